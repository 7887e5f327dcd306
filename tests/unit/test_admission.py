"""The planner (`engine.queue.admission`) on plain data: placement, queueing, preemption, reclaim and growth,
the same calls the operator, the replay and the console make, without KopfRunner."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from heterojob.engine.queue import admission as planner
from heterojob.engine.queue import relocation
from heterojob.engine.disruption.holders import Holder
from heterojob.engine.queue.admission import AdmissionSettings, DisruptionKind, Outcome
from heterojob.engine.capacity.fleet import Allocation, Fleet, usage
from heterojob.engine.placing.placement import Alternative, Request
from tests.unit.test_placement import CLASSES, gpu_node

NOW = 10_000.0


def req(job: str, replicas: int = 1, priority: int = 1, created: float = 0.0) -> Request:
    return Request(f"ns/{job}", [Alternative("nvidia-h100", 8)], replicas, priority=priority, created=created)


def holder(job: str, nodes: dict[str, int], priority: int = 1, since: float = 0.0, base: int | None = None,
           **kw: object) -> Holder:
    b = Request(f"ns/{job}", [Alternative("nvidia-h100", 8)], base, allowed_regions=("cn-east",),
                priority=priority) if base is not None else None
    return Holder(f"ns/{job}", priority, since, Allocation("nvidia.com/gpu", nodes, "ns", "nvidia-h100", "cn-east"),
                  b, **kw)  # type: ignore[arg-type]


def fleet_with(nodes: str, holders: list[Holder]) -> Fleet:
    return Fleet({n: gpu_node(n) for n in nodes}, CLASSES, used=usage(h.allocation for h in holders))


def test_the_queue_is_placed_in_priority_then_age_order_and_the_rest_queue_behind() -> None:
    f = fleet_with("a", [])
    plan = planner.plan_queue([req("young", created=5.0), req("old", created=1.0), req("low", priority=0)], [], f,
                              NOW)
    assert plan["ns/old"].outcome == Outcome.PLACED and plan["ns/old"].candidate.nodes == ("a",)
    assert plan["ns/young"].outcome == Outcome.QUEUED and plan["ns/young"].wake == ("ns/old",)
    assert "queued behind 1 higher-priority or older job(s) that fit first: ns/old" in plan["ns/young"].message
    assert plan["ns/low"].outcome == Outcome.QUEUED


def test_a_preemption_plan_names_its_victims_and_reserves_the_room() -> None:
    running = [holder("low", {"a": 8}, priority=0), holder("medium", {"b": 8}, priority=1)]
    f = fleet_with("ab", running)
    plan = planner.plan_queue([req("urgent", priority=3), req("high", priority=2)], running, f, NOW)
    urgent, high = plan["ns/urgent"], plan["ns/high"]
    assert urgent.outcome == Outcome.PREEMPTING and [d.job for d in urgent.disruptions] == ["ns/low"]
    assert urgent.disruptions[0].kind == DisruptionKind.PREEMPT and urgent.disruptions[0].by == "ns/urgent"
    # the next job does not count on the room the first one takes: it picks another victim
    assert high.outcome == Outcome.PREEMPTING and [d.job for d in high.disruptions] == ["ns/medium"]
    assert "preempted by ns/urgent (urgent)" == urgent.disruptions[0].explain("urgent")


def test_no_victim_is_young_equal_or_already_yielding() -> None:
    running = [holder("young", {"a": 8}, priority=0, since=NOW - 10), holder("peer", {"b": 8}, priority=2)]
    f = fleet_with("ab", running)
    plan = planner.plan_queue([req("high", priority=2)], running, f, NOW, AdmissionSettings(min_runtime_s=60))
    assert plan["ns/high"].outcome == Outcome.NO_ROOM and not plan.disruptions
    assert "room for 0 of 1 replicas" in plan["ns/high"].message


def test_a_job_whose_victims_are_still_checkpointing_waits_without_asking_again() -> None:
    running = [holder("low", {"a": 8}, priority=0, yielding_to="ns/urgent", disrupted=True)]
    plan = planner.plan_queue([req("urgent", priority=3)], running, fleet_with("a", running), NOW)
    assert plan["ns/urgent"].outcome == Outcome.PREEMPTING and plan["ns/urgent"].disruptions == ()
    assert "waiting for 1 preempted or reclaimed job(s)" in plan["ns/urgent"].message


def test_room_a_victim_released_stays_its_preemptors_while_the_other_victim_checkpoints() -> None:
    """Victim low-1 released node b and waits again; low-0 still checkpoints on node a for `big` (2 x 8). The
    freed node is big's: low-1 must not be placed back there (big would preempt again, elsewhere)."""
    running = [holder("low-0", {"a": 8}, priority=0, yielding_to="ns/big", disrupted=True)]
    plan = planner.plan_queue([req("big", replicas=2, priority=3), req("low-1", priority=0, created=5.0)], running,
                              fleet_with("abc", running + [holder("other", {"c": 8})]), NOW)
    assert plan["ns/big"].outcome == Outcome.PREEMPTING and plan["ns/big"].disruptions == ()
    assert sorted(plan["ns/big"].candidate.nodes) == ["a", "b"]
    assert plan["ns/low-1"].outcome != Outcome.PLACED


def test_lent_room_is_reclaimed_before_anything_is_preempted() -> None:
    running = [holder("grown", {"a": 8, "b": 8}, priority=1, base=1), holder("low", {"c": 8}, priority=0)]
    plan = planner.plan_queue([req("peer", priority=1)], running, fleet_with("abc", running), NOW)
    peer = plan["ns/peer"]
    assert peer.outcome == Outcome.RECLAIMING
    assert [(d.job, d.kind, d.replicas) for d in peer.disruptions] == [("ns/grown", DisruptionKind.RECLAIM, 1)]
    assert peer.disruptions[0].explain("medium").startswith("reclaim: ns/peer (medium) needs the room lent")


def test_a_job_moving_right_now_lends_nothing_but_can_still_be_preempted() -> None:
    running = [holder("grown", {"a": 8, "b": 8}, priority=0, base=1, disrupted=True)]
    plan = planner.plan_queue([req("high", priority=2)], running, fleet_with("ab", running), NOW)
    assert plan["ns/high"].outcome == Outcome.PREEMPTING


def test_plan_one_respects_the_queue_for_room_and_for_victims() -> None:
    running = [holder("low", {"a": 8}, priority=0)]
    queue = [req("first", priority=3, created=1.0), req("second", priority=3, created=2.0)]
    # with one free node, the older job takes it and the younger one waits for it rather than preempting
    second = planner.plan_one(queue[1], queue, running, fleet_with("ab", running), NOW)
    assert second.outcome == Outcome.QUEUED and second.wake == ("ns/first",) and not second.disruptions
    # with none, the older job claims the only victim first: the younger one gets no room
    second = planner.plan_one(queue[1], queue, running, fleet_with("a", running), NOW)
    assert second.outcome == Outcome.NO_ROOM and not second.disruptions
    first = planner.plan_one(queue[0], queue, running, fleet_with("a", running), NOW)
    assert first.outcome == Outcome.PREEMPTING and [d.job for d in first.disruptions] == ["ns/low"]


def test_growth_only_into_room_nobody_of_its_priority_or_above_waits_for() -> None:
    running = [holder("elastic", {"a": 8}, priority=1)]
    f = fleet_with("abc", [])  # the job's own devices are not counted: the fleet without it
    me = req("elastic", priority=1)
    assert planner.growth(me, None, f, current=1, maximum=4, device_class="nvidia-h100", region="cn-east") == 3
    assert planner.growth(me, 1, f, 1, 4, "nvidia-h100", "cn-east") is None  # a peer waits
    assert planner.growth(me, 0, f, 1, 2, "nvidia-h100", "cn-east") == 2  # only lower priority waits
    assert planner.growth(me, None, f, 4, 4, "nvidia-h100", "cn-east") is None
    assert planner.top_priority([req("elastic", priority=3), req("x", priority=0)], besides="ns/elastic") == 0
    assert running  # the holder shape the operator passes for the same job


@settings(max_examples=200, deadline=None)
@given(jobs=st.lists(st.tuples(st.integers(1, 3), st.integers(0, 3)), min_size=1, max_size=8),
       held=st.lists(st.tuples(st.sampled_from("abcd"), st.integers(0, 3), st.booleans()), max_size=4,
                     unique_by=lambda h: h[0]))
def test_a_plan_never_overcommits_and_never_disturbs_a_job_twice(jobs: list[tuple[int, int]],
                                                                   held: list[tuple[str, int, bool]]) -> None:
    """Placements plus planned destinations fit in what is free once the disturbed jobs have left (a
    reclaimed job keeps its admitted size), and no job is disturbed twice."""
    running = [holder(f"h{n}", {n: 8}, priority=p, base=1 if grown else None) for n, p, grown in held]
    f = fleet_with("abcd", running)
    plan = planner.plan_queue([req(f"j{i}", replicas, prio, float(i)) for i, (replicas, prio) in enumerate(jobs)],
                              running, f, NOW)
    disturbed = {d.job: d for d in plan.disruptions}
    assert len(disturbed) == len(plan.disruptions)
    taken: dict[str, int] = {}
    for a in plan.admissions.values():
        if a.outcome != Outcome.QUEUED and a.candidate is not None:
            for node, n in a.candidate.per_node.items():
                taken[node] = taken.get(node, 0) + n
    stays = {n: 8 for h in running if h.job not in disturbed for n in h.allocation.per_node}
    for node, n in taken.items():
        assert n + stays.get(node, 0) <= 8, (node, plan.admissions)
    kept = sum(8 * (d.replicas or 0) for d in disturbed.values() if d.kind == DisruptionKind.RECLAIM)
    assert sum(taken.values()) + sum(stays.values()) + kept <= 32


# --- make before break (a voluntary move reserves its destination first) -----------------------------------

def test_a_voluntary_move_into_a_full_fleet_is_held_and_disturbs_nobody() -> None:
    running = [holder("mover", {"a": 8}, priority=3), holder("low", {"b": 8}, priority=0)]
    leaving = Request("ns/mover", [Alternative("nvidia-h100", 8)], 1, priority=3, exclude_nodes=frozenset({"a"}))
    f_without_mover = fleet_with("ab", running[1:])
    move = relocation.plan_move(leaving, [], running, f_without_mover, NOW)
    assert move.outcome == Outcome.NO_ROOM and move.candidate is None and not move.disruptions
    assert move.message.startswith("no destination:")


def test_a_voluntary_move_gets_a_destination_no_job_ahead_of_it_needs() -> None:
    running = [holder("mover", {"a": 8}, priority=1)]
    leaving = Request("ns/mover", [Alternative("nvidia-h100", 8)], 1, priority=1, exclude_nodes=frozenset({"a"}))
    assert relocation.plan_move(leaving, [], running, fleet_with("abc", []), NOW).candidate.nodes in (("b",), ("c",))
    ahead = [req("older", priority=1, created=-1.0), req("urgent", priority=3), req("high", priority=2)]
    move = relocation.plan_move(leaving, ahead, running, fleet_with("abc", []), NOW)
    assert move.outcome == Outcome.NO_ROOM  # the three waiting jobs ahead of it take a, b and c
    assert not move.disruptions


def test_reserved_room_is_kept_from_others_and_used_by_its_owner() -> None:
    # "mover" is checkpointing on a with b reserved; a waiting job cannot take b
    mover = holder("mover", {"a": 8}, priority=1, disrupted=True,
                   reserved=Allocation("nvidia.com/gpu", {"b": 8}, "ns", "nvidia-h100", "cn-east"))
    f = Fleet({n: gpu_node(n) for n in "ab"}, CLASSES, used=usage(mover.footprint))
    other = planner.plan_queue([req("other", priority=1)], [mover], f, NOW)["ns/other"]
    assert other.outcome == Outcome.NO_ROOM and "room for 0 of 1" in other.message
    # after its checkpoint it waits with only the reservation, and lands there even behind a bigger job
    parked = holder("mover", {"b": 8}, priority=1, waiting=True)
    f = fleet_with("ab", [parked])
    plan = planner.plan_queue([req("mover", priority=1, created=5.0), req("urgent", priority=3)], [parked], f, NOW)
    assert plan["ns/mover"].outcome == Outcome.PLACED and plan["ns/mover"].candidate.nodes == ("b",)
    assert plan["ns/urgent"].outcome == Outcome.PLACED and plan["ns/urgent"].candidate.nodes == ("a",)
    assert "reserved for it" in plan["ns/mover"].message


def test_a_parked_job_is_neither_lender_nor_victim() -> None:
    parked = holder("parked", {"a": 8}, priority=0, base=1, waiting=True)
    plan = planner.plan_queue([req("urgent", priority=3)], [parked], fleet_with("a", [parked]), NOW)
    assert plan["ns/urgent"].outcome == Outcome.NO_ROOM and not plan.disruptions
