"""What makes a replay's cycle cheaper decides exactly what the full computation decides.

- `admission.may_act` asks each kind of request once (requests alike in shape, priorities and the jobs they
  preempt besides answer alike) and reads the fleet's own index instead of a ledger's copy
  (`Ledger.reading`): it answers what asking every request on a copied ledger answers.
- `policy.prepare` gives a job that displaces by its promoted level (`Knowledge.promoted_displace`) its rank
  as the priority it preempts with, without computing `queueing.preempt_rank` again; past that point, whom a
  promoted job displaces besides is a bisection of the running jobs sorted once per pass (`also_preempts.AlsoPreempts`).
- The replay plans its cycles for what acts only (`plan_cycle(acting=True)`: no waiting job's message).
- `completion.choose` decides a job with one class to run on without ranking; `guidance.choose` builds the
  completion estimates of every class directly (not by choosing among them all a second time), and a job that
  fits every class it has a wait for is chosen for once; `Guide.fits`, `Guide.advantage` and `guidance.kind`
  are kept per job speeds.
Whole replays with these and without them start, stop and move the same jobs at the same times.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heterojob.engine.basics import queueing
from heterojob.engine.disruption import also_preempts
from heterojob.engine.queue import admission, completion, cycle, guidance, policy
from heterojob.engine.disruption.holders import Holder
from heterojob.engine.queue.admission import AdmissionSettings, _displacing
from heterojob.engine.capacity.fleet import Allocation, Fleet, usage
from heterojob.engine.placing.placement import Alternative, FleetIndex, Ledger, Request
from heterojob.engine.disruption.pool import _Pool
from heterojob.engine.capacity.rooms import Memory
from heterojob.replay.config import Config
from heterojob.replay.replay import _Replay
from heterojob.replay.scheduler import ReplayScheduler
from heterojob.replay.traces import TraceJob, synthetic_trace
from tests.unit.test_placement import CLASSES, gpu_node, npu_node
from heterojob.engine.queue.facts import Facts

NOW = 100_000.0
TABLE = Path(__file__).resolve().parents[2] / "data" / "gavel" / "isolated_throughputs.csv"


def _may_act_in_full(queue: Iterable[Request], holders: Iterable[Holder], fleet: Fleet, now: float,
                     settings: AdmissionSettings = AdmissionSettings(), memory: Memory | None = None) -> bool:
    """The oracle: every request asked, on a ledger copied from the fleet."""
    holders = list(holders)
    if any(h.waiting or h.yielding_to is not None for h in holders):
        return True
    ledger = Ledger(fleet, FleetIndex(fleet, memory))
    lent = sorted(h.priority for h in holders if h.base is not None)
    for request in queue:
        if ledger.may_fit(request):
            return True
        pool = _Pool.untaken(holders)
        if request.preempts is not None and request.preempts < request.priority:
            request = _displacing(request, lent)
        if pool.may_disrupt(request, set()) and pool.may_make_room(request, ledger, set(), now,
                                                                   settings.min_runtime_s):
            return True
    return False


_CLASS = {"a": "nvidia-h100", "b": "nvidia-h100", "c": "ascend-910b", "d": "ascend-910b"}
_RESOURCE = {"nvidia-h100": "nvidia.com/gpu", "ascend-910b": "huawei.com/Ascend910"}


@settings(max_examples=300, deadline=None)
@given(held=st.lists(st.tuples(st.sampled_from("abcd"), st.sampled_from([2, 4, 8]), st.integers(0, 4), st.booleans(),
                               st.booleans()), max_size=8),
       kinds=st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(1, 3), st.integers(0, 4),
                                st.integers(0, 4), st.booleans(), st.sampled_from(["h100", "910b", "both"])),
                      min_size=1, max_size=4),
       picks=st.lists(st.integers(0, 3), min_size=1, max_size=12))
def test_may_act_asking_each_kind_once_answers_what_asking_every_request_answers(
        held: list[tuple[str, int, int, bool, bool]], kinds: list[tuple[int, int, int, int, bool, str]],
        picks: list[int]) -> None:
    """Queues of a few kinds of request, each many times over under other names, some of one shape at other
    priorities or preempting with less, among holders of every priority (old and young, some lending room)."""
    holders, per = [], dict[str, int]()
    for i, (node, devices, priority, grown, old) in enumerate(held):
        cls, job = _CLASS[node], f"ns/h{i}"
        per[node] = per.get(node, 0) + devices
        base = Request(job, [Alternative(cls, 2)], 1, priority=priority) if grown else None
        holders.append(Holder(job, priority, 0.0 if old else NOW - 60, Allocation(
            _RESOURCE[cls], {node: devices}, "ns", cls, "cn-east" if node in "ab" else "cn-north"), base))
    if any(v > 8 for v in per.values()):
        return
    fleet = Fleet({n: gpu_node(n) for n in "ab"} | {n: npu_node(n) for n in "cd"}, CLASSES,
                  used=usage(h.allocation for h in holders))
    alternatives = {"h100": ["nvidia-h100"], "910b": ["ascend-910b"], "both": ["nvidia-h100", "ascend-910b"]}
    queue = []
    for i, k in enumerate(picks):
        devices, replicas, priority, preempts, also, classes = kinds[k % len(kinds)]
        queue.append(Request(f"ns/w{i}", [Alternative(c, devices) for c in alternatives[classes]], replicas,
                             priority=priority, created=float(i), preempts=preempts,
                             also_preempts=frozenset(h.job for h in holders[::2]) if also else frozenset()))
    assert admission.may_act(queue, holders, fleet, NOW) == _may_act_in_full(queue, holders, fleet, NOW)


def test_requests_of_one_shape_at_other_priorities_are_asked_apart() -> None:
    """Two nodes full of old priority-1 jobs: of two 8-device jobs of one shape, only the one of priority 2 may
    preempt. Asked in either order, the queue may act (a kind read by shape alone would answer for both by
    the first one's answer)."""
    holders = [Holder(f"ns/h{n}", 1, 0.0, Allocation("nvidia.com/gpu", {n: 8}, "ns", "nvidia-h100", "cn-east"))
               for n in "ab"]
    fleet = Fleet({n: gpu_node(n) for n in "ab"}, CLASSES, used=usage(h.allocation for h in holders))
    low, high = (Request(f"ns/{p}", [Alternative("nvidia-h100", 8)], 1, priority=p, created=float(p))
                 for p in (1, 2))
    assert not admission.may_act([low, low], holders, fleet, NOW)
    assert admission.may_act([low, high], holders, fleet, NOW) and admission.may_act([high, low], holders, fleet, NOW)


@settings(max_examples=100, deadline=None)
@given(waiting=st.lists(st.tuples(st.integers(0, 1), st.floats(0, 40 * 3600), st.floats(0, 3e5), st.booleans()),
                        min_size=1, max_size=8),
       held=st.lists(st.tuples(st.sampled_from("abcd"), st.integers(0, 1), st.floats(0, 40 * 3600)), max_size=6),
       promoted_displace=st.booleans(), now=st.floats(2e5, 6e5))
def test_prepare_gives_each_job_the_priority_it_preempts_with(
        waiting: list[tuple[int, float, float, bool]], held: list[tuple[str, int, float]], promoted_displace: bool,
        now: float) -> None:
    """Waiting jobs of every level, some starved (promoted): each prepared request preempts with
    `min(rank, queueing.preempt_rank(...))` (kept only when below its rank), whether promotions displace or not."""
    facts: dict[str, Facts] = {}
    holders = []
    for i, (node, priority, attained) in enumerate(held):
        job, cls = f"ns/h{i}", _CLASS[node]
        holders.append(Holder(job, priority, now - 4000.0, Allocation(
            _RESOURCE[cls], {node: 2}, "ns", cls, "cn-east" if node in "ab" else "cn-north")))
        facts[job] = Facts(queueing.Service(attained, 0.0), {"nvidia-h100": 1.0, "ascend-910b": 0.5}, 1000.0)
    queue = []
    for i, (priority, attained, waited, also_ran) in enumerate(waiting):
        job = f"ns/w{i}"
        queue.append(Request(job, [Alternative("nvidia-h100", 1), Alternative("ascend-910b", 1)], 1,
                             priority=priority, created=float(i)))
        facts[job] = Facts(queueing.Service(attained, now - waited, False, 3600.0 if also_ran else 0.0),
                                  {"nvidia-h100": 1.0, "ascend-910b": 0.5}, attained / 4)
    knowledge = policy.Knowledge(facts, promoted_displace=promoted_displace)
    settings_ = queueing.QueueSettings()
    fleet = Fleet({n: gpu_node(n) for n in "ab"} | {n: npu_node(n) for n in "cd"}, CLASSES,
                  used=usage(h.allocation for h in holders))
    prepared = policy.prepare(queue, holders, fleet, now, knowledge, settings_, 300.0)
    for r in prepared.queue:
        original = next(q for q in queue if q.job == r.job)
        service = facts[r.job].service
        rank = queueing.rank(original.priority, service, now, settings_)
        preempts = min(rank, queueing.preempt_rank(original.priority, service, now, settings_, promoted_displace))
        assert r.priority == rank
        assert r.preempts == (preempts if preempts < rank else None)


class _Logged(_Replay):
    """A replay that logs every start and stop of a job, with its time."""

    def __init__(self, jobs: Sequence[TraceJob], policy_name: str, config: Config) -> None:
        super().__init__(jobs, policy_name, config)
        self.log: list[tuple[object, ...]] = []

    def start(self, job: TraceJob, cls: str, region: str, nodes: Sequence[str], per: int, now: float,
              pause: float = 0.0) -> None:
        self.log.append(("start", now, job.id, cls, region, tuple(nodes), per, pause))
        super().start(job, cls, region, nodes, per, now, pause)

    def stop(self, run: Any, now: float) -> None:
        self.log.append(("stop", now, run.job.id))
        super().stop(run, now)


_PLAN_CYCLE = cycle.plan_cycle


def _planned_in_full(*args: Any, **kwargs: Any) -> cycle.Cycle:
    """`plan_cycle` with every waiting job planned and explained (`acting` dropped)."""
    kwargs.pop("acting", None)
    return _PLAN_CYCLE(*args, **kwargs)


def _choose_in_full(remaining_s: float, rel: dict[str, float], wait_s: dict[str, float], kept: str | None = None
                    ) -> completion.Choice:
    """The oracle of `completion.choose`: every class ranked, whatever their number."""
    done = {c: wait_s[c] + (remaining_s / rel[c] if rel[c] > 0 else float("inf")) for c in rel if c in wait_s}
    if not done:
        return completion.Choice((), {}, ())
    best = min(done, key=lambda c: (done[c], -rel[c], c))
    if (kept is not None and kept != best and kept in done and wait_s[kept] != 0 and wait_s[best] != 0
            and math.isfinite(done[kept]) and done[best] >= done[kept] * (1 - completion.KEEP_MARGIN)):
        best = kept
    if all(wait_s[c] != 0 for c in done):
        return completion.Choice((best,), done, ())
    keep = sorted((c for c in done if c == best or (wait_s[c] == 0 and done[c] <= done[best])),
                  key=lambda c: (done[c], -rel[c], c))
    return completion.Choice(tuple(keep), done, tuple(sorted(c for c in done if wait_s[c] == 0 and c not in keep)))


def _fits_in_full(guide: guidance.Guide, rel: dict[str, float]) -> frozenset[str]:
    values = guide.values(rel)
    if not values:
        return frozenset()
    best = max(values.values())
    if math.isinf(best):
        return frozenset(c for c, v in values.items() if math.isinf(v))
    return frozenset(c for c, v in values.items() if v >= (1 - guide.tolerance) * best)


def _advantage_in_full(guide: guidance.Guide, rel: dict[str, float]) -> dict[str, float]:
    values = guide.values(rel)
    best = max((v for v in values.values() if not math.isinf(v)), default=0.0)
    return {c: 1.0 if math.isinf(v) else (v / best if best > 0 else 0.0) for c, v in values.items()}


def _guided_in_full(remaining_s: float, rel: dict[str, float], wait_s: dict[str, float], guide: guidance.Guide,
                    kept: str | None = None) -> completion.Choice:
    """The oracle of `guidance.choose`: the fitting classes chosen among, then every class for the estimates."""
    fit = _fits_in_full(guide, rel)
    narrowed = {c: r for c, r in rel.items() if c in fit and c in wait_s}
    if not narrowed:
        return _choose_in_full(remaining_s, rel, wait_s, kept)
    choice = _choose_in_full(remaining_s, narrowed, wait_s, kept if kept in narrowed else None)
    full = _choose_in_full(remaining_s, rel, wait_s)
    unfit = tuple(c for c in rel if c not in fit and c in wait_s and wait_s[c] == 0 and rel[c] > 0)
    return completion.Choice(choice.classes, full.completion_s, tuple(sorted({*choice.declined, *unfit})), unfit)


_SPEEDS = st.sampled_from([0.0, 0.1, 0.3, 0.5, 1.0]) | st.floats(0.01, 1.0)
_WAITS = st.sampled_from([0.0, 0.0, 600.0, 3600.0, math.inf]) | st.floats(0.0, 1e6)


@settings(max_examples=400, deadline=None)
@given(rel=st.dictionaries(st.sampled_from(["h100", "a100", "910b"]), _SPEEDS, max_size=3),
       waits=st.dictionaries(st.sampled_from(["h100", "a100", "910b", "cpu"]), _WAITS, max_size=4),
       remaining=st.sampled_from([0.0, 3600.0]) | st.floats(0.0, 1e6),
       kept=st.none() | st.sampled_from(["h100", "a100", "910b", "cpu"]),
       prices=st.dictionaries(st.sampled_from(["h100", "a100", "910b"]), st.sampled_from([0.0, 0.3, 1.0])
                              | st.floats(0.0, 1.0), max_size=3))
def test_choosing_a_class_decides_what_ranking_every_class_in_full_decides(
        rel: dict[str, float], waits: dict[str, float], remaining: float, kept: str | None,
        prices: dict[str, float]) -> None:
    """One class or several, free now or not (ties included), a kept class or none, a guide that fits some,
    all or none of them; the guide asked twice (its kept `fits` answers as the first)."""
    assert completion.choose(remaining, rel, waits, kept) == _choose_in_full(remaining, rel, waits, kept)
    for digits in (2, 1, 2):  # `guidance.kind`, kept per speeds and digits
        assert guidance.kind(rel, digits) == tuple(sorted((c, round(r, digits)) for c, r in rel.items() if r > 0))
    if prices:
        guide = guidance.Guide(prices)
        for _ in range(2):
            assert guide.fits(rel) == _fits_in_full(guide, rel)
            mine = guide.advantage(rel)
            assert mine == _advantage_in_full(guide, rel)
            mine["h100"] = -1.0  # the caller's own copy: what is kept does not change
            here = next(iter(rel), "h100")
            assert guidance.misfit(guide, rel, here, frozenset({here})) == (
                _advantage_in_full(guide, rel).get(here, 1.0) < guidance.MISFIT)
            assert guidance.choose(remaining, rel, waits, guide, kept) == _guided_in_full(remaining, rel, waits,
                                                                                           guide, kept)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("share", [None, 0.7])  # the proportional and the skewed mix
def test_a_replay_with_the_cheaper_cycle_logs_what_the_full_computation_logs(
        seed: int, share: float | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the knee (long queues, promotions, preemptions, failures, the fluid optimum's guide): every start
    and stop at the same time."""
    jobs = synthetic_trace(140, 4, TABLE, seed=seed, fastest_share=share, high_priority_share=0.1)
    config = Config(nodes_per_class_region=2, regions=2, devices_per_node=4, mtbf_h=3000, seed=seed)
    fast = _Logged(jobs, "heterojob", config)
    fast_report = fast.run()
    with monkeypatch.context() as m:
        m.setattr(cycle, "may_act", _may_act_in_full)
        m.setattr("heterojob.replay.scheduler.plan_cycle", _planned_in_full)
        m.setattr(completion, "choose", _choose_in_full)
        m.setattr(guidance, "choose", _guided_in_full)
        full = _Logged(jobs, "heterojob", config)
        full_report = full.run()
    assert fast.log == full.log and fast_report.summary() == full_report.summary()
    assert fast_report.jct_h_by_job == full_report.jct_h_by_job
    assert fast.metrics.preemptions > 0 and fast.metrics.restarts > 0 and fast.known.promotions > 0
    assert isinstance(fast.queue, ReplayScheduler) and fast.queue.guided is not None  # the guide was built


class _EveryTime:
    """The oracle of `also_preempts.AlsoPreempts`: every running job asked each time."""

    def __init__(self, ranked: Sequence[tuple[str, int]], work: Any) -> None:
        self.ranked, self.work = ranked, work

    def __call__(self, work_s: float, above: int, rank: int) -> frozenset[str]:
        work = self.work()
        return frozenset(job for job, p in self.ranked if above <= p < rank and work[job] > work_s)


@settings(max_examples=300, deadline=None)
@given(running=st.lists(st.tuples(st.integers(0, 5), st.sampled_from([0.0, 100.0, 5e3, 5e4])) | st.tuples(
           st.integers(0, 5), st.floats(0, 1e5)), max_size=12),
       asked=st.lists(st.tuples(st.sampled_from([0.0, 100.0, 5e3]) | st.floats(0, 1e5), st.integers(0, 5),
                                st.integers(0, 6)), min_size=1, max_size=10))
def test_whom_a_promoted_job_displaces_besides_is_what_asking_every_running_job_says(
        running: list[tuple[int, float]], asked: list[tuple[float, int, int]]) -> None:
    """Ties with the bound included: jobs of exactly `work_s` are not longer; equal answers are one set."""
    ranked = [(f"ns/r{i}", p) for i, (p, _) in enumerate(running)]
    work = {f"ns/r{i}": w for i, (_, w) in enumerate(running)}
    longer, oracle = also_preempts.AlsoPreempts(ranked, lambda: work), _EveryTime(ranked, lambda: work)
    answers = {}
    for work_s, above, rank in asked:
        got = longer(work_s, above, rank)
        assert got == oracle(work_s, above, rank)
        assert answers.setdefault((above, rank, got), got) is got


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(waiting=st.lists(st.tuples(st.integers(0, 1), st.floats(0, 40 * 3600), st.floats(0, 3e5), st.booleans(),
                                  st.sampled_from([1, 2, 4])), min_size=1, max_size=10),
       held=st.lists(st.tuples(st.sampled_from("abcd"), st.integers(0, 1), st.floats(0, 40 * 3600),
                               st.floats(0, 2e4)), max_size=8),
       completed=st.lists(st.floats(60, 1e5), max_size=30), now=st.floats(2e5, 6e5))
def test_prepare_with_whom_promoted_jobs_displace_indexed_decides_what_asking_every_job_decides(
        waiting: list[tuple[int, float, float, bool, int]], held: list[tuple[str, int, float, float]],
        completed: list[float], now: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the point where promotions displace by level: promoted jobs of every level among running jobs of
    every level and expected remaining work, the nodes near full."""
    facts: dict[str, Facts] = {}
    holders, per = [], dict[str, int]()
    for i, (node, priority, attained, since) in enumerate(held):
        job, cls = f"ns/h{i}", _CLASS[node]
        per[node] = per.get(node, 0) + 2
        holders.append(Holder(job, priority, now - since, Allocation(
            _RESOURCE[cls], {node: 2}, "ns", cls, "cn-east" if node in "ab" else "cn-north")))
        facts[job] = Facts(queueing.Service(attained, 0.0), {"nvidia-h100": 1.0, "ascend-910b": 0.5},
                                  attained / 3)
    if any(v > 8 for v in per.values()):
        return
    queue = []
    for i, (priority, attained, waited, also_ran, devices) in enumerate(waiting):
        job = f"ns/w{i}"
        queue.append(Request(job, [Alternative("nvidia-h100", devices), Alternative("ascend-910b", devices)], 1,
                             priority=priority, created=float(i)))
        facts[job] = Facts(queueing.Service(attained, now - waited, False, 3600.0 if also_ran else 0.0),
                                  {"nvidia-h100": 1.0, "ascend-910b": 0.5}, attained / 4)
    knowledge = policy.Knowledge(facts, completion.Residual(completed), promoted_displace=False)
    fleet = Fleet({n: gpu_node(n, devices=8) for n in "ab"} | {n: npu_node(n) for n in "cd"}, CLASSES,
                  used=usage(h.allocation for h in holders))
    fast = policy.prepare(queue, holders, fleet, now, knowledge, queueing.QueueSettings(), 300.0)
    with monkeypatch.context() as m:
        m.setattr(also_preempts, "AlsoPreempts", _EveryTime)
        slow = policy.prepare(queue, holders, fleet, now, knowledge, queueing.QueueSettings(), 300.0)
    assert fast == slow
