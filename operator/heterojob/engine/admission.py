"""The planner: the waiting queue, the jobs holding devices and the fleet in; a plan out. Pure.

One home for admission policy, called by the operator (`controller.admission`), the trace replay
(`replay.replay`), the console's previews and the benchmarks. It returns what should happen and never
acts: which waiting job is placed where, which waits behind whom (and why, in the words the user reads),
which running jobs are asked to give up room (preempted, or lent room reclaimed) and for whom, and which
jobs to look at again now. Steps of `plan_queue`, in order:

1. Sort the queue: priority (urgent > high > medium > low), then age, then name.
2. Place it in that order on a scratch ledger (`placement.schedule`): each placement takes its room
   before the next job is tried, so no job takes room a job ahead of it can use now.
3. A job that did not fit but would fit alone is QUEUED behind the jobs ahead that took the room.
4. A job whose earlier victims are still checkpointing WAITS for them (nothing new is disturbed).
5. Otherwise it takes back room lent to grown elastic jobs of its priority or below (RECLAIMING), or
   else preempts strictly lower-priority jobs that have run long enough (PREEMPTING), or gets NO_ROOM.
   Each planned disruption frees its room for this job on the scratch ledger, so two waiting jobs never
   pick the same victim and later jobs do not count on that room.

A pass indexes the holders once (`_Pool`: who yields to whom, the others lowest priority first), so
steps 4-5 cost per waiting job what it may disturb, not every holder; and it remembers which request shapes
no preemption could make room for until room is given back. Its cost grows with the queue it is given and
the holders, not with their product.

`growth` says how far an elastic job may grow: never while a job of its priority or above waits.

`plan_with_policy` runs the heterogeneity-aware policy first (`engine.policy.prepare`: the queue order of
`engine.queueing` folded into priorities, and each job's classes narrowed and ordered by expected
completion, `engine.completion`), then `plan_queue` on what it returns.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING

from heterojob.engine import completion, preemption, transfer
from heterojob.engine.fleet import Allocation, Fleet, quota_room
from heterojob.engine.placement import (
    Alternative,
    Candidate,
    FleetIndex,
    Ledger,
    Request,
    Result,
    listed,
    place,
    replicas_text,
    room_to_grow,
)
from heterojob.engine.rooms import Memory

if TYPE_CHECKING:
    from heterojob.engine.policy import Knowledge, Prepared
    from heterojob.engine.queueing import QueueSettings
    from heterojob.engine.ranking import Memo


class Outcome(StrEnum):
    """What the plan says of one waiting job; the value is the reason written to its status."""

    PLACED = "Placed"
    QUEUED = "Queued"  # fits alone, but jobs ahead of it take the room first
    PREEMPTING = "Preempting"  # lower-priority jobs are (or were just) asked to checkpoint and leave
    RECLAIMING = "Reclaiming"  # grown elastic jobs are (or were just) asked to shrink back
    NO_ROOM = "NoRoom"


class DisruptionKind(StrEnum):
    PREEMPT = "preempt"  # the job checkpoints, releases everything and requeues
    RECLAIM = "reclaim"  # the job checkpoints and restarts at its admitted size


@dataclass(frozen=True)
class Holder:
    """A job that holds devices now, as the planner needs it."""

    job: str
    priority: int
    since: float  # when its current placement started (unix seconds)
    allocation: Allocation
    base: Request | None = None  # its admitted size when it grew beyond it (the rest is lent room)
    yielding_to: str | None = None  # already asked to give its room to this waiting job
    disrupted: bool = False  # checkpointing, migrating or resizing now
    reserved: Allocation | None = None  # room also held for its move (its destination)
    waiting: bool = False  # it waits in the queue: `allocation` is room reserved for itself, not devices

    @property
    def footprint(self) -> list[Allocation]:
        return [a for a in (self.allocation, self.reserved) if a is not None]


@dataclass(frozen=True)
class Disruption:
    job: str  # who gives up room
    kind: DisruptionKind
    by: str  # the waiting job it makes room for
    replicas: int | None  # RECLAIM: the size it goes back to
    keep: Candidate | None = None  # RECLAIM: where it stays at that size (reserved before it checkpoints)

    def explain(self, priority: str) -> str:
        """Why, for the disturbed job's status and history; `priority` names the waiting job's priority."""
        if self.kind == DisruptionKind.PREEMPT:
            return f"preempted by {self.by} ({priority})"
        return f"reclaim: {self.by} ({priority}) needs the room lent to this job; back to {self.replicas} replica(s)"


@dataclass(frozen=True)
class Admission:
    """The plan for one waiting job."""

    job: str
    outcome: Outcome
    message: str
    candidate: Candidate | None = None  # PLACED: where; PREEMPTING/RECLAIMING: where it will go
    disruptions: tuple[Disruption, ...] = ()  # new ones only: jobs already yielding are not asked again
    wake: tuple[str, ...] = ()  # QUEUED: the jobs ahead that fit first (look at them now)
    reason: str = ""  # plan_move: a named reason the move is held (`transfer.Reason`), else empty


@dataclass(frozen=True)
class Settings:
    min_runtime_s: float = 300.0  # a job that has run less than this is never preempted (no thrashing)
    lookahead: int = 256  # how many jobs ahead in the queue a single job's plan makes room for


@dataclass
class Plan:
    admissions: dict[str, Admission] = field(default_factory=dict)

    def __getitem__(self, job: str) -> Admission:
        return self.admissions[job]

    @property
    def placed(self) -> list[Admission]:
        return [a for a in self.admissions.values() if a.outcome == Outcome.PLACED]

    @property
    def disruptions(self) -> list[Disruption]:
        return [d for a in self.admissions.values() for d in a.disruptions]


# said of a job the queue policy moved up (promoted after waiting its starvation bound) whose promotion
# displaces fewer than its order (`Request.preempts`: the queue asks for more devices than the fleet has)
PROMOTED_HELD = ("; promoted after waiting, it takes the next room first, but while the queue asks for more "
                 "devices than the fleet has it displaces only running jobs of its level or later expected to "
                 "run longer than it")


def plan_queue(queue: Iterable[Request], holders: Iterable[Holder], fleet: Fleet, now: float,
               settings: Settings = Settings(), memory: Memory | None = None) -> Plan:
    """Plan every waiting job of `queue` (steps in the module docstring); `fleet` counts every holder's
    devices as used. `memory`: a `rooms.Memory` the caller keeps from one cycle to the next, for one fleet
    (what placement found per class and region while its free room is unchanged); the plan is the same
    without it."""
    holders = list(holders)
    ordered = sorted(queue, key=lambda r: r.order)
    own = {h.job: h for h in holders if h.waiting}
    index = FleetIndex(fleet, memory)  # nodes per class and region and their free room, on the fleet as given
    ledger = Ledger(fleet, index)
    plan = Plan()
    for request in ordered:  # step 0: a moving job lands on the room it reserved, when that still fits it
        if request.job in own:
            ledger.take(own[request.job].allocation, -1)
            pinned = place(_pinned(request, own[request.job].allocation, fleet), ledger.fleet, ledger.index).chosen
            if pinned is not None:
                ledger.take(pinned.allocation(request.namespace))
                plan.admissions[request.job] = Admission(
                    request.job, Outcome.PLACED, f"placed on the room reserved for it: {_where(pinned)}", pinned)
    taken: set[str] = set()  # holders a job earlier in this plan already disturbs
    yielding: dict[str, list[Holder]] = {}
    for h in holders:
        if h.yielding_to:
            yielding.setdefault(h.yielding_to, []).append(h)
    for request in ordered:  # step 1: the room in-flight victims give (or gave) their job stays that job's
        if request.job in plan.admissions or request.job not in yielding:
            continue
        fenced = _in_flight(request, sorted(yielding[request.job], key=lambda h: h.job), ledger, taken)
        if fenced is not None and fenced.candidate is not None:
            plan.admissions[request.job] = fenced
            ledger.take(fenced.candidate.allocation(request.namespace))
    for request in [r for r in ordered if r.job not in plan.admissions]:  # step 2, `schedule` on the ledger
        if not ledger.may_fit(request):
            continue  # only what fits is kept of this step (a waiting job's message comes from step 3 or 5)
        result = ledger.place(request)  # a placement takes its room before the next job is tried
        if result.chosen is not None:
            plan.admissions[request.job] = Admission(request.job, Outcome.PLACED, result.explain(), result.chosen)
    pool = _Pool(holders)  # who may be disturbed, indexed once for the whole pass
    alone_by_shape: dict[tuple[object, ...], Result] = {}  # the fleet does not change: equal shapes alike
    placed: list[str] = []  # jobs placed so far, in queue order
    said: dict[int, tuple[Result, str]] = {}  # a "would it fit alone" result's explanation
    for request in ordered:
        if request.job in plan.admissions:
            placed.append(request.job)
            continue
        if request.job in own:  # its own reservation is room it may use
            mine = Ledger(fleet, index)
            mine.take(own[request.job].allocation, -1)
            alone = place(request, mine.fleet, mine.index)
        else:
            if request.shape not in alone_by_shape:
                alone_by_shape[request.shape] = place(request, fleet, index)
            alone = alone_by_shape[request.shape]
        if alone.chosen is not None:  # step 3
            plan.admissions[request.job] = Admission(
                request.job, Outcome.QUEUED,
                f"queued behind {len(placed)} higher-priority or older job(s) that fit first: "
                f"{', '.join(placed[:5])}{' ...' if len(placed) > 5 else ''}", alone.chosen, wake=tuple(placed))
            continue
        known = said.get(id(alone))
        if known is None or known[0] is not alone:
            known = said[id(alone)] = (alone, alone.explain())
        why = known[1]
        if request.preempt_priority < request.priority and pool.below(request.priority, taken):
            why += PROMOTED_HELD  # its order would displace a running job that its promotion may not
        if not pool.may_disrupt(request, taken) or not pool.may_make_room(request, ledger, taken, now,
                                                                             settings.min_runtime_s):
            plan.admissions[request.job] = Admission(request.job, Outcome.NO_ROOM, why)
            continue
        plan.admissions[request.job] = admission = _disrupt(request, holders, ledger, taken, now, settings, why,
                                                            pool)
        if admission.candidate is not None and admission.outcome != Outcome.NO_ROOM:
            ledger.take(admission.candidate.allocation(request.namespace))
    return plan


def may_act(queue: Iterable[Request], holders: Iterable[Holder], fleet: Fleet, now: float,
            settings: Settings = Settings()) -> bool:
    """False only when `plan_queue` would place, preempt and reclaim nothing (every job QUEUED or NO_ROOM
    is impossible then too: a job that fits alone fits the free room): no holder yields to a waiting job or
    holds room reserved for one, no request may fit the free room (`Ledger.may_fit`), and for none could
    disturbing holders make room (`_Pool.may_disrupt`, `_Pool.may_make_room`). Until a job is placed or
    disturbs someone, `plan_queue` sees the ledger and the holders as given, so the first job that acts
    passes one of these tests. For callers that act on the plan only (the trace replay): the messages of
    the jobs that wait need `plan_queue`."""
    holders = list(holders)
    if any(h.waiting or h.yielding_to is not None for h in holders):
        return True
    ledger = Ledger(fleet)
    pool: _Pool | None = None
    taken: set[str] = set()
    for request in queue:
        if ledger.may_fit(request):
            return True
        pool = pool or _Pool.untaken(holders)
        if pool.may_disrupt(request, taken) and pool.may_make_room(request, ledger, taken, now,
                                                                   settings.min_runtime_s):
            return True
    return False


def _pinned(request: Request, room: Allocation, fleet: Fleet) -> Request:
    """`request` allowed only on the nodes of `room`, in its class and region."""
    return replace(request, alternatives=[a for a in request.alternatives if a.device_class == room.device_class],
                   allowed_regions=(room.region,),
                   exclude_nodes=request.exclude_nodes | (frozenset(fleet.nodes) - frozenset(room.per_node)))


def _where(c: Candidate) -> str:
    return f"{c.region}/{c.device_class}: {replicas_text(len(c.nodes))} on {len(set(c.nodes))} node(s)"


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
        self._most: dict[tuple[object, ...], int] = {}  # `_most_replicas` per ledger state
        self._fit: dict[tuple[object, ...], tuple[tuple[int, int], Ledger, int]] = {}  # ... its regions' counts
        self._extras: dict[tuple[str, int], tuple[dict[str, int], set[str], set[str],
                                                  dict[str, list[Mapping[str, int]]], dict[str | None, int]]] = {}
        self._backs: dict[tuple[str, int], tuple[dict[tuple[str, str], int], set[str], set[str],
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
    def untaken(cls, holders: Sequence[Holder]) -> _Pool:
        """The pool as the first job of a pass sees it, for `may_disrupt` and `may_make_room` with nothing
        taken, from holders none of which yields or waits: `may_disrupt` then reads only the lowest holder
        and the lowest lender, so only those are kept of the sorted lists (the rest is not built)."""
        pool = cls.__new__(cls)
        pool.yielding, pool.yielders, pool._running, pool._on, pool._most = {}, {}, None, None, {}
        pool._fit, pool._extras, pool._backs = {}, {}, {}
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
        of no class and region it may use do the free devices plus those of the holders it may disturb
        (lower priority and past `min_runtime_s`, or lent room of its priority or below) hold its gang, one
        replica per node's share (`place` packs whole replicas per node, and a disturbed holder frees at
        most its devices there). A necessary condition, checked before the full search."""
        if any(j not in taken for j in self.yielding.get(request.job, ())):
            return True
        if not self.quota_allows(request, ledger, taken, now, min_runtime_s):
            return False
        for alt in request.alternatives:
            if alt.per_replica <= 0 or alt.device_class not in ledger.fleet.classes:
                return True  # nothing to bound by: search
            key = (alt.device_class, alt.per_replica, request.priority, tuple(request.allowed_regions), ledger.version,
                   len(taken))
            most = self._most.get(key)
            if most is None:
                most = self._most[key] = self._most_replicas(alt, request, ledger, taken, now, min_runtime_s)
            if most >= request.replicas:
                return True
        return False

    def _most_replicas(self, alt: Alternative, request: Request, ledger: Ledger, taken: set[str], now: float,
                       min_runtime_s: float) -> int:
        """The most replicas of `alt` one region could hold if every holder `request` may disturb gave up its
        devices (`may_make_room`). A region's count is kept while the devices in use on its nodes
        (`rooms.Rooms.touched`) and those of the holders it may disturb there are unchanged."""
        cls = ledger.fleet.classes[alt.device_class]
        index = ledger.index
        index.room(cls)
        resource, rank, per = cls.resource_name, request.priority, alt.per_replica
        extra, stamps = self._extra(resource, rank, taken, now, min_runtime_s, index)
        used, capacity, touched = ledger.used, index.capacity(cls), index.rooms.touched
        most = 0
        for region, names in index.nodes(cls).items():
            if request.allowed_regions and region not in request.allowed_regions:
                continue
            stamp = (touched[(cls.name, region)], stamps.get(region, stamps[None]))
            key = (cls.name, per, rank, region)
            known = self._fit.get(key)
            if known is not None and known[0] == stamp and known[1] is ledger:
                fit = known[2]
            else:
                fit = 0
                for n in names:
                    have = capacity[n] - used.get((n, resource), 0) + extra.get(n, 0)
                    if have >= per:
                        fit += have // per
                self._fit[key] = (stamp, ledger, fit)
            most = max(most, fit)
        return most

    def quota_allows(self, request: Request, ledger: Ledger, taken: set[str], now: float,
                     min_runtime_s: float) -> bool:
        """False only when the namespace's quota refuses `request` in every class and region it may use even
        once every holder of its classes it may disturb (`disturbable`, not `taken`) gave back all it holds in
        that namespace (a victim's room comes back to its namespace; a reclaimed job keeps some). A necessary
        condition."""
        limits = ledger.fleet.quotas.get(request.namespace)
        if not limits:
            return True
        back = self._given_back(request.namespace, request.priority, taken, now, min_runtime_s)
        classes = {a.device_class for a in request.alternatives}  # only holders of these are disturbed for it
        held = {key: n - back.get(key, 0) if key[0] in classes else n
                for key, n in ledger.held.get(request.namespace, {}).items()}
        for alt in request.alternatives:
            cls = ledger.fleet.classes.get(alt.device_class)
            if cls is None:
                continue
            need = request.replicas * alt.per_replica
            for region in ledger.index.regions(cls):
                if request.allowed_regions and region not in request.allowed_regions:
                    continue
                if quota_room(limits, held, cls.name, region, need) is None:
                    return True
        return False

    def _given_back(self, namespace: str, rank: int, taken: set[str], now: float, min_runtime_s: float
                    ) -> dict[tuple[str, str], int]:
        """(class, region) -> the devices held in `namespace` by the holders a job of priority `rank` may
        disturb, but `taken`; kept per (namespace, rank) as `taken` grows (as `_extra`)."""
        state = self._backs.get((namespace, rank))
        if state is None or state[2] is not taken or not len(state[1]) <= len(taken):
            back: dict[tuple[str, str], int] = {}
            holds: dict[str, list[Allocation]] = {}
            for h in self.free.values():
                if self._below(h, now, min_runtime_s) < rank:
                    for a in h.footprint:
                        if a.namespace == namespace:
                            holds.setdefault(h.job, []).append(a)
                            if h.job not in taken:
                                back[(a.device_class, a.region)] = back.get((a.device_class, a.region), 0) + a.devices
            state = self._backs[(namespace, rank)] = (back, set(taken), taken, holds)
        elif len(state[1]) < len(taken):
            back, accounted, _, holds = state
            for job in taken - accounted:
                for a in holds.get(job, ()):
                    back[(a.device_class, a.region)] -= a.devices
            accounted |= taken
        return state[0]

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
        if self._on is None:
            self._on = {}
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


def _in_flight(request: Request, in_flight: Sequence[Holder], ledger: Ledger, taken: set[str]) -> Admission | None:
    """The job's room once the jobs yielding to it have released theirs, when it fits there: their room is
    freed on `ledger` (the caller takes the returned candidate) and they are `taken`; else None."""
    rooms = [a for h in in_flight for a in h.footprint]
    ledger.take_all(rooms, -1)
    fits = place(request, ledger.fleet, ledger.index).chosen
    if fits is None:
        ledger.take_all(rooms, +1)  # as it was
        return None
    taken.update(h.job for h in in_flight)
    outcome = Outcome.RECLAIMING if all(h.base is not None for h in in_flight) else Outcome.PREEMPTING
    names = ", ".join(h.job for h in in_flight)
    return Admission(request.job, outcome, f"waiting for {len(in_flight)} preempted or reclaimed job(s) to "
                     f"checkpoint and release their devices: {names}", fits)


def _disrupt(request: Request, holders: Sequence[Holder], ledger: Ledger, taken: set[str], now: float,
             settings: Settings, no_room: str, pool: _Pool) -> Admission:
    """Steps 4 and 5 for one job that does not fit, on `ledger` (left with the disturbed jobs' room freed)."""
    in_flight = sorted((h for h in pool.yielders.get(request.job, ()) if h.job not in taken), key=lambda h: h.job)
    if in_flight:  # step 4
        waiting = _in_flight(request, in_flight, ledger, taken)
        if waiting is not None:
            return waiting
    lenders = [g for g in pool.grown if g.job not in taken]
    reclaim = preemption.plan_reclaim(request, ledger.fleet, lenders) if lenders else None
    if reclaim is not None:
        back = pool.free
        for lender, _ in reclaim.shrink:
            ledger.take(back[lender].allocation, -1)
            taken.add(lender)
        kept: dict[str, Candidate | None] = {}
        for lender, _ in reclaim.shrink:  # the lender keeps its admitted size where it is
            base = back[lender].base
            assert base is not None
            kept[lender] = place(base, ledger.fleet, ledger.index).chosen
            if kept[lender] is not None:
                ledger.take(kept[lender].allocation(base.namespace))
        return Admission(request.job, Outcome.RECLAIMING, f"{reclaim.explain()}; waiting for their checkpoints",
                         reclaim.candidate, tuple(
                             Disruption(j, DisruptionKind.RECLAIM, request.job, n, kept[j]) for j, n in reclaim.shrink))
    if pool.cannot_preempt(request, ledger):
        return Admission(request.job, Outcome.NO_ROOM, no_room)
    found = preemption.plan_preemption(request, ledger.fleet, pool.victims(request, taken), now,
                                       settings.min_runtime_s)
    if found is None:
        pool.preempt_failed(request, ledger)
        return Admission(request.job, Outcome.NO_ROOM, no_room)
    lost = pool.free
    for victim in found.victims:
        for a in lost[victim].footprint:
            ledger.take(a, -1)
        taken.add(victim)
    victims = tuple(Disruption(v, DisruptionKind.PREEMPT, request.job, None) for v in found.victims)
    return Admission(request.job, Outcome.PREEMPTING, f"{found.explain()}; waiting for their checkpoints",
                     found.candidate, victims)


def plan_one(request: Request, queue: Iterable[Request], holders: Iterable[Holder], fleet: Fleet, now: float,
             settings: Settings = Settings(), policy: tuple[Knowledge, QueueSettings] | None = None) -> Admission:
    """The plan for one waiting job: the jobs ahead of it in `queue` (at most `settings.lookahead`) are
    planned first, so it neither takes their room nor the victims they would preempt; the caller acts on
    this job's part only (the jobs ahead act on theirs in their own passes). With `policy` (what is known
    of the jobs, the queue settings), the order and classes come from `plan_with_policy`."""
    if policy is not None:
        from heterojob.engine import policy as heterogeneity

        knowledge, queue_settings = policy
        queue, holders = list(queue), list(holders)
        prepared = heterogeneity.prepare([*(r for r in queue if r.job != request.job), request], holders, fleet,
                                         now, knowledge, queue_settings, settings.min_runtime_s)
        mine = next(r for r in prepared.queue if r.job == request.job)
        ahead = [r for r in prepared.queue if r.job != request.job and r.order < mine.order][:settings.lookahead]
        admission = plan_queue([*ahead, mine], prepared.holders, fleet, now, settings)[request.job]
        if admission.outcome == Outcome.PLACED:
            return admission
        aside = set_aside(request, mine, prepared.choices.get(request.job), fleet)
        return replace(admission, message=f"{admission.message}; {aside}") if aside else admission
    ahead = sorted((r for r in queue if r.job != request.job and r.order < request.order),
                   key=lambda r: r.order)[:settings.lookahead]
    return plan_queue([*ahead, request], holders, fleet, now, settings)[request.job]


def set_aside(request: Request, narrowed: Request, choice: completion.Choice | None, fleet: Fleet) -> str:
    """Why the classes of `request` that the policy left out of `narrowed` (`engine.policy.prepare`: a
    waiting job keeps only the classes worth taking now) are not where it waits, from `choice`'s estimates,
    and the quota limits that would refuse them besides: a waiting job's message accounts for every class
    the user listed, not only those its plan explains. Empty when none was set aside."""
    kept = {a.device_class for a in narrowed.alternatives}
    aside = [a for a in request.alternatives if a.device_class not in kept]
    if not aside:
        return ""
    done = choice.completion_s if choice is not None else {}
    first = choice.classes[0] if choice is not None and choice.classes else ""  # its best expected completion
    best = done.get(first, math.inf)
    notes = []
    for a in aside:
        c = a.device_class
        mine = done.get(c, math.inf)
        if not (math.isfinite(mine) and math.isfinite(best)):
            notes.append(f"{c}: no expected completion (no usable node of it, or no speed known for it: "
                         f"AcceleratorClass spec.throughput)")
        elif choice is not None and c in choice.declined:
            notes.append(f"{c}: declined: waiting for {first} is expected to finish sooner (~{_hours(best)}) "
                         f"than starting on {c} now (~{_hours(mine)})")
        else:
            notes.append(f"{c}: waiting for it is expected to finish later (~{_hours(mine)}) than waiting for "
                         f"{first} (~{_hours(best)})")
    blockers = [r for r in place(replace(request, alternatives=aside), fleet).rejections if r.quota]
    text = f"set aside: {listed(notes, 4)}"
    return text + (f"; and quota besides: {listed(blockers, 4)}" if blockers else "")


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h"


def plan_move(request: Request, queue: Iterable[Request], holders: Iterable[Holder], fleet_without_it: Fleet,
              now: float, settings: Settings = Settings(), move: transfer.Move | None = None) -> Admission:
    """Where a running job would land if it moved now (make before break): PLACED with the destination to
    reserve before its checkpoint is asked for, or why there is none. A voluntary move takes no room a job
    ahead of it in the queue could use and disturbs nobody. `fleet_without_it` must not count the job's
    own devices (it gives them up when it moves); `request` says which nodes it leaves. With `move` (its
    checkpoint and the region it leaves), a destination in another region is taken only when
    `transfer.judge` lets it: the move saves more than it costs and a link leads there; when only such
    regions had room, the answer names the reason (`reason`: NoLink, TransferExceedsSaving or
    LostWorkExceedsSaving)."""
    verdicts: dict[str, transfer.Verdict] = {}
    open_ = True
    if move is not None:
        verdicts = {r: transfer.judge(move, r, fleet_without_it.regions) for r in _regions(request, fleet_without_it)}
        if any(not v.ok for v in verdicts.values()):
            request = replace(request, allowed_regions=tuple(sorted(r for r, v in verdicts.items() if v.ok)))
            open_ = bool(request.allowed_regions)
    others = [h for h in holders if h.job != request.job]
    if open_:
        admission = plan_one(request, [r for r in queue if r.job != request.job], others, fleet_without_it, now,
                             settings)
    else:  # every region is refused
        admission = Admission(request.job, Outcome.NO_ROOM, "no region may be moved to")
    if admission.outcome == Outcome.PLACED:
        assert admission.candidate is not None
        verdict = verdicts.get(admission.candidate.region)
        if verdict is not None and verdict.cost is not None and verdict.cost.link is not None:
            return replace(admission, message=f"{admission.message}; {verdict.message}")
        return admission
    why = admission.message if admission.outcome in (Outcome.QUEUED, Outcome.NO_ROOM) else \
        place(request, fleet_without_it).explain()
    refused = {r: v for r, v in verdicts.items() if not v.ok}
    if refused:  # would it have fitted in a region the transfer rules out? then that is why it is held
        fits = place(replace(request, allowed_regions=tuple(sorted(refused))), fleet_without_it).chosen
        if fits is not None:
            v = refused[fits.region]
            others_refused = "; ".join(x.message for r, x in sorted(refused.items()) if r != fits.region)
            return Admission(request.job, Outcome.NO_ROOM, f"no destination worth the move: {v.message}"
                             + (f"; also {others_refused}" if others_refused else "")
                             + (f"; elsewhere {why}" if open_ else ""), reason=v.reason.value)
    return Admission(request.job, Outcome.NO_ROOM, f"no destination: {why}")


def plan_relocation(request: Request, queue: Iterable[Request], holders: Iterable[Holder], fleet: Fleet, now: float,
                    settings: Settings = Settings(), move: transfer.Move | None = None) -> Admission:
    """`plan_one` for a job that must leave where it ran (an involuntary move: a dead device, a lost member):
    with `move`, the regions that fit are tried cheapest transfer first (`transfer.tiers`: its own region,
    then by transfer time, unlinked regions last), and the first tier where it is placed wins; when none
    places it, the plan over every allowed region (it may preempt or queue there) as before."""
    queue = list(queue)
    if move is None:
        return plan_one(request, queue, holders, fleet, now, settings)
    holders = list(holders)
    groups = transfer.tiers(move, _regions(request, fleet), fleet.regions)
    if len(groups) > 1:
        mine = Ledger(fleet)  # room reserved for the job itself (the healthy part of its old room) is its own
        for h in holders:
            if h.job == request.job and h.waiting:
                mine.take(h.allocation, -1)
        for tier in groups:
            narrowed = replace(request, allowed_regions=tier)
            if place(narrowed, mine.fleet, mine.index).chosen is None:
                continue  # nothing fits there even alone: no plan needed
            admission = plan_one(narrowed, queue, holders, fleet, now, settings)
            if admission.outcome == Outcome.PLACED:
                assert admission.candidate is not None
                v = transfer.judge(move, admission.candidate.region, fleet.regions)
                note = f"; the cheapest transfer that fits: {v.message}" if v.cost and v.cost.link else ""
                return replace(admission, message=admission.message + note)
    return plan_one(request, queue, holders, fleet, now, settings)


def _regions(request: Request, fleet: Fleet) -> list[str]:
    """The regions `request` may go to: its allowed ones, else every region of the fleet."""
    if request.allowed_regions:
        return list(request.allowed_regions)
    names = set(fleet.regions)
    if not fleet.regions:
        names |= {n.region for n in fleet.nodes.values() if n.region}
    return sorted(names)


def growth(request: Request, top_waiting: int | None, fleet_without_it: Fleet, current: int, maximum: int,
           device_class: str, region: str) -> int | None:
    """The most replicas (above `current`, up to `maximum`) an elastic job may restart with now, in its
    class and region, or None. Room is only lent while no job of its priority or above waits: `top_waiting`
    is the highest priority among the other waiting jobs (None: nobody waits)."""
    if current >= maximum or (top_waiting is not None and top_waiting >= request.priority):
        return None
    return room_to_grow(request, fleet_without_it, current, maximum, device_class, region)


def top_priority(waiting: Iterable[Request], besides: str = "") -> int | None:
    """The highest priority among `waiting` (but `besides`), the argument `growth` takes."""
    return max((r.priority for r in waiting if r.job != besides), default=None)


# --- the heterogeneity-aware policy (engine.policy) in front of the plan ----------------------------------

def plan_with_policy(queue: Iterable[Request], holders: Iterable[Holder], fleet: Fleet, now: float,
                     knowledge: Knowledge, queue_settings: QueueSettings, settings: Settings = Settings(),
                     memo: Memo | None = None, memory: Memory | None = None) -> tuple[Plan, Prepared]:
    """`engine.policy.prepare` (queue order, class choice by expected completion), then `plan_queue`.
    `memo`: `engine.ranking.Memo`, `memory`: `rooms.Memory`, both kept by the caller between passes (the
    plan is the same without them)."""
    from heterojob.engine import policy

    prepared = policy.prepare(queue, holders, fleet, now, knowledge, queue_settings, settings.min_runtime_s, memo)
    return plan_queue(prepared.queue, prepared.holders, fleet, now, settings, memory), prepared

