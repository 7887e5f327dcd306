"""`kube.api.Kube` against a plain HTTP/1.1 server: what its calls cost the API server beyond the request."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import kubernetes
import pytest
from heterojob.kube.api import Kube, RateLimit


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    connections = 0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as kube-apiserver

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1  # type: ignore[attr-defined]

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        sent = json.loads(self.rfile.read(length) or b"{}")
        sent.setdefault("metadata", {})["resourceVersion"] = "7"
        body = json.dumps(sent).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _kube(server: _Server) -> Kube:
    config = kubernetes.client.Configuration()
    config.host = f"http://127.0.0.1:{server.server_address[1]}"
    return Kube(kubernetes.client.ApiClient(config), workers=1, rate=RateLimit(qps=0))


def test_calls_whose_answer_is_not_parsed_reuse_one_connection(server: _Server) -> None:
    """A create asked for unparsed (`_preload_content=False`) used to leave its answer unread, so its connection
    never went back to the pool: every such call opened (and the API server accepted) a new TCP connection."""
    kube = _kube(server)

    async def run() -> list[bool]:
        return [await kube.create({"kind": "Pod", "metadata": {"namespace": "ns", "name": f"p{i}"}})
                for i in range(5)]

    try:
        assert asyncio.run(run()) == [True] * 5
    finally:
        kube.close()
    assert server.connections == 1
