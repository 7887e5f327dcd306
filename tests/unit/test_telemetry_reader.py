"""The Prometheus reader against a misbehaving server: every failure is a TelemetryError that says why."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from heterojob.telemetry.prometheus import PrometheusReader, TelemetryError


class Behaviour:
    mode = "ok"
    delay = 0.0


@pytest.fixture
def server() -> Iterator[tuple[str, type[Behaviour]]]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
            time.sleep(Behaviour.delay)
            bodies: dict[str, tuple[int, bytes]] = {
                "ok": (200, json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
                    {"metric": {"UUID": "GPU-1"}, "value": [1, "5"]}]}}).encode()),
                "503": (503, b"service unavailable"),
                "422": (422, json.dumps({"status": "error", "errorType": "execution",
                                         "error": "query processing would load too many samples"}).encode()),
                "html": (200, b"<html>login</html>"),
                "matrix": (200, json.dumps({"status": "success", "data": {"result": "banana"}}).encode()),
            }
            code, body = bodies[Behaviour.mode]
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: Any, client_address: Any) -> None:
            # a slow answer's client has timed out and hung up (the point of the slow case): its late write
            # fails in a thread that outlives the test and would print a traceback into a later test's output
            if not isinstance(sys.exc_info()[1], ConnectionError):
                super().handle_error(request, client_address)

    httpd = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    Behaviour.mode, Behaviour.delay = "ok", 0.0
    yield f"http://127.0.0.1:{httpd.server_address[1]}", Behaviour
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("mode, says", [
    ("503", "HTTP Status Code 503"),
    ("422", "too many samples"),
    ("html", "not a Prometheus API response"),
    ("matrix", "expected an instant vector"),
])
def test_bad_answers_are_telemetry_errors(server: tuple[str, type[Behaviour]], mode: str, says: str) -> None:
    url, behaviour = server
    behaviour.mode = mode
    reader = PrometheusReader(url, timeout_s=2)
    with pytest.raises(TelemetryError, match=says):
        reader.query({"a": "up", "b": "up"})
    behaviour.mode = "ok"  # and it recovers by itself on the next call
    assert reader.query({"a": "up"})["a"][0]["metric"] == {"UUID": "GPU-1"}
    reader.close()


def test_slow_prometheus_times_out_within_the_deadline(server: tuple[str, type[Behaviour]]) -> None:
    url, behaviour = server
    behaviour.delay = 3.0
    reader = PrometheusReader(url, timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(TelemetryError, match="timed out after 0.5s"):
        reader.query({"a": "up"})
    assert time.monotonic() - started < 2.9  # one retry at most, never the server's pace
    reader.close()


def test_absent_prometheus_names_the_url() -> None:
    reader = PrometheusReader("http://127.0.0.1:9", timeout_s=1)
    with pytest.raises(TelemetryError, match="cannot reach Prometheus at http://127.0.0.1:9"):
        reader.query({"a": "up"})
    reader.close()
