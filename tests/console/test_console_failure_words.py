"""Member and Prometheus failures in words (heterojob.failures): the real clients (kubernetes'
with retries off, as for members; prometheus-api-client through the operator's PrometheusReader) pointed at
a closed port, a port that accepts and never answers, https against a plain-HTTP server, and a server that
answers 401 and 403. What people see names what happened, never urllib3's pool-and-retry text."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import kubernetes
import pytest

from heterojob.failures import describe
from heterojob.telemetry.prometheus import PrometheusReader, TelemetryError

RAW = ("MaxRetryError", "HTTPConnectionPool", "NewConnectionError", "Caused by", "urllib3")


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    silent = socket.socket()  # accepts connections (the backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            code = 403 if "forbidden" in self.headers.get("Host", "") or self.path.startswith("/403") else 401
            body = b'{"kind":"Status","code":%d}' % code
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    port = httpd.server_address[1]
    yield {"closed": "http://127.0.0.1:9", "silent": f"http://127.0.0.1:{silent.getsockname()[1]}",
           "tls": f"https://127.0.0.1:{port}", "401": f"http://127.0.0.1:{port}",
           "403": f"http://127.0.0.1:{port}/403"}
    httpd.shutdown()
    silent.close()


def kube_error(url: str) -> BaseException:
    config = kubernetes.client.Configuration()
    config.host, config.retries = url, 0  # as heterojob.kube.members.member_configuration sets it
    with kubernetes.client.ApiClient(config) as api:
        with pytest.raises(Exception) as caught:
            kubernetes.client.CoreV1Api(api).list_node(_request_timeout=1.0)
    return caught.value


@pytest.mark.parametrize("case, words", [
    ("closed", "connection refused (nothing listens there)"),
    ("silent", "timed out after 1 s"),
    ("tls", "TLS failed: the server does not speak TLS there (http:// instead of https://?)"),
    ("401", "refused the credentials (HTTP 401)"),
    ("403", "forbids it (HTTP 403)"),
])
def test_kubernetes_client_failures_in_words(servers: dict[str, str], case: str, words: str) -> None:
    exc = kube_error(servers[case])
    assert describe(exc, 1.0) == words


@pytest.mark.parametrize("case, words", [
    ("closed", "connection refused (nothing listens there)"),
    ("silent", "timed out after 1"),
    ("tls", "TLS failed: the server does not speak TLS there"),
])
def test_prometheus_failures_in_words(servers: dict[str, str], case: str, words: str) -> None:
    reader = PrometheusReader(servers[case], timeout_s=1)
    try:
        with pytest.raises(TelemetryError) as caught:
            reader.query({"util": "DCGM_FI_DEV_GPU_UTIL"})
    finally:
        reader.close()
    message = str(caught.value)
    assert words in message and not any(raw in message for raw in RAW), message
