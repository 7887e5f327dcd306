"""What one pass of `admission.plan_queue` leaves for the next: the waiting jobs for which steps 4-5 (take
back lent room, preempt) found nothing. Pure; part of the planner's step, kept in the caller's `rooms.Memory`.

Steps 4-5 find nothing for a job when neither the room it could use nor the holders it may disturb give it
room. A pass runs in epochs: each time it gives room back (a victim's, a lender's) a new one begins, with the
ledger as it is then and the holders taken so far. A finding of an earlier pass's epoch holds in a later pass,
for the same request, while that later pass has given nothing back yet, when
- the nodes, classes, regions, quotas and device faults are the same (the same objects or equal values), but
  for nodes now not Ready or cordoned (their room only shrank);
- the job's own reserved room and the holders yielding to it are the same objects;
- at least as many devices are in use on every node and held by every namespace as the epoch had when it
  ended (its ledger when it began, plus what it placed);
- every holder the later pass may disturb could be disturbed then too, at a priority no lower (the same
  holder object, not newly past the minimum runtime, nothing newly lent), and none the epoch had taken is
  free to disturb again.
Then steps 4-5 find nothing again: the pass skips their searches and the job waits (QUEUED when it fits
alone, else NO_ROOM with the message the placement gives, exactly what the full search would have said).
What a pass proves this way and what it finds itself it leaves to the next pass, epoch by epoch.
tests/unit/test_settled.py checks plans made with it against plans made without it, pass after pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from heterojob.engine.capacity.fleet import Allocation, Fleet, Node
from heterojob.engine.placing.placement import Ledger, Request

if TYPE_CHECKING:
    from heterojob.engine.disruption.holders import Holder
    from heterojob.engine.disruption.pool import _Pool
    from heterojob.engine.capacity.rooms import Memory

_NEVER = float("inf")
EPOCHS = 32  # epochs a pass keeps findings for (each copies the ledger's use when it begins)


@dataclass(frozen=True)
class Epoch:
    """What a pass found between two times it gave room back, and what keeps it true: at least these devices
    in use and held (the ledger when the epoch began, plus what it placed until it ended), none of the holders
    it had already taken (asked to give room for a job ahead) free to disturb again."""

    used: Mapping[tuple[str, str], int]  # (node, resource) -> devices in use, at least
    held: Mapping[str, Mapping[tuple[str, str], int]]  # namespace -> (class, region) -> devices held, at least
    taken: frozenset[str]
    nothing: Mapping[str, Request]  # job -> the request steps 4-5 found nothing for


@dataclass(frozen=True)
class Settled:
    """One pass's findings, under the conditions that keep them true (module docstring)."""

    parts: tuple[object, ...]  # the fleet's classes, regions, quotas and faults
    nodes: Mapping[str, Node]
    disturbable: Mapping[str, tuple[Holder, float]]  # job -> the holder and the rank below which it may be disturbed
    yielders: Mapping[str, tuple[Holder, ...]]
    own: Mapping[str, Holder]
    min_runtime_s: float
    epochs: tuple[Epoch, ...]


def _parts(fleet: Fleet) -> tuple[object, ...]:
    return (fleet.classes, fleet.regions, fleet.quotas, fleet.unhealthy, fleet.failed, fleet.network_down)


def _same(a: object, b: object) -> bool:
    return a is b or a == b


class _OpenEpoch:
    """The epoch a pass is in: the ledger when it began, what it has placed and found since."""

    def __init__(self, ledger: Ledger, taken: set[str]) -> None:
        self.used = dict(ledger.used)
        self.held = {ns: dict(h) for ns, h in ledger.held.items()}
        self.taken = frozenset(taken)
        self.placed: list[Allocation] = []
        self.nothing: dict[str, Request] = {}

    def closed(self) -> Epoch:
        used, held = self.used, self.held
        for a in self.placed:
            for node, n in a.per_node.items():
                used[(node, a.resource)] = used.get((node, a.resource), 0) + n
            mine = held.setdefault(a.namespace, {})
            mine[(a.device_class, a.region)] = mine.get((a.device_class, a.region), 0) + a.devices
        return Epoch(used, held, self.taken, self.nothing)


class Tracker:
    """One pass's side of it, made once steps 0-1 have run on `ledger` (`taken`: the plan's set of holders
    taken, which grows as it goes): what it may skip (`known`) and what it learns (`found_nothing`, `placed`),
    epoch by epoch; `end` leaves it in `memory` for the next pass."""

    def __init__(self, memory: Memory, fleet: Fleet, ledger: Ledger, pool: _Pool, own: Mapping[str, Holder],
                 now: float, min_runtime_s: float, taken: set[str]) -> None:
        self.memory, self.fleet, self.ledger, self.pool, self.own = memory, fleet, ledger, pool, own
        self.now, self.min_runtime_s, self.taken = now, min_runtime_s, taken
        self.start = ledger.given_back
        self.given_back = ledger.given_back
        self.epochs: list[Epoch] = []
        self.open: _OpenEpoch | None = _OpenEpoch(ledger, taken)
        # the ledger after steps 0-1: what an earlier epoch's findings are held against (read only while this
        # pass is in its first epoch, before that epoch's own placements are added in)
        self.start_used, self.start_held = self.open.used, self.open.held
        self._common: bool | None = None  # the conditions every earlier epoch needs (None: not checked yet)
        self._valid_epoch: dict[int, bool] = {}
        self._disturbable: dict[str, tuple[Holder, float]] | None = None

    def _epoch(self) -> _OpenEpoch | None:
        """The epoch open now (None: past `EPOCHS`, nothing more is kept: a surge that gives room back for
        every job would copy the ledger as often)."""
        if self.open is not None and self.ledger.given_back != self.given_back:  # room given back: a new epoch
            self.epochs.append(self.open.closed())
            self.open = _OpenEpoch(self.ledger, self.taken) if len(self.epochs) < EPOCHS else None
            self.given_back = self.ledger.given_back
        return self.open

    def known(self, request: Request) -> bool:
        """Steps 4-5 find nothing for `request` (a pass before found nothing for it, and nothing since could
        change that); it is kept as found by this pass too."""
        if self.ledger.given_back != self.start:
            return False
        last = self.memory.settled
        if not isinstance(last, Settled):
            return False
        job = request.job
        if last.own.get(job) is not self.own.get(job) or not _holders_same_order(
                last.yielders.get(job, ()), self.pool.yielders.get(job, ())):
            return False  # its own reserved room, or the holders yielding to it, changed
        for k, epoch in enumerate(last.epochs):
            known = epoch.nothing.get(job)
            if known is not None and _same(known, request) and self._holds(last, k):
                self.found_nothing(request)
                return True
        return False

    def found_nothing(self, request: Request) -> None:
        """Steps 4-5 (or their necessary tests) found nothing for `request` on this pass's ledger."""
        epoch = self._epoch()
        if epoch is not None:
            epoch.nothing[request.job] = request

    def placed(self, allocation: Allocation) -> None:
        epoch = self._epoch()
        if epoch is not None:
            epoch.placed.append(allocation)

    def end(self) -> None:
        """The pass is whole: its findings, under its own epochs, for the next pass."""
        last = self._epoch()
        epochs = (*self.epochs, *((last.closed(),) if last is not None else ()))
        self.memory.settled = Settled(_parts(self.fleet), self.fleet.nodes, self.disturbable(), _yielders(self.pool),
                                      dict(self.own), self.min_runtime_s, tuple(e for e in epochs if e.nothing))

    def disturbable(self) -> dict[str, tuple[Holder, float]]:
        """job -> (holder, rank): the holders a waiting job of a rank above may disturb now (`_Pool._below`)."""
        if self._disturbable is None:
            below = type(self.pool)._below
            self._disturbable = {}
            for job, h in self.pool.free.items():
                rank = below(h, self.now, self.min_runtime_s)
                if rank != _NEVER:
                    self._disturbable[job] = (h, rank)
        return self._disturbable

    def _holds(self, last: Settled, k: int) -> bool:
        """Whether the last pass's epoch `k` still holds for this pass, now in its first epoch."""
        if self._common is None:
            self._common = self._same_fleet(last)
        if not self._common:
            return False
        valid = self._valid_epoch.get(k)
        if valid is None:
            epoch, used, held = last.epochs[k], self.start_used, self.start_held
            valid = (not any(used.get(key, 0) < n for key, n in epoch.used.items())
                     and not any(held.get(ns, {}).get(key, 0) < n
                                 for ns, mine in epoch.held.items() for key, n in mine.items())
                     and not any(job in self.disturbable() for job in epoch.taken))
            self._valid_epoch[k] = valid
        return valid

    def _same_fleet(self, last: Settled) -> bool:
        """The conditions of the module docstring that do not depend on the epoch."""
        if last.min_runtime_s != self.min_runtime_s:
            return False
        fleet = self.fleet
        if not all(_same(a, b) for a, b in zip(last.parts, _parts(fleet), strict=True)):
            return False
        nodes = fleet.nodes
        if last.nodes is not nodes and (len(last.nodes) != len(nodes) or any(
                (n := nodes.get(k)) is not v and (n is None or n.ready and n.schedulable)
                for k, v in last.nodes.items())):
            return False  # a node new, gone or changed, but for one that cannot take anything now (its room shrank)
        before = last.disturbable
        for job, (h, rank) in self.disturbable().items():
            known = before.get(job)
            if known is None or known[0] is not h or known[1] > rank:
                return False
        return True


def _yielders(pool: _Pool) -> dict[str, tuple[Holder, ...]]:
    return {job: tuple(hs) for job, hs in pool.yielders.items()}


def _holders_same_order(a: Iterable[Holder], b: Iterable[Holder]) -> bool:
    mine, other = tuple(a), tuple(b)
    return len(mine) == len(other) and all(x is y for x, y in zip(mine, other, strict=True))
