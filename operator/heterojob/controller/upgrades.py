"""What the scheduler's cycles tell a running job's pass (`controller.moves`): its expected remaining time where
it runs, and an upgrade move (or a probe of an unmeasured class) that pays now (`engine.queue.policy.upgrades`, as the
replay asks it). Reads the scheduler's cache, knowledge and last cycle; acts on nothing."""

from __future__ import annotations

from collections.abc import Sequence

from heterojob.controller.scheduler import PROBE_SHARE, Scheduler
from heterojob.engine.queue import completion
from heterojob.engine.queue import policy as heterogeneity


class Upgrades:
    """A running job's look at the queue, on its pass; `Controller` wires it to `controller.moves.Moves`."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.s = scheduler

    def remaining_for(self, key: str, now: float) -> float | None:
        """Running job `key`'s expected remaining wall time where it runs (`engine.queue.policy.remaining_s`: its own
        facts, the completed jobs' work as the last cycle counted it); None under fifo or before any cycle."""
        if self.s.queue is None:
            return None
        mine = [h for h in self.s.cache.holders_of(key) if not h.waiting]
        if not mine:
            return None
        known = self.s.knower.of_running(key, mine[0], self.s.fleet())
        return None if known is None else heterogeneity.remaining_s(mine[0], now, known)

    def upgrade_for(self, key: str, classes: Sequence[str], now: float, save_s: float | None = None
                    ) -> completion.Upgrade | None:
        """A move up (or a probe) that pays for running job `key` now, onto free devices of `classes` no
        waiting job chose to wait for (`engine.queue.policy.upgrades`, as the replay asks it; the classes waited
        for are the last cycle's); None under fifo. `save_s`: its last checkpoint's save time (else the
        default move cost's)."""
        if self.s.queue is None:
            return None
        entry = self.s.cache.entries.get(key)
        if entry is None or entry.allocation is None or entry.request is not None:
            return None
        mine = [h for h in self.s.cache.holders_of(key) if not h.waiting]
        if not mine:
            return None
        here = mine[0].allocation
        # asked on every pass of a running job: cheap tests first (the last cycle's free room, then the fleet's
        # now); room freed since wakes a cycle, which pokes the jobs an upgrade may pay for
        if self.s.cycles and self.s.trigger.due(now) is False and not any(
                self.s.free.get(c, 0) >= here.devices for c in classes if c != here.device_class):
            return None
        fleet = self.s.fleet()
        free, _ = heterogeneity.devices_by_class(fleet)
        if not any(free.get(c, 0) >= here.devices for c in classes if c != here.device_class):
            return None
        # its own facts now, the completed jobs' work as the last cycle counted it: what `upgrades` reads of
        # the knowledge for this job (the whole fleet's is built in the cycle's thread, not on the event loop)
        known = self.s.knower.of_running(key, mine[0], fleet)
        if known is None:
            return None  # no cycle has planned yet: the first one pokes the jobs an upgrade may pay for
        waiting_for = self.s.waiting_for if self.s.cache.waiting() else frozenset()
        cost = completion.MoveCost(save_s=save_s) if save_s else completion.MoveCost()
        moves = heterogeneity.upgrades(mine, fleet, now, known, waiting_for, cost, self.s.settings.min_runtime_s,
                                       {key: list(classes)}, PROBE_SHARE)
        return moves[0] if moves else None
