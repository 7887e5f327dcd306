"""One scheduling cycle for the whole waiting queue (Kueue's scheduling cycle). Pure.

Step of the pipeline: a snapshot of the cache (every waiting request, every holder, the fleet) in, every
waiting job's verdict out, in one plan. The operator (`controller.scheduler`) and the trace replay
(`replay.replay`) both run their admission through `plan_cycle`, so the replay measures the loop that
ships. Inside it:

1. Involuntary moves out of a region (a dead node, a lost member cluster) keep their priority and age;
   each is narrowed to the cheapest tier of regions (`transfer.tiers`) where the planner places it now,
   as `relocation.plan_relocation` would, and keeps every class its user listed.
2. With a queue policy, `policy.prepare` orders the queue and narrows each other job's classes
   (`admission.plan_with_policy`); then `admission.plan_queue` plans the whole queue once.
3. A job that waits is told which listed classes the policy set aside (`aside.set_aside`).

A cycle computes what its reader reads (`Cycle`): the policy's pass at once; the plan only when the
planner's necessary test (`admission.may_act`, on the queue as prepared) says some job may act, else when
it is read; the classes set aside only when a waiting job's message is read. The trace replay reads only
what acts (`Cycle.acting`), the operator every verdict.

`verdict` is what of a waiting job's plan its status must say: the outcome and the message without its
live figures (free devices, hours, the jobs ahead that fit first). The caller writes a waiting job's status
only when its verdict changes, so API writes follow decisions, not figures.

`CycleTrigger` says whether a cycle could change anything since the last one: a request added, edited or
removed, room given back, the fleet changed, or a timer (a starvation promotion, a move's requeue bound)
came due. A cycle with none of these plans the same queue on the same snapshot at another time; what the
clock alone changes (expected completions, the minimum runtime, levels) is left to a timer the caller sets
(the operator: at least every 30 s while jobs wait). A cycle
that placed or disturbed anyone changed the snapshot (the policy reads the free room), so its caller plans
once more; cycles stop when one acts on nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache, partial
from typing import TYPE_CHECKING

from heterojob.engine.capacity import transfer
from heterojob.engine.disruption.holders import Holder
from heterojob.engine.queue.admission import (
    STOP_EVERY, Admission, AdmissionSettings, Outcome, QueuePlan, Stopped, may_act, plan_queue,
)
from heterojob.engine.queue.aside import set_aside
from heterojob.engine.capacity.fleet import Fleet
from heterojob.engine.queue.relocation import cheapest_tier
from heterojob.engine.placing.placement import FleetIndex, Rejection, Request
from heterojob.engine.capacity.rooms import Memory

if TYPE_CHECKING:
    from heterojob.engine.queue.completion import MoveCost, Upgrade
    from heterojob.engine.queue.policy import Knowledge, Prepared
    from heterojob.engine.basics.queueing import QueueSettings
    from heterojob.engine.queue.ranking import Memo


class Cycle:
    """The plan of one cycle: every waiting job's admission (`admissions`, messages final), under a queue
    policy the classes waiting jobs chose to wait for (upgrade moves keep off them), and the free devices per
    class once its placements are taken.

    What is not read is not computed: a waiting job's message gains the classes the policy set aside (and an
    involuntary move's the transfer it weighed) when `admissions` is first read, and a cycle the planner's
    necessary test says acts on nothing (`admission.may_act`, on the queue as the policy prepared it) plans
    its queue only when `plan` or `admissions` is read. `acted` and `acting` read neither. Equal cycles have
    equal admissions, classes waited for and free room."""

    def __init__(self, plan: QueuePlan | Callable[[], QueuePlan], waiting_for: frozenset[str] = frozenset(),
                 free: Mapping[str, int] | None = None,
                 explain: Callable[[QueuePlan], dict[str, Admission]] | None = None, quiet: bool = False,
                 chose: Mapping[str, str] | None = None) -> None:
        self._plan, self._explain = plan, explain
        self.waiting_for, self.free, self.quiet = waiting_for, free if free is not None else {}, quiet
        self.chose = chose if chose is not None else {}  # the policy's first class per job: `Knowledge.chose`

    @cached_property
    def plan(self) -> QueuePlan:
        """The planner's plan (a waiting job's message as `admission.plan_queue` says it)."""
        return self._plan if isinstance(self._plan, QueuePlan) else self._plan()

    @cached_property
    def admissions(self) -> Mapping[str, Admission]:
        return self._explain(self.plan) if self._explain is not None else self.plan.admissions

    @property
    def acting(self) -> list[Admission]:
        """The admissions that place or disturb someone, in queue order (none, unplanned, when `quiet`)."""
        if self.quiet:
            return []
        return [a for a in self.plan.admissions.values() if a.outcome == Outcome.PLACED or a.disruptions]

    @property
    def acted(self) -> bool:
        """It placed or disturbed someone: that changes the snapshot (the policy reads the free room), so
        the caller plans once more (`CycleTrigger.room`)."""
        return bool(self.acting)

    def room_grew(self, before: Mapping[str, int]) -> bool:
        """More devices of some class are free than after the cycle before (`before`: its `free`): running
        jobs an upgrade move may pay for are looked at now, not on every pass of theirs."""
        return any(n > before.get(c, 0) for c, n in self.free.items())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Cycle):
            return NotImplemented
        return (self.admissions == other.admissions and self.waiting_for == other.waiting_for
                and dict(self.free) == dict(other.free))

    __hash__ = None  # type: ignore[assignment]  # mutable caches: compared by value, never hashed

    def __repr__(self) -> str:
        return f"Cycle(admissions={dict(self.admissions)!r}, waiting_for={self.waiting_for!r}, free={self.free!r})"


def plan_cycle(queue: Iterable[Request], holders: Iterable[Holder], fleet: Fleet, now: float,
               settings: AdmissionSettings = AdmissionSettings(), policy: tuple[Knowledge, QueueSettings] | None = None,
               moves: Mapping[str, transfer.Move] | None = None, memo: Memo | None = None,
               memory: Memory | None = None, acting: bool = False, stop: Callable[[], bool] | None = None,
               *, every: bool = False) -> Cycle:
    """Plan every waiting job of `queue` at once (steps in the module docstring). `fleet` counts every
    holder's devices as used; `moves`: job -> the transfer an involuntary move out of its region weighs;
    `memo` (`engine.queue.ranking.Memo`) and `memory` (`engine.capacity.rooms.Memory`, for one fleet), both kept by the
    caller between cycles, only save recomputing equal values: the cycle is the same without them.
    `acting`: only the jobs that act, each as the full cycle plans it (`admission.plan_queue`'s `acting`);
    `stop`: `admission.plan_queue`'s (`admission.Stopped` ends the cycle, with no plan; a plan computed when
    read may raise it then). `every`: the caller reads every admission (the operator's full cycle): the plan is
    made at once, without the necessary test, whose answer would only say when."""
    queue, holders = list(queue), list(holders)
    if not queue:  # nothing to plan: only the free room (what `room_grew` compares)
        return Cycle(QueuePlan(), frozenset(), _free_after(QueuePlan(), fleet, memo))
    moves = moves or {}
    narrowed: dict[str, Request] = {}
    for request in queue:
        if request.job in moves:
            narrowed[request.job] = cheapest_tier(request, queue, holders, fleet, now, settings, moves[request.job])[0]
    if narrowed:
        queue = [narrowed.get(r.job, r) for r in queue]
    if policy is None:
        plan = plan_queue(queue, holders, fleet, now, settings, memory, acting, stop)
        return Cycle(plan, frozenset(), _free_after(plan, fleet, memo),
                     partial(_explain, fleet=fleet, moves=moves, narrowed=narrowed, stop=stop))
    from heterojob.engine.queue import policy as heterogeneity

    knowledge, queue_settings = policy
    prepared = heterogeneity.prepare(queue, holders, fleet, now, knowledge, queue_settings, settings.min_runtime_s,
                                     memo)
    ordered = [replace(r, alternatives=narrowed[r.job].alternatives) if r.job in narrowed else r
               for r in prepared.queue] if narrowed else prepared.queue  # an involuntary move keeps every class
    # its user listed; the requests by job are made only when the messages are read
    explain = partial(_explain, fleet=fleet, moves=moves, narrowed=narrowed, original=queue, mine=ordered,
                      prepared=prepared, memory=memory, stop=stop)
    if not every and not may_act(ordered, prepared.holders, fleet, now, settings, memory):  # planned when read
        # (acting: its part that acts is empty, exactly: nothing places or disturbs anyone)
        return Cycle(QueuePlan() if acting else
                     partial(plan_queue, ordered, prepared.holders, fleet, now, settings, memory, acting, stop),
                     prepared.waiting_for, _free_after(QueuePlan(), fleet, memo), explain, quiet=True,
                     chose=prepared.chose)
    plan = plan_queue(ordered, prepared.holders, fleet, now, settings, memory, acting, stop)
    return Cycle(plan, prepared.waiting_for, _free_after(plan, fleet, memo), explain, chose=prepared.chose)


def _explain(plan: QueuePlan, fleet: Fleet, moves: Mapping[str, transfer.Move], narrowed: Mapping[str, Request],
             original: Sequence[Request] | None = None, mine: Sequence[Request] | None = None,
             prepared: Prepared | None = None, memory: Memory | None = None,
             stop: Callable[[], bool] | None = None) -> dict[str, Admission]:
    """`plan`'s admissions with their messages final: a waiting job's the classes the policy set aside
    (`aside.set_aside`; `prepared`: the policy's pass, `original`: the requests as given, `mine`: as
    planned), an involuntary move's placement the transfer it weighed (step 3 of the module docstring)."""
    admissions = dict(plan.admissions)
    if prepared is not None and original is not None and mine is not None:
        given, planned = {r.job: r for r in original}, {r.job: r for r in mine}
        quota_memo: dict[tuple[object, ...], list[Rejection]] = {}
        index = FleetIndex(fleet, memory)  # one for every job's set-aside classes: the free room read once
        for k, (job, admission) in enumerate(plan.admissions.items()):
            if stop is not None and k % STOP_EVERY == 0 and stop():
                raise Stopped(k)
            if admission.outcome == Outcome.PLACED or job in narrowed:
                continue
            aside = set_aside(given[job], planned[job], prepared.choices.get(job), fleet, quota_memo, index)
            if aside:
                admissions[job] = replace(admission, message=f"{admission.message}; {aside}")
    for job in narrowed:
        placed = admissions.get(job)
        if placed is None or placed.outcome != Outcome.PLACED or placed.candidate is None:
            continue
        v = transfer.judge(moves[job], placed.candidate.region, fleet.regions)
        if v.cost and v.cost.link:
            admissions[job] = replace(placed, message=f"{placed.message}; the cheapest transfer that "
                                                      f"fits: {v.message}")
    return admissions


def _free_after(plan: QueuePlan, fleet: Fleet, memo: Memo | None = None) -> dict[str, int]:
    """Free devices per class on usable nodes once the plan's placements are taken."""
    from heterojob.engine.queue.policy import devices_by_class

    free, _ = devices_by_class(fleet, memo)
    for a in plan.admissions.values():
        if a.outcome == Outcome.PLACED and a.candidate is not None:
            c = a.candidate
            free[c.device_class] = free.get(c.device_class, 0) - len(c.nodes) * c.per_replica
    return free



# --- what a waiting job's status says --------------------------------------------------------------------

_FIGURES = re.compile(r"(room for \d+ of \d+)|\d+(?:\.\d+)?")
_AHEAD = re.compile(r"(that fit first): [^;]*")


@lru_cache(maxsize=1 << 14)
def verdict(outcome: str | None, message: str | None) -> tuple[str, str]:
    """A waiting job's verdict: its outcome and its message without the figures that move while nothing is
    decided (free devices, counts, hours) and without the names of the jobs ahead that fit first. How many
    of its replicas a candidate has room for ("room for 1 of 2") is kept: that is how far it is from fitting.
    Memoised per (outcome, message): a cycle's thousands of waiting jobs share a few hundred messages, most of
    them the last cycle's too."""
    return outcome or "", _FIGURES.sub(lambda m: m.group(1) or "#", _AHEAD.sub(r"\1", message or ""))


# --- when a cycle is worth running -----------------------------------------------------------------------

@dataclass
class CycleTrigger:
    """What happened since the last cycle, and the earliest timer; `due` says whether a cycle may change
    anything. Time is an argument."""

    changed: set[str] = field(default_factory=set)  # jobs whose request was added, edited or removed
    freed: bool = False  # room was given back, or the fleet (nodes, classes, regions, quotas, faults) changed
    timers: dict[str, float] = field(default_factory=dict)  # job -> when its plan changes by the clock alone

    def request(self, job: str) -> None:
        self.changed.add(job)

    def room(self) -> None:
        self.freed = True

    def at(self, job: str, when: float | None) -> None:
        """The job's plan changes at `when` by the clock alone (None: never)."""
        if when is None or not math.isfinite(when):
            self.timers.pop(job, None)
        else:
            self.timers[job] = when

    def next_timer(self) -> float | None:
        return min(self.timers.values(), default=None)

    def due(self, now: float) -> bool:
        return bool(self.changed) or self.freed or any(t <= now for t in self.timers.values())

    def planned(self, now: float) -> None:
        """A cycle ran on everything that happened so far: timers that came due are spent."""
        self.changed.clear()
        self.freed = False
        for job in [j for j, t in self.timers.items() if t <= now]:
            del self.timers[job]


# --- what a cycle leaves to the clock and to the running jobs ----------------------------------------------

def timer(now: float, waited_from: float, queue: QueueSettings | None, run_s: float = 0.0,
          back: float | None = None) -> float | None:
    """When a waiting job's plan changes by the clock alone, after a cycle at `now` left it waiting: its
    starvation promotion (`queueing.promotion_time`: the bound grows with `run_s`, its run time since its
    last promotion, under a `promote_ratio`) or `back`, a move's requeue bound; None: neither is ahead."""
    from heterojob.engine.basics import queueing

    promote = queueing.promotion_time(waited_from, queue, run_s) if queue is not None else None
    return min((t for t in (promote, back) if t is not None and t > now), default=None)


def upgrade_candidates(cycle: Cycle, before: Mapping[str, int], holders: Iterable[Holder], fleet: Fleet,
                       now: float, knowledge: Knowledge, cost: MoveCost, min_runtime_s: float,
                       probe_share: float, memo: Memo | None = None) -> list[str]:
    """The running jobs an upgrade move may pay for, looked at only when the free room of some class grew
    since the cycle before (`Cycle.room_grew`; `before`: its `free`). `holders` and `fleet`: the snapshot the
    cycle planned. Each then checks its own move (`upgrade_of`), with its own classes and checkpoint cost.
    `memo`: as `plan_cycle`'s."""
    if not cycle.room_grew(before):
        return []
    from heterojob.engine.queue import policy as heterogeneity

    return [u.job for u in heterogeneity.upgrades([h for h in holders if not h.waiting], fleet, now, knowledge,
                                                  cycle.waiting_for, cost, min_runtime_s, None, probe_share, memo)]


def upgrade_of(mine: Sequence[Holder], classes: Sequence[str], fleet: Fleet, now: float, knowledge: Knowledge,
               waiting_for: Iterable[str], cost: MoveCost, min_runtime_s: float, probe_share: float,
               memo: Memo | None = None) -> Upgrade | None:
    """A running job's own upgrade move (or probe) onto free devices of `classes` that no waiting job chose
    to wait for (`waiting_for`: the last cycle's, empty when none waits), when it pays
    (`engine.queue.policy.upgrades`); `mine`: the job's holders (its placement first). None when no listed class
    other than its own has room for it (exactly when `upgrades` proposes nothing: moves go to free room).
    `memo`: as `plan_cycle`'s."""
    from heterojob.engine.queue import policy as heterogeneity

    held = [h for h in mine if not h.waiting]
    if not held:
        return None
    here = held[0].allocation
    free, _ = heterogeneity.devices_by_class(fleet, memo)
    if not any(free.get(c, 0) >= here.devices for c in classes if c != here.device_class):
        return None
    moves = heterogeneity.upgrades(held, fleet, now, knowledge, waiting_for, cost, min_runtime_s,
                                   {held[0].job: list(classes)}, probe_share, memo)
    return moves[0] if moves else None
