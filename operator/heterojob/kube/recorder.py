"""Kubernetes Events, as client-go's EventRecorder sends them: queued, and written one at a time in the background.

A decision never waits for its Event, and a burst of decisions (a 200-job burst admitted in one cycle) does not put
200 Event writes in front of the gangs' pods: the Events go out in order behind them, one in flight, within the
client's rate limit (client-go's broadcaster hands its recorder's Events to one sink goroutine the same way). The
queue holds `QUEUED` Events; more are dropped while the API server does not keep up (client-go drops at 1,000 too).
The same type, reason and message on the same object bumps the existing Event's `count` and `lastTimestamp`
instead of creating another (client-go's EventCorrelator, the kubelet's repeats)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kubernetes.client import ApiException

log = logging.getLogger(__name__)
REMEMBERED = 4096  # Events that a repeat bumps instead of creating another (oldest forgotten first)
QUEUED = 1000  # Events waiting to be written; more are dropped (logged)

Send = Callable[..., Awaitable[Any]]  # `Kube.send`


class EventRecorder:
    def __init__(self, send: Send) -> None:
        self.send = send
        self._known: dict[tuple[Any, ...], tuple[str, int]] = {}  # (object, type, reason, message) -> Event
        self._sink: tuple[asyncio.AbstractEventLoop, asyncio.Queue[Callable[[], Awaitable[None]]],
                          asyncio.Task[None]] | None = None
        self.dropped = 0

    def post(self, obj: Mapping[str, Any], involved: tuple[str, str], type_: str, reason: str, message: str,
             now: str) -> None:
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"], meta.get("uid"), type_, reason, message[:1024])

        async def write() -> None:
            try:
                seen = self._known.pop(key, None)  # read when it is written: a repeat queued behind it bumps it
                if seen is not None:
                    name, count = seen
                    try:
                        await self.send("patch_namespaced_event", {"count": count + 1, "lastTimestamp": now},
                                        namespace=meta["namespace"], name=name)
                        self._remember(key, (name, count + 1))
                        return
                    except ApiException as exc:
                        if exc.status != 404:
                            raise
                name = f"{meta['name']}.{time.time_ns():x}"  # client-go's recorder: <object>.<unix nanoseconds, hex>
                body = {
                    "apiVersion": "v1", "kind": "Event",
                    "metadata": {"name": name, "namespace": meta["namespace"]},
                    "involvedObject": {"apiVersion": involved[0], "kind": involved[1], "name": meta["name"],
                                       "namespace": meta["namespace"], "uid": meta.get("uid")},
                    "reason": reason, "message": message[:1024], "type": type_,
                    "source": {"component": "heterojob"}, "reportingComponent": "heterojob",
                    "firstTimestamp": now, "lastTimestamp": now, "count": 1,
                }
                await self.send("create_namespaced_event", body, namespace=meta["namespace"])
                self._remember(key, (name, 1))
            except Exception as exc:  # noqa: BLE001 - an Event is best effort
                log.warning("could not post event %s on %s/%s: %s", reason, meta["namespace"], meta["name"], exc)

        try:
            self._queue().put_nowait(write)
        except asyncio.QueueFull:
            self.dropped += 1
            log.debug("event %s on %s/%s dropped: %d waiting to be written", reason, meta["namespace"],
                      meta["name"], QUEUED)

    def _queue(self) -> asyncio.Queue[Callable[[], Awaitable[None]]]:
        loop = asyncio.get_running_loop()
        if self._sink is None or self._sink[0] is not loop:
            queue: asyncio.Queue[Callable[[], Awaitable[None]]] = asyncio.Queue(QUEUED)
            self._sink = (loop, queue, loop.create_task(self._drain(queue), name="heterojob-events"))
        return self._sink[1]

    @staticmethod
    async def _drain(queue: asyncio.Queue[Callable[[], Awaitable[None]]]) -> None:
        while True:
            write = await queue.get()
            await write()

    async def flush(self) -> None:
        """Until every Event queued so far is written (tests, shutdown)."""
        if self._sink is not None and self._sink[0] is asyncio.get_running_loop():
            done = asyncio.Event()

            async def mark() -> None:
                done.set()

            await self._sink[1].put(mark)
            await done.wait()

    def close(self) -> None:
        if self._sink is not None:
            self._sink[2].cancel()
            self._sink = None

    def _remember(self, key: tuple[Any, ...], value: tuple[str, int]) -> None:
        self._known[key] = value
        while len(self._known) > REMEMBERED:
            self._known.pop(next(iter(self._known)))
