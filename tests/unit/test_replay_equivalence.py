"""The replay's and planner's shortcuts decide exactly what the brute-force computations decide.

heterojob's replay runs the operator's scheduling cycle (`replay.scheduler`: `engine.queue.cycle.plan_cycle` when
`engine.queue.cycle.CycleTrigger` says a cycle is due), so its shortcuts are the operator's: the CycleTrigger skips cycles
after events that changed no request, gave no room back and fired no timer; the policy reuses ranks and
reads across cycles (`ranking.Memo`: also a rank over the span it cannot change, the fleet's devices per
class) and placement what it found per class and region while its room is unchanged (`rooms.Memory`); an
empty queue is not planned. Below those, the planner (`admission.plan_queue`) indexes the holders once per
cycle (`_Pool`), skips preemption searches a cycle already found hopeless and placements `Ledger.may_fit`
rules out, `placement.FleetIndex` shares its per-class node tables between indexes of one fleet view, the
policy finds expected waits by bisection (`completion.Ends`), and growth tries no size its region's free
devices cannot hold (`placement._replica_slots`) and is not searched where its class and region have no
free device. The static and kueue baselines walk their queue per fit group (`Fifo.fit_key`) instead of job
by job and keep the free room up to date instead of recomputing it.

The oracles are the computations those replace: a replay that keeps nothing between cycles, builds every
index from scratch, asks every holder every question, places every job and tries every size, plans a
cycle after every event the CycleTrigger skips (each must act on nothing), and rescans every waiting job in
queue order. Both run the same overloaded traces (long queues, failures, two priorities, every policy) and
must start the same jobs at the same times on the same nodes, with the same report; random plain-data plans
must come out equal, admission by admission.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heterojob.engine.basics import queueing
from heterojob.engine.capacity import fleet_index
from heterojob.engine.disruption import preemption
from heterojob.engine.placing import placement
from heterojob.engine.queue import admission, completion, cycle, policy, ranking
from heterojob.engine.queue import admission as planner
from heterojob.engine.disruption.holders import Holder
from heterojob.engine.queue.admission import Outcome
from heterojob.engine.capacity.fleet import Allocation, Fleet, usage
from heterojob.engine.placing.placement import Alternative, Request, place
from heterojob.replay import replay as replay_module
from heterojob.replay.devices import Devices, room
from heterojob.replay.fifo import Fifo
from heterojob.replay.config import Config, NAMESPACE, POLICIES
from heterojob.replay.replay import _Replay
from heterojob.replay.traces import CLASSES
from heterojob.replay.scheduler import ReplayScheduler
from heterojob.replay.traces import TraceJob, synthetic_trace
from tests.unit.test_placement import CLASSES as PLACEMENT_CLASSES
from tests.unit.test_placement import gpu_node, npu_node
from heterojob.engine.queue.facts import Facts

NOW = 10_000.0

TABLE = Path(__file__).resolve().parents[2] / "data" / "gavel" / "isolated_throughputs.csv"

Start = tuple[float, int, str, str, tuple[str, ...], int, float]


class _Recording(_Replay):
    def __init__(self, jobs: Sequence[TraceJob], policy: str, config: Config) -> None:
        super().__init__(jobs, policy, config)
        self.log: list[Start] = []
        self.longest = 0  # the longest queue a start saw

    def start(self, job: TraceJob, cls: str, region: str, nodes: Sequence[str], per: int, now: float,
              pause: float = 0.0) -> None:
        self.log.append((now, job.id, cls, region, tuple(nodes), per, pause))
        self.longest = max(self.longest, len(self.queue.waiting))
        super().start(job, cls, region, nodes, per, now, pause)


class _FreshDevices(Devices):
    """Every snapshot computed afresh each time it is asked for; every job's growth searched."""

    def current_fleet(self, without: Any = None) -> Fleet:
        used = dict(self.used)
        if without is not None:
            for n, c in without.per_node.items():
                used[(n, without.cls)] -= c
        return Fleet(self.nodes_view, self.base.classes, used=used)

    def room(self) -> dict[str, tuple[int, int]]:
        return room(self.current_fleet(), self.down)

    def region_free(self) -> dict[tuple[str, str], int]:
        return _Everywhere()

    def by_id(self) -> list[Any]:
        return sorted(self.running.values(), key=lambda r: r.job.id)


class _ScanFifo(Fifo):
    """The scan the baselines had before their fit groups: every waiting job, in queue order, every pass."""

    def place(self, now: float) -> None:
        sim = self.sim
        if not (sim.freed or sim.arrived):
            return
        pool = [self.keys[j.id] for j in sim.arrived if j.id in self.keys] if not sim.freed else None
        free = sim.devices.room()
        for k in (sorted(pool) if pool is not None else list(self.order_list)):
            if not any(free[c][0] for c in CLASSES):
                break
            job = self.waiting[k[2]]
            replicas, per = sim.shape(job)
            flavors = [c for c in self.flavors(job) if free[c][0] >= replicas * per and free[c][1] >= per]
            if not flavors:
                continue
            result = place(Request(f"{NAMESPACE}/{job.id}", [Alternative(c, per) for c in flavors], replicas),
                           sim.devices.current_fleet())
            if result.chosen is not None:
                c = result.chosen
                sim.start(job, c.device_class, c.region, c.nodes, per, now)
                free = sim.devices.room()


class _EveryCycle(ReplayScheduler):
    """The operator's cycle with nothing kept between cycles. At every event whose CycleTrigger is not due, a cycle
    is planned anyway (side-effect free) on the state as it is, at the time of the last cycle, and must act on
    nothing: every change a cycle reads but the clock fed the CycleTrigger. (The clock alone does move plans: a
    cycle planned at the skipped event's own time may act, `drifted`.) The kept count of waiting jobs per priority
    is checked against a scan of the queue."""

    def __init__(self, sim: _Replay) -> None:
        super().__init__(sim)
        self.memo = None  # type: ignore[assignment]
        self.memory = None  # type: ignore[assignment]
        self.skipped = 0  # cycles the CycleTrigger skipped, planned here anyway
        self.last = -1.0  # when the last cycle was planned
        self.drifted: list[float] = []  # skipped events at which a cycle planned now would act
        grow = self.running.grow

        def checked(now: float) -> None:
            top = planner.top_priority(self.request(j) for j in self.waiting.values())
            kept = max((p for p, n in self.priorities.items() if n), default=None)
            assert top == kept, (top, kept)  # the count kept up to date is the scan's answer
            grow(now)
        self.running.grow = checked  # type: ignore[method-assign]  # checked before every growth look

    def plan(self, now: float) -> None:
        if not self.trigger.due(now) and self.last >= 0:
            self.skipped += 1
            assert not self.skipped_cycle(self.last).acted, self.last
            if self.skipped_cycle(now).acted:
                self.drifted.append(now)
        cycles = self.cycles
        super().plan(now)
        if self.cycles > cycles:
            self.last = now

    def skipped_cycle(self, at: float) -> cycle.Cycle:
        config = self.sim.config
        knowledge = self.sim.known.knowledge
        knowledge.promoted_displace = queueing.promoted_displacing(self.waiting_devices, config.devices, config.queue)
        knowledge.displace_by_level = queueing.displacing(self.waiting_devices, config.devices, config.queue)
        return cycle.plan_cycle([self.request(j) for j in self.waiting.values()], self.holders(),
                                self.sim.devices.current_fleet(), at, self.settings, (knowledge, config.queue))


class _BruteForce(_Recording):
    def __init__(self, jobs: Sequence[TraceJob], policy: str, config: Config) -> None:
        super().__init__(jobs, policy, config)
        self.devices = _FreshDevices(self.base)
        self.queue = _EveryCycle(self) if policy == "heterojob" else _ScanFifo(self)


class _ScanEnds(completion.Ends):
    """`expected_wait`'s sort and scan, from the jobs an `Ends` was built from."""

    def wait(self, need: int, free: int, capacity: int, ahead_device_s: float) -> float:
        devices = [b - a for a, b in zip([0, *self.freed], self.freed, strict=False)]
        return completion.expected_wait(need, free, capacity, [completion.Busy(n, e) for n, e in
                                                               zip(devices, self.ends, strict=True)], ahead_device_s)


def _choose_in_full(remaining_s: float, rel: Any, wait_s: Any, kept: str | None = None) -> completion.Choice:
    """`completion.choose` without its shortcut for a job that can start nowhere now."""
    completion_s = {c: wait_s[c] + (remaining_s / rel[c] if rel[c] > 0 else float("inf")) for c in rel if c in wait_s}
    if not completion_s:
        return completion.Choice((), {}, ())
    best = min(completion_s, key=lambda c: (completion_s[c], -rel[c], c))
    if kept in completion_s and wait_s[kept] > 0 and wait_s[best] > 0 and completion_s[kept] < float("inf") \
            and completion_s[best] >= completion_s[kept] * (1 - completion.KEEP_MARGIN):
        best = kept  # the class it waited for, while within the margin
    keep = sorted((c for c in completion_s if c == best or (wait_s[c] == 0 and completion_s[c] <= completion_s[best])),
                  key=lambda c: (completion_s[c], -rel[c], c))
    declined = tuple(sorted(c for c in completion_s if wait_s[c] == 0 and c not in keep))
    return completion.Choice(tuple(keep), completion_s, declined)


class _Everywhere(dict[tuple[str, str], int]):
    """Free devices in every class and region."""

    def get(self, key: Any, default: Any = None) -> int:
        return 1


def _plan_cycle_in_full(queue: Any, holders: Any, fleet: Fleet, now: float, settings: admission.AdmissionSettings,
                        with_policy: Any, moves: Any = None, memo: Any = None, memory: Any = None,
                        acting: bool = False) -> cycle.Cycle:
    """`plan_cycle` with an empty queue planned like any other (through the policy and the planner), every
    waiting job planned in full (`acting` left out: what acts is the same, `admission.plan_queue`)."""
    queue = list(queue)
    if queue:
        return _PLAN_CYCLE(queue, holders, fleet, now, settings, with_policy, moves, memo, memory)
    knowledge, queue_settings = with_policy
    prepared = policy.prepare([], holders, fleet, now, knowledge, queue_settings, settings.min_runtime_s)
    plan = planner.plan_queue([], prepared.holders, fleet, now, settings)
    return cycle.Cycle(plan, prepared.waiting_for, cycle._free_after(plan, fleet))


_PLAN_CYCLE = cycle.plan_cycle


def _runs(jobs: list[TraceJob], policy: str, config: Config, monkeypatch: pytest.MonkeyPatch
          ) -> tuple[_Recording, _BruteForce]:
    fast = _Recording(jobs, policy, config)
    fast_report = fast.run()
    with monkeypatch.context() as m:  # every index built from scratch, as before the shared views
        m.setattr(fleet_index, "_view", fleet_index._View)
        m.setattr(admission, "_Pool", _ScanPool)
        m.setattr(placement.Ledger, "may_fit", lambda self, request: True)  # place every job, as before
        m.setattr(placement, "_replica_slots", lambda *args: 1 << 30)  # try every size
        m.setattr(completion, "Ends", _ScanEnds)  # every wait by a sort and a scan
        m.setattr(completion, "choose", _choose_in_full)
        m.setattr("heterojob.replay.scheduler.plan_cycle", _plan_cycle_in_full)
        m.setattr(cycle, "may_act", lambda *args, **kwargs: True)  # every cycle planned, none left unread
        slow = _BruteForce(jobs, policy, config)
        slow_report = slow.run()
    assert fast_report.summary() == slow_report.summary()
    assert fast_report.jct_h_by_job == slow_report.jct_h_by_job
    return fast, slow


@pytest.mark.parametrize("policy", POLICIES)
def test_the_replays_shortcuts_start_what_the_full_computation_starts(policy: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # 16 devices per class, 4 jobs/h: far past every policy's knee, so the queue grows long
    jobs = synthetic_trace(260, 4, TABLE, seed=7, high_priority_share=0.15, fastest_share=0.7)
    config = Config(nodes_per_class_region=2, regions=2, devices_per_node=4, mtbf_h=3000, seed=3)
    fast, slow = _runs(jobs, policy, config, monkeypatch)
    assert fast.log == slow.log
    assert len(fast.log) >= len(jobs)
    assert fast.longest > 32  # the scans had far more to look at than a pass starts
    assert fast.metrics.restarts > 0  # failures happened, so room also came back through repairs
    if policy == "heterojob":  # the policy's shortcuts were exercised: growth, preemption, upgrade moves
        m = fast.metrics
        assert m.resizes > 0 and m.preemptions > 0 and m.upgrades > 0
        assert isinstance(slow.queue, _EveryCycle) and slow.queue.skipped > 0  # the CycleTrigger skipped cycles
        # what the CycleTrigger does not see: with nothing else changed, the clock alone moves the policy's
        # estimates (a job that chose to wait for a faster class takes a slower free one some 800 s later),
        # so a cycle planned then would act; the operator waits for the next event (no timer covers it)
        assert slow.queue.drifted


def test_the_oracle_tells_a_growth_bound_one_short_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """A slot bound that cut one size too many would be caught: heterojob's logs then differ."""
    jobs = synthetic_trace(120, 1, TABLE, seed=7)
    config = Config(nodes_per_class_region=2, regions=2, devices_per_node=4, mtbf_h=1e9)
    real = placement._replica_slots
    with monkeypatch.context() as m:
        m.setattr(placement, "_replica_slots", lambda *args: real(*args) - 1)
        wrong = _Recording(jobs, "heterojob", config)
        wrong.run()
    right = _Recording(jobs, "heterojob", config)
    right.run()
    assert right.metrics.resizes > wrong.metrics.resizes and wrong.log != right.log


def test_the_oracle_tells_a_different_scan_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """A shortcut that skipped one group of the queue would be caught: the logs then differ."""
    jobs = synthetic_trace(200, 3, TABLE, seed=7, fastest_share=0.7)
    config = Config(nodes_per_class_region=2, regions=2, devices_per_node=4, mtbf_h=1e9)

    class Skipping(Fifo):
        def fit_key(self, job: TraceJob) -> tuple[tuple[str, ...], int, int]:
            classes, replicas, per = super().fit_key(job)
            return (classes[:1], replicas, per) if job.gpus == 2 else (classes, replicas, per)

    wrong = _Recording(jobs, "kueue", config)
    wrong.queue = Skipping(wrong)
    wrong.run()
    with monkeypatch.context() as m:
        m.setattr(fleet_index, "_view", fleet_index._View)
        slow = _BruteForce(jobs, "kueue", config)
        slow.run()
    assert wrong.log != slow.log


def test_the_oracle_tells_a_trigger_that_skips_a_request_apart() -> None:
    """A CycleTrigger that missed an added request (a requeued victim, an arrival) would skip a cycle that acts:
    the oracle's side-effect-free cycle at that event then places someone."""
    jobs = synthetic_trace(60, 1, TABLE, seed=7)
    config = Config(nodes_per_class_region=2, regions=2, devices_per_node=4, mtbf_h=1e9)

    class Deaf(_EveryCycle):
        def add(self, job: TraceJob, now: float, run_s: float) -> None:
            super().add(job, now, run_s)
            self.trigger.changed.discard(self.key(job))

    sim = _Recording(jobs, "heterojob", config)
    sim.queue = Deaf(sim)
    with pytest.raises(AssertionError):
        sim.run()


def test_fleet_indexes_of_one_view_share_their_tables_and_a_changed_node_gets_its_own() -> None:
    fleet = replay_module.fleet(Config(nodes_per_class_region=1, regions=1))
    cls = fleet.classes["nvidia-h100"]
    a, b = placement.FleetIndex(fleet), placement.FleetIndex(Fleet(fleet.nodes, fleet.classes, used={("x", "y"): 1}))
    assert a.nodes(cls) is b.nodes(cls)  # `used` is not part of the view
    name = next(n for n in fleet.nodes if "h100" in n)
    down = dict(fleet.nodes)
    down[name] = replay_module.Node(name, fleet.nodes[name].labels, fleet.nodes[name].allocatable, ready=False)
    c = placement.FleetIndex(Fleet(down, fleet.classes))
    assert c.nodes(cls) == {} and c.unfit(cls, "cn-east") == 1 and a.unfit(cls, "cn-east") == 0
    unhealthy = placement.FleetIndex(Fleet(fleet.nodes, fleet.classes, unhealthy={name: "xid 79"}))
    assert unhealthy.nodes(cls) == {} and a.nodes(cls) == {"cn-east": [name]}


# --- the planner's per-pass index of who may be disturbed (admission._Pool) ---------------------------------

class _ScanPool(admission._Pool):
    """The oracle: every question answered by rescanning every holder, nothing remembered."""

    def __init__(self, holders: Sequence[Holder]) -> None:
        super().__init__(holders)
        self.holders = list(holders)

    def may_disrupt(self, request: Request, taken: set[str]) -> bool:
        return admission._may_disrupt(request, self.holders, taken)

    def victims(self, request: Request, taken: set[str]) -> list[preemption.RunningJob]:
        return [preemption.RunningJob(h.job, h.priority, h.since, h.allocation) for h in self.holders
                if h.job not in taken and h.yielding_to is None and not h.waiting]

    def cannot_preempt(self, request: Request, ledger: Any) -> bool:
        return False

    def may_make_room(self, *args: Any) -> bool:
        return True


def _holders(spec: list[tuple[int, int, int, bool, int, bool]]) -> list[Holder]:
    out = []
    for i, (node, devices, priority, grown, yielding, waiting) in enumerate(spec):
        job = f"ns/h{i}"
        base = Request(job, [Alternative("nvidia-h100", 2)], 1, allowed_regions=("cn-east",),
                       priority=priority) if grown else None
        out.append(Holder(job, priority, since=0.0 if i % 3 else NOW - 60,
                          allocation=Allocation("nvidia.com/gpu", {"abcdef"[node]: devices}, "ns", "nvidia-h100",
                                                "cn-east"),
                          base=base, yielding_to=f"ns/j{yielding}" if yielding >= 0 else None,
                          disrupted=yielding >= 0, waiting=waiting and yielding < 0 and not grown))
    return out


def _both(queue: list[Request], holders: list[Holder], monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    fleet = Fleet({n: gpu_node(n) for n in "abcdef"}, PLACEMENT_CLASSES,
                  used=usage(h.allocation for h in holders))
    fast = admission.plan_queue(queue, holders, fleet, NOW)
    with monkeypatch.context() as m:
        m.setattr(admission, "_Pool", _ScanPool)
        m.setattr(placement.Ledger, "may_fit", lambda self, request: True)
        slow = admission.plan_queue(queue, holders, fleet, NOW)
    return fast, slow


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(held=st.lists(st.tuples(st.integers(0, 5), st.sampled_from([2, 4, 8]), st.integers(0, 3), st.booleans(),
                               st.integers(-1, 3), st.booleans()), max_size=10),
       jobs=st.lists(st.tuples(st.integers(1, 3), st.sampled_from([2, 4, 8]), st.integers(0, 3)), min_size=1,
                     max_size=10))
def test_the_planners_pool_index_plans_what_rescanning_every_holder_plans(
        held: list[tuple[int, int, int, bool, int, bool]], jobs: list[tuple[int, int, int]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    holders = _holders(held)
    # no node over its 8 devices
    per: dict[str, int] = {}
    for h in holders:
        for n, d in h.allocation.per_node.items():
            per[n] = per.get(n, 0) + d
    if any(v > 8 for v in per.values()):
        return
    queue = [Request(f"ns/j{i}", [Alternative("nvidia-h100", d)], r, priority=p, created=float(i))
             for i, (r, d, p) in enumerate(jobs)]
    fast, slow = _both(queue, holders, monkeypatch)
    assert fast.admissions == slow.admissions


@pytest.mark.parametrize("bound", [True, False])
def test_a_shape_no_preemption_can_make_room_for_is_not_searched_again_at_or_below_its_priority(
        bound: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # six nodes full of priority-1 jobs (two still young); eight identical 3 x 8-device jobs of priority 2:
    # four old victims would do, but a 3 x 8 gang needs three whole nodes of victims
    holders = [Holder(f"ns/h{i}", 1, 0.0 if i < 4 else NOW - 60,
                      Allocation("nvidia.com/gpu", {n: 8}, "ns", "nvidia-h100", "cn-east"))
               for i, n in enumerate("abcdef")]
    queue = [Request(f"ns/j{i}", [Alternative("nvidia-h100", 8)], 3, priority=2 - (i % 2), created=float(i))
             for i in range(8)]
    searched: list[str] = []
    real = preemption.plan_preemption

    def spy(request: Request, *args: Any) -> Any:
        searched.append(request.job)
        return real(request, *args)

    monkeypatch.setattr(preemption, "plan_preemption", spy)
    if not bound:  # the memo of hopeless shapes alone
        monkeypatch.setattr(admission._Pool, "may_make_room", lambda *args: True)
    fast, slow = _both(queue, holders, monkeypatch)
    assert fast.admissions == slow.admissions
    assert [fast[f"ns/j{i}"].outcome for i in range(3)] == [Outcome.PREEMPTING, Outcome.NO_ROOM, Outcome.NO_ROOM]
    assert [d.job for d in fast["ns/j0"].disruptions] == ["ns/h0", "ns/h1", "ns/h2"]
    # priority 2 jobs search for victims (priority 1 ones have none of lower priority): j0 finds three, j2
    # finds the one old victim left too few; with the index j4 and j6 are not searched again. With the
    # bound on the devices a job may free (`_Pool.may_make_room`), j2 is not searched either: one old
    # victim's node is room for one replica of three; the brute force searches every one
    if bound:
        assert searched == ["ns/j0", "ns/j0", "ns/j2", "ns/j4", "ns/j6"]
    else:
        assert searched == ["ns/j0", "ns/j2", "ns/j0", "ns/j2", "ns/j4", "ns/j6"]


def test_what_no_preemption_could_do_is_forgotten_once_room_is_given_back() -> None:
    fleet = Fleet({n: gpu_node(n) for n in "ab"}, PLACEMENT_CLASSES, used={("a", "nvidia.com/gpu"): 8})
    ledger = placement.Ledger(fleet)
    pool = admission._Pool([])
    job = Request("ns/x", [Alternative("nvidia-h100", 8)], 2, priority=2)
    pool.preempt_failed(job, ledger)
    assert pool.cannot_preempt(job, ledger)
    assert pool.cannot_preempt(dataclasses.replace(job, job="ns/y", priority=1), ledger)  # fewer victims still
    assert not pool.cannot_preempt(dataclasses.replace(job, priority=3), ledger)  # more victims: search
    assert not pool.cannot_preempt(dataclasses.replace(job, replicas=1), ledger)  # another shape: search
    ledger.take(Allocation("nvidia.com/gpu", {"a": 8}, "ns", "nvidia-h100", "cn-east"))
    assert pool.cannot_preempt(job, ledger)  # room taken: still none
    ledger.take(Allocation("nvidia.com/gpu", {"a": 8}, "ns", "nvidia-h100", "cn-east"), -1)
    assert not pool.cannot_preempt(job, ledger)  # room given back: search again


@settings(max_examples=300, deadline=None)
@given(used=st.lists(st.integers(0, 8), min_size=4, max_size=4), down=st.integers(-1, 3),
       replicas=st.integers(1, 4), per=st.sampled_from([1, 2, 4, 8]), region=st.sampled_from(["", "cn-east"]),
       npu=st.booleans())
def test_a_ledger_says_may_not_fit_only_when_placement_finds_no_room(used: list[int], down: int, replicas: int,
                                                                     per: int, region: str, npu: bool) -> None:
    nodes = {n: gpu_node(n, region="cn-east" if i < 2 else "cn-west", ready=i != down)
             for i, n in enumerate("abcd")}
    fleet = Fleet(nodes, PLACEMENT_CLASSES, used={(n, "nvidia.com/gpu"): u for n, u in zip("abcd", used)})
    alternatives = [Alternative("nvidia-h100", per)] + ([Alternative("ascend-910b", per)] if npu else [])
    request = Request("ns/x", alternatives, replicas, allowed_regions=(region,) if region else ())
    ledger = placement.Ledger(fleet)
    fits = place(request, ledger.fleet, ledger.index).chosen is not None
    assert ledger.may_fit(request) or not fits
    if not region and down < 0 and not npu:  # the whole class in one region would do: the test is exact
        west = sum(max(0, 8 - u) // per for u in used[2:])
        east = sum(max(0, 8 - u) // per for u in used[:2])
        assert fits == (max(east, west) >= replicas)


# --- what heterojob's policy carries between passes (ranking.Memo) --------------------------------------------

@settings(max_examples=80, deadline=None)
@given(held=st.lists(st.tuples(st.integers(0, 3), st.sampled_from([1, 2, 4]), st.integers(0, 1),
                               st.floats(0, 40 * 3600), st.floats(0, 5e4), st.booleans(), st.booleans()), max_size=8),
       waiting=st.lists(st.tuples(st.sampled_from([1, 2, 4]), st.integers(1, 2), st.integers(0, 1),
                                  st.floats(0, 20 * 3600), st.floats(0, 3e4), st.booleans()), min_size=1, max_size=8),
       nows=st.lists(st.floats(1e4, 2e5), min_size=2, max_size=4), completed=st.lists(st.floats(60, 1e5), max_size=30))
def test_prepare_with_a_memo_kept_across_passes_decides_what_it_decides_without(
        held: list[tuple[int, int, int, float, float, bool, bool]], waiting: list[tuple[int, int, int, float, float, bool]],
        nows: list[float], completed: list[float]) -> None:
    nodes = {n: gpu_node(n) for n in "ab"} | {n: npu_node(n) for n in "cd"}
    holders, queue, facts = _scene(held, waiting, lambda i: float(i * 700), lambda since: since)
    knowledge = policy.Knowledge(facts, completion.Residual(completed))
    memo = ranking.Memo()
    for k, now in enumerate(sorted(nows)):
        if k == 1:  # a node goes down and comes back as new objects: its class is looked up again
            nodes = dict(nodes) | {"b": dataclasses.replace(nodes["b"], ready=False)}
        if k == 2:
            nodes = dict(nodes) | {"b": gpu_node("b")}
            holders = holders[1:] + [dataclasses.replace(h) for h in holders[:1]]  # one holder is a new object
        fleet = Fleet(nodes, PLACEMENT_CLASSES, used=usage(h.allocation for h in holders))
        kept = policy.prepare(queue, holders, fleet, now, knowledge, queueing.QueueSettings(), 300.0, memo)
        fresh = policy.prepare(queue, holders, fleet, now, knowledge, queueing.QueueSettings(), 300.0)
        assert kept == fresh
        assert policy.devices_by_class(fleet, memo) == policy.devices_by_class(fleet)


def _scene(held: list[tuple[int, int, int, float, float, bool, bool]],
           waiting: list[tuple[int, int, int, float, float, bool]], held_since: Callable[[int], float],
           waited_since: Callable[[float], float]) -> tuple[list[Holder], list[Request], dict[str, Facts]]:
    """Holders on nodes a-d (two H100, two Ascend) and a waiting queue that may use either class, with their
    facts, from the property tests' drawn tuples; `held_since(i)`: holder i's start; `waited_since(x)`: a
    waiting job's starvation clock from its drawn value."""
    resource = {"a": "nvidia.com/gpu", "b": "nvidia.com/gpu", "c": "huawei.com/Ascend910", "d": "huawei.com/Ascend910"}
    cls = {"a": "nvidia-h100", "b": "nvidia-h100", "c": "ascend-910b", "d": "ascend-910b"}
    facts: dict[str, Facts] = {}
    holders = []
    for i, (node, devices, priority, attained, work, promoted, grown) in enumerate(held):
        n = "abcd"[node]
        job = f"ns/h{i}"
        base = Request(job, [Alternative(cls[n], 1)], 1, priority=priority) if grown else None
        holders.append(Holder(job, priority, since=held_since(i), allocation=Allocation(
            resource[n], {n: devices}, "ns", cls[n], "cn-east" if n in "ab" else "cn-north"), base=base))
        facts[job] = Facts(queueing.Service(attained, 0.0, promoted), {"nvidia-h100": 1.0, "ascend-910b": 0.4},
                                  work, frozenset({cls[n]}))
    queue = []
    for i, (per, replicas, priority, attained, since, measured) in enumerate(waiting):
        job = f"ns/w{i}"
        queue.append(Request(job, [Alternative("nvidia-h100", per), Alternative("ascend-910b", per)], replicas,
                             priority=priority, created=float(i)))
        facts[job] = Facts(queueing.Service(attained, waited_since(since)),
                                  {"nvidia-h100": 1.0, "ascend-910b": 0.5 if measured else 0.4}, attained / 2)
    return holders, queue, facts


@settings(max_examples=80, deadline=None)
@given(held=st.lists(st.tuples(st.integers(0, 3), st.sampled_from([1, 2, 4]), st.integers(0, 1),
                               st.floats(0, 12 * 3600), st.floats(0, 5e4), st.booleans(), st.booleans()), max_size=8),
       waiting=st.lists(st.tuples(st.sampled_from([1, 2, 4]), st.integers(1, 2), st.integers(0, 1),
                                  st.floats(0, 12 * 3600), st.floats(0, 3e4), st.booleans()), min_size=1, max_size=8),
       steps=st.lists(st.tuples(st.floats(0, 6 * 3600), st.booleans(), st.floats(60, 1e5), st.booleans()),
                      min_size=2, max_size=8),
       completed=st.lists(st.floats(60, 1e5), max_size=30))
def test_a_memo_kept_over_many_passes_ranks_and_chooses_what_fresh_passes_do(
        held: list[tuple[int, int, int, float, float, bool, bool]], waiting: list[tuple[int, int, int, float, float, bool]],
        steps: list[tuple[float, bool, float, bool]], completed: list[float]) -> None:
    """Passes minutes to hours apart (holders cross level thresholds, promotions end, waiting jobs starve),
    with the queue's displacement by level switched on and off, jobs completing (the expected remaining
    work changes) and a holder leaving: every pass with the memo equals a pass without one, and the
    planner's action test (`admission.may_act`) says False only for plans that do nothing."""
    nodes = {n: gpu_node(n) for n in "ab"} | {n: npu_node(n) for n in "cd"}
    start = 50_000.0
    holders, queue, facts = _scene(held, waiting, lambda i: start - i * 600.0, lambda since: start - since)
    knowledge = policy.Knowledge(facts, completion.Residual(completed))
    fleet = Fleet(nodes, PLACEMENT_CLASSES, used=usage(h.allocation for h in holders))
    memo = ranking.Memo()
    now = start
    for k, (later, by_level, done, leave) in enumerate(steps):
        now += later
        knowledge.displace_by_level = by_level
        knowledge.promoted_displace = k % 2 == 0  # past the knee every other pass: `also_preempts` memoised too
        if k % 2:
            knowledge.residual.add(done)
        if leave and holders:  # a holder ends: the fleet and the holders change
            holders = holders[1:]
            fleet = Fleet(nodes, PLACEMENT_CLASSES, used=usage(h.allocation for h in holders))
        kept = policy.prepare(queue, holders, fleet, now, knowledge, queueing.QueueSettings(), 300.0, memo)
        fresh = policy.prepare(queue, holders, fleet, now, knowledge, queueing.QueueSettings(), 300.0)
        assert kept == fresh
        assert policy.ranked_holders(holders, now, knowledge, queueing.QueueSettings(), memo) == fresh.holders
        assert policy.devices_by_class(fleet, memo) == policy.devices_by_class(fleet)
        plan = admission.plan_queue(fresh.queue, fresh.holders, fleet, now, admission.AdmissionSettings())
        acts = any(a.outcome == Outcome.PLACED or a.disruptions for a in plan.admissions.values())
        if not admission.may_act(fresh.queue, fresh.holders, fleet, now, admission.AdmissionSettings()):
            assert not acts


def test_a_span_is_kept_only_as_far_as_the_rank_is_checked_to_hold() -> None:
    """`ranking.steady` takes the caller's guess of the next change only after checking the rank there: a
    guess past the real change (here at t=100, guessed at 1000) leaves a span of one instant."""
    memo = ranking.Memo()
    key = object()
    step = lambda t: 2 if t < 100 else 1  # noqa: E731 - monotone, falls at 100
    first = ranking.steady(memo.held, memo._seen_held, key, (key,), 0.0, step, lambda t: 1000.0)
    assert (first.rank, first.lo, first.hi) == (2, 0.0, 0.0)
    assert ranking.steady(memo.held, memo._seen_held, key, (key,), 150.0, step, lambda t: 1000.0).rank == 1
    right = ranking.steady(memo.held, memo._seen_held, key, (key,), 10.0, step, lambda t: 100.0)
    assert right.rank == 2 and 99.0 < right.hi < 100.0
    assert ranking.steady(memo.held, memo._seen_held, key, (key,), 50.0, step, lambda t: 100.0) is right


@settings(max_examples=300, deadline=None)
@given(running=st.lists(st.tuples(st.integers(0, 6), st.sampled_from([0.0, 60.0, 3600.0, 7200.0]) | st.floats(0, 1e5)),
                        max_size=12),
       need=st.integers(0, 20), free=st.integers(0, 8), capacity=st.integers(0, 24), ahead=st.floats(0, 1e6))
def test_ends_wait_by_bisection_is_the_sort_and_scan(running: list[tuple[int, float]], need: int, free: int,
                                                     capacity: int, ahead: float) -> None:
    busy = [completion.Busy(n, e) for n, e in running]
    expected = completion.expected_wait(need, free, capacity, busy, ahead)
    assert completion.Ends(busy).wait(need, free, capacity, ahead) == expected
    ordered = sorted(busy, key=lambda b: b.ends_in_s)
    assert completion.Ends.ordered([b.ends_in_s for b in ordered], [b.devices for b in ordered]).wait(
        need, free, capacity, ahead) == expected


@settings(max_examples=200, deadline=None)
@given(work=st.lists(st.floats(1, 1e5), max_size=40), done=st.lists(st.floats(0, 2e5), max_size=10))
def test_remaining_each_is_remaining_of_each(work: list[float], done: list[float]) -> None:
    residual = completion.Residual(work)
    assert residual.remaining_each(done) == [residual.remaining(d) for d in done]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(held=st.lists(st.tuples(st.integers(0, 5), st.sampled_from([2, 4, 8]), st.integers(0, 3), st.booleans(),
                               st.integers(-1, 3), st.booleans()), max_size=10),
       jobs=st.lists(st.tuples(st.integers(1, 3), st.sampled_from([2, 4, 8]), st.integers(0, 3)), min_size=1,
                     max_size=10))
def test_may_act_says_no_only_for_plans_that_place_preempt_and_reclaim_nothing(
        held: list[tuple[int, int, int, bool, int, bool]], jobs: list[tuple[int, int, int]]) -> None:
    holders = _holders(held)
    per: dict[str, int] = {}
    for h in holders:
        for n, d in h.allocation.per_node.items():
            per[n] = per.get(n, 0) + d
    if any(v > 8 for v in per.values()):
        return
    fleet = Fleet({n: gpu_node(n) for n in "abcdef"}, PLACEMENT_CLASSES, used=usage(h.allocation for h in holders))
    queue = [Request(f"ns/j{i}", [Alternative("nvidia-h100", d)], r, priority=p, created=float(i))
             for i, (r, d, p) in enumerate(jobs)]
    plan = admission.plan_queue(queue, holders, fleet, NOW)
    if not admission.may_act(queue, holders, fleet, NOW):
        assert all(a.outcome == Outcome.NO_ROOM and not a.disruptions for a in plan.admissions.values())


def test_may_act_tells_a_queue_that_can_preempt_from_one_that_cannot() -> None:
    """Six nodes full of old priority-1 jobs: a 3 x 8-device job of priority 2 may preempt three of them,
    one of priority 1 (or a 7 x 8 gang, more than the fleet) cannot."""
    holders = [Holder(f"ns/h{i}", 1, 0.0, Allocation("nvidia.com/gpu", {n: 8}, "ns", "nvidia-h100", "cn-east"))
               for n, i in zip("abcdef", range(6), strict=True)]
    fleet = Fleet({n: gpu_node(n) for n in "abcdef"}, PLACEMENT_CLASSES, used=usage(h.allocation for h in holders))

    def job(priority: int, replicas: int) -> Request:
        return Request("ns/x", [Alternative("nvidia-h100", 8)], replicas, priority=priority)

    assert admission.may_act([job(2, 3)], holders, fleet, NOW)
    assert not admission.may_act([job(1, 3)], holders, fleet, NOW)
    assert not admission.may_act([job(2, 7)], holders, fleet, NOW)


@settings(max_examples=300, deadline=None)
@given(left=st.floats(0, 1e6), rel=st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from([0.0, 0.3, 0.8, 1.0])),
       waits=st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from([0.0, 60.0]) | st.floats(0, 1e6)),
       kept=st.sampled_from([None, "a", "b", "c"]))
def test_choose_with_its_shortcut_is_choose_in_full(left: float, rel: dict[str, float], waits: dict[str, float],
                                                    kept: str | None) -> None:
    assert completion.choose(left, rel, waits, kept) == _choose_in_full(left, rel, waits, kept)

