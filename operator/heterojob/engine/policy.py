"""The heterogeneity-aware policy before and after a plan: queue order, class choice, upgrade moves. Pure.

Step of the pipeline: `prepare` turns the waiting queue and the running jobs into what the planner
(`engine.admission.plan_queue`) reads, and `upgrades` proposes moves after the plan has been applied.
`engine.admission.plan_with_policy` chains `prepare` and `plan_queue`; the trace replay and the operator
call it the same way.

`prepare`, in queue order:
1. Each job's effective priority comes from the queue policy (`engine.queueing`: priority, then the MLFQ
   level of its attained service, level 0 once starved), for waiting and running jobs alike, so the
   planner orders by it and preempts a job of a later level for one of an earlier level. A job promoted
   by the starvation bound preempts by its promoted level only while `Knowledge.promoted_displace`
   (`queueing.promoted_displacing`: the queue asks for fewer devices than the fleet has); past that, by
   its attained level, and besides only the running jobs of the levels between whose expected remaining
   work is larger than its own (`completion.Residual`: shortest expected remaining work first).
2. Each waiting job's device alternatives are narrowed to the classes worth taking now and ordered by
   expected completion (`engine.completion.choose`): a slower class is declined when waiting for a faster
   one is expected to finish sooner. A class's expected wait counts the running jobs there that this job
   cannot displace (their expected remaining work; of a grown job only its admitted size, since the
   planner takes borrowed room back for any waiting job) and the jobs ahead of it in this pass that chose to
   wait there, so jobs spread over classes (and, through the planner's scorers, regions) by expected wait.
   A job with free room on some class it may use counts no displacement anywhere (`displaces`: work
   conservation, no preemption while devices it could use idle).
   The planner honours the order (a step in preference order outweighs every other score).

What it reads is what the operator knows (`Facts`, from the job's status): attained service, the job's
relative speed per class (measured steps/s where it ran, declared AcceleratorClass throughput elsewhere:
`completion.speeds`), the work it has done; plus the completed jobs' work (`completion.Residual`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from heterojob.engine import completion, queueing, ranking
from heterojob.engine.admission import Holder
from heterojob.engine.fleet import DeviceClass, Fleet
from heterojob.engine.placement import Request


@dataclass(frozen=True)
class Facts:
    """What the operator knows of one job."""

    service: queueing.Service = queueing.Service()  # attained service before its current run; last wait
    rel: Mapping[str, float] = field(default_factory=dict)  # relative speed per class (1.0: its fastest)
    work_s: float = 0.0  # reference seconds trained before its current run
    measured: frozenset[str] = frozenset()  # classes where `rel` is its own measurement, not the sheet's


@dataclass
class Knowledge:
    facts: Mapping[str, Facts]
    residual: completion.Residual = field(default_factory=completion.Residual)
    # whether running jobs' attained service is known across runs: then a job of an earlier level may
    # displace one of a later level; without it (a restarted run would count from zero and the two would
    # take turns) running jobs keep the first level of their priority and only the queue is ordered
    displace_by_level: bool = True
    # whether a job promoted by the starvation bound displaces by its promoted level
    # (`queueing.promoted_displacing` of the whole queue's devices; the caller knows the whole queue)
    promoted_displace: bool = True

    def of(self, job: str) -> Facts:
        return self.facts.get(job, Facts())


@dataclass(frozen=True)
class Prepared:
    queue: list[Request]  # effective priorities, alternatives narrowed and ordered
    holders: list[Holder]  # effective priorities
    waiting_for: frozenset[str]  # classes some job in this pass chose to wait for
    choices: Mapping[str, completion.Choice]


def devices_by_class(fleet: Fleet, memo: ranking.Memo | None = None) -> tuple[dict[str, int], dict[str, int]]:
    """(free, capacity) devices per class over Ready, schedulable nodes."""
    free: dict[str, int] = dict.fromkeys(fleet.classes, 0)
    capacity: dict[str, int] = dict.fromkeys(fleet.classes, 0)
    signature = ranking.signature(fleet)
    if memo is not None:  # a node's class per node object (a Node is immutable)
        used = fleet.used
        for node in fleet.nodes.values():
            if not node.ready or not node.schedulable:
                continue
            cls = ranking.class_of(fleet, node, signature, memo)
            if cls is None:
                continue
            total = node.allocatable.get(cls.resource_name, 0)
            capacity[cls.name] += total
            free[cls.name] += max(0, total - used.get((node.name, cls.resource_name), 0))  # Fleet.free
        return free, capacity
    for node in fleet.nodes.values():
        if not node.ready or not node.schedulable:
            continue
        key = (signature, node.name, tuple(node.labels.items()), tuple(node.allocatable.items()))
        if key not in _CLASS_MEMO:  # a node's class only depends on the classes, its labels and resources
            if len(_CLASS_MEMO) > 100_000:
                _CLASS_MEMO.clear()
            _CLASS_MEMO[key] = fleet.class_of(node)
        cls = _CLASS_MEMO[key]
        if cls is None:
            continue
        capacity[cls.name] += node.allocatable.get(cls.resource_name, 0)
        free[cls.name] += fleet.free(node.name, cls.resource_name)
    return free, capacity


_CLASS_MEMO: dict[tuple[object, ...], DeviceClass | None] = {}


def running_rank(holder: Holder, now: float, knowledge: Knowledge, settings: queueing.QueueSettings) -> int:
    if not knowledge.displace_by_level:
        return queueing.effective_priority(holder.priority, 0, settings)
    facts = knowledge.facts.get(holder.job) or _NONE
    ran = max(0.0, now - holder.since)
    attained = facts.service.attained_device_s + ran * holder.allocation.devices
    return queueing.running_rank(holder.priority, attained, settings, ran, facts.service.promoted)


def remaining_s(holder: Holder, now: float, knowledge: Knowledge) -> float:
    """A running job's expected remaining wall seconds where it is."""
    facts = knowledge.facts.get(holder.job) or _NONE
    r = facts.rel.get(holder.allocation.device_class, 0.0)
    return max(0.0, holder.since - now) + remaining_work(holder, now, knowledge) / max(r, 1e-9)


def remaining_work(holder: Holder, now: float, knowledge: Knowledge) -> float:
    """A running job's expected remaining work (reference seconds), from the work it has done."""
    facts = knowledge.facts.get(holder.job) or _NONE
    done = facts.work_s + max(0.0, now - holder.since) * facts.rel.get(holder.allocation.device_class, 0.0)
    return knowledge.residual.remaining(done)


_NONE = Facts()


def _kept(holder: Holder) -> int:
    """Devices a running job keeps whoever waits: a grown job's admitted size (the planner takes the room
    it borrowed back for any waiting job), else all it holds."""
    if holder.base is None or not holder.base.alternatives:
        return holder.allocation.devices
    return min(holder.allocation.devices, holder.base.replicas * holder.base.alternatives[0].per_replica)


WORK_CONSERVING = True


def displaces(need: Mapping[str, int], free: Mapping[str, int], rel: Mapping[str, float]) -> bool:
    """Whether a waiting job may count on displacing running jobs of a later level when it weighs a class:
    only when no class it may run on has room for it now. A job that can start on free room weighs a
    faster class by when that class frees by itself, so it does not preempt a job there while devices idle
    elsewhere: past the knee every such displacement is a victim requeued (and its checkpoint costs) for
    the same work, while the free class stays idle."""
    if not WORK_CONSERVING:
        return True
    return not any(free.get(c, 0) >= n for c, n in need.items() if rel.get(c, 0.0) > 0)


def prepare(queue: Iterable[Request], holders: Iterable[Holder], fleet: Fleet, now: float, knowledge: Knowledge,
            settings: queueing.QueueSettings, min_runtime_s: float, memo: ranking.Memo | None = None) -> Prepared:
    """Steps 1 and 2 of the module docstring; `queue` in any order. `memo` (kept by the caller between
    passes, `engine.ranking`) only saves rebuilding equal objects: the result is the same without it."""
    free, capacity = devices_by_class(fleet, memo)
    ranked_holders, settled = [], []
    for h in holders:
        rank = running_rank(h, now, knowledge, settings)
        ranked_holders.append(ranking.ranked_holder(h, rank, memo))
        settled.append(now - h.since >= min_runtime_s and not h.disrupted)
    busy_cache: dict[str, list[tuple[int, str, completion.Busy]]] = {}
    below: dict[tuple[str, int | None], list[completion.Busy]] = {}

    def cannot_displace(cls: str, rank: int | None) -> list[completion.Busy]:
        """The running jobs of a class a waiting job of `rank` cannot displace (once per class and rank);
        rank None: one that displaces no one (work conservation, `displaces`), so all of them."""
        if (cls, rank) not in below:
            below[(cls, rank)] = [b for rk, _, b in busy(cls) if rank is None or rk >= rank]
        return below[(cls, rank)]

    def busy(cls: str) -> list[tuple[int, str, completion.Busy]]:
        """Running jobs of a class with the rank a waiting job must beat to displace them (computed only
        for classes some job cannot start on now)."""
        if cls not in busy_cache:
            busy_cache[cls] = [(h.priority if ok else 1 << 30, h.job,
                                completion.Busy(_kept(h), remaining_s(h, now, knowledge)))
                               for h, ok in zip(ranked_holders, settled, strict=True)
                               if h.allocation.device_class == cls]
        return busy_cache[cls]

    def longer_than(work_s: float, above: int, rank: int) -> frozenset[str]:
        """Running jobs ranked in [above, rank) expected to run longer than `work_s` more (reference s)."""
        if not work:
            work.update((h.job, remaining_work(h, now, knowledge)) for h in ranked_holders)
        return frozenset(h.job for h in ranked_holders if above <= h.priority < rank and work[h.job] > work_s)

    work: dict[str, float] = {}

    ranked = [(queueing.rank(r.priority, knowledge.of(r.job).service, now, settings), r) for r in queue]
    ranked.sort(key=lambda x: (-x[0], x[1].created, x[1].job))
    ahead: dict[str, float] = dict.fromkeys(capacity, 0.0)
    out, choices, waiting_for = [], {}, set()
    reserved = {h.job: h.allocation.device_class for h in ranked_holders if h.waiting}  # its own room, held
    for rank, request in ranked:
        facts = knowledge.of(request.job)
        left = knowledge.residual.remaining(facts.work_s)
        need = {a.device_class: a.per_replica * request.replicas for a in request.alternatives}
        rel = {c: facts.rel.get(c, 0.0) for c in need if c in capacity}
        # work conservation (see `displaces`): with free room on some class, no displacement is expected
        displace = displaces(need, free, rel)
        preempts = min(rank, queueing.preempt_rank(request.priority, facts.service, now, settings,
                                                   knowledge.promoted_displace))
        # promoted, past the point where promotions displace by level: it still displaces the running jobs
        # it would displace by level that are expected to run longer than it (shortest expected remaining
        # work first, from the completed jobs' work: with a heavy tail the job that has run longer has
        # longer to go, and turns pay; with a light one it is nearly done, and they do not)
        also = longer_than(left, preempts, rank) if preempts < rank else frozenset()

        def blocking(c: str) -> list[completion.Busy]:
            if not displace:
                return cannot_displace(c, None)
            if not also:
                return cannot_displace(c, preempts)
            return [b for rk, job, b in busy(c) if rk >= preempts and job not in also]

        waits = {c: completion.expected_wait(need[c], free[c], capacity[c], [] if free[c] >= need[c] else
                                             blocking(c), ahead[c])
                 for c in rel if rel[c] > 0}
        choice = completion.choose(left, rel, waits)
        choices[request.job] = choice
        if not choice.classes:  # no speed known for any class: as the user listed them
            out.append(ranking.ranked_request(request, rank, None, memo, preempts, also))
            continue
        if request.job in reserved and reserved[request.job] in need:
            # its room is reserved (a move's destination, already counted as used): make before break, so
            # the reserved class is never narrowed away, whatever waiting for another class would promise
            mine = reserved[request.job]
            out.append(ranking.ranked_request(request, rank, [mine, *(c for c in choice.classes if c != mine)],
                                              memo, preempts, also))
            continue
        first = choice.classes[0]
        if waits[first] == 0:
            free[first] -= need[first]
        else:
            ahead[first] += need[first] * left / rel[first]
            waiting_for.add(first)
        out.append(ranking.ranked_request(request, rank, choice.classes, memo, preempts, also))
    if memo is not None:
        memo.end_pass()
    return Prepared(out, ranked_holders, frozenset(waiting_for), choices)


def upgrades(holders: Iterable[Holder], fleet: Fleet, now: float, knowledge: Knowledge,
             waiting_for: Iterable[str], cost: completion.MoveCost, min_runtime_s: float,
             allowed: Mapping[str, Sequence[str]] | None = None, probe_share: float = 0.0
             ) -> list[completion.Upgrade]:
    """Moves up onto free devices of classes no waiting job chose to wait for, when the move pays
    (`completion.plan_upgrades`), and with `probe_share` > 0 probes of classes whose speed for the job is
    only the sheet's guess; a job moves only after `min_runtime_s` in place and never while disrupted.
    `allowed`: job -> classes it may run on (default: those with a known speed)."""
    free, _ = devices_by_class(fleet)
    free = {c: n for c, n in free.items() if c not in set(waiting_for) and n > 0}
    if not free:
        return []
    movers = []
    for h in holders:
        facts = knowledge.of(h.job)
        here = h.allocation.device_class
        classes = allowed.get(h.job, ()) if allowed is not None else facts.rel
        rel = {c: facts.rel.get(c, 0.0) for c in classes}
        rel[here] = facts.rel.get(here, 0.0)
        unmeasured = frozenset(c for c in rel if c not in facts.measured) if facts.measured else frozenset()
        if not any(rel.get(c, 0.0) > rel[here] or (probe_share > 0 and c in unmeasured) for c in free):
            continue
        settled = now - h.since >= min_runtime_s and not h.disrupted and h.base is None
        movers.append(completion.Mover(h.job, here, h.allocation.devices, remaining_s(h, now, knowledge) * rel[here],
                                       rel, settled, unmeasured))
    return completion.plan_upgrades(movers, free, cost, probe_share=probe_share, min_runtime_s=min_runtime_s)

