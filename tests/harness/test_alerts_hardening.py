"""The alert port against hostile or broken senders: compression bombs, undecodable bodies, late firings,
exporter-pod labels, TLS. Alertmanager semantics: docs/telemetry.md section 6 (v0.34: 5xx retried
forever, other non-2xx dropped), so everything that can never succeed must be a counted 4xx."""

from __future__ import annotations

import asyncio
import ssl
import functools
import subprocess
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from heterojob.alerts.mapping import jobs_for
from heterojob.state.cache import Placed
from heterojob.alerts.payload import Alert
from heterojob.alerts.receiver import AlertReceiver
from heterojob.metrics import OperatorMetrics
from tests.harness.test_alerts_http import AUTH, TOKEN, alert, body, exchange, notification


def gzip_zeros(size: int) -> bytes:
    """`size` bytes of zeros, gzip-compressed (about 1000:1), made without holding them in memory."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    out = [comp.compress(block) for _ in range(size >> 20)]
    return b"".join(out) + comp.flush()


BOMB_1GIB = functools.cache(lambda: gzip_zeros(1 << 30))  # ~1 MiB on the wire, built once (~4 s)

BAD_BODIES = {
    "bad utf-8": b"\xff\xfe\x00",
    "100,000-digit number": b'{"version": "4", "n": ' + b"9" * 100_000 + b"}",
    "nested 100,000 deep": b"[" * 100_000 + b"]" * 100_000,
    "NaN": b'{"version": NaN}',
    "truncated gzip": gzip_zeros(1 << 20)[:100],
}


@pytest.mark.parametrize("name", list(BAD_BODIES))
def test_every_undecodable_body_is_a_counted_400(name: str) -> None:
    headers = dict(AUTH)
    if name.endswith("gzip"):
        headers["Content-Encoding"] = "gzip"
    answers, handled, metrics = exchange([(headers, BAD_BODIES[name])])
    assert answers[0][0] == 400, answers
    assert not handled and metrics.alerts_rejected.labels("400")._value.get() == 1


def test_a_gzip_body_is_inflated_under_the_cap_and_a_bomb_is_413() -> None:
    comp = zlib.compressobj(6, zlib.DEFLATED, 31)
    ok = comp.compress(body(notification(alert("gz", Hostname="gpu-1")))) + comp.flush()
    started = time.monotonic()
    answers, handled, metrics = exchange([
        ({**AUTH, "Content-Encoding": "gzip"}, ok),
        ({**AUTH, "Content-Encoding": "gzip"}, gzip_zeros(256 << 20)),
        ({**AUTH, "Content-Encoding": "br"}, b"anything"),
    ])
    assert [a[0] for a in answers] == [200, 413, 415]
    assert [a.fingerprint for a in handled] == ["gz"]
    assert metrics.alerts_rejected.labels("413")._value.get() == 1
    assert time.monotonic() - started < 10  # 256 MiB were never inflated


def _send_from_another_thread(url: str, bomb: bytes, senders: int) -> tuple[list[int], float]:
    """Post `senders` bombs at once from a thread with its own loop (a real sender is another machine)."""
    out: dict[str, Any] = {}

    async def go() -> None:
        async with aiohttp.ClientSession() as session:
            async def send() -> int:
                try:
                    async with session.post(url, data=bomb, headers={"Content-Encoding": "gzip"}) as r:
                        return r.status
                except aiohttp.ClientError:
                    return -1  # the server closed the connection mid-upload: also a refusal
            t0 = time.perf_counter()
            out["codes"] = await asyncio.gather(*(send() for _ in range(senders)))
            out["seconds"] = time.perf_counter() - t0

    thread = threading.Thread(target=lambda: asyncio.run(go()))
    thread.start()
    thread.join(120)
    return out["codes"], out["seconds"]


def test_unauthenticated_bombs_are_refused_without_inflating_them() -> None:
    """Four senders post 1 GiB-of-zeros gzip bombs without a token (the issue's attack): each gets 401
    before its body is read and the connection is closed, so the loop never inflates them (before: about
    0.5 s of inflation per bomb, on the event loop)."""
    bomb = BOMB_1GIB()

    async def run() -> tuple[list[int], float, float]:
        async def handle(_: Alert) -> None:
            return None

        receiver = AlertReceiver(handle, TOKEN, OperatorMetrics())
        port = await receiver.start("127.0.0.1", 0)
        lag = 0.0
        sending = asyncio.get_running_loop().run_in_executor(
            None, _send_from_another_thread, f"http://127.0.0.1:{port}/alerts", bomb, 4)
        while not sending.done():
            t0 = time.perf_counter()
            await asyncio.sleep(0.01)
            lag = max(lag, time.perf_counter() - t0 - 0.01)
        codes, seconds = await sending
        await receiver.stop()
        return codes, seconds, lag

    codes, seconds, lag = asyncio.run(run())
    assert all(c in (401, -1) for c in codes), codes
    assert seconds < 1.0 and lag < 0.25, f"4 bombs took {seconds:.2f}s to refuse; loop lag up to {lag:.2f}s"


def _at(alert_: dict[str, Any], starts: str) -> dict[str, Any]:
    return {**alert_, "startsAt": starts}


def test_a_firing_after_its_resolved_never_rearms() -> None:
    t1, t2 = "2026-11-21T03:00:00Z", "2026-11-21T04:00:00Z"
    answers, handled, _ = exchange([
        (AUTH, body(notification(_at(alert("f1", status="resolved", Hostname="gpu-1"), t1)))),
        (AUTH, body(notification(_at(alert("f1", Hostname="gpu-1"), t1)))),  # late: the same episode
        (AUTH, body(notification(_at(alert("f1", Hostname="gpu-1"), t2)))),  # a new episode fires
        (AUTH, body(notification(_at(alert("f1", status="resolved", Hostname="gpu-1"), t1)))),  # old news
        (AUTH, body(notification(_at(alert("f1", Hostname="gpu-1"), t1)))),  # older still
    ])
    assert [a[0] for a in answers] == [200] * 5
    assert [(a.status, a.starts_at.hour) for a in handled] == [("resolved", 3), ("firing", 4)]


def test_exporter_pod_labels_fall_back_to_the_node() -> None:
    running = {"team-a/train": Placed("team-a", "train", 2, ("gpu-1", "gpu-2"))}
    exporter = {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x7k2p", "Hostname": "gpu-2"}
    assert [(h.job, h.nodes) for h in jobs_for(exporter, running)] == [("team-a/train", ("gpu-2",))]
    # through a ServiceMonitor (honorLabels false) the workload pod is exported_*: it wins
    relabelled = {**exporter, "exported_namespace": "team-a", "exported_pod": "train-g2-0"}
    assert [(h.job, h.nodes) for h in jobs_for(relabelled, running)] == [("team-a/train", ("gpu-2",))]
    assert jobs_for({**exporter, "Hostname": "gpu-9"}, running) == []


def test_tls_with_a_certificate_from_files(tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    from heterojob.handlers import tls_context

    server_ctx = tls_context(str(tmp_path))
    assert server_ctx is not None and tls_context(str(tmp_path / "absent")) is None
    handled: list[Alert] = []

    async def run() -> int:
        async def handle(a: Alert) -> None:
            handled.append(a)

        receiver = AlertReceiver(handle, TOKEN, OperatorMetrics())
        port = await receiver.start("127.0.0.1", 0, ssl_context=server_ctx)
        client = ssl.create_default_context(cafile=str(cert))
        client.check_hostname = False
        async with aiohttp.ClientSession() as session:
            async with session.post(f"https://127.0.0.1:{port}/alerts", data=body(notification(alert("tls"))),
                                    headers=AUTH, ssl=client) as r:
                status = r.status
            with pytest.raises(aiohttp.ClientError):
                async with session.post(f"http://127.0.0.1:{port}/alerts", data=b"{}", headers=AUTH):
                    pass
        await receiver.queue.join()
        await receiver.stop()
        return status

    assert asyncio.run(run()) == 200 and [a.fingerprint for a in handled] == ["tls"]
