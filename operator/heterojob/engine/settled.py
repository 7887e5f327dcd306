"""What one pass of `admission.plan_queue` leaves for the next: the waiting jobs for which steps 4-5 (take
back lent room, preempt) found nothing. Pure; part of the planner's step, kept in the caller's `rooms.Memory`.

Steps 4-5 find nothing for a job when neither the room it could use nor the holders it may disturb give it
room. Both only shrink while nothing is given back: so when a later pass starts
- on the same nodes (but for nodes now not Ready or cordoned: their room only shrank), classes, regions,
  quotas and device faults (the same objects or equal values),
- with the same holders yielding to each waiting job and the same rooms reserved for waiting jobs,
- with at least the devices in use on every node and held by every namespace that the earlier pass had
  once it stopped only taking room (its start plus what it placed until then), and
- with every holder it may disturb one it could disturb then too, at a priority no lower (the same holder
  object, not newly past the minimum runtime, nothing newly lent),
then, for the same request, while the later pass has given nothing back either, steps 4-5 find nothing
again: the pass skips their searches and the job waits (QUEUED when it fits alone, else NO_ROOM with the
message the placement gives, exactly what the full search would have said). What a pass proves this way,
and what it finds itself before it first gives room back, it leaves for the next pass under its own start.
tests/unit/test_settled.py checks plans made with it against plans made without it, pass after pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from heterojob.engine.fleet import Allocation, Fleet, Node
from heterojob.engine.placement import Ledger, Request

if TYPE_CHECKING:
    from heterojob.engine.admission import Holder
    from heterojob.engine.pool import _Pool
    from heterojob.engine.rooms import Memory

_NEVER = float("inf")


@dataclass(frozen=True)
class Settled:
    """One pass's findings, under the conditions that keep them true (module docstring)."""

    parts: tuple[object, ...]  # the fleet's classes, regions, quotas and faults
    nodes: Mapping[str, Node]
    used: Mapping[tuple[str, str], int]  # (node, resource) -> devices in use, at least, for the findings to hold
    held: Mapping[str, Mapping[tuple[str, str], int]]  # namespace -> (class, region) -> devices held, at least
    disturbable: Mapping[str, tuple[Holder, float]]  # job -> the holder and the rank below which it may be disturbed
    yielders: Mapping[str, tuple[Holder, ...]]
    own: Mapping[str, Holder]
    min_runtime_s: float
    nothing: Mapping[str, Request]  # job -> the request steps 4-5 found nothing for


def _parts(fleet: Fleet) -> tuple[object, ...]:
    return (fleet.classes, fleet.regions, fleet.quotas, fleet.unhealthy, fleet.failed, fleet.network_down)


def _same(a: object, b: object) -> bool:
    return a is b or a == b


class Tracker:
    """One pass's side of it, made once steps 0-1 have run on `ledger`: what it may skip (`known`) and what it
    learns (`nothing`, `placed`); `end` leaves it in `memory` for the next pass."""

    def __init__(self, memory: Memory, fleet: Fleet, ledger: Ledger, pool: _Pool, own: Mapping[str, Holder],
                 now: float, min_runtime_s: float) -> None:
        self.memory, self.fleet, self.ledger, self.pool, self.own = memory, fleet, ledger, pool, own
        self.now, self.min_runtime_s = now, min_runtime_s
        self.given_back = ledger.given_back
        self.used = dict(ledger.used)
        self.held = {ns: dict(h) for ns, h in ledger.held.items()}
        self.taken: list[Allocation] = []  # placed since steps 0-1, while nothing was given back
        self.nothing: dict[str, Request] = {}
        self._carried: Mapping[str, Request] | None = None
        self._disturbable: dict[str, tuple[Holder, float]] | None = None

    def quiet(self) -> bool:
        """Nothing was given back since steps 0-1 (findings are made and used only then)."""
        return self.ledger.given_back == self.given_back

    def known(self, request: Request) -> bool:
        """Steps 4-5 find nothing for `request` (a pass before found nothing for it, and nothing since could
        change that); it is kept as found by this pass too."""
        if not self.quiet():
            return False
        if self._carried is None:
            self._carried = self._valid()
        known = self._carried.get(request.job)
        if known is not None and _same(known, request):
            self.nothing[request.job] = request
            return True
        return False

    def found_nothing(self, request: Request) -> None:
        """Steps 4-5 (or their necessary tests) found nothing for `request` on this pass's ledger."""
        if self.quiet():
            self.nothing[request.job] = request

    def placed(self, allocation: Allocation) -> None:
        if self.quiet():
            self.taken.append(allocation)

    def end(self) -> None:
        """The pass is whole: its findings, under its own start, for the next pass."""
        used, held = self.used, self.held
        for a in self.taken:
            for node, n in a.per_node.items():
                used[(node, a.resource)] = used.get((node, a.resource), 0) + n
            mine = held.setdefault(a.namespace, {})
            mine[(a.device_class, a.region)] = mine.get((a.device_class, a.region), 0) + a.devices
        self.memory.settled = Settled(_parts(self.fleet), self.fleet.nodes, used, held, self.disturbable(),
                                      _yielders(self.pool), dict(self.own), self.min_runtime_s, dict(self.nothing))

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

    def _valid(self) -> Mapping[str, Request]:
        """The last pass's findings when every condition of the module docstring holds, else none."""
        last = self.memory.settled
        if not isinstance(last, Settled) or last.min_runtime_s != self.min_runtime_s:
            return {}
        fleet = self.fleet
        if not all(_same(a, b) for a, b in zip(last.parts, _parts(fleet), strict=True)):
            return {}
        nodes = fleet.nodes
        if last.nodes is not nodes and (len(last.nodes) != len(nodes) or any(
                (n := nodes.get(k)) is not v and (n is None or n.ready and n.schedulable)
                for k, v in last.nodes.items())):
            return {}  # a node new, gone or changed, but for one that cannot take anything now (its room only shrank)
        if not _holders_same(last.own, self.own) or not _yielders_same(last.yielders, _yielders(self.pool)):
            return {}
        used = self.used
        if any(used.get(key, 0) < n for key, n in last.used.items()):
            return {}
        held = self.held
        for ns, mine in last.held.items():
            now_held = held.get(ns, {})
            if any(now_held.get(key, 0) < n for key, n in mine.items()):
                return {}
        before = last.disturbable
        for job, (h, rank) in self.disturbable().items():
            known = before.get(job)
            if known is None or known[0] is not h or known[1] > rank:
                return {}
        return last.nothing


def _yielders(pool: _Pool) -> dict[str, tuple[Holder, ...]]:
    return {job: tuple(hs) for job, hs in pool.yielders.items()}


def _holders_same(a: Mapping[str, Holder], b: Mapping[str, Holder]) -> bool:
    return len(a) == len(b) and all(b.get(k) is v for k, v in a.items())


def _yielders_same(a: Mapping[str, Iterable[Holder]], b: Mapping[str, Iterable[Holder]]) -> bool:
    if len(a) != len(b):
        return False
    for job, hs in a.items():
        theirs = b.get(job)
        if theirs is None:
            return False
        mine, other = tuple(hs), tuple(theirs)
        if len(mine) != len(other) or any(x is not y for x, y in zip(mine, other, strict=True)):
            return False
    return True
