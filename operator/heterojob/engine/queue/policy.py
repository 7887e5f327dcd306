"""The heterogeneity-aware policy before and after a plan: queue order, class choice, upgrade moves. Pure.

Step of the pipeline: `prepare` turns the waiting queue and the running jobs into what the planner
(`engine.queue.admission.plan_queue`) reads, and `upgrades` proposes moves after the plan has been applied.
`engine.queue.admission.plan_with_policy` chains `prepare` and `plan_queue`; the trace replay and the operator
call it the same way.

`prepare`, in queue order:
1. Each job's effective priority comes from the queue policy (`engine.basics.queueing`: priority, then the MLFQ
   level of its attained service, level 0 once starved), for waiting and running jobs alike, so the
   planner orders by it and preempts a job of a later level for one of an earlier level. A job promoted
   by the starvation bound preempts by its promoted level only while `Knowledge.promoted_displace`
   (`queueing.promoted_displacing`: the queue asks for fewer devices than the fleet has); past that, by
   its attained level, and besides only the running jobs of the levels between whose expected remaining
   work is larger than its own (`completion.Residual`: shortest expected remaining work first).
2. Each waiting job's device alternatives are narrowed to the classes worth taking now and ordered by
   expected completion (`engine.queue.completion.choose`): a slower class is declined when waiting for a faster
   one is expected to finish sooner. A class's expected wait counts the running jobs there that this job
   cannot displace (their expected remaining work; of a grown job only its admitted size, since the
   planner takes borrowed room back for any waiting job) and the jobs ahead of it in this pass that chose to
   wait there, so jobs spread over classes (and, through the planner's scorers, regions) by expected wait.
   A job with free room on some class it may use counts no displacement anywhere (`displaces`: work
   conservation, no preemption while devices it could use idle). A job keeps the class it chose to wait
   for at the pass before (`Knowledge.chose`) while that is within `completion.KEEP_MARGIN` of the best.
   The planner honours the order (a step in preference order outweighs every other score).

What it reads is what the operator knows (`Facts`, from the job's status): attained service, the job's
relative speed per class (measured steps/s where it ran, declared AcceleratorClass throughput elsewhere:
`completion.speeds`), the work it has done; plus the completed jobs' work (`completion.Residual`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from heterojob.engine.basics import queueing
from heterojob.engine.disruption import also_preempts
from heterojob.engine.queue import allocation, completion, guidance, ranking
from heterojob.engine.disruption.holders import Holder
from heterojob.engine.queue.facts import Facts
from heterojob.engine.capacity.fleet import DeviceClass, Fleet
from heterojob.engine.placing.placement import Request


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
    # what a preemption costs (`completion.MoveCost.seconds`: the victim's save and restore, with a margin):
    # past the point where promotions displace by level, a promoted job displaces a running one only when
    # that one is expected to run longer than it by more than this (`prepare`), so the turn's gain covers it
    move_cost_s: float = field(default_factory=lambda: completion.MoveCost().seconds)
    # whether the waiting jobs ask for the fleet's devices (`allocation.saturated`, the caller knows the whole
    # queue): then room left idle after the pass goes to the jobs that declined it (`allocation.fill`)
    saturated: bool = False
    # job -> the class it chose to wait for at the pass before (`Prepared.chose`): kept while it is within
    # `completion.KEEP_MARGIN` of the best (`completion.choose`); empty: every choice made afresh
    chose: Mapping[str, str] = field(default_factory=dict)
    # near the knee: the fluid optimum's prices per class (`engine.queue.guidance`, built by the caller from every
    # job in the system), which narrow each waiting job's classes to those it fits, room nobody fitting takes
    # going to those that declined it (`allocation.fill`), and let misfits be displaced (None: no guide)
    guide: guidance.Guide | None = None

    def of(self, job: str) -> Facts:
        return self.facts.get(job, Facts())


@dataclass(frozen=True)
class Prepared:
    queue: list[Request]  # effective priorities, alternatives narrowed and ordered
    holders: list[Holder]  # effective priorities
    waiting_for: frozenset[str]  # classes some job in this pass chose to wait for
    choices: Mapping[str, completion.Choice]

    @property
    def chose(self) -> dict[str, str]:
        """job -> its first choice of class (what `Knowledge.chose` gives the next pass: it counts only while
        the job still waits for it)."""
        return {job: c.classes[0] for job, c in self.choices.items() if c.classes}


def devices_by_class(fleet: Fleet, memo: ranking.Memo | None = None) -> tuple[dict[str, int], dict[str, int]]:
    """(free, capacity) devices per class over Ready, schedulable nodes."""
    free: dict[str, int] = dict.fromkeys(fleet.classes, 0)
    capacity: dict[str, int] = dict.fromkeys(fleet.classes, 0)
    signature = ranking.signature(fleet)
    if memo is not None:  # a node's class per node object (a Node is immutable)
        last = memo.devices
        if last is not None and last[2] == signature and last[0] == fleet.nodes and last[1] == fleet.used:
            return dict(last[3]), dict(last[4])  # the same nodes (objects), devices used and classes
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
        memo.devices = (dict(fleet.nodes), dict(used), signature, dict(free), dict(capacity))
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
    return queueing.running_rank(holder.priority, attained, settings, ran, facts.service.promoted, facts.turns)


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


def _running_changes(holder: Holder, facts: Facts, knowledge: Knowledge, settings: queueing.QueueSettings
                     ) -> Callable[[float], float]:
    """When `running_rank` of `holder` may next change after `now`: the end of a promotion's first
    `starvation_s`, or the time its attained service reaches the next level's threshold (inf: never)."""
    def at(now: float) -> float:
        if (not knowledge.displace_by_level or settings.policy != queueing.QueuePolicy.MLFQ
                or not settings.turns_left(facts.turns)):
            return math.inf  # the first level of its priority, whatever happens
        svc, devices = facts.service, holder.allocation.devices
        ran = max(0.0, now - holder.since)
        if svc.promoted and ran < settings.starvation_s:
            return holder.since + settings.starvation_s  # level 0 until then, whatever its service
        current = queueing.level(svc.attained_device_s + ran * devices, settings)
        thresholds = settings.thresholds_device_h
        if devices > 0 and current < len(thresholds):
            return holder.since + (thresholds[current] * 3600 - svc.attained_device_s) / devices
        return math.inf
    return at


def ranked_holders(holders: Iterable[Holder], now: float, knowledge: Knowledge, settings: queueing.QueueSettings,
                   memo: ranking.Memo | None) -> list[Holder]:
    """Each holder at its effective priority (`running_rank`); with `memo`, a holder's rank is computed again
    only when its inputs changed or `now` left the span over which it was known (`ranking.steady`)."""
    return _ranked(holders, now, knowledge, settings, memo)[0]


Row = ranking.Row  # class, since, work_s, rel there, max(rel, 1e-9), kept


def _row(h: Holder, facts: Facts) -> Row:
    """What `remaining_s` and the wait estimate read of a holder and its facts, but `now`."""
    cls = h.allocation.device_class
    r = facts.rel.get(cls, 0.0)
    return (cls, h.since, facts.work_s, r, max(r, 1e-9), _kept(h), h.disrupted)


def _parts(entry: ranking.Steady) -> tuple[Holder, Row]:
    """A running job's memo entry: its copy at its rank and its row (`_ranked`'s `fresh` sets both)."""
    assert entry.ranked is not None and entry.row is not None
    return entry.ranked, entry.row


def _ranked(holders: Iterable[Holder], now: float, knowledge: Knowledge, settings: queueing.QueueSettings,
            memo: ranking.Memo | None) -> tuple[list[Holder], list[Row]]:
    """`ranked_holders`, and each holder's `_row`."""
    holders = tuple(holders)
    facts_of, flag = knowledge.facts.get, knowledge.displace_by_level
    facts_now = [facts_of(h.job) or _NONE for h in holders]
    if memo is None:
        return ([ranking.ranked_holder(h, running_rank(h, now, knowledge, settings), None) for h in holders],
                [_row(h, f) for h, f in zip(holders, facts_now, strict=True)])
    held, seen = memo.held, memo._seen_held

    def fresh(h: Holder, facts: Facts) -> ranking.Steady:
        entry = ranking.steady(held, seen, h, (h, facts, settings, flag), now,
                               lambda t: running_rank(h, t, knowledge, settings),
                               _running_changes(h, facts, knowledge, settings))
        if entry.ranked is None:
            entry = ranking.Steady(entry.inputs, entry.lo, entry.hi, entry.rank,
                                   ranking.ranked_holder(h, entry.rank, None), _row(h, facts))
            held[id(h)] = seen[id(h)] = entry
        return entry

    last = memo.last_held
    if (last is not None and last[2] is settings and last[3] is flag and last[0] == holders
            and last[1] == facts_now):  # the same holders and facts as the last pass
        if last[4] <= now <= last[5]:  # ... and every rank still holds
            seen.update(zip(map(id, holders), last[8]))
            return last[6], last[7]
        entries, out, rows = list(last[8]), list(last[6]), list(last[7])
        lo, hi = -math.inf, math.inf
        for i, entry in enumerate(entries):
            if not entry.lo <= now <= entry.hi:  # only the ranks whose span ended are computed again
                entry = entries[i] = fresh(holders[i], facts_now[i])
                out[i], rows[i] = _parts(entry)
            if entry.lo > lo:
                lo = entry.lo
            if entry.hi < hi:
                hi = entry.hi
        seen.update(zip(map(id, holders), entries))
        memo.last_held = (holders, facts_now, settings, flag, lo, hi, out, rows, entries)
        return out, rows
    out, rows, entries = [], [], []  # typed where the branch above first binds them
    lo, hi = -math.inf, math.inf
    for h, facts in zip(holders, facts_now, strict=True):
        known = held.get(id(h))
        if known is not None and known.lo <= now <= known.hi and (same := known.inputs)[0] is h \
                and same[1] is facts and same[2] is settings and same[3] is flag:  # `ranking.steady`'s fast path
            seen[id(h)] = entry = known
        else:
            entry = fresh(h, facts)
        entries.append(entry)
        ranked_holder, row = _parts(entry)
        out.append(ranked_holder)
        rows.append(row)
        if entry.lo > lo:
            lo = entry.lo
        if entry.hi < hi:
            hi = entry.hi
    memo.last_held = (holders, facts_now, settings, flag, lo, hi, out, rows, entries)
    return out, rows


def waiting_rank(request: Request, now: float, knowledge: Knowledge, settings: queueing.QueueSettings,
                  memo: ranking.Memo | None) -> int:
    """`queueing.rank` of a waiting job (kept in `memo` until it may starve)."""
    facts = knowledge.facts.get(request.job) or _NONE  # `Knowledge.of`, without building a default each time
    service = facts.service
    if memo is None:
        return queueing.rank(request.priority, service, now, settings)
    known = memo.waiting.get(id(request))
    if known is not None and known.lo <= now <= known.hi:  # the fast path of `ranking.steady`
        same = known.inputs
        if same[0] is request and same[1] is facts and same[2] is settings:
            memo._seen_waiting[id(request)] = known
            return known.rank

    def changes(t: float) -> float:
        if queueing.starved(service.waiting_since, t, settings, service.run_s):
            return math.inf  # starved stays starved
        at = queueing.promotion_time(service.waiting_since, settings, service.run_s)
        return math.inf if at is None else at

    return ranking.steady(memo.waiting, memo._seen_waiting, request, (request, facts, settings), now,
                          lambda t: queueing.rank(request.priority, service, t, settings), changes).rank


def prepare(queue: Iterable[Request], holders: Iterable[Holder], fleet: Fleet, now: float, knowledge: Knowledge,
            settings: queueing.QueueSettings, min_runtime_s: float, memo: ranking.Memo | None = None) -> Prepared:
    """Steps 1 and 2 of the module docstring; `queue` in any order. `memo` (kept by the caller between
    passes, `engine.queue.ranking`) only saves recomputing equal values: the result is the same without it."""
    free, capacity = devices_by_class(fleet, memo)
    running, rows_of = _ranked(holders, now, knowledge, settings, memo)
    guide = knowledge.guide  # the caller sets it near the knee only (`engine.queue.guidance`)
    if guide is not None:  # misfits measured where they run yield to jobs that fit there
        running = guidance.lowered(running, knowledge, guide, settings)
    by_class: dict[str, list[tuple[float, int, int, str]]] = {}
    mine: dict[str, list[tuple[Row, int, str]]] = {}
    below: dict[tuple[str, int | None], completion.Ends] = {}

    def cannot_displace(cls: str, rank: int | None) -> completion.Ends:
        """The running jobs of a class a waiting job of `rank` cannot displace (once per class and rank),
        by expected end; rank None: one that displaces no one (work conservation, `displaces`), so all."""
        ends = below.get((cls, rank))
        if ends is None:
            jobs = busy(cls) if rank is None else [b for b in busy(cls) if b[2] >= rank]
            ends = below[(cls, rank)] = completion.Ends.ordered([b[0] for b in jobs], (b[1] for b in jobs))
        return ends

    def busy(cls: str) -> list[tuple[float, int, int, str]]:
        """Running jobs of a class by expected end (`remaining_s`), with the rank a waiting job must beat to
        displace them (computed only for classes some job cannot start on now)."""
        if cls not in by_class:
            if not mine:
                for h, row in zip(running, rows_of, strict=True):
                    mine.setdefault(row[0], []).append((row, h.priority, h.job))
            rows = []
            for (_, since, work, r, denom, kept, disrupted), rank, job in mine.get(cls, ()):
                # `remaining_s`: the same operations in the same order
                rows.append((since - now if since > now else 0.0, denom, work + (now - since if now > since else 0.0) * r,
                             kept, rank if now - since >= min_runtime_s and not disrupted else 1 << 30, job))
            left = knowledge.residual.remaining_each(row[2] for row in rows)
            jobs = by_class[cls] = [(wait + rest / r, n, rk, job) for (wait, r, _, n, rk, job), rest
                                    in zip(rows, left, strict=True)]
            jobs.sort(key=lambda b: b[0])
        return by_class[cls]

    work: dict[str, float] = {}

    def remaining() -> dict[str, float]:
        """Each running job's expected remaining work (reference s), computed once per pass."""
        if not work:
            done = [row[2] + (now - row[1] if now > row[1] else 0.0) * row[3] for row in rows_of]
            work.update(zip((h.job for h in running), knowledge.residual.remaining_each(done), strict=True))
        return work

    # running jobs ranked in [above, rank) expected to run longer than `work_s` more (reference s)
    longer_than = also_preempts.AlsoPreempts([(h.job, h.priority) for h in running], remaining)
    besides: dict[tuple[str, int, frozenset[str]], completion.Ends] = {}  # the running jobs such a job waits for

    ranked = [(waiting_rank(r, now, knowledge, settings, memo), r) for r in queue]
    ranked.sort(key=lambda x: (-x[0], x[1].created, x[1].job))
    ahead: dict[str, float] = dict.fromkeys(capacity, 0.0)
    out, choices, waiting_for = [], {}, set()
    reserved = {h.job: h.allocation.device_class for h in running if h.waiting}  # its own room, held
    residual, classes, facts_of = knowledge.residual, tuple(capacity), knowledge.facts.get
    decliners: list[tuple[allocation.Decliner, int, Request, int, tuple[str, ...], int, frozenset[str]]] = []
    level_rank: dict[tuple[int, float], int] = {}  # (priority, attained service) -> the rank it preempts with
    for rank, request in ranked:
        facts = facts_of(request.job) or _NONE
        read = memo.reads.get(id(request)) if memo is not None else None
        if (read is not None and read[0] is request and read[1] is facts and read[2] == classes
                and read[3] is residual and read[4] == residual.version):
            left, need, rel = read[5], read[6], read[7]
            memo._seen_reads[id(request)] = read  # type: ignore[union-attr]
        else:
            left = residual.remaining(facts.work_s)
            need = {a.device_class: a.per_replica * request.replicas for a in request.alternatives}
            rel = {c: facts.rel.get(c, 0.0) for c in need if c in capacity}
            if memo is not None:
                memo.reads[id(request)] = memo._seen_reads[id(request)] = (
                    request, facts, classes, residual, residual.version, left, need, rel)
        # work conservation (see `displaces`): with free room on some class, no displacement is expected
        displace = True
        if WORK_CONSERVING:  # `displaces`, inlined (once per waiting job per pass)
            for c, n in need.items():
                if free.get(c, 0) >= n and rel.get(c, 0.0) > 0:
                    displace = False
                    break
        if knowledge.promoted_displace:
            preempts = rank  # promoted: its rank
        else:  # `queueing.preempt_rank(..., False)`: its priority and attained level, whatever the time
            level_key = (request.priority, facts.service.attained_device_s)
            by_level = level_rank.get(level_key)
            if by_level is None:
                by_level = level_rank[level_key] = queueing.preempt_rank(request.priority, facts.service, now,
                                                                         settings, False)
            preempts = min(rank, by_level)
        # promoted, past the point where promotions displace by level: it still displaces the running jobs
        # it would displace by level that are expected to run longer than it (shortest expected remaining
        # work first, from the completed jobs' work: with a heavy tail the job that has run longer has
        # longer to go, and turns pay; with a light one it is nearly done, and they do not)
        # ... by more than what the turn costs (`Knowledge.move_cost_s`): swapping the two saves their
        # difference in completion time, less the cost
        also = longer_than(left + knowledge.move_cost_s, preempts, rank) if preempts < rank else frozenset()
        against = preempts if displace else None
        waits = {}
        for c, r in rel.items():
            if r > 0:
                n = need[c]
                if free[c] >= n:
                    waits[c] = completion.expected_wait(n, free[c], capacity[c], (), ahead[c])
                elif also and displace:
                    ends = besides.get((c, preempts, also))
                    if ends is None:
                        jobs = [b for b in busy(c) if b[2] >= preempts and b[3] not in also]
                        ends = besides[(c, preempts, also)] = completion.Ends.ordered([b[0] for b in jobs],
                                                                                      (b[1] for b in jobs))
                    waits[c] = ends.wait(n, free[c], capacity[c], ahead[c])
                else:
                    ends = below.get((c, against)) or cannot_displace(c, against)
                    waits[c] = ends.wait(n, free[c], capacity[c], ahead[c])
        kept = knowledge.chose.get(request.job)
        choice = completion.choose(left, rel, waits, kept) if guide is None else guidance.choose(left, rel, waits, guide,
                                                                                                 kept)
        choices[request.job] = choice
        if not choice.classes:  # no speed known for any class: as the user listed them
            out.append(ranking.ranked_request(request, rank, None, memo, preempts, also))
            continue
        if request.job in reserved and reserved[request.job] in need:
            # its room is reserved (a move's destination, already counted as used): make before break, so
            # the reserved class is never narrowed away, whatever waiting for another class would promise
            held = reserved[request.job]  # not `mine`: busy() reads that dict for every job after this one
            out.append(ranking.ranked_request(request, rank, [held, *(c for c in choice.classes if c != held)],
                                              memo, preempts, also))
            continue
        first = choice.classes[0]
        if waits[first] == 0:
            free[first] -= need[first]
        else:
            ahead[first] += need[first] * left / rel[first]
            waiting_for.add(first)
        if (knowledge.saturated or guide is not None) and waits[first] != 0 and choice.declined:
            decliners.append((allocation.Decliner(request.job, len(out), choice.declined, need,
                                                  rel if guide is None else guidance.last_choice(guide, rel)), len(out),
                              request, rank, choice.classes, preempts, also))
        out.append(ranking.ranked_request(request, rank, choice.classes, memo, preempts, also))
    if decliners:  # past the knee: no device left idle while a job that could use it waits (module docstring)
        taken = allocation.fill(free, (d[0] for d in decliners))
        for d, i, request, rank, chosen, preempts, also in decliners:
            if d.job in taken:
                out[i] = ranking.ranked_request(request, rank, [*chosen, taken[d.job]], memo, preempts, also)
    if memo is not None:
        memo.end_pass()
    return Prepared(out, running, frozenset(waiting_for), choices)


def upgrades(holders: Iterable[Holder], fleet: Fleet, now: float, knowledge: Knowledge,
             waiting_for: Iterable[str], cost: completion.MoveCost, min_runtime_s: float,
             allowed: Mapping[str, Sequence[str]] | None = None, probe_share: float = 0.0,
             memo: ranking.Memo | None = None) -> list[completion.Upgrade]:
    """Moves up onto free devices of classes no waiting job chose to wait for, when the move pays
    (`completion.plan_upgrades`), and with `probe_share` > 0 probes of classes whose speed for the job is
    only the sheet's guess; a job moves only after `min_runtime_s` in place and never while disrupted.
    `allowed`: job -> classes it may run on (default: those with a known speed). `memo`: as `prepare`'s."""
    free, _ = devices_by_class(fleet, memo)
    free = {c: n for c, n in free.items() if c not in set(waiting_for) and n > 0}
    if not free:
        return []
    movers = []
    for h in holders:
        facts = knowledge.facts.get(h.job) or _NONE
        here = h.allocation.device_class
        classes = allowed.get(h.job, ()) if allowed is not None else facts.rel
        rel = {c: facts.rel.get(c, 0.0) for c in classes}
        rel[here] = facts.rel.get(here, 0.0)
        unmeasured = frozenset(c for c in rel if c not in facts.measured and c not in facts.sure) \
            if facts.measured else frozenset()
        if not any(rel.get(c, 0.0) > rel[here] or (probe_share > 0 and c in unmeasured) for c in free):
            continue
        settled = now - h.since >= min_runtime_s and not h.disrupted and h.base is None
        movers.append(completion.Mover(h.job, here, h.allocation.devices, remaining_s(h, now, knowledge) * rel[here],
                                       rel, settled, unmeasured))
    return completion.plan_upgrades(movers, free, cost, probe_share=probe_share, min_runtime_s=min_runtime_s)

