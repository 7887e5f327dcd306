"""What the replay and the operator's scheduler share of `engine.queue.cycle` beyond `plan_cycle`: the rooms memory
kept across cycles, the empty queue, a waiting job's timer, and the upgrade step that follows a cycle (which
running jobs look, and each one's own check). Each shortcut equals the full computation."""

from __future__ import annotations

from dataclasses import replace

from heterojob.engine.queue import completion, policy
from heterojob.engine.disruption.holders import Holder
from heterojob.engine.queue.admission import Outcome
from heterojob.engine.queue.cycle import Cycle, plan_cycle, timer, upgrade_candidates, upgrade_of
from heterojob.engine.capacity.fleet import Fleet, usage
from heterojob.engine.basics.queueing import QueuePolicy, QueueSettings, Service
from heterojob.engine.queue.ranking import Memo
from heterojob.engine.capacity.rooms import Memory
from heterojob.replay.config import Config
from heterojob.replay.replay import _Replay
from heterojob.replay.scheduler import ReplayScheduler
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_cycle import NOW, _knowledge, _scene
from tests.unit.test_replay import job
from heterojob.engine.queue.facts import Facts

COST = completion.MoveCost()


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000))
def test_a_rooms_memory_kept_across_cycles_plans_what_fresh_cycles_plan(seed: int) -> None:
    """Cycles in a row, each applying the last one's placements and a holder leaving (room changes in some
    regions, not others): with one `rooms.Memory` and one `ranking.Memo` kept, each cycle equals a fresh one."""
    queue, holders, fleet = _scene(seed)
    known, qs = _knowledge(queue), QueueSettings()
    memo, memory = Memo(), Memory()
    for step in range(6):
        kept = plan_cycle(queue, holders, fleet, NOW + step, policy=(known, qs), memo=memo, memory=memory)
        fresh = plan_cycle(queue, holders, fleet, NOW + step, policy=(known, qs))
        assert kept.admissions == fresh.admissions
        assert (kept.waiting_for, kept.free) == (fresh.waiting_for, fresh.free)
        placed = [a for a in kept.admissions.values() if a.outcome == Outcome.PLACED and a.candidate]
        priority = {r.job: r.priority for r in queue}
        holders = holders[1:] + [Holder(a.job, priority[a.job], NOW, a.candidate.allocation("ns"))
                                 for a in placed if a.candidate]
        fleet = Fleet(fleet.nodes, fleet.classes, used=usage(h.allocation for h in holders))
        queue = [r for r in queue if r.job not in {a.job for a in placed}]


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000))
def test_an_empty_queue_is_not_planned_and_its_cycle_is_the_planned_one(seed: int) -> None:
    _, holders, fleet = _scene(seed)
    known, qs = _knowledge([]), QueueSettings()
    quick = plan_cycle([], holders, fleet, NOW, policy=(known, qs))
    prepared = policy.prepare([], holders, fleet, NOW, known, qs, 300.0)
    assert quick == Cycle(quick.plan, prepared.waiting_for, policy.devices_by_class(fleet)[0])
    assert not quick.admissions and not quick.acted


def test_a_waiting_job_is_timed_for_its_promotion_by_its_own_bound() -> None:
    mlfq = QueueSettings(starvation_s=3600.0, promote_ratio=2.0)
    assert timer(100.0, 0.0, mlfq) == 3600.0
    # it ran 3 h since its last promotion: it waits twice that (`QueueSettings.bound_s`), not the fixed bound
    assert timer(100.0, 0.0, mlfq, run_s=3 * 3600.0) == 6 * 3600.0
    assert timer(3600.0, 0.0, mlfq) is None  # promoted already: nothing ahead
    assert timer(100.0, 0.0, mlfq, back=600.0) == 600.0  # a move's requeue bound comes first
    fifo = QueueSettings(policy=QueuePolicy.FIFO)
    assert timer(100.0, 0.0, fifo) is None and timer(100.0, 0.0, None, back=50.0) is None
    assert timer(100.0, 0.0, fifo, back=600.0) == 600.0


def _running(seed: int) -> tuple[list[Holder], Fleet, policy.Knowledge]:
    """The scene's running jobs, settled, with speeds that make moves to the faster class pay."""
    _, holders, fleet = _scene(seed, waiting=0)
    holders = [replace(h, since=NOW - 10_000.0) for h in holders]
    facts = {h.job: Facts(Service(5e4, 0.0), {"h100": 1.0, "910b": 0.5}, 4e4,
                                 frozenset({h.allocation.device_class})) for h in holders}
    known = policy.Knowledge(facts, completion.Residual([1e5, 2e5, 4e5]))
    return holders, fleet, known


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([(), ("h100",), ("910b",)]), st.sampled_from([0.0, 0.05]))
def test_a_jobs_own_upgrade_check_is_what_upgrades_proposes_for_it(seed: int, waiting_for: tuple[str, ...],
                                                                   probe: float) -> None:
    """`upgrade_of`'s test of free room before asking `upgrades` leaves out only jobs `upgrades` moves nowhere."""
    holders, fleet, known = _running(seed)
    for h in holders:
        classes = ["h100", "910b"]
        mine = upgrade_of([h], classes, fleet, NOW, known, waiting_for, COST, 300.0, probe)
        full = policy.upgrades([h], fleet, NOW, known, waiting_for, COST, 300.0, {h.job: classes}, probe)
        assert mine == (full[0] if full else None)
        assert upgrade_of([h], classes, fleet, NOW, known, waiting_for, COST, 300.0, probe, Memo()) == mine


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000))
def test_running_jobs_look_for_upgrades_only_when_free_room_grew(seed: int) -> None:
    holders, fleet, known = _running(seed)
    cycle = plan_cycle([], holders, fleet, NOW, policy=(known, QueueSettings()))
    expected = [u.job for u in policy.upgrades(holders, fleet, NOW, known, (), COST, 300.0, None, 0.05)]
    assert upgrade_candidates(cycle, {}, holders, fleet, NOW, known, COST, 300.0, 0.05) == expected
    assert upgrade_candidates(cycle, {}, holders, fleet, NOW, known, COST, 300.0, 0.05, Memo()) == expected
    assert upgrade_candidates(cycle, dict(cycle.free), holders, fleet, NOW, known, COST, 300.0, 0.05) == []


def test_the_replay_plans_the_events_of_one_instant_in_one_cycle() -> None:
    """Two alike jobs arriving at the same instant are one batch, as the operator's scheduler coalesces
    events: one cycle places both and one more finds nothing left to do; they finish at one instant too, and
    one cycle (an empty queue: only the free room) follows. A cycle per event would take six. (Informed: their
    speeds known at once, no step-window event between.)"""
    def cycles(batched: bool) -> int:
        sim = _Replay([job(1, gpus=1, hours=1), job(2, gpus=1, hours=1)],
                      "heterojob", Config(nodes_per_class_region=1, regions=1, mtbf_h=1e9, elastic=False,
                                          knowledge="informed"))
        sim.batched = batched
        report = sim.run()
        assert isinstance(sim.queue, ReplayScheduler)
        assert report.jobs == 2 and max(report.jcts_h) < 1.1  # both started at once
        return sim.queue.cycles

    assert cycles(True) == 3
    assert cycles(False) == 6
