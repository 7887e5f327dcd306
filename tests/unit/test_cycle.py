"""One scheduling cycle for the whole queue (`engine.queue.cycle`): the same plans the per-job planner made, each
shortcut checked against the full computation, and what of a waiting job's plan its status must say."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from heterojob.engine.queue import admission as planner
from heterojob.engine.queue import relocation
from heterojob.engine.capacity import transfer
from heterojob.engine.disruption.holders import Holder
from heterojob.engine.queue.admission import STOP_EVERY, AdmissionSettings, Outcome, Stopped
from heterojob.engine.queue.cycle import CycleTrigger, plan_cycle, verdict
from heterojob.engine.capacity.fleet import Allocation, DeviceClass, Fleet, Node, RegionInfo, usage
from heterojob.engine.placing.placement import Alternative, Request
from heterojob.engine.queue.facts import Facts
from heterojob.engine.queue.policy import Knowledge
from heterojob.engine.basics.queueing import QueueSettings, Service
from heterojob.engine.queue.ranking import Memo
from heterojob.engine.capacity.rooms import Memory

NOW = 100_000.0
CLASSES = {"h100": DeviceClass("h100", "nvidia.com/gpu", {"acc": "h100"}, 1.0),
           "910b": DeviceClass("910b", "huawei.com/Ascend910", {"acc": "910b"}, 0.5)}
REGIONS = ("east", "west", "north")


def _fleet(rng: random.Random, nodes: int, holders: list[Holder]) -> Fleet:
    out = {}
    for i in range(nodes):
        cls = CLASSES["h100" if i % 2 == 0 else "910b"]
        region = REGIONS[i % 3]
        out[f"n{i}"] = Node(f"n{i}", {"topology.kubernetes.io/region": region, **cls.node_selector},
                            {cls.resource_name: 8}, ready=rng.random() > 0.05)
    return Fleet(out, CLASSES, used=usage(h.allocation for h in holders))


def _scene(seed: int, nodes: int = 24, waiting: int = 30, running: int = 12
           ) -> tuple[list[Request], list[Holder], Fleet]:
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(nodes)]
    holders: list[Holder] = []
    taken: set[str] = set()
    for j in range(running):
        node = rng.choice([n for n in names if n not in taken])
        taken.add(node)
        i = int(node[1:])
        cls = CLASSES["h100" if i % 2 == 0 else "910b"]
        holders.append(Holder(f"ns/run{j}", rng.randrange(4), NOW - rng.choice([10.0, 10_000.0]),
                              Allocation(cls.resource_name, {node: rng.choice([4, 8])}, "ns", cls.name,
                                         REGIONS[i % 3])))
    queue = []
    for k in range(waiting):
        per = rng.choice([1, 2, 4, 8])
        alts = [Alternative(rng.choice(list(CLASSES)), per)]
        if rng.random() < 0.4:
            alts.append(Alternative("910b" if alts[0].device_class == "h100" else "h100", per))
        queue.append(Request(f"ns/w{k}", alts, rng.choice([1, 1, 2, 3]), priority=rng.randrange(4),
                             created=float(rng.randrange(1000)),
                             allowed_regions=tuple(rng.sample(REGIONS, 2)) if rng.random() < 0.2 else ()))
    return queue, holders, _fleet(rng, nodes, holders)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000))
def test_a_cycle_without_a_policy_is_the_whole_queue_planned_once(seed: int) -> None:
    queue, holders, fleet = _scene(seed)
    cycle = plan_cycle(queue, holders, fleet, NOW)
    full = planner.plan_queue(queue, holders, fleet, NOW)
    assert cycle.admissions == full.admissions


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000))
def test_the_first_job_in_queue_order_gets_what_the_per_job_planner_gave_it(seed: int) -> None:
    """The per-job planner (`plan_one`) planned the jobs ahead of a job first: for the first job of the queue
    the cycle and the per-job plan agree, outcome, candidate, victims and message alike."""
    queue, holders, fleet = _scene(seed)
    first = min(queue, key=lambda r: r.order)
    one = planner.plan_one(first, queue, holders, fleet, NOW)
    assert plan_cycle(queue, holders, fleet, NOW).admissions[first.job] == one


def _knowledge(queue: list[Request]) -> Knowledge:
    facts = {r.job: Facts(Service(0.0, r.created), {"h100": 1.0, "910b": 0.5}) for r in queue}
    return Knowledge(facts)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000))
def test_a_cycle_with_the_policy_is_plan_with_policy_and_the_memo_changes_nothing(seed: int) -> None:
    queue, holders, fleet = _scene(seed)
    known, qs = _knowledge(queue), QueueSettings()
    plan, _ = planner.plan_with_policy(queue, holders, fleet, NOW, known, qs)
    memo = Memo()
    first = plan_cycle(queue, holders, fleet, NOW, policy=(known, qs), memo=memo)
    again = plan_cycle(queue, holders, fleet, NOW, policy=(known, qs), memo=memo)  # kept across cycles
    for job, admission in plan.admissions.items():
        mine = first.admissions[job]
        assert (mine.outcome, mine.candidate, mine.disruptions) == (admission.outcome, admission.candidate,
                                                                    admission.disruptions)
        assert mine.message.startswith(admission.message)  # plus what the policy set aside, if anything
    assert again.admissions == first.admissions and again.waiting_for == first.waiting_for


def test_an_involuntary_move_takes_the_cheapest_region_that_fits_as_plan_relocation_did() -> None:
    nodes = {f"{r}-{i}": Node(f"{r}-{i}", {"topology.kubernetes.io/region": r, "acc": "h100"},
                              {"nvidia.com/gpu": 8}) for r in ("east", "west", "far") for i in range(2)}
    link = transfer.Link(bandwidth_gbps=10.0, latency_ms=5.0)
    regions = {"east": RegionInfo("east", {"topology.kubernetes.io/region": "east"}, links={"west": link}),
               "west": RegionInfo("west", {"topology.kubernetes.io/region": "west"}, links={"east": link}),
               "far": RegionInfo("far", {"topology.kubernetes.io/region": "far"})}
    busy = Holder("ns/busy", 3, 0.0, Allocation("nvidia.com/gpu", {"east-0": 8, "east-1": 8}, "ns", "h100", "east"))
    fleet = Fleet(nodes, CLASSES, regions, used=usage([busy.allocation]))
    mover = Request("ns/mover", [Alternative("h100", 8)], 2, priority=1)
    other = Request("ns/other", [Alternative("h100", 8)], 2, priority=0, created=5.0)
    move = transfer.Move(origin="east", size=transfer.Size(500 * 2**30, transfer.SizeSource.REPORTED), save_s=60.0,
                         voluntary=False)
    old = relocation.plan_relocation(mover, [mover, other], [busy], fleet, NOW, AdmissionSettings(), move)
    cycle = plan_cycle([other, mover], [busy], fleet, NOW, moves={mover.job: move})
    assert old.outcome == Outcome.PLACED and old.candidate is not None and old.candidate.region == "west"
    assert cycle.admissions[mover.job] == old
    assert cycle.admissions[other.job].outcome == Outcome.PLACED  # the rest of the queue in the same plan
    assert cycle.admissions[other.job].candidate.region == "far"  # type: ignore[union-attr]


def test_a_verdict_ignores_live_figures_and_names_ahead_but_not_what_decides() -> None:
    a = verdict("NoRoom", "east/h100: room for 1 of 2 replicas (8 free on 1 node(s), 8 per replica)")
    assert a == verdict("NoRoom", "east/h100: room for 1 of 2 replicas (12 free on 3 node(s), 8 per replica)")
    assert a != verdict("NoRoom", "east/h100: room for 0 of 2 replicas (4 free on 1 node(s), 8 per replica)")
    assert a != verdict("Queued", "east/h100: room for 1 of 2 replicas (8 free on 1 node(s), 8 per replica)")
    assert a != verdict("NoRoom", "east/h100: quota 16/16 used (team: h100 in any region; needs 8)")
    queued = "queued behind 3 higher-priority or older job(s) that fit first: ns/a, ns/b, ns/c"
    assert verdict("Queued", queued) == verdict("Queued", queued.replace("3", "2").replace(", ns/c", ""))
    assert verdict("Queued", queued) != verdict("Queued", queued + "; set aside: 910b: declined")


def test_a_trigger_is_due_only_after_something_happened_or_a_timer_came() -> None:
    t = CycleTrigger()
    assert not t.due(NOW)
    t.request("ns/a")
    assert t.due(NOW)
    t.planned(NOW)
    assert not t.due(NOW)
    t.room()
    assert t.due(NOW)
    t.planned(NOW)
    t.at("ns/a", NOW + 60)
    assert not t.due(NOW) and t.next_timer() == NOW + 60 and t.due(NOW + 60)
    t.planned(NOW + 60)
    assert t.next_timer() is None and not t.due(NOW + 120)
    t.at("ns/b", NOW + 5)
    t.at("ns/b", None)
    assert t.next_timer() is None


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000))
def test_skipping_a_cycle_with_nothing_new_loses_nothing(seed: int) -> None:
    """The shortcut the scheduler takes. A cycle that placed or disturbed someone changed the snapshot (the
    policy's class choices read free room), so the scheduler plans once more; once a cycle acts on nothing,
    with no request added, edited or removed, no room given back and no timer due, the next cycle would plan
    exactly what it planned, so it is skipped."""
    queue, holders, fleet = _scene(seed)
    known, qs = _knowledge(queue), QueueSettings()
    memo = Memo()
    for _ in range(10):
        cycle = plan_cycle(queue, holders, fleet, NOW, policy=(known, qs), memo=memo)
        assert cycle.admissions == plan_cycle(queue, holders, fleet, NOW, policy=(known, qs)).admissions
        placed = [a for a in cycle.admissions.values() if a.outcome == Outcome.PLACED and a.candidate]
        yielding = {d.job: d.by for a in cycle.admissions.values() for d in a.disruptions}
        if not placed and not yielding:
            break
        # what the scheduler records in the cache before the next cycle: placements held, victims yielding
        priority = {r.job: r.priority for r in queue}
        holders = [Holder(h.job, h.priority, h.since, h.allocation, h.base, yielding.get(h.job, h.yielding_to))
                   for h in holders] + [Holder(a.job, priority[a.job], NOW, a.candidate.allocation("ns"))
                                        for a in placed if a.candidate]
        fleet = Fleet(fleet.nodes, fleet.classes, used=usage(h.allocation for h in holders))
        queue = [r for r in queue if r.job not in {a.job for a in placed}]
    else:
        raise AssertionError("ten cycles in a row placed or disturbed someone")
    assert plan_cycle(queue, holders, fleet, NOW, policy=(known, qs), memo=memo).admissions == cycle.admissions


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000))
def test_cycles_that_keep_their_memo_and_memory_through_acting_and_stopped_plans_equal_fresh_full_plans(
        seed: int) -> None:
    """The scheduler's sequence: an acting cycle (only the jobs that act), a full cycle that an event stops
    half way, and full cycles, all on one `Memo` and one `rooms.Memory`, with the fleet changing in between
    (placed jobs run, victims yield, running jobs finish, a node goes NotReady, a new job arrives): every
    full cycle equals a fresh plan without them, and every acting cycle equals that plan's jobs that act."""
    rng = random.Random(seed)
    queue, holders, fleet = _scene(seed)
    known, qs = _knowledge(queue), QueueSettings()
    memo, memory = Memo(), Memory()
    for step in range(8):
        fresh = plan_cycle(queue, holders, fleet, NOW, policy=(known, qs))
        acting = plan_cycle(queue, holders, fleet, NOW, policy=(known, qs), memo=memo, memory=memory, acting=True)
        acts = {j: a for j, a in fresh.admissions.items() if a.outcome not in (Outcome.QUEUED, Outcome.NO_ROOM)}
        assert acting.admissions == acts, step
        asked = iter(range(rng.randrange(0, 2)))  # a full plan stopped at its first or second question: no plan
        if queue:  # (a cycle that may act on nothing plans when read: its reader, in the scheduler's thread)
            with pytest.raises(Stopped):
                plan_cycle(queue, holders, fleet, NOW, policy=(known, qs), memo=memo, memory=memory,
                           stop=lambda: next(asked, None) is None).admissions
        full = plan_cycle(queue, holders, fleet, NOW, policy=(known, qs), memo=memo, memory=memory)
        assert full.admissions == fresh.admissions and full.waiting_for == fresh.waiting_for, step
        # the scheduler records the plan; then the fleet moves on
        placed = [a for a in full.admissions.values() if a.outcome == Outcome.PLACED and a.candidate]
        yielding = {d.job: d.by for a in full.admissions.values() for d in a.disruptions}
        priority = {r.job: r.priority for r in queue}
        holders = [Holder(h.job, h.priority, h.since, h.allocation, h.base, yielding.get(h.job, h.yielding_to))
                   for h in holders] + [Holder(a.job, priority[a.job], NOW, a.candidate.allocation("ns"))
                                        for a in placed if a.candidate]
        queue = [r for r in queue if r.job not in {a.job for a in placed}]
        roll = rng.random()
        if roll < 0.4 and holders:  # running jobs finish
            for _ in range(rng.randint(1, 3)):
                if holders:
                    holders.pop(rng.randrange(len(holders)))
        elif roll < 0.6:  # a node goes NotReady (a new fleet view)
            name = rng.choice(sorted(fleet.nodes))
            fleet = Fleet({**fleet.nodes, name: replace(fleet.nodes[name], ready=False)}, fleet.classes)
        elif roll < 0.8:  # a new job
            new = Request(f"ns/new{step}", [Alternative(rng.choice(list(CLASSES)), rng.choice([1, 2, 4, 8]))],
                          rng.choice([1, 2]), priority=rng.randrange(4), created=NOW - step)
            queue.append(new)
            known = Knowledge({**known.facts, new.job: Facts(Service(0.0, new.created), {"h100": 1.0, "910b": 0.5})})
        fleet = Fleet(fleet.nodes, fleet.classes, used=usage(h.allocation for h in holders))


def test_a_stop_asked_every_so_many_jobs_ends_the_plan() -> None:
    queue, holders, fleet = _scene(7, waiting=STOP_EVERY * 3)
    asked: list[int] = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) == 3

    with pytest.raises(Stopped):
        planner.plan_queue(queue, holders, fleet, NOW, stop=stop)
    assert len(asked) == 3
    assert planner.plan_queue(queue, holders, fleet, NOW, stop=lambda: False) == planner.plan_queue(
        queue, holders, fleet, NOW)


def test_a_holder_at_another_priority_is_the_dataclass_replaced_one() -> None:
    """`ranking.at_priority` builds the copy directly: equal to `dataclasses.replace`, field by field, for
    every kind of holder (which has no `__post_init__` and caches nothing beside its fields)."""
    from dataclasses import fields as fields_of

    from heterojob.engine.queue.ranking import at_priority

    queue, holders, _ = _scene(3)
    base = Request("ns/g", [Alternative("h100", 1)], 1, priority=0)
    kinds = [*holders, replace(holders[0], base=base, yielding_to="ns/w1", disrupted=True),
             replace(holders[1], reserved=holders[2].allocation, waiting=True)]
    assert not hasattr(Holder, "__post_init__")
    for h in kinds:
        h.footprint  # noqa: B018 - read, as a plan reads it, before the copy
        assert set(vars(h)) == {f.name for f in fields_of(Holder)}
        for rank in (h.priority, h.priority + 7, -3):
            copy = at_priority(h, rank)
            assert copy == replace(h, priority=rank) and type(copy) is Holder
