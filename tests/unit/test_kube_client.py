"""`kube.api.Kube` against a plain HTTP/1.1 server: what its calls cost the API server beyond the request."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import kubernetes
import pytest
from heterojob.kube.api import Kube, RateLimit


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    connections = 0
    tokens: list[str | None]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as kube-apiserver

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1  # type: ignore[attr-defined]

    def do_POST(self) -> None:
        self.server.tokens.append(self.headers.get("Authorization"))  # type: ignore[attr-defined]
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


def _serving(kind: type[_Server], handler: type[_Handler]) -> Iterator[_Server]:
    srv = kind(("127.0.0.1", 0), handler)
    srv.tokens = []
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def server() -> Iterator[_Server]:
    yield from _serving(_Server, _Handler)


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


def test_a_pass_writes_while_the_thread_pool_is_busy(server: _Server) -> None:
    """A pass's calls go out on the event loop: a slow call on the thread pool (a member's list, a Secret read)
    does not hold up a gang's creates behind it."""
    kube = _kube(server)  # one worker

    async def run() -> float:
        slow = asyncio.ensure_future(kube.call(time.sleep, 1.5))
        await asyncio.sleep(0.05)  # the one worker is taken
        started = time.monotonic()
        assert await kube.create({"kind": "Pod", "metadata": {"namespace": "ns", "name": "p"}})
        took = time.monotonic() - started
        await slow
        return took

    try:
        assert asyncio.run(run()) < 1.0
    finally:
        kube.close()


def test_every_call_carries_the_token_the_configuration_holds_now(server: _Server) -> None:
    """A rotated token (in-cluster, an exec plugin: the configuration's refresh hook) is sent from the next call."""
    kube = _kube(server)
    config = kube.client.configuration
    config.api_key_prefix["authorization"] = "Bearer"
    config.api_key["authorization"] = "as loaded"
    issued = iter(["one", "two"])

    def refresh(cfg: kubernetes.client.Configuration) -> None:
        cfg.api_key["authorization"] = next(issued)

    config.refresh_api_key_hook = refresh

    async def run() -> None:
        for i in range(2):
            await kube.create({"kind": "Pod", "metadata": {"namespace": "ns", "name": f"p{i}"}})

    try:
        asyncio.run(run())
    finally:
        kube.close()
    assert server.tokens == ["Bearer one", "Bearer two"]


def test_a_call_does_not_read_the_proxy_variables_again(server: _Server, tmp_path: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The kubeconfig's token refresh hook, run before every call for its token, sets the configuration's host
    again, and the client then read the proxy variables anew (a tenth of a millisecond a call): the proxy is the
    environment's when the client is made, and the token is still the hook's at every call."""
    from heterojob.kube.api import load_client

    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "u", "user": {"token": "t0"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    kube = Kube(load_client(str(path)), workers=1, rate=RateLimit(qps=0))
    read = []
    monkeypatch.setattr(kubernetes.client.configuration, "getproxies", lambda: read.append(1) or {})

    async def run() -> None:
        for i in range(3):
            await kube.create({"kind": "Pod", "metadata": {"namespace": "ns", "name": f"p{i}"}})

    try:
        asyncio.run(run())
    finally:
        kube.close()
    assert server.tokens == ["Bearer t0"] * 3
    assert read == []


def test_the_command_lines_rate_limit_is_the_operators_default() -> None:
    from heterojob.cli import parser

    args = parser().parse_args(["operator", "run"])
    assert (args.kube_api_qps, args.kube_api_burst) == (RateLimit().qps, RateLimit().burst)


class _SlowHandler(_Handler):
    delay = 0.3

    def do_POST(self) -> None:
        time.sleep(self.delay)
        try:
            super().do_POST()
        except (BrokenPipeError, ConnectionResetError):  # the client gave up on it (its timeout)
            self.close_connection = True


class _BusyServer(_Server):
    request_queue_size = 64  # every connection of a burst accepted at once


@pytest.fixture
def slow_server() -> Iterator[_Server]:
    yield from _serving(_BusyServer, _SlowHandler)


def test_a_calls_timeout_counts_from_when_it_has_a_connection_not_while_it_waits_for_one(slow_server: _Server) -> None:
    """A member's calls carry a timeout; in a burst they queue behind the client's connections (16). The wait in that
    queue is the operator's, not the member's slowness: 48 creates, each answered in 0.3 s, all pass under a 0.5 s
    bound (counted from the queue, the last waves timed out); a call the server does not answer in time still fails
    within about the bound, and a call still waiting when the member is found not to answer fails at once."""
    kube = _kube(slow_server)
    kube.timeout = 0.5

    def pod(i: int) -> dict[str, Any]:
        return {"kind": "Pod", "metadata": {"namespace": "ns", "name": f"p{i}"}}

    async def burst() -> list[Any]:
        return await asyncio.gather(*(kube.create(pod(i)) for i in range(48)), return_exceptions=True)

    try:
        assert asyncio.run(burst()) == [True] * 48
        _SlowHandler.delay = 2.0  # frozen, as far as the bound is concerned

        async def frozen() -> tuple[Any, float, list[Any]]:
            started = time.monotonic()
            calls = [asyncio.ensure_future(kube.create(pod(100 + i))) for i in range(20)]  # 4 wait for a connection
            await asyncio.sleep(0.1)
            kube.guard = _refuse  # type: ignore[method-assign]  # found not to answer (a member's probe)
            results = await asyncio.gather(*calls, return_exceptions=True)
            return results[0], time.monotonic() - started, results[16:]

        first, took, queued = asyncio.run(frozen())
        assert isinstance(first, TimeoutError) and took < 1.5
        assert all(isinstance(r, ConnectionError) and "does not answer" in str(r) for r in queued)
    finally:
        _SlowHandler.delay = 0.3
        kube.close()


def _refuse() -> None:
    raise ConnectionError("the member cluster does not answer")
