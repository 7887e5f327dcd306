"""Which classes a job should take past the knee: the fluid optimum's allocation (Gavel's, OSDI'20). Pure.

Step of the pipeline: the caller (the operator's `state.knowledge`, the replay's scheduler) builds a `Guide`
from what it knows of every job in the system, waiting and running (`demand`: each job's relative speed
per class, its devices and its expected remaining work) and the fleet's devices per class (`guide`), while
the waiting jobs ask for the fleet's devices (`engine.queue.allocation.saturated`); `engine.queue.policy.prepare`
narrows each waiting job's classes by it (`choose`).

Past the knee every device is busy whatever the policy does; what it decides is how much work the fleet
does an hour, and that is set by which job runs on which class. Gavel's max-throughput linear program
splits the jobs over the classes so that the fleet finishes their remaining work soonest. Its dual gives
each class a price: what one device-second there is worth (`prices`). At the optimum a job runs only where
its speed per price is its best (complementary slackness): a model that keeps half its speed on a slow
class goes there, and one that keeps a tenth waits for a fast one, even when waiting is slower for that
job alone. So a waiting job's classes are narrowed to those within `tolerance` of its best speed per price
(`Guide.fits`); the ones it could start on now but does not fit stay a last choice (`choose`: declined),
so room nobody fitting takes still goes to the job that loses least there (`engine.queue.allocation.fill`, by
`Guide.advantage`): the guide never leaves a device idle that a waiting job could use.

What a job's speed per class is, is what the operator knows (`engine.queue.completion.speeds`: measured where it
ran, else a sheet's guess). Jobs whose speeds are only the declared sheet all look alike: the prices then
rank the classes as the sheet does and such a job fits everywhere alike; the guide narrows only what
measurements (or a workload's pooled speeds) tell apart.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from heterojob.engine.basics import queueing
from heterojob.engine.queue import completion, ranking
from heterojob.engine.disruption.holders import Holder
from heterojob.engine.placing.placement import Request
from heterojob.engine.queue.facts import Facts


class KnownJobs(Protocol):
    """What the guide reads of the queue policy's knowledge (`policy.Knowledge` is one)."""

    @property
    def facts(self) -> Mapping[str, Facts]: ...

    @property
    def residual(self) -> completion.Residual: ...

Kind = tuple[tuple[str, float], ...]  # a job's relative speed per class, rounded (jobs alike share one row)
TOLERANCE = 0.15  # a class fits a job when its speed per price there is within this share of its best
MISFIT = 0.7  # a running job is a misfit where its measured speed per price is under this share of its best


@dataclass(frozen=True)
class Guide:
    """Each class's price (the value of one of its device-seconds, the highest 1.0) and the fit tolerance."""

    prices: Mapping[str, float]
    tolerance: float = TOLERANCE
    # a job takes a class it does not fit only at this share of its best speed there or more (0: at any). At
    # 0.2, in the replay's informed mode at 3.1 jobs/h, 7% of the devices idled and the work served fell from
    # 0.92 to 0.87 of the arriving work: a misfit on an idle device still does work, and it may be displaced
    floor: float = 0.0
    # `fits` per job speeds (their items): a pass asks it for every waiting job, and the guide lives for
    # minutes while the jobs' speeds rarely change
    _fits: dict[tuple[tuple[str, float], ...], frozenset[str]] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    _advantages: dict[tuple[tuple[str, float], ...], dict[str, float]] = field(  # `advantage`, the same way
        default_factory=dict, init=False, repr=False, compare=False)

    def values(self, rel: Mapping[str, float]) -> dict[str, float]:
        """The job's speed per price on each class it runs on (inf on a class whose room nobody needs)."""
        out = {}
        for c, r in rel.items():
            if r <= 0 or c not in self.prices:
                continue
            p = self.prices[c]
            out[c] = math.inf if p <= 0 else r / p
        return out

    def fits(self, rel: Mapping[str, float]) -> frozenset[str]:
        """The classes where the job's speed per price is within `tolerance` of its best: where the fluid
        optimum would run it. Empty when no class is priced (no guidance: every class is the caller's)."""
        return _kept(self._fits, tuple(rel.items()), lambda: self._fit(rel))

    def _fit(self, rel: Mapping[str, float]) -> frozenset[str]:
        values = self.values(rel)
        if not values:
            return frozenset()
        best = max(values.values())
        if math.isinf(best):
            return frozenset(c for c, v in values.items() if math.isinf(v))
        return frozenset(c for c, v in values.items() if v >= (1 - self.tolerance) * best)

    def advantage(self, rel: Mapping[str, float]) -> dict[str, float]:
        """Per class, the job's speed per price there over its best (1.0 where it fits best): who loses
        least on a class it does not fit (`engine.queue.allocation.fill` takes the highest first)."""
        return dict(self._kept_advantage(rel))  # the caller's own copy

    def _kept_advantage(self, rel: Mapping[str, float]) -> Mapping[str, float]:
        """`advantage`, kept per job speeds (read only)."""
        return _kept(self._advantages, tuple(rel.items()), lambda: self._advantage(rel))

    def _advantage(self, rel: Mapping[str, float]) -> dict[str, float]:
        values = self.values(rel)
        finite = [v for v in values.values() if not math.isinf(v)]
        best = max(finite, default=0.0)
        return {c: 1.0 if math.isinf(v) else (v / best if best > 0 else 0.0) for c, v in values.items()}


def kind(rel: Mapping[str, float], digits: int = 2) -> Kind:
    """The row a job adds its work to: its relative speeds, rounded (so the program stays small)."""
    # a guide is built from every job in the system every few minutes; speeds rarely change
    return _kept(_KINDS, (digits, *rel.items()),
                 lambda: tuple(sorted((c, round(r, digits)) for c, r in rel.items() if r > 0)))


K = TypeVar("K")
T = TypeVar("T")
_KINDS: dict[tuple[object, ...], Kind] = {}  # `kind` per digits and speeds (items, in their order)
_KEPT_MAX = 100_000  # entries a memo keeps before it starts over (speeds seen are few; this bounds memory)


def _kept(table: dict[K, T], key: K, make: Callable[[], T]) -> T:
    """`table[key]`, made by `make()` the first time (the table starts over past `_KEPT_MAX` entries)."""
    known = table.get(key)
    if known is None:
        if len(table) > _KEPT_MAX:
            table.clear()
        known = table[key] = make()
    return known


def demand(jobs: Iterable[tuple[Mapping[str, float], int, float]]) -> dict[Kind, float]:
    """Work to do per kind of job: each job is (relative speed per class, devices, expected remaining work
    in reference seconds); a job's weight is its devices x its remaining work (device-seconds on its
    fastest class)."""
    out: dict[Kind, float] = {}
    for rel, devices, remaining_s in jobs:
        k = kind(rel)
        if not k or devices <= 0 or remaining_s <= 0 or not math.isfinite(remaining_s):
            continue
        out[k] = out.get(k, 0.0) + devices * remaining_s
    return out


def prices(work: Mapping[Kind, float], capacity: Mapping[str, int]) -> dict[str, float]:
    """Each class's price from the dual of Gavel's max-throughput program over `work` (`demand`):
    minimize t such that every class does its share of the work within t (devices x t), each kind's work
    split over the classes it runs on in any shares. A class's price is its constraint's dual value: how
    much sooner the whole would be done per extra device-second there. Scaled so the highest is 1.0; {}
    when there is nothing to price (no work, no devices, or the program fails)."""
    classes = [c for c, n in capacity.items() if n > 0]
    rows = [(k, w) for k, w in work.items() if w > 0 and any(c in classes and r > 0 for c, r in k)]
    if not classes or not rows:
        return {}
    from scipy.optimize import linprog  # HiGHS: a few milliseconds for the dozens of kinds a queue holds

    total = sum(w for _, w in rows)
    index = {c: i for i, c in enumerate(classes)}
    columns: list[tuple[int, int, float]] = []  # (kind, class, device-seconds if all of it ran there)
    for g, (k, w) in enumerate(rows):
        for c, r in k:
            if c in index and r > 0:
                columns.append((g, index[c], w / total / r))
    n = len(columns) + 1  # the shares, then t
    cost = [0.0] * n
    cost[-1] = 1.0
    load = [[0.0] * n for _ in classes]  # per class: its work - devices x t <= 0
    split = [[0.0] * n for _ in rows]  # per kind: its shares sum to 1
    for j, (g, i, hours) in enumerate(columns):
        load[i][j] = hours
        split[g][j] = 1.0
    for c, i in index.items():
        load[i][-1] = -float(capacity[c])
    result = linprog(cost, A_ub=load, b_ub=[0.0] * len(classes), A_eq=split, b_eq=[1.0] * len(rows),
                     bounds=[(0.0, None)] * n, method="highs")
    if not result.success:
        return {}
    duals = [max(0.0, -float(m)) for m in result.ineqlin.marginals]
    top = max(duals, default=0.0)
    if top <= 0:
        return {}
    return {c: duals[index[c]] / top for c in classes}


def guide(jobs: Iterable[tuple[Mapping[str, float], int, float]], capacity: Mapping[str, int],
          tolerance: float = TOLERANCE) -> Guide | None:
    """The `Guide` for the jobs in the system (`demand`'s items) on a fleet of `capacity` devices per class;
    None when nothing is priced."""
    p = prices(demand(jobs), capacity)
    return Guide(p, tolerance) if p else None


def in_system(waiting: Iterable[Request], holders: Iterable[Holder], now: float, knowledge: KnownJobs
              ) -> list[tuple[Mapping[str, float], int, float]]:
    """`demand`'s items for the waiting jobs (their first alternative's devices) and the running ones (the
    devices they keep), each with its relative speeds and expected remaining work as the operator knows them
    (`engine.queue.Facts`; a running job's work grows at its speed where it runs)."""
    facts, residual = knowledge.facts, knowledge.residual
    out: list[tuple[Mapping[str, float], int, float]] = []
    for r in waiting:
        f = facts.get(r.job)
        if f is not None and r.alternatives:
            out.append((f.rel, r.replicas * r.alternatives[0].per_replica, residual.remaining(f.work_s)))
    for h in holders:
        f = facts.get(h.job)
        if f is not None:
            done = f.work_s + max(0.0, now - h.since) * f.rel.get(h.allocation.device_class, 0.0)
            out.append((f.rel, h.allocation.devices, residual.remaining(done)))
    return out


def last_choice(guide: Guide, rel: Mapping[str, float]) -> dict[str, float]:
    """What `engine.queue.allocation.fill` ranks a waiting job by on the classes it declined (`Guide.advantage`),
    without the classes where it would run under `Guide.floor` of its best speed."""
    return {c: a for c, a in guide._kept_advantage(rel).items() if rel.get(c, 0.0) >= guide.floor}


def misfit(guide: Guide, rel: Mapping[str, float], here: str, measured: frozenset[str]) -> bool:
    """Whether a job running on `here` is measured to lose much there against where it fits best: its
    speed there is its own measurement and its advantage there is under `MISFIT` (a guess never evicts)."""
    if here not in measured:
        return False
    return guide._kept_advantage(rel).get(here, 1.0) < MISFIT


def lowered(running: list[Holder], knowledge: KnownJobs, guide: Guide, settings: queueing.QueueSettings
            ) -> list[Holder]:
    """`running` (at their effective priorities) with each misfit (`misfit`) at the last level of its
    priority, so a waiting job of an earlier level that fits its class displaces it through the planner's
    preemption (a checkpoint; its minimum run time holds) instead of waiting behind it for hours: Gavel's
    rounds hand a class back to the jobs it suits the same way. A job with no turns left
    (`QueueSettings.max_turns`) keeps its rank, so a job is evicted this way at most that many times."""
    facts, last = knowledge.facts, settings.levels - 1
    out = running
    for i, h in enumerate(running):
        f = facts.get(h.job)
        if f is None or not settings.turns_left(f.turns) or h.disrupted or h.waiting:
            continue
        if not misfit(guide, f.rel, h.allocation.device_class, f.measured):
            continue
        priority, _ = queueing.split(h.priority, settings)
        rank = queueing.effective_priority(priority, last, settings)
        if rank < h.priority:
            if out is running:
                out = list(running)
            out[i] = ranking.at_priority(h, rank)
    return out


def choose(remaining_s: float, rel: Mapping[str, float], wait_s: Mapping[str, float], guide: Guide,
           kept: str | None = None) -> completion.Choice:
    """`completion.choose` among the classes the job fits (`Guide.fits`; `kept`: the class it chose at the
    pass before, as there); a class it could start on now but does not fit is declined (a last choice,
    `engine.queue.allocation.fill`), so no device it could use idles for the guide. With no fitting class it may
    run on, `completion.choose` unchanged."""
    fit = guide.fits(rel)
    narrowed = {c: r for c, r in rel.items() if c in fit and c in wait_s}
    if not narrowed:
        return completion.choose(remaining_s, rel, wait_s, kept)
    if len(narrowed) == len(wait_s):  # it fits every class it has a wait for (those are the ones it runs on):
        return completion.choose(remaining_s, narrowed, wait_s, kept)  # nothing is narrowed away or unfit
    choice = completion.choose(remaining_s, narrowed, wait_s, kept if kept in narrowed else None)
    # the completion estimates of every class (what `completion.choose` of all of them says)
    estimates = {c: wait_s[c] + (remaining_s / r if r > 0 else math.inf) for c, r in rel.items() if c in wait_s}
    unfit = tuple(c for c in rel if c not in fit and c in wait_s and wait_s[c] == 0 and rel[c] > 0)
    declined = tuple(sorted({*choice.declined, *unfit}))
    return completion.Choice(choice.classes, estimates, declined, unfit)
