"""Run the operator only while this replica holds the Lease; serve liveness and readiness meanwhile.

Several replicas start; each waits as a standby until it holds the Lease (kube/leader.py), then runs
Kopf standalone (no Kopf peering: nothing to freeze). A standby lists and watches what the operator's
caches hold meanwhile (`handlers.Standby`), so a takeover does not wait for a first listing of the fleet. When it cannot renew the Lease for the renew
deadline, it stops acting at once and exits with status 1 so Kubernetes restarts it as a standby: two
replicas never act together, and a standby takes over within the Lease duration plus one retry
(15 s + 2 s by default) after the holder dies. A clean stop (SIGTERM) releases the Lease at once.

Health (`--liveness http://HOST:PORT/healthz`): `/healthz` answers from the same event loop as the
operator, so a frozen loop fails the probe by timing out; it also answers 503 when the replica has not
reached the API server for 3 Lease durations, or leads but Kopf is not ready 60 s after it started, or
Kopf's task has ended. Every healthy replica is Ready (a leader-only readiness would deadlock a rolling
update: the new pods could never become available while an old one holds the Lease); traffic reaches the
leader because each replica labels its own pod `heterojob.io/role=leader|standby` and the Service selects
`leader`. `/readyz` answers 200 only on the leader with Kopf ready (for people and tests).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from aiohttp import web

from heterojob.kube.leader import LeaderElector

log = logging.getLogger("heterojob.leader")

KOPF_READY_WITHIN_S = 60.0


@dataclass
class ReplicaHealth:
    elector: LeaderElector
    started_leading: float | None = None
    kopf_ready: asyncio.Event = field(default_factory=asyncio.Event)
    kopf_task: asyncio.Task[Any] | None = None

    def problem(self, now: float) -> str | None:
        """Why this replica should be restarted, or None."""
        stale = now - self.elector.last_contact
        if stale > 3 * self.elector.config.duration_s:
            return f"no answer from the API server for {stale:.0f}s"
        if self.kopf_task is not None and self.kopf_task.done():
            return "the operator has stopped"
        if self.started_leading is not None and not self.kopf_ready.is_set() \
                and now - self.started_leading > KOPF_READY_WITHIN_S:
            return f"leader for {now - self.started_leading:.0f}s and the operator is not ready"
        return None

    async def healthz(self, _: web.Request) -> web.Response:
        why = self.problem(time.monotonic())
        role = "leader" if self.elector.is_leader else "standby"
        return web.Response(status=503 if why else 200, text=f"{why or 'ok'} ({role})\n")

    async def readyz(self, _: web.Request) -> web.Response:
        ready = self.elector.is_leader and self.kopf_ready.is_set()
        return web.Response(status=200 if ready else 503, text="leader\n" if ready else "standby\n")


async def _serve_health(health: ReplicaHealth, url: str) -> web.AppRunner:
    parts = urlsplit(url)
    app = web.Application()
    path = parts.path or "/healthz"
    app.add_routes([web.get(path, health.healthz), web.get("/readyz", health.readyz)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, parts.hostname or "0.0.0.0", parts.port or 8080).start()
    return runner


class Warm(Protocol):
    """What a replica starts while it stands by and stops if it never leads (`handlers.Standby`: the informers)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


async def run(elector: LeaderElector, start_operator: Callable[[asyncio.Event, asyncio.Event], Coroutine[Any, Any, None]],
              liveness: str | None, warm: Warm | None = None) -> int:
    """Stand by, lead, step down. `start_operator(stop_flag, ready_flag)` runs Kopf until stop_flag is set; `warm`
    is started first, so the caches are listed and followed while this replica stands by."""
    health = ReplicaHealth(elector)
    runner = await _serve_health(health, liveness) if liveness else None
    if warm is not None:
        await warm.start()
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    try:
        log.info("standing by for Lease %s/%s as %s", elector.config.namespace, elector.config.name,
                 elector.config.identity)
        await asyncio.to_thread(elector.label_role, "standby")
        acquire = loop.create_task(elector.acquire())
        stop_wait = loop.create_task(stopping.wait())
        await asyncio.wait([acquire, stop_wait], return_when=asyncio.FIRST_COMPLETED)
        if stopping.is_set():
            acquire.cancel()
            return 0
        stop_wait.cancel()
        health.started_leading = time.monotonic()
        log.info("leading: starting the operator")
        await asyncio.to_thread(elector.label_role, "leader")
        stop_flag = asyncio.Event()
        # Kopf installs its own SIGINT/SIGTERM handlers (they end its task); ours must not swallow them
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        health.kopf_task = loop.create_task(start_operator(stop_flag, health.kopf_ready))
        signals = loop.create_task(_stop_by_flag(loop, health.kopf_ready, stop_flag))
        holding = loop.create_task(elector.hold())
        await asyncio.wait([health.kopf_task, holding], return_when=asyncio.FIRST_COMPLETED)
        if holding.done():
            log.error("stepping down: %s; stopping the operator and exiting (a restart makes this a standby)",
                      holding.result())
            stop_flag.set()
            try:
                await asyncio.wait_for(asyncio.shield(health.kopf_task), timeout=10)
            except (TimeoutError, Exception):  # noqa: BLE001 - exiting anyway
                pass
            return 1
        holding.cancel()
        signals.cancel()
        exc = health.kopf_task.exception()
        await asyncio.to_thread(elector.label_role, "standby")
        await asyncio.to_thread(elector.release)
        if exc is not None:
            log.error("the operator stopped: %s: %s", type(exc).__name__, exc)
            return 1
        return 0
    finally:
        if warm is not None:
            await warm.stop()  # what the operator did not take (it stops what it took at its cleanup)
        if runner is not None:
            await runner.cleanup()


async def _stop_by_flag(loop: asyncio.AbstractEventLoop, ready: asyncio.Event, stop_flag: asyncio.Event) -> None:
    """Once Kopf runs (it installed its own SIGINT/SIGTERM handlers at its start), a signal sets its stop flag
    instead: Kopf 1.45's signal path leaves its own stop-flag waiter pending and then waits 5 s for it as a hung
    task, so a SIGTERM took 5 s longer to release the Lease (no leader meanwhile) than a stop flag does."""
    await ready.wait()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop_flag.set)


def main(elector: LeaderElector, start_operator: Callable[[asyncio.Event, asyncio.Event], Coroutine[Any, Any, None]],
         liveness: str | None, warm: Warm | None = None) -> int:
    code = asyncio.run(run(elector, start_operator, liveness, warm))
    sys.stdout.flush()
    return code
