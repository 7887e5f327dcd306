"""The planner: the waiting queue, the jobs holding devices and the fleet in; a plan out. Pure.

One home for admission policy, called by the operator (`controller.admission`), the trace replay
(`replay.replay`), the console's previews and the benchmarks. It returns what should happen and never
acts: which waiting job is placed where, which waits behind whom (and why, in the words the user reads),
which running jobs are asked to give up room (preempted, or lent room reclaimed) and for whom, and which
jobs to look at again now. Steps of `plan_queue`, in order:

1. Sort the queue: priority (urgent > high > medium > low), then age, then name.
2. Take the queue in that order on a scratch ledger: a job that fits is placed (`placement.schedule`) and
   takes its room before the next job is tried, so no job takes room a job ahead of it can use now.
3. A job that did not fit but would fit alone is QUEUED behind the jobs ahead that took the room.
4. A job whose earlier victims are still checkpointing WAITS for them (nothing new is disturbed).
5. Otherwise it takes back room lent to grown elastic jobs of its priority or below (RECLAIMING), or
   else preempts strictly lower-priority jobs that have run long enough (PREEMPTING), or gets NO_ROOM.
   Each planned disruption takes this job's room (the victims' and the free room it counts on) on the
   scratch ledger before the next job is tried, so two waiting jobs never pick the same victim and no
   job behind it takes the room it preempts for.
Each job's plan is therefore what it would get with only the jobs ahead of it in the queue (`plan_one`).

A pass indexes the holders once (`_Pool`: who yields to whom, the others lowest priority first), so
steps 4-5 cost per waiting job what it may disturb, not every holder; and it remembers which request shapes
no preemption could make room for until room is given back. Its cost grows with the queue it is given and
the holders, not with their product. Placement reads only the nodes with free room (`engine.capacity.rooms`;
`memory`, a `rooms.Memory` the caller keeps, carries what it found per region to the next cycle while the
room there is unchanged), and the preemption and reclaim searches ask `engine.disruption.victims.Search` whether a job
fits as victims come and go instead of placing it each time (tests/unit/test_planner_exact.py checks every
plan against the straightforward scan, `engine.reference`; `bench/planner.py` measures it).

`growth` says how far an elastic job may grow: never while a job of its priority or above waits.

`plan_with_policy` runs the heterogeneity-aware policy first (`engine.queue.policy.prepare`: the queue order of
`engine.basics.queueing` folded into priorities, and each job's classes narrowed and ordered by expected
completion, `engine.queue.completion`), then `plan_queue` on what it returns.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING

from heterojob.engine.disruption import preemption
from heterojob.engine.queue.aside import set_aside
from heterojob.engine.capacity.fleet import Allocation, Fleet, cpu_classes, quota_room
from heterojob.engine.disruption.holders import Holder
from heterojob.engine.placing.placement import (
    Candidate, FleetIndex, Ledger, Request, Result, fits, place, replicas_text, room_to_grow,
)
from heterojob.engine.disruption.pool import _may_disrupt, _Pool  # noqa: F401 - _may_disrupt: the pool's oracle
from heterojob.engine.capacity.rooms import Memory
from heterojob.engine.queue.settled import Tracker

if TYPE_CHECKING:
    from heterojob.engine.queue.policy import Knowledge, Prepared
    from heterojob.engine.basics.queueing import QueueSettings
    from heterojob.engine.queue.ranking import Memo


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
class AdmissionSettings:
    min_runtime_s: float = 300.0  # a job that has run less than this is never preempted (no thrashing)
    lookahead: int = 256  # how many jobs ahead in the queue a single job's plan makes room for


@dataclass
class QueuePlan:
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
               settings: AdmissionSettings = AdmissionSettings(), memory: Memory | None = None, acting: bool = False,
               stop: Callable[[], bool] | None = None) -> QueuePlan:
    """Plan every waiting job of `queue` (steps in the module docstring); `fleet` counts every holder's
    devices as used. `memory`: a `rooms.Memory` the caller keeps from one cycle to the next, for one fleet
    (what placement found per class and region while its free room is unchanged); the plan is the same
    without it.

    `acting`: only the jobs that act (PLACED, PREEMPTING, RECLAIMING: they take room on the ledger or disturb
    someone), each exactly as the full plan has it; the jobs that wait (QUEUED, NO_ROOM) are left out, with
    no placement or message made for them. A job that waits changes nothing a later job reads (the ledger,
    the jobs taken), so the jobs that act see the same ledger in both; a waiting job is told apart by the same
    tests in another order (`_Pool.may_disrupt` first, then whether it fits alone, by `fits`, not `place`).
    The scheduler applies this part first (`controller.scheduler`).

    `stop`: asked every `STOP_EVERY` jobs; when it says so the plan ends at once with `Stopped` (the caller
    drops it: a plan is whole or nothing)."""
    holders = list(holders)
    ordered = sorted(queue, key=lambda r: r.order)
    own = {h.job: h for h in holders if h.waiting}
    index = FleetIndex(fleet, memory)  # nodes per class and region and their free room, on the fleet as given
    ledger = Ledger(fleet, index)
    plan = QueuePlan()
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
    pool = _Pool.of(holders, memory)  # who may be disturbed, indexed once for the whole pass
    # the waiting jobs the last pass found steps 4-5 could do nothing for, while that still holds (`settled`)
    tracker = (Tracker(memory, fleet, ledger, pool, own, now, settings.min_runtime_s, taken) if memory is not None
               else None)
    alone_by_shape: dict[tuple[object, ...], Result] = {}  # the fleet does not change: equal shapes alike
    fits_by_shape: dict[tuple[object, ...], bool] = {}  # `acting`: the same, yes or no
    placed: list[str] = []  # jobs placed so far, in queue order
    ahead: tuple[tuple[str, ...], str] | None = None  # `placed` as a tuple, and a queued job's message
    said: dict[int, tuple[Result, str]] = {}  # a "would it fit alone" result's explanation
    for k, request in enumerate(ordered):
        if stop is not None and k % STOP_EVERY == 0 and stop():
            raise Stopped(k)
        if request.job in plan.admissions:
            placed.append(request.job)
            continue
        if ledger.may_fit(request) and ledger.fits(request):  # step 2, `schedule` on the ledger: it takes its
            result = ledger.place(request)  # room before the next job
            if result.chosen is not None:
                plan.admissions[request.job] = Admission(request.job, Outcome.PLACED, result.explain(),
                                                         result.chosen)
                placed.append(request.job)
                if tracker is not None:
                    tracker.placed(result.chosen.allocation(request.namespace))
                continue
        if acting:
            if tracker is not None and tracker.known(request):
                continue  # steps 4-5 find nothing: it waits (QUEUED or NO_ROOM)
            waits = _waits(request, fleet, index, own, pool, ledger, taken, now, settings, fits_by_shape)
            if waits is not None:
                if waits and tracker is not None:
                    tracker.found_nothing(request)
                continue  # QUEUED or NO_ROOM: nothing taken, nothing disturbed
            plan.admissions[request.job] = admission = _disrupt(request, holders, ledger, taken, now, settings, "",
                                                                pool)
            if admission.outcome == Outcome.NO_ROOM:
                del plan.admissions[request.job]
                if tracker is not None:
                    tracker.found_nothing(request)
            elif admission.candidate is not None:
                ledger.take(admission.candidate.allocation(request.namespace))
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
            if ahead is None or len(ahead[0]) != len(placed):  # made again only once more are placed
                ahead = (tuple(placed), f"queued behind {len(placed)} higher-priority or older job(s) that fit "
                                        f"first: {', '.join(placed[:5])}{' ...' if len(placed) > 5 else ''}")
            plan.admissions[request.job] = Admission(request.job, Outcome.QUEUED, ahead[1], alone.chosen,
                                                     wake=ahead[0])
            continue
        known = said.get(id(alone))
        if known is None or known[0] is not alone:
            known = said[id(alone)] = (alone, alone.explain())
        why = known[1]
        if request.preempt_priority < request.priority and pool.below(request.priority, taken):
            why += PROMOTED_HELD  # its order would displace a running job that its promotion may not
        if tracker is not None and tracker.known(request) or not pool.may_disrupt(request, taken) \
                or not pool.may_make_room(request, ledger, taken, now, settings.min_runtime_s):
            plan.admissions[request.job] = Admission(request.job, Outcome.NO_ROOM, why)
            if tracker is not None:
                tracker.found_nothing(request)
            continue
        plan.admissions[request.job] = admission = _disrupt(request, holders, ledger, taken, now, settings, why,
                                                            pool)
        if admission.candidate is not None and admission.outcome != Outcome.NO_ROOM:
            ledger.take(admission.candidate.allocation(request.namespace))
        elif admission.outcome == Outcome.NO_ROOM and tracker is not None:
            tracker.found_nothing(request)
    if tracker is not None:
        tracker.end()
    return plan


STOP_EVERY = 64  # jobs between two questions to `plan_queue`'s `stop`


class Stopped(Exception):  # noqa: N818 - what happened, not an error: the caller asked for it
    """`plan_queue` (or `engine.queue.cycle.plan_cycle`) was told to stop; no plan."""


def _waits(request: Request, fleet: Fleet, index: FleetIndex, own: dict[str, Holder], pool: _Pool, ledger: Ledger,
           taken: set[str], now: float, settings: AdmissionSettings, fits_by_shape: dict[tuple[object, ...], bool]
           ) -> bool | None:
    """`plan_queue(acting=True)`: whether a job that does not fit the ledger's room waits, as the full plan's
    tests say, without its message: True when steps 4-5 cannot start (NO_ROOM, or QUEUED), False when it
    fits alone (QUEUED), None when it does not wait (steps 4-5 are tried)."""
    if not pool.may_disrupt(request, taken):
        return True  # QUEUED or NO_ROOM, whichever
    if request.job in own:
        mine = Ledger(fleet, index)
        mine.take(own[request.job].allocation, -1)
        alone = fits(request, mine.fleet, mine.index)
    else:
        known = fits_by_shape.get(request.shape)
        if known is None:
            known = fits_by_shape[request.shape] = fits(request, fleet, index)
        alone = known
    if alone:
        return False
    return True if not pool.may_make_room(request, ledger, taken, now, settings.min_runtime_s) else None


def may_act(queue: Iterable[Request], holders: Iterable[Holder], fleet: Fleet, now: float,
            settings: AdmissionSettings = AdmissionSettings(), memory: Memory | None = None) -> bool:
    """False only when `plan_queue` would place, preempt and reclaim nothing (every job QUEUED or NO_ROOM
    is impossible then too: a job that fits alone fits the free room): no holder yields to a waiting job or
    holds room reserved for one, no request may fit the free room (`Ledger.may_fit`, and `_may_fit_quota`: free
    room where its namespace's quota refuses it is no reason to plan), and for none could
    disturbing holders make room (`_Pool.may_disrupt`, `_Pool.may_make_room`). Until a job is placed or
    disturbs someone, `plan_queue` sees the ledger and the holders as given, so the first job that acts
    passes one of these tests. For callers that act on the plan only (the trace replay): the messages of
    the jobs that wait need `plan_queue`. A job ordered above the priority it preempts with
    (`Request.preempts`: promoted, displacing fewer) is asked at that priority (`_displacing`). `memory`: as
    `plan_queue`'s."""
    holders = list(holders)
    if any(h.waiting or h.yielding_to is not None for h in holders):
        return True
    ledger = Ledger.reading(fleet, FleetIndex(fleet, memory))
    pool: _Pool | None = None
    taken: set[str] = set()
    lent: list[int] | None = None
    # requests alike in all the tests below read (nothing reads a name once no holder yields to a waiting job;
    # nothing is taken and the ledger is not changed here) answer alike: each such kind is asked once
    asked: set[tuple[object, ...]] = set()
    tally: dict[str, dict[str, tuple[int, int]]] = {}
    quota_ok: dict[tuple[str, str, str, int], bool] = {}
    for request in queue:
        alike = (request.shape, request.priority, request.preempts, request.also_preempts)
        if alike in asked:
            continue
        asked.add(alike)
        if ledger.may_fit(request) and _may_fit_quota(request, ledger, tally, quota_ok):
            return True
        pool = pool or _Pool.untaken(holders)
        if request.preempts is not None and request.preempts < request.priority:
            if lent is None:
                lent = sorted(h.priority for h in holders if h.base is not None)
            request = _displacing(request, lent)
        if pool.may_disrupt(request, taken) and pool.may_make_room(request, ledger, taken, now,
                                                                   settings.min_runtime_s):
            return True
    return False


def _may_fit_quota(request: Request, ledger: Ledger, tally: dict[str, dict[str, tuple[int, int]]],
                   quota_ok: dict[tuple[str, str, str, int], bool]) -> bool:
    """False only when `place` cannot fit `request` on `ledger` now: in no region of an alternative's class it may
    use is there both a node with room for a replica and room for the whole gang (`Ledger.may_fit`'s test, per
    region) and room in its namespace's quota (`fleet.quota_room`, as `place` asks it). `tally` (class -> region ->
    the most free devices on one node, and in all) and `quota_ok` are kept by the caller for one ledger state."""
    fleet = ledger.fleet
    limits = fleet.quotas.get(request.namespace)
    for alt in request.alternatives:
        cls = fleet.classes.get(alt.device_class)
        if cls is None:
            continue
        by_region = tally.get(cls.name)
        if by_region is None:
            by_region = tally[cls.name] = {region: (max(free.values(), default=0), sum(free.values()))
                                           for region, free in ledger.index.room(cls).items()}
        need = request.replicas * alt.per_replica
        for region, (most, total) in by_region.items():
            if request.allowed_regions and region not in request.allowed_regions:
                continue
            if most <= 0 or most < alt.per_replica or total < need:
                continue
            if not limits:
                return True
            key = (request.namespace, cls.name, region, need)
            ok = quota_ok.get(key)
            if ok is None:
                ok = quota_ok[key] = quota_room(limits, ledger.held.get(request.namespace, {}), cls.name, region,
                                                need, cpu_classes(fleet.classes)) is None
            if ok:
                return True
    return False


def _displacing(request: Request, lent: Sequence[int]) -> Request:
    """`request` at the priority it preempts with, when steps 4-5 may disturb for it exactly the holders they
    may disturb for that: it preempts none besides (`also_preempts`) and no job of a priority between the two
    lends room (a lender of the waiting job's priority or below may be reclaimed from; `lent`: the lenders'
    priorities, sorted). Else `request` as it is."""
    low, high = request.preempt_priority, request.priority
    if request.also_preempts or bisect.bisect_right(lent, high) > bisect.bisect_right(lent, low):
        return request
    return replace(request, priority=low, preempts=None)


def _pinned(request: Request, room: Allocation, fleet: Fleet) -> Request:
    """`request` allowed only on the nodes of `room`, in its class and region."""
    return replace(request, alternatives=[a for a in request.alternatives if a.device_class == room.device_class],
                   allowed_regions=(room.region,),
                   exclude_nodes=request.exclude_nodes | (frozenset(fleet.nodes) - frozenset(room.per_node)))


def _where(c: Candidate) -> str:
    return f"{c.region}/{c.device_class}: {replicas_text(len(c.nodes))} on {len(set(c.nodes))} node(s)"


def _in_flight(request: Request, in_flight: Sequence[Holder], ledger: Ledger, taken: set[str]) -> Admission | None:
    """The job's room once the jobs yielding to it have released theirs, when it fits there: their room is
    freed on `ledger` (the caller takes the returned candidate) and they are `taken`; else None."""
    rooms = [a for h in in_flight for a in h.footprint]
    given_back = ledger.given_back
    ledger.take_all(rooms, -1)
    fits = place(request, ledger.fleet, ledger.index).chosen
    if fits is None:
        ledger.take_all(rooms, +1)  # as it was: nothing was given back after all
        ledger.given_back = given_back
        return None
    taken.update(h.job for h in in_flight)
    outcome = Outcome.RECLAIMING if all(h.base is not None for h in in_flight) else Outcome.PREEMPTING
    names = ", ".join(h.job for h in in_flight)
    return Admission(request.job, outcome, f"waiting for {len(in_flight)} preempted or reclaimed job(s) to "
                     f"checkpoint and release their devices: {names}", fits)


def _disrupt(request: Request, holders: Sequence[Holder], ledger: Ledger, taken: set[str], now: float,
             settings: AdmissionSettings, no_room: str, pool: _Pool) -> Admission:
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
            chosen = kept[lender] = place(base, ledger.fleet, ledger.index).chosen
            if chosen is not None:
                ledger.take(chosen.allocation(base.namespace))
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
             settings: AdmissionSettings = AdmissionSettings(),
             policy: tuple[Knowledge, QueueSettings] | None = None) -> Admission:
    """The plan for one waiting job: the jobs ahead of it in `queue` (at most `settings.lookahead`) are
    planned first, so it neither takes their room nor the victims they would preempt; the caller acts on
    this job's part only (the jobs ahead act on theirs in their own passes). With `policy` (what is known
    of the jobs, the queue settings), the order and classes come from `plan_with_policy`."""
    if policy is not None:
        from heterojob.engine.queue import policy as heterogeneity

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


# --- the heterogeneity-aware policy (engine.queue.policy) in front of the plan ----------------------------------

def plan_with_policy(queue: Iterable[Request], holders: Iterable[Holder], fleet: Fleet, now: float,
                     knowledge: Knowledge, queue_settings: QueueSettings,
                     settings: AdmissionSettings = AdmissionSettings(),
                     memo: Memo | None = None, memory: Memory | None = None, acting: bool = False
                     ) -> tuple[QueuePlan, Prepared]:
    """`engine.queue.policy.prepare` (queue order, class choice by expected completion), then `plan_queue`.
    `memo`: `engine.queue.ranking.Memo`, `memory`: `rooms.Memory`, both kept by the caller between passes (the
    plan is the same without them); `acting`: `plan_queue`'s."""
    from heterojob.engine.queue import policy

    prepared = policy.prepare(queue, holders, fleet, now, knowledge, queue_settings, settings.min_runtime_s, memo)
    return plan_queue(prepared.queue, prepared.holders, fleet, now, settings, memory, acting), prepared

