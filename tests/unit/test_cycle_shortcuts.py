"""The scheduling cycle's shortcuts (`engine.cycle.plan_cycle`) against the full computation: a cycle the
planner's necessary test says acts on nothing is planned only when read, messages gain the classes the policy
set aside only when read, and a namespace without a quota is not placed again to find quota refusals."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from heterojob.engine import admission as planner
from heterojob.engine import cycle as cycle_module
from heterojob.engine import policy as heterogeneity
from heterojob.engine.admission import Holder, Outcome, set_aside
from heterojob.engine.cycle import plan_cycle
from heterojob.engine.fleet import Allocation, DeviceClass, Fleet, Limit, Node, usage
from heterojob.engine.placement import Alternative, Request, place
from heterojob.engine.policy import Facts, Knowledge
from heterojob.engine.queueing import QueueSettings, Service
from heterojob.engine.ranking import Memo
from heterojob.replay.replay import Config, _Replay
from heterojob.replay.traces import TraceJob, synthetic_trace

NOW = 100_000.0
TABLE = Path(__file__).resolve().parents[2] / "data" / "gavel" / "isolated_throughputs.csv"
CLASSES = {"h100": DeviceClass("h100", "nvidia.com/gpu", {"acc": "h100"}, 1.0),
           "910b": DeviceClass("910b", "huawei.com/Ascend910", {"acc": "910b"}, 0.5)}
REGIONS = ("east", "west")


def _busy_scene(seed: int, nodes: int = 8, waiting: int = 25) -> tuple[list[Request], list[Holder], Fleet,
                                                                          Knowledge]:
    """A fleet nearly full of running jobs of every level, and a queue of jobs of every level and size: some
    cycles preempt or place, others can act on nothing."""
    rng = random.Random(seed)
    settled = seed % 2 == 0  # the fleet full of young first-level jobs: few cycles may act
    holders: list[Holder] = []
    node_objs = {}
    facts: dict[str, Facts] = {}
    for i in range(nodes):
        cls = CLASSES["h100" if i % 2 == 0 else "910b"]
        name = f"n{i}"
        node_objs[name] = Node(name, {"topology.kubernetes.io/region": REGIONS[i % 2], **cls.node_selector},
                               {cls.resource_name: 8})
        left = 8 - (0 if settled else rng.choice([0, 0, 0, 1, 4]))
        while left > 0:
            n = min(left, rng.choice([2, 4, 8]))
            job = f"ns/run{len(holders)}"
            holders.append(Holder(job, 0, NOW - (30.0 if settled else rng.choice([30.0, 5_000.0, 80_000.0])),
                                  Allocation(cls.resource_name, {name: n}, "ns", cls.name, REGIONS[i % 2])))
            facts[job] = Facts(Service(0.0 if settled else rng.choice([0.0, 3 * 3600.0, 50 * 3600.0]), NOW - 90_000),
                               {"h100": 1.0, "910b": rng.choice([0.2, 0.5, 0.9])}, rng.choice([100.0, 50_000.0]))
            left -= n
    queue = []
    for k in range(waiting):
        per = rng.choice([1, 2, 4, 8])
        alts = [Alternative(rng.choice(list(CLASSES)), per)]
        if rng.random() < 0.5:
            alts.append(Alternative("910b" if alts[0].device_class == "h100" else "h100", per))
        job = f"ns/w{k}"
        created = NOW - rng.choice([60.0, 3_000.0, 20_000.0])
        queue.append(Request(job, alts, rng.choice([1, 1, 2]), priority=0, created=created))
        facts[job] = Facts(Service(rng.choice([0.0, 0.0, 3 * 3600.0, 50 * 3600.0]), created),
                           {"h100": 1.0, "910b": rng.choice([0.2, 0.5, 0.9])}, rng.choice([0.0, 20_000.0]))
    fleet = Fleet(node_objs, CLASSES, used=usage(h.allocation for h in holders))
    return queue, holders, fleet, Knowledge(facts)


def _in_full(monkeypatch: pytest.MonkeyPatch, *args: object, **kwargs: object) -> cycle_module.Cycle:
    """`plan_cycle` planning every cycle at once, whatever the planner's necessary test says."""
    with monkeypatch.context() as m:
        m.setattr(cycle_module, "may_act", lambda *a, **k: True)
        out = plan_cycle(*args, **kwargs)  # type: ignore[arg-type]
        out.admissions  # noqa: B018 - read while the full computation is patched in
    return out


def test_a_quiet_cycle_acts_on_nothing_and_reads_as_the_full_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    quiet = acting = 0
    for seed in range(60):
        queue, holders, fleet, known = _busy_scene(seed)
        qs = QueueSettings()
        memo = Memo()
        fast = plan_cycle(queue, holders, fleet, NOW, policy=(known, qs), memo=memo)
        full = _in_full(monkeypatch, queue, holders, fleet, NOW, policy=(known, qs))
        acts = [a for a in full.admissions.values() if a.outcome == Outcome.PLACED or a.disruptions]
        assert [(a.job, a.outcome, a.candidate, a.disruptions) for a in fast.acting] == \
               [(a.job, a.outcome, a.candidate, a.disruptions) for a in acts]
        assert fast.acted == bool(acts) and fast.waiting_for == full.waiting_for and fast.free == full.free
        if fast.quiet:
            quiet += 1
            assert not acts
        else:
            acting += bool(acts)
        assert fast.admissions == full.admissions  # read later, planned then: the same messages
        assert fast.plan.admissions == planner.plan_with_policy(queue, holders, fleet, NOW, known, qs)[0].admissions
    assert quiet >= 5 and acting >= 5  # both kinds of cycle were met


def test_a_cycle_the_test_lets_through_is_planned_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shortcut depends on the planner's necessary test: a test that said "acts on nothing" wrongly would
    lose placements, and this comparison would catch it."""
    queue, holders, _, known = _busy_scene(1)
    fleet = Fleet({n: v for n, v in _busy_scene(1)[2].nodes.items()}, CLASSES, used={})  # all free
    with monkeypatch.context() as m:
        m.setattr(cycle_module, "may_act", lambda *a, **k: False)
        wrong = plan_cycle(queue, holders, fleet, NOW, policy=(known, QueueSettings()))
    right = plan_cycle(queue, holders, fleet, NOW, policy=(known, QueueSettings()))
    assert right.acted and not wrong.acted and not right.quiet


def _set_aside_in_full(request: Request, narrowed: Request, choice: object, fleet: Fleet) -> str:
    """`set_aside` placing the classes set aside to find quota refusals, whatever the namespace's quota."""
    kept = {a.device_class for a in narrowed.alternatives}
    aside = [a for a in request.alternatives if a.device_class not in kept]
    text = set_aside(request, narrowed, choice, Fleet(fleet.nodes, fleet.classes, used=fleet.used))  # type: ignore[arg-type]
    if not aside:
        return text
    blockers = [r for r in place(replace(request, alternatives=aside), fleet).rejections if r.quota]
    return text + (f"; and quota besides: {planner.listed(blockers, 4)}" if blockers else "")


@pytest.mark.parametrize("quotas", [{}, {"other": [Limit("h100", "*", 0)]}, {"ns": [Limit("h100", "*", 0)]},
                                    {"ns": [Limit("910b", "east", 100)]}])
def test_set_aside_without_a_quota_says_what_placing_the_classes_set_aside_says(quotas: dict[str, list[Limit]]
                                                                                ) -> None:
    for seed in range(20):
        queue, holders, fleet, known = _busy_scene(seed)
        fleet = Fleet(fleet.nodes, fleet.classes, used=fleet.used, quotas=quotas,
                      held={"ns": {(h.allocation.device_class, h.allocation.region): h.allocation.devices
                                   for h in holders}})
        prepared = heterogeneity.prepare(queue, holders, fleet, NOW, known, QueueSettings(), 300.0)
        mine = {r.job: r for r in prepared.queue}
        for request in queue:
            choice = prepared.choices.get(request.job)
            assert set_aside(request, mine[request.job], choice, fleet) == \
                _set_aside_in_full(request, mine[request.job], choice, fleet)


class _Logged(_Replay):
    """A replay that logs every start, stop and move of a job, with its time."""

    def __init__(self, jobs: Sequence[TraceJob], policy: str, config: Config) -> None:
        super().__init__(jobs, policy, config)
        self.log: list[tuple[object, ...]] = []

    def start(self, job: TraceJob, cls: str, region: str, nodes: Sequence[str], per: int, now: float,
              pause: float = 0.0) -> None:
        self.log.append(("start", now, job.id, cls, region, tuple(nodes), per, pause))
        super().start(job, cls, region, nodes, per, now, pause)

    def stop(self, run: object, now: float) -> None:
        self.log.append(("stop", now, run.job.id))  # type: ignore[attr-defined]
        super().stop(run, now)  # type: ignore[arg-type]


@pytest.mark.parametrize(("seed", "share"), [(1, None), (2, 0.7), (3, None), (4, 0.7)])
def test_a_replay_that_plans_every_cycle_in_full_logs_what_the_shortcuts_log(
        seed: int, share: float | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the knee (long queues, preemptions, failures): every start, stop and move at the same time."""
    jobs = synthetic_trace(220, 4, TABLE, seed=seed, fastest_share=share, high_priority_share=0.1)
    config = Config(nodes_per_class_region=2, regions=2, devices_per_node=4, mtbf_h=3000, seed=seed)
    fast = _Logged(jobs, "heterojob", config)
    fast_report = fast.run()
    with monkeypatch.context() as m:
        m.setattr(cycle_module, "may_act", lambda *a, **k: True)
        full = _Logged(jobs, "heterojob", config)
        full_report = full.run()
    assert fast.log == full.log and fast_report.summary() == full_report.summary()
    assert fast.metrics.preemptions > 0 and fast.metrics.restarts > 0
