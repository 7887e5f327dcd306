"""The holders one planning pass may disturb, indexed once per pass (`_Pool`): who yields to whom, the
others by priority and class in the order `plan_preemption` adds victims, what disturbing them could free
per region (`may_make_room`) and whether the namespace's quota could ever let a job in (`quota_allows`),
and which request shapes no preemption could make room for. Pure; `engine.queue.admission.plan_queue` uses it.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, cast

from heterojob.engine.disruption import preemption
from heterojob.engine.capacity.fleet import Allocation, cpu_classes, quota_headroom
from heterojob.engine.placing.placement import Alternative, FleetIndex, Ledger, Request

if TYPE_CHECKING:
    from heterojob.engine.disruption.holders import Holder
    from heterojob.engine.capacity.rooms import Memory


def _may_disrupt(request: Request, holders: Sequence[Holder], taken: set[str]) -> bool:
    """Whether steps 4-5 could find anything for `request`: a holder yielding to it, a lender of its
    priority or below, or a running job of lower priority (a cheap test before the full search; `_Pool`
    answers the same per pass without rescanning the holders)."""
    return any(h.job not in taken and (h.yielding_to == request.job or h.yielding_to is None and not h.waiting and (
        request.may_preempt(h.priority, h.job) or h.base is not None and h.priority <= request.priority))
        for h in holders)


_NEVER = float("inf")
_STAMPS = itertools.count(1)


class _Pool:
    """The holders one pass may disturb, sorted once: those yielding to each waiting job, and the others
    (then the lenders among them) lowest priority first, so `may_disrupt` looks at the few holders already
    `taken` and one more instead of every holder. Also remembers, per request shape, the highest priority
    for which no preemption could make room while no room has been given back on the pass's ledger: room
    only shrinks and the candidate victims of a job of that shape and priority or below are a subset, so
    it cannot make room either."""

    def __init__(self, holders: Sequence[Holder]) -> None:
        self.yielding: dict[str, list[str]] = {}
        self.yielders: dict[str, list[Holder]] = {}  # the same, as holders in the order given
        self.lowest: list[tuple[int, str]] = []
        self.lenders: list[tuple[int, str]] = []
        self.free: dict[str, Holder] = {}  # neither yielding nor waiting: may be asked to give room
        self.grown: list[preemption.GrownJob] = []  # ... and lend room (not moving right now)
        self._running: dict[str, tuple[list[preemption.RunningJob], list[int]]] | None = None  # ... per class
        self._on: dict[str, list[tuple[float, Mapping[str, int], str]]] | None = None
        self._on_at: tuple[float, float] | None = None  # the `now` and minimum runtime `_on` was built for
        self._most: dict[tuple[object, ...], int] = {}  # `_most_replicas` per ledger state
        # ... per class, rank and region: devices a node could offer -> nodes (kept while they are unchanged)
        self._fit: dict[tuple[object, ...], tuple[tuple[int, int], Ledger, dict[int, int]]] = {}
        self._extras: dict[tuple[str, int], tuple[dict[str, int], set[str], set[str],
                                                  dict[str, list[Mapping[str, int]]], dict[str | None, int]]] = {}
        self._quota: dict[tuple[object, ...], Callable[[str, str], float]] = {}  # `_quota_room`
        self._extra_at: dict[tuple[str, int], tuple[dict[str, int], dict[str | None, set[str]]]] = {}
        self._backs: dict[int, tuple[dict[str, dict[tuple[str, str], int]], set[str], set[str],
                                     dict[str, list[Allocation]]]] = {}
        for h in holders:
            if h.yielding_to is not None:
                self.yielding.setdefault(h.yielding_to, []).append(h.job)
                self.yielders.setdefault(h.yielding_to, []).append(h)
            elif not h.waiting:
                self.lowest.append((h.priority, h.job))
                self.free[h.job] = h
                if h.base is not None:
                    self.lenders.append((h.priority, h.job))
                    if not h.disrupted:
                        self.grown.append(preemption.GrownJob(h.job, h.priority, h.since, h.allocation, h.base))
        self.lowest.sort()
        self.lenders.sort()
        self.hopeless: dict[tuple[object, ...], tuple[int, int]] = {}  # shape -> (priority, ledger.given_back)

    @classmethod
    def of(cls, holders: Sequence[Holder], memory: Memory | None) -> _Pool:
        """The pool of `holders` for a new pass. With `memory` (a `rooms.Memory` kept between cycles), when the
        holders are the same objects in the same order as the last pass's, what was sorted and built from them
        alone is taken from that pass's pool (its victims in order, and what may be disturbed at the same
        `now`); what a pass learns on its ledger starts empty."""
        if memory is None:
            return cls(holders)
        known = memory.pool
        if known is not None and len(known[0]) == len(holders) and all(
                a is b for a, b in zip(known[0], holders, strict=True)):
            last = cast(_Pool, known[1])
            pool = cls.__new__(cls)
            pool.yielding, pool.yielders, pool.lowest, pool.lenders = (last.yielding, last.yielders, last.lowest,
                                                                         last.lenders)
            pool.free, pool.grown, pool._running = last.free, last.grown, last._running
            pool._on, pool._on_at = last._on, last._on_at
            pool._most, pool._fit, pool._extras, pool._backs, pool.hopeless = {}, {}, {}, {}, {}
            pool._quota, pool._extra_at = {}, {}
        else:
            pool = cls(holders)
        memory.pool = (tuple(holders), pool)
        return pool

    @classmethod
    def untaken(cls, holders: Sequence[Holder]) -> _Pool:
        """The pool as the first job of a pass sees it, for `may_disrupt` and `may_make_room` with nothing
        taken, from holders none of which yields or waits: `may_disrupt` then reads only the lowest holder
        and the lowest lender, so only those are kept of the sorted lists (the rest is not built)."""
        pool = cls.__new__(cls)
        pool.yielding, pool.yielders, pool._running, pool._on, pool._most = {}, {}, None, None, {}
        pool._on_at = None
        pool._fit, pool._extras, pool._backs, pool._quota, pool._extra_at = {}, {}, {}, {}, {}
        pool.free = {h.job: h for h in holders}
        pool.lowest = [min((h.priority, h.job) for h in holders)] if holders else []
        lenders = [(h.priority, h.job) for h in holders if h.base is not None]
        pool.lenders = [min(lenders)] if lenders else []
        pool.grown, pool.hopeless = [], {}
        return pool

    @property
    def running(self) -> dict[str, tuple[list[preemption.RunningJob], list[int]]]:
        """The free holders as `plan_preemption` takes them, per class, in its order (lowest priority, then
        youngest, then name), with their priorities (built on first use)."""
        if self._running is None:
            self._running = {}
            for r in sorted((preemption.RunningJob(h.job, h.priority, h.since, h.allocation)
                             for h in self.free.values()), key=lambda r: (r.priority, -r.since, r.job)):
                self._running.setdefault(r.allocation.device_class, ([], []))[0].append(r)
            for jobs, priorities in self._running.values():
                priorities.extend(r.priority for r in jobs)
        return self._running

    def below(self, priority: int, taken: set[str]) -> bool:
        """Whether a free holder not taken runs at a priority below `priority`."""
        return next((p < priority for p, job in self.lowest if job not in taken), False)

    def may_disrupt(self, request: Request, taken: set[str]) -> bool:
        """`_may_disrupt`, from the sorted lists."""
        if any(j not in taken for j in self.yielding.get(request.job, ())):
            return True
        for priority, job in self.lowest:
            if job not in taken:
                if priority < request.preempt_priority:
                    return True
                break
        if any(j in self.free and j not in taken for j in request.also_preempts):
            return True
        for priority, job in self.lenders:
            if job not in taken:
                return priority <= request.priority
        return False

    def may_make_room(self, request: Request, ledger: Ledger, taken: set[str], now: float,
                      min_runtime_s: float) -> bool:
        """False only when steps 4-5 cannot give `request` room: no job yields to it, and on the usable nodes
        of no class and region it may use, and whose quota could let it in (`quota_allows`), do the free devices
        plus those of the holders it may disturb (lower priority and past `min_runtime_s`, or lent room of its
        priority or below) hold its gang, one replica per node's share (`place` packs whole replicas per node,
        and a disturbed holder frees at most its devices there). A necessary condition, checked before the full
        search: a placement is one class in one region, which needs both the room and the quota there."""
        if any(j not in taken for j in self.yielding.get(request.job, ())):
            return True
        allows: bool | Mapping[str, tuple[str, ...]] | None = None  # `quota_allows`, asked once room is found
        for alt in request.alternatives:
            if alt.per_replica <= 0 or alt.device_class not in ledger.fleet.classes:
                # nothing to bound by: search, if the quota may let it in anywhere
                return bool(self.quota_allows(request, ledger, taken, now, min_runtime_s) if allows is None
                            else allows)
            if self._most_in(alt, request, tuple(request.allowed_regions), ledger, taken, now,
                             min_runtime_s) < request.replicas:
                continue  # not even where its quota is not asked (the regions it allows are among these)
            if allows is None:
                allows = self.quota_allows(request, ledger, taken, now, min_runtime_s)
            if not allows:
                return False
            if allows is True:
                return True
            regions = allows.get(alt.device_class, ())  # only the regions whose quota may let it in
            if regions and self._most_in(alt, request, regions, ledger, taken, now, min_runtime_s) >= request.replicas:
                return True
        return False

    def _most_in(self, alt: Alternative, request: Request, regions: tuple[str, ...], ledger: Ledger, taken: set[str],
                 now: float, min_runtime_s: float) -> int:
        """`_most_replicas` over `regions` (those of `request`, or some of them), kept per pass state."""
        key = (alt.device_class, alt.per_replica, request.priority, regions, ledger.version, len(taken))
        most = self._most.get(key)
        if most is None:
            asked = request if regions == tuple(request.allowed_regions) else replace(request, allowed_regions=regions)
            most = self._most[key] = self._most_replicas(alt, asked, ledger, taken, now, min_runtime_s)
        return most

    def _most_replicas(self, alt: Alternative, request: Request, ledger: Ledger, taken: set[str], now: float,
                       min_runtime_s: float) -> int:
        """The most replicas of `alt` one region could hold if every holder `request` may disturb gave up its
        devices (`may_make_room`). A region's count is kept while the devices in use on its nodes
        (`rooms.Rooms.touched`) and those of the holders it may disturb there are unchanged."""
        cls = ledger.fleet.classes[alt.device_class]
        index = ledger.index
        room = index.room(cls)
        resource, rank, per = cls.resource_name, request.priority, alt.per_replica
        extra, stamps = self._extra(resource, rank, taken, now, min_runtime_s, index)
        used, capacity, touched = ledger.used, index.capacity(cls), index.rooms.touched
        extra_in = self._extra_regions(resource, rank, extra, index)
        most = 0
        for region in index.nodes(cls):
            if request.allowed_regions and region not in request.allowed_regions:
                continue
            stamp = (touched[(cls.name, region)], stamps.get(region, stamps[None]))
            key = (cls.name, rank, region)
            known = self._fit.get(key)
            if known is not None and known[0] == stamp and known[1] is ledger:
                have_by = known[2]
            else:  # devices a node could offer -> how many nodes (for every size of replica at once): only a
                # node with free devices or a disturbable holder's offers any (the class's others are full)
                have_by = {}
                for n in room.get(region, {}).keys() | extra_in.get(region, ()):
                    if n not in capacity:
                        continue  # not a usable node of this class (a disturbable holder of another's)
                    have = capacity[n] - used.get((n, resource), 0) + extra.get(n, 0)
                    if have > 0:
                        have_by[have] = have_by.get(have, 0) + 1
                self._fit[key] = (stamp, ledger, have_by)
            fit = sum(count * (have // per) for have, count in have_by.items() if have >= per)
            most = max(most, fit)
        return most

    def _extra_regions(self, resource: str, rank: int, extra: dict[str, int], index: FleetIndex
                       ) -> dict[str | None, set[str]]:
        """region -> the nodes of `extra` (`_extra`'s, whose nodes never change while it is the same object) in it,
        kept with it."""
        known = self._extra_at.get((resource, rank))
        if known is not None and known[0] is extra:
            return known[1]
        out: dict[str | None, set[str]] = {}
        for n in extra:
            out.setdefault(index.region_of(n), set()).add(n)
        self._extra_at[(resource, rank)] = (extra, out)
        return out

    def quota_allows(self, request: Request, ledger: Ledger, taken: set[str], now: float,
                     min_runtime_s: float) -> bool | Mapping[str, tuple[str, ...]]:
        """Where the namespace's quota may let `request` in even once every holder of its classes it may
        disturb (`disturbable`, not `taken`) gave back all it holds in that namespace (a victim's room comes
        back to its namespace; a reclaimed job keeps some): True when no quota applies to it, else class ->
        the regions (of those it may use) where the quota may let it in; falsy (False, or no region for any
        class) when the quota refuses it everywhere. A necessary condition."""
        limits = ledger.fleet.quotas.get(request.namespace)
        if not limits:
            return True
        room = self._quota_room(request, ledger, taken, now, min_runtime_s)
        out: dict[str, tuple[str, ...]] = {}
        for alt in request.alternatives:
            cls = ledger.fleet.classes.get(alt.device_class)
            if cls is None:
                continue
            need = request.replicas * alt.per_replica
            regions = [region for region in ledger.index.regions(cls)
                       if not (request.allowed_regions and region not in request.allowed_regions)
                       and need <= room(cls.name, region)]
            out[alt.device_class] = tuple(sorted({*out.get(alt.device_class, ()), *regions}))
        return out if any(out.values()) else False

    def _quota_room(self, request: Request, ledger: Ledger, taken: set[str], now: float, min_runtime_s: float
                    ) -> Callable[[str, str], float]:
        """(class, region) -> the most devices the namespace's quota lets `request`'s namespace add there once
        the holders a job of its priority may disturb gave back what they hold of its classes
        (`fleet.quota_headroom`); one table per namespace, priority and classes, made again when the
        ledger or the holders taken change, each entry computed on first use."""
        classes = frozenset(a.device_class for a in request.alternatives)  # only holders of these are disturbed
        key = (request.namespace, request.priority, classes, ledger.version, len(taken))
        known = self._quota.get(key)
        if known is not None:
            return known
        limits = ledger.fleet.quotas.get(request.namespace, ())
        back = self._given_back(request.namespace, request.priority, taken, now, min_runtime_s)
        held = {k: n - back.get(k, 0) if k[0] in classes else n
                for k, n in ledger.held.get(request.namespace, {}).items()}
        cpu = cpu_classes(ledger.fleet.classes)
        table: dict[tuple[str, str], float] = {}

        def room(device_class: str, region: str) -> float:
            out = table.get((device_class, region))
            if out is None:
                out = table[(device_class, region)] = quota_headroom(limits, held, device_class, region, cpu)
            return out

        self._quota[key] = room
        return room

    def _given_back(self, namespace: str, rank: int, taken: set[str], now: float, min_runtime_s: float
                    ) -> dict[tuple[str, str], int]:
        """(class, region) -> the devices held in `namespace` by the holders a job of priority `rank` may
        disturb, but `taken`; kept per rank (every namespace in one pass over the holders) as `taken` grows
        (as `_extra`)."""
        state = self._backs.get(rank)
        if state is None or state[2] is not taken or not len(state[1]) <= len(taken):
            back: dict[str, dict[tuple[str, str], int]] = {}
            holds: dict[str, list[Allocation]] = {}
            for h in self.free.values():
                if self._below(h, now, min_runtime_s) < rank:
                    holds[h.job] = h.footprint
                    if h.job not in taken:
                        for a in h.footprint:
                            mine = back.setdefault(a.namespace, {})
                            mine[(a.device_class, a.region)] = mine.get((a.device_class, a.region), 0) + a.devices
            state = self._backs[rank] = (back, set(taken), taken, holds)
        elif len(state[1]) < len(taken):
            back, accounted, _, holds = state
            for job in taken - accounted:
                for a in holds.get(job, ()):
                    back[a.namespace][(a.device_class, a.region)] -= a.devices
            accounted |= taken
        return state[0].get(namespace, {})

    def _extra(self, resource: str, rank: int, taken: set[str], now: float, min_runtime_s: float,
               index: FleetIndex) -> tuple[dict[str, int], dict[str | None, int]]:
        """node -> the devices of `resource` there of the holders a job of priority `rank` may disturb, but
        `taken` (`disturbable`); and per region a stamp that changes with it. Kept per (resource, rank) and
        brought up to date as `taken` grows (one set, that only grows, per pass)."""
        state = self._extras.get((resource, rank))
        if state is None or state[2] is not taken or not len(state[1]) <= len(taken):
            extra: dict[str, int] = {}
            holds: dict[str, list[Mapping[str, int]]] = {}
            for below, per_node, job in self.disturbable(resource, now, min_runtime_s):
                if below < rank:
                    holds.setdefault(job, []).append(per_node)
                    if job not in taken:
                        for n, devices in per_node.items():
                            extra[n] = extra.get(n, 0) + devices
            state = self._extras[(resource, rank)] = (extra, set(taken), taken, holds, {None: next(_STAMPS)})
        elif len(state[1]) < len(taken):
            extra, accounted, _, holds, stamps = state
            for job in taken - accounted:
                for per_node in holds.get(job, ()):
                    for n, devices in per_node.items():
                        extra[n] -= devices
                        stamps[index.region_of(n)] = next(_STAMPS)
            accounted |= taken
        return state[0], state[4]

    def disturbable(self, resource: str, now: float, min_runtime_s: float
                    ) -> list[tuple[float, Mapping[str, int], str]]:
        """(rank, devices per node, job) of the free holders' room of `resource`: a waiting job of a priority
        above `rank` may disturb the holder (it is of lower priority and past `min_runtime_s`, or lends room
        and is of its priority or below). Built on first use (`now` is the pass's)."""
        if self._on is None or self._on_at != (now, min_runtime_s):
            self._on, self._on_at = {}, (now, min_runtime_s)
            for h in self.free.values():
                below = self._below(h, now, min_runtime_s)
                if below is _NEVER:
                    continue
                self._on.setdefault(h.allocation.resource, []).append((below, h.allocation.per_node, h.job))
                if h.reserved is not None:
                    self._on.setdefault(h.reserved.resource, []).append((below, h.reserved.per_node, h.job))
        return self._on.get(resource, [])

    @staticmethod
    def _below(h: Holder, now: float, min_runtime_s: float) -> float:
        """A waiting job of a priority above this may disturb `h` (`_NEVER`: none may)."""
        below = _NEVER
        if now - h.since >= min_runtime_s:
            below = h.priority
        if h.base is not None and not h.disrupted and h.priority - 1 < below:
            below = h.priority - 1
        return below

    def victims(self, request: Request, taken: set[str]) -> preemption.Ordered:
        """The free holders of lower priority than `request` not yet taken, of its classes (those
        `plan_preemption` may pick), in its order, read lazily (`taken` must not change meanwhile)."""
        runs = []
        for cls in dict.fromkeys(a.device_class for a in request.alternatives):
            if cls in self.running:
                runs.append(_below(*self.running[cls], request, taken))
        return preemption.Ordered(*runs)

    def cannot_preempt(self, request: Request, ledger: Ledger) -> bool:
        if request.also_preempts:
            return False  # its victims are not those of a priority: nothing to compare with
        known = self.hopeless.get(request.shape)
        return known is not None and known[1] == ledger.given_back and request.preempt_priority <= known[0]

    def preempt_failed(self, request: Request, ledger: Ledger) -> None:
        if request.also_preempts:
            return
        known = self.hopeless.get(request.shape)
        if known is None or known[1] != ledger.given_back or known[0] < request.preempt_priority:
            self.hopeless[request.shape] = (request.preempt_priority, ledger.given_back)


def _below(running: list[preemption.RunningJob], priorities: list[int], request: Request, taken: set[str]
           ) -> Iterator[preemption.RunningJob]:
    """Of one class's free holders (in `plan_preemption`'s order, with their priorities), those `request` may
    preempt by priority, or besides (`also_preempts`), not `taken`."""
    below = bisect.bisect_left(priorities, request.preempt_priority)
    also = request.also_preempts
    upto = bisect.bisect_left(priorities, request.priority) if also else below
    for k, r in enumerate(itertools.islice(running, upto)):
        if r.job not in taken and (k < below or r.job in also):
            yield r
