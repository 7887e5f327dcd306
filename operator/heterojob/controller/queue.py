"""The work queue: one reconcile pass per job at a time, coalesced pokes, backoff, timers and resync.

`poke(key)` asks for a pass soon; a poke during a pass runs exactly one more pass after it. A pass that
raises is retried with jittered exponential backoff; one job's trouble never stops the others.
`wake_at` keeps one timer per job (checkpoint deadlines, holding times); `start_resync` looks at every
known job again each interval whatever the events said, and runs the periodic tasks it is given.

At most `STARTS_PER_TURN` passes start in one turn of the event loop, first come first served: a burst of
thousands of events (a backlog created, a relist) would otherwise make thousands of passes ready at once, and
`/healthz`, `/metrics` and the alert webhook, served on the same loop, would wait for all of them (3.2 s at
100,000 devices while 5,000 jobs were created).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AbstractContextManager

from heterojob.kube.api import UNANSWERED

log = logging.getLogger("heterojob.controller")

Pass = Callable[[str], Awaitable[None]]
STARTS_PER_TURN = 64  # passes started in one turn of the event loop (about 30 ms of passes' CPU before an await)


class WorkQueue:
    """Owns the per-job tasks, the dirty set, the retry counters and the timers."""

    def __init__(self, run: Pass, max_retry_delay: float = 60.0,
                 on_pass: Callable[[], AbstractContextManager[object]] | None = None) -> None:
        self._run = run
        self._max_retry_delay = max_retry_delay
        self._on_pass = on_pass  # a context manager factory timing each pass (metrics), or None
        self.known: set[str] = set()  # jobs the resync looks at
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._dirty: set[str] = set()
        self._failures: dict[str, int] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._group_timer: asyncio.TimerHandle | None = None
        self._loops: list[asyncio.Task[None]] = []
        self._started = 0  # passes started in this turn of the event loop
        self._in_line: collections.deque[asyncio.Future[None]] = collections.deque()  # passes for a later turn
        self._turn: asyncio.Handle | None = None  # the next turn's count, when one is due

    def poke(self, key: str) -> None:
        """Reconcile `key` soon; a pass already running for it runs once more afterwards."""
        self.known.add(key)
        if key in self._tasks:
            self._dirty.add(key)
            return
        self._tasks[key] = asyncio.get_running_loop().create_task(self._work(key), name=f"reconcile {key}")

    def poke_all(self, keys: Callable[[], Iterable[str]], delay: float = 0.0) -> None:
        """Poke every key `keys()` names after `delay` (coalesced: one pending call at a time)."""
        if self._group_timer is not None:
            return

        def fire() -> None:
            self._group_timer = None
            for key in sorted(keys()):
                self.poke(key)

        self._group_timer = asyncio.get_running_loop().call_later(delay, fire)

    def forget(self, key: str) -> None:
        self.known.discard(key)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def settle(self, key: str) -> None:
        """A finished job: no more resyncs (its own events still reach it)."""
        self.known.discard(key)

    def wake_at(self, key: str, when: float) -> None:
        """Look at `key` again at `when` (unix seconds): one timer per job, the newest wins."""
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()
        self._timers[key] = asyncio.get_running_loop().call_later(max(0.0, when - time.time()) + 0.05,
                                                                   self.poke, key)

    async def _start(self) -> None:
        """Wait for a turn of the event loop with a start left (`STARTS_PER_TURN`), in the order asked."""
        if self._started < STARTS_PER_TURN and not self._in_line:
            self._started += 1
            self._next_turn_soon()
            return
        waiter = asyncio.get_running_loop().create_future()
        self._in_line.append(waiter)
        self._next_turn_soon()
        await waiter  # counted by `_next_turn`

    def _next_turn_soon(self) -> None:
        if self._turn is None:
            self._turn = asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        """A new turn: the count starts over and the next passes in line go."""
        self._turn, self._started = None, 0
        while self._in_line and self._started < STARTS_PER_TURN:
            waiter = self._in_line.popleft()
            if not waiter.done():  # done: its task was cancelled
                waiter.set_result(None)
                self._started += 1
        if self._in_line or self._started:
            self._next_turn_soon()

    async def _work(self, key: str) -> None:
        try:
            while True:
                await self._start()
                self._dirty.discard(key)
                try:
                    if self._on_pass is not None:
                        with self._on_pass():
                            await self._run(key)
                    else:
                        await self._run(key)
                    self._failures.pop(key, None)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - one job's trouble must not stop the others
                    failures = self._failures[key] = self._failures.get(key, 0) + 1
                    delay = min(self._max_retry_delay, 0.2 * 2 ** failures) * (0.5 + random.random() / 2)
                    if isinstance(exc, UNANSWERED):  # an API server that does not answer is news, not a bug
                        log.warning("reconcile of %s failed (attempt %d): %s: %s; retrying in %.1fs", key, failures,
                                    type(exc).__name__, exc, delay)
                    else:
                        log.exception("reconcile of %s failed (attempt %d); retrying in %.1fs", key, failures,
                                      delay)
                    asyncio.get_running_loop().call_later(delay, self.poke, key)
                    break
                if key not in self._dirty:
                    break
        finally:
            self._tasks.pop(key, None)

    def start_resync(self, interval: float, periodic: Iterable[tuple[str, float, Callable[[], Awaitable[None]]]] = (),
                     keys: Callable[[int], Iterable[str]] | None = None, rate: float = 0.0) -> None:
        """Every known job (or what `keys(round)` names) is looked at again each `interval`; each (name,
        seconds, task) runs that often. `rate` > 0 paces a round at that many jobs a second (a round over
        thousands of jobs is spread out, and the next starts `interval` after it ends), so the safety net
        costs a bounded share of the API and the operator whatever the fleet's size."""
        async def resync() -> None:
            round_ = 0
            while True:
                await asyncio.sleep(interval)
                round_ += 1
                started = time.monotonic()
                for i, key in enumerate(keys(round_) if keys is not None else sorted(self.known)):
                    if rate > 0 and (ahead := started + i / rate - time.monotonic()) > 0:
                        await asyncio.sleep(ahead)
                    self.poke(key)

        async def every(name: str, seconds: float, task: Callable[[], Awaitable[None]]) -> None:
            while True:
                await asyncio.sleep(seconds)
                try:
                    await task()
                except Exception as exc:  # noqa: BLE001 - retried next time
                    log.warning("%s failed: %s", name, exc)

        loop = asyncio.get_running_loop()
        self._loops.append(loop.create_task(resync(), name="resync"))
        for name, seconds, task in periodic:
            self._loops.append(loop.create_task(every(name, seconds, task), name=name))

    async def stop(self) -> None:
        for task in self._loops:
            task.cancel()
        for timer in self._timers.values():
            timer.cancel()
        if self._group_timer is not None:
            self._group_timer.cancel()
        tasks = [*self._tasks.values(), *self._loops]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
