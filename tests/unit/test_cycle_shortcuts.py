"""The scheduling cycle's shortcuts (`engine.queue.cycle.plan_cycle`) against the full computation: a cycle the
planner's necessary test says acts on nothing is planned only when read, messages gain the classes the policy
set aside only when read, and a namespace without a quota is not placed again to find quota refusals."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heterojob.engine.queue import admission as planner
from heterojob.engine.queue import cycle as cycle_module
from heterojob.engine.queue import policy as heterogeneity
from heterojob.engine.disruption.holders import Holder
from heterojob.engine.queue.admission import Outcome
from heterojob.engine.queue.aside import set_aside
from heterojob.engine.queue.cycle import plan_cycle
from heterojob.engine.capacity.fleet import Allocation, DeviceClass, Fleet, Limit, Node, usage
from heterojob.engine.placing.placement import Alternative, Request, listed, place
from heterojob.engine.queue.facts import Facts
from heterojob.engine.queue.policy import Knowledge
from heterojob.engine.basics.queueing import QueueSettings, Service
from heterojob.engine.queue.ranking import Memo
from heterojob.replay.config import Config
from heterojob.replay.devices import Devices
from heterojob.replay.replay import _Replay
from heterojob.replay.replay import fleet as replay_fleet
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
    return text + (f"; and quota besides: {listed(blockers, 4)}" if blockers else "")


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


@pytest.mark.parametrize(("seed", "share", "n"), [(1, None, 220), (2, 0.7, 220), (3, None, 220), (4, 0.7, 220),
                                                 (1, None, 150)])
def test_a_replay_that_plans_every_cycle_in_full_logs_what_the_shortcuts_log(
        seed: int, share: float | None, n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the knee (long queues, preemptions, failures): every start, stop and move at the same time. At 150
    jobs, seed 1, a node repaired between two cycles once left the full run's plan a finding of the cycle
    before (`settled`, kept in the replay's `rooms.Memory`): the repair changed the fleet's node mapping in
    place, and the finding held while the mapping was the same object."""
    jobs = synthetic_trace(n, 4, TABLE, seed=seed, fastest_share=share, high_priority_share=0.1)
    config = Config(nodes_per_class_region=2, regions=2, devices_per_node=4, mtbf_h=3000, seed=seed)
    fast = _Logged(jobs, "heterojob", config)
    fast_report = fast.run()
    with monkeypatch.context() as m:
        m.setattr(cycle_module, "may_act", lambda *a, **k: True)
        full = _Logged(jobs, "heterojob", config)
        full_report = full.run()
    assert fast.log == full.log and fast_report.summary() == full_report.summary()
    assert fast.metrics.preemptions > 0 and fast.metrics.restarts > 0


def test_a_fleet_the_replay_handed_out_keeps_its_nodes_when_one_fails_or_is_repaired() -> None:
    """The planner's findings kept between cycles (`engine.queue.settled`) hold while the fleet's node mapping
    is the same object: a replay that changed it in place on a repair kept a finding of a cycle that saw the
    node down (the 150-job case above)."""
    devices = Devices(replay_fleet(Config(nodes_per_class_region=2, regions=2, devices_per_node=4)))
    node = next(iter(devices.base.nodes))
    up = devices.current_fleet()
    devices.fail(node)
    down = devices.current_fleet()
    assert up.nodes[node].ready and not down.nodes[node].ready and down.nodes is not up.nodes
    devices.repair(node)
    again = devices.current_fleet()
    assert again.nodes[node].ready and not down.nodes[node].ready and again.nodes is not down.nodes
    assert up.nodes[node].ready


def _gpu_node(name: str) -> Node:
    return Node(name, {"topology.kubernetes.io/region": "east", "acc": "h100"}, {"nvidia.com/gpu": 8})


@settings(max_examples=300, deadline=None)
@given(held=st.lists(st.tuples(st.integers(0, 1), st.sampled_from([2, 4, 8]), st.integers(0, 5), st.booleans(),
                               st.booleans()), max_size=8),
       jobs=st.lists(st.tuples(st.integers(1, 2), st.sampled_from([2, 4, 8]), st.integers(0, 5), st.integers(0, 5),
                               st.booleans()), min_size=1, max_size=8))
def test_may_act_on_promoted_jobs_says_no_only_for_plans_that_act_on_nothing(
        held: list[tuple[int, int, int, bool, bool]], jobs: list[tuple[int, int, int, int, bool]]) -> None:
    """Jobs ordered above the priority they preempt with (promoted), some preempting jobs besides, among
    holders of every priority, some lending room: `may_act` says no only when the plan places, preempts and
    reclaims nothing."""
    holders = []
    per: dict[str, int] = {}
    for i, (node, devices, priority, grown, old) in enumerate(held):
        name, job = "ab"[node], f"ns/h{i}"
        per[name] = per.get(name, 0) + devices
        base = Request(job, [Alternative("h100", 2)], 1, allowed_regions=("east",), priority=priority) \
            if grown else None
        holders.append(Holder(job, priority, 0.0 if old else NOW - 60,
                              Allocation("nvidia.com/gpu", {name: devices}, "ns", "h100", "east"), base))
    if any(v > 8 for v in per.values()):
        return
    fleet = Fleet({n: _gpu_node(n) for n in "ab"}, CLASSES, used=usage(h.allocation for h in holders))
    queue = [Request(f"ns/j{i}", [Alternative("h100", d)], r, priority=max(p, q), created=float(i),
                     preempts=min(p, q), also_preempts=frozenset(h.job for h in holders[::2]) if also else frozenset())
             for i, (r, d, p, q, also) in enumerate(jobs)]
    plan = planner.plan_queue(queue, holders, fleet, NOW)
    if not planner.may_act(queue, holders, fleet, NOW):
        assert all(a.outcome == Outcome.NO_ROOM and not a.disruptions for a in plan.admissions.values())


def test_a_promoted_job_is_asked_at_the_priority_it_preempts_with() -> None:
    """A fleet full of old priority-1 jobs and a young one of priority 0: a job ordered at 3 that preempts only
    below 1 can make no room (the young one has not run its minimum runtime), unless it may preempt some of
    them besides, or one of priority 2 lends room."""
    holders = [Holder(f"ns/h{i}", 1, 0.0, Allocation("nvidia.com/gpu", {n: 8}, "ns", "h100", "east"))
               for i, n in enumerate("bcdef")]
    holders.append(Holder("ns/young", 0, NOW - 60, Allocation("nvidia.com/gpu", {"a": 8}, "ns", "h100", "east")))
    fleet = Fleet({n: _gpu_node(n) for n in "abcdef"}, CLASSES, used=usage(h.allocation for h in holders))
    promoted = Request("ns/x", [Alternative("h100", 8)], 1, priority=3, preempts=1)
    assert not planner.may_act([promoted], holders, fleet, NOW)
    assert planner.may_act([replace(promoted, preempts=2)], holders, fleet, NOW)
    assert planner.may_act([replace(promoted, also_preempts=frozenset({"ns/h0"}))], holders, fleet, NOW)
    lender = replace(holders[0], priority=2, base=Request("ns/h0", [Alternative("h100", 4)], 1, priority=2))
    assert planner.may_act([promoted], [lender, *holders[1:]], fleet, NOW)


def test_the_operators_cycle_is_planned_and_explained_in_its_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator plans in a worker thread so probes keep answering: what a cycle leaves until it is read
    (a quiet cycle's plan, the set-aside messages) is computed there too, not where the verdicts are read."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from heterojob.controller import scheduler as controller
    from heterojob.engine.queue import admission

    where: set[int] = set()
    plan_queue, set_aside_ = admission.plan_queue, cycle_module.set_aside

    def planned(*args: object, **kwargs: object) -> object:
        where.add(threading.get_ident())
        return plan_queue(*args, **kwargs)  # type: ignore[arg-type]

    def aside(*args: object, **kwargs: object) -> str:
        where.add(threading.get_ident())
        return set_aside_(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(cycle_module, "plan_queue", planned)
    monkeypatch.setattr(cycle_module, "set_aside", aside)
    kinds = set()
    for seed in range(12):
        queue, holders, fleet, known = _busy_scene(seed)
        with ThreadPoolExecutor(1) as pool:
            cycle = pool.submit(controller._explained, queue, holders, fleet, NOW, planner.AdmissionSettings(),
                                (known, QueueSettings()), None, None, None).result()
            worker = pool.submit(threading.get_ident).result()
        kinds.add(cycle.quiet)
        assert cycle.admissions and where == {worker}
        where.clear()
    assert kinds == {True, False}


def test_free_room_only_where_the_quota_refuses_makes_no_cycle_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """`bench/scale.py`'s probe region: every other node full of running jobs nobody may preempt yet, free room only
    in a region each waiting job's quota closes to it. The necessary test says nothing acts (it asks the quota with
    the room, per region), an acting cycle plans nothing, the preemption bound sends no job to a search, and the
    full plan reads as the one computed without the shortcut: every job NoRoom, the closed region named."""
    nodes = {f"{r}{i}": Node(f"{r}{i}", {"topology.kubernetes.io/region": r, "acc": "h100"}, {"nvidia.com/gpu": 8})
             for r in REGIONS for i in range(3)}
    holders = [Holder(f"ns/run-{n}", 0, NOW - 60.0, Allocation("nvidia.com/gpu", {n: 8}, "ns", "h100", "east"))
               for n in nodes if n.startswith("east")]
    quotas = {"ns": [Limit("*", "west", 0, "team"), Limit("*", "*", 1000, "team")]}
    fleet = Fleet(nodes, CLASSES, used=usage(h.allocation for h in holders), quotas=quotas,
                  held={"ns": {("h100", "east"): 24}})
    queue = [Request(f"ns/w{k}", [Alternative("h100", per)], replicas, priority=2, created=NOW - 100 + k)
             for k, (per, replicas) in enumerate([(1, 1), (8, 1), (4, 2), (8, 3)])]
    known = Knowledge({r.job: Facts(Service(0.0, r.created), {"h100": 1.0}) for r in queue})
    settings = planner.AdmissionSettings(min_runtime_s=3600.0)  # the running jobs are too young to preempt
    assert planner.Ledger(fleet).may_fit(queue[0])  # room alone would say "may fit": the west is free
    assert not planner.may_act(queue, holders, fleet, NOW, settings)
    acting = plan_cycle(queue, holders, fleet, NOW, settings, (known, QueueSettings()), acting=True)
    assert acting.quiet and not acting.acted and dict(acting.admissions) == {}
    searched: list[str] = []
    real = planner.preemption.plan_preemption
    monkeypatch.setattr(planner.preemption, "plan_preemption",
                        lambda request, *a, **k: searched.append(request.job) or real(request, *a, **k))
    full = plan_cycle(queue, holders, fleet, NOW, settings, (known, QueueSettings()), every=True)
    assert searched == []  # the bound asks the quota per region: no search for room the quota closes
    assert {a.outcome for a in full.admissions.values()} == {Outcome.NO_ROOM}
    assert all("quota 0/0" in a.message for a in full.admissions.values())
    assert full == _in_full(monkeypatch, queue, holders, fleet, NOW, settings, (known, QueueSettings()))
