"""The job cache (`state.cache`) rebuilt from statuses: holdings, reservations, the queue, the budget."""

from __future__ import annotations

from typing import Any

from heterojob.api.job import HeteroJobSpec
from heterojob.api.job_status import HeteroJobStatus
from heterojob.engine.capacity.fleet import DeviceClass
from heterojob.state.cache import Cache

CLASSES = {"nvidia-h100": DeviceClass("nvidia-h100", "nvidia.com/gpu")}
SPEC = HeteroJobSpec.model_validate({
    "priority": "high", "replicas": {"min": 1, "max": 4, "initial": 1},
    "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
    "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}})


def job(name: str, **status: Any) -> tuple[str, dict[str, Any], HeteroJobStatus]:
    obj = {"metadata": {"name": name, "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
           "spec": SPEC.model_dump(by_alias=True), "status": status}
    return f"ns/{name}", obj, HeteroJobStatus.model_validate(status)


def placement(*nodes: str, generation: int = 1) -> dict[str, Any]:
    return {"region": "cn-east", "deviceClass": "nvidia-h100", "replicas": len(nodes), "perReplica": 8,
            "nodes": list(nodes), "generation": generation, "since": "2026-01-01T00:10:00Z"}


def sync(cache: Cache, name: str, **status: Any) -> str:
    key, obj, st = job(name, **status)
    cache.sync(key, obj, st, SPEC, CLASSES, now=0.0)
    return key


def test_rebuilt_from_statuses_what_each_job_holds_and_what_it_waits_for() -> None:
    cache = Cache()
    sync(cache, "running", phase="Running", placement=placement("a"))
    sync(cache, "grown", phase="Running", placement=placement("b", "c"))
    sync(cache, "waiting", phase="Pending")
    sync(cache, "done", phase="Succeeded", placement=placement("d"))
    assert set(cache.allocations()) == {"ns/running", "ns/grown"}
    assert [r.job for r in cache.waiting()] == ["ns/waiting"]
    grown = next(h for h in cache.holders() if h.job == "ns/grown")
    assert grown.base is not None and grown.base.replicas == 1  # admitted with 1, grew to 2: the rest is lent
    assert next(h for h in cache.holders() if h.job == "ns/running").base is None
    assert cache.placed()["ns/running"].nodes == ("a",)


def test_the_budget_counts_only_jobs_still_holding_devices_while_they_move() -> None:
    cache = Cache()
    sync(cache, "checkpointing", phase="Checkpointing", placement=placement("a"),
         checkpoint={"pending": {"id": "g1-1", "reason": "manual", "requestedAt": "x", "deadline": "x",
                                 "then": "migrate"}})
    for i in range(5):  # parked: gave their devices back, wait for room
        sync(cache, f"parked{i}", phase="Migrating", migration={"exclude": ["z"], "reason": "deviceFailed"})
    assert cache.disrupted() == 1


def test_a_reservation_is_held_from_the_status_and_its_owner_waits_on_it() -> None:
    cache = Cache()
    reserved = {"region": "cn-east", "deviceClass": "nvidia-h100", "perReplica": 8, "nodes": ["b"]}
    sync(cache, "mover", phase="Checkpointing", placement=placement("a"),
         migration={"exclude": ["a"], "reason": "manual", "reserved": reserved})
    (h,) = cache.holders()
    assert h.allocation.per_node == {"a": 8} and h.reserved.per_node == {"b": 8} and not h.waiting
    sync(cache, "mover", phase="Migrating", migration={"exclude": ["a"], "reason": "manual", "reserved": reserved})
    (h,) = cache.holders()
    assert h.waiting and h.allocation.per_node == {"b": 8}
    assert cache.forget("ns/mover")  # its reservation was room: others get another look


def test_yielding_and_own_decisions_are_seen_before_the_status_comes_back() -> None:
    cache = Cache()
    key = sync(cache, "victim", phase="Running", placement=placement("a"))
    cache.yield_to(key, "ns/urgent")
    assert cache.holders()[0].yielding_to == "ns/urgent"
    assert cache.release(key) and not cache.release(key)
    assert cache.holders() == []


def test_the_budget_count_follows_jobs_that_stop_moving_or_go() -> None:
    """The count reads only the jobs marked moving: one that lands, is forgotten or is marked by the
    disruption step alone is counted exactly (each step checked against a scan of every entry)."""
    cache = Cache()

    def scanned() -> int:
        return sum(1 for e in cache.entries.values() if e.disrupted and e.allocation is not None)

    moving = {"checkpoint": {"pending": {"id": "g1-1", "reason": "manual", "requestedAt": "x", "deadline": "x",
                                         "then": "migrate"}}}
    for i in range(4):
        sync(cache, f"m{i}", phase="Checkpointing", placement=placement(f"n{i}"), **moving)
    sync(cache, "steady", phase="Running", placement=placement("s"))
    assert cache.disrupted() == scanned() == 4
    sync(cache, "m0", phase="Running", placement=placement("n0"))  # landed
    cache.forget("ns/m1")
    cache.disrupt("ns/steady")  # the disruption step marks it before its status says so
    assert cache.disrupted() == scanned() == 3
    cache.disrupt("ns/steady", False)
    sync(cache, "m2", phase="Migrating", migration={"exclude": ["z"], "reason": "deviceFailed"})  # parked
    assert cache.disrupted() == scanned() == 1


def test_a_fleet_taken_now_and_built_later_counts_what_was_held_when_it_was_taken() -> None:
    """The scheduler takes the fleet with its snapshot (on the event loop) and sums it in its cycle's thread: a
    job placed or gone in between is not in it, and it equals the fleet built at once."""
    from heterojob.state.views import FleetSource

    cache = Cache()
    source = FleetSource(nodes=dict, classes=lambda: CLASSES, regions=dict, foreign_usage=lambda: {("x", "cpu"): 2})
    sync(cache, "early", phase="Running", placement=placement("a"))
    now = cache.fleet(source)
    later = cache.fleet_later(source)
    sync(cache, "late", phase="Running", placement=placement("b"))  # placed after the snapshot
    cache.forget("ns/early")  # and one gone
    built = later()
    assert built.used == now.used == {("a", "nvidia.com/gpu"): 8, ("x", "cpu"): 2}
    assert built.held == now.held


def test_a_deleted_jobs_pods_being_deleted_hold_their_devices_and_a_live_jobs_leave_theirs_to_the_planner() -> None:
    """A deleted job's pods in their grace period: kube-scheduler counts them on their nodes, so the fleet does. A
    live job's (a preemption victim's, a mover's) room was given by a cycle to someone whose pods wait for them a
    moment: counting them would make that one preempt another victim."""
    from heterojob.state.views import FleetSource

    cache = Cache()
    leaving = {"ns/gone": {1: {("a", "nvidia.com/gpu"): 8}}, "ns/moving": {1: {("c", "nvidia.com/gpu"): 8}}}
    foreign = {("x", "cpu"): 2}
    source = FleetSource(nodes=dict, classes=lambda: CLASSES, regions=dict, foreign_usage=lambda: foreign,
                         leaving=lambda: leaving)
    sync(cache, "moving", phase="Running", placement=placement("b"))
    assert cache.fleet(source).used == {("a", "nvidia.com/gpu"): 8, ("b", "nvidia.com/gpu"): 8, ("x", "cpu"): 2}
    assert cache.fleet(source, exclude=["ns/moving"]).used == {("a", "nvidia.com/gpu"): 8, ("x", "cpu"): 2}
    assert foreign == {("x", "cpu"): 2}  # the source's own mapping is left as it was


def test_a_live_jobs_left_gang_holds_its_devices_where_no_job_was_given_them() -> None:
    """A job moved off a node that failed (generation 2 now) leaves its generation-1 pods Terminating there; when the
    node is Ready again kube-scheduler counts them until they are gone, so the fleet does (a gang placed there would
    wait Pending through their grace period). What a cycle gave of that node to another job (a preemptor whose pods
    wait for them) is that job's already and is not counted twice; the pods of a job's newest gang (a preemption
    victim's, placed or waiting) are not counted (the planner gave their room away)."""
    from heterojob.engine.capacity.fleet import Node
    from heterojob.state.views import FleetSource

    cache = Cache()
    gpu = "nvidia.com/gpu"
    nodes = {n: Node(n, {}, {gpu: 8}) for n in "bdefgh"}
    leaving = {"ns/moved": {1: {("d", gpu): 8, ("e", gpu): 8}},  # its old gang, on d and e
               "ns/victim": {1: {("g", gpu): 8}},  # of its current gang (generation 1), being deleted
               "ns/requeued": {1: {("h", gpu): 4}, 2: {("f", gpu): 8}}}  # waiting now; generation 2 was its last
    source = FleetSource(nodes=lambda: nodes, classes=lambda: CLASSES, regions=dict, foreign_usage=dict,
                         leaving=lambda: leaving)
    sync(cache, "moved", phase="Running", placement=placement("b", generation=2))
    sync(cache, "preemptor", phase="Running", placement=placement("e"))
    sync(cache, "victim", phase="Running", placement=placement("g"))
    key, obj, st = job("requeued", phase="Pending", lastGeneration=2)
    cache.sync(key, obj, st, SPEC, CLASSES, now=0.0)
    used = cache.fleet(source).used
    assert used[("d", gpu)] == 8  # nobody's: its old pods hold it
    assert used[("e", gpu)] == 8  # the preemptor's, once
    assert used[("b", gpu)] == 8
    assert used[("h", gpu)] == 4  # a waiting job's older gang counts too
    assert ("f", gpu) not in used  # ... not its newest: its room is the planner's to give
    assert used[("g", gpu)] == 8  # the victim's own allocation, not its pods again
    # planning the moved job's own move: the fleet as if it held nothing, its old pods included (as before)
    assert ("d", gpu) not in cache.fleet(source, exclude=["ns/moved"]).used


def test_a_left_gang_on_a_node_shared_with_a_running_job_counts_what_the_node_has_left() -> None:
    """kube-scheduler counts both a running job's 4 devices and a moved job's 4 Terminating ones on one 8-device
    node: so does the fleet (another 4-device gang placed there would wait Pending), never beyond the node."""
    from heterojob.engine.capacity.fleet import Node
    from heterojob.state.views import FleetSource

    cache = Cache()
    gpu = "nvidia.com/gpu"
    source = FleetSource(nodes=lambda: {"d": Node("d", {}, {gpu: 8})}, classes=lambda: CLASSES, regions=dict,
                         foreign_usage=dict, leaving=lambda: {"ns/moved": {1: {("d", gpu): 4}}})
    sync(cache, "moved", phase="Running", placement=placement("b", generation=2))
    key, obj, st = job("small", phase="Running", placement={**placement("d"), "perReplica": 4})
    cache.sync(key, obj, st, SPEC, CLASSES, now=0.0)
    assert cache.fleet(source).used[("d", gpu)] == 8
    key, obj, st = job("big", phase="Running", placement={**placement("d"), "perReplica": 6})
    cache.sync(key, obj, st, SPEC, CLASSES, now=0.0)
    assert cache.fleet(source).used[("d", gpu)] == 10  # 4 + 6 planned: the left gang adds nothing past the node


def test_a_deleted_jobs_devices_stay_counted_until_its_pods_are_gone_and_nobody_may_take_them() -> None:
    from heterojob.state.views import FleetSource

    cache = Cache()
    source = FleetSource(nodes=dict, classes=lambda: CLASSES, regions=dict, foreign_usage=dict,
                         leaving=lambda: {"ns/old": {1: {("a", "nvidia.com/gpu"): 8}}})  # its pod, now Terminating
    sync(cache, "old", phase="Running", placement=placement("a"))
    sync(cache, "bare", phase="Running", placement=placement("b"))
    cache.forget("ns/old", pods_left=True)
    cache.forget("ns/bare")  # no pods left (never made, or gone): its room is free at once
    assert cache.fleet(source).used == {("a", "nvidia.com/gpu"): 8}  # counted once, not as its pod again
    assert cache.holders() == [] and "ns/old" not in cache.allocations()  # nobody's to preempt or report
    assert not cache.departed_gone(lambda key: True) and cache.departed
    assert cache.departed_gone(lambda key: False)  # its pods are gone: so is what they held
    assert cache.fleet(FleetSource(nodes=dict, classes=lambda: CLASSES, regions=dict, foreign_usage=dict)).used == {}


def test_a_first_speed_on_a_class_and_size_is_news_for_the_scheduler_a_moved_figure_is_not() -> None:
    cache = Cache()

    def speeds(*measured: tuple[str, int, float]) -> dict[str, Any]:
        return {"speeds": [{"deviceClass": c, "replicas": r, "stepsPerSecond": s} for c, r, s in measured]}

    def news(name: str, **status: Any) -> bool:
        key, obj, st = job(name, **status)
        return cache.sync(key, obj, st, SPEC, CLASSES, now=0.0)

    running = {"phase": "Running", "placement": placement("a")}
    assert not news("j", **running)
    assert news("j", **running, scheduling=speeds(("nvidia-h100", 1, 2.0)))
    assert not news("j", **running, scheduling=speeds(("nvidia-h100", 1, 2.6)))  # the figure moved: no news
    assert news("j", **running, scheduling=speeds(("nvidia-h100", 1, 2.6), ("nvidia-h100", 2, 5.0)))  # a size
    # a waiting job's speeds (read from its last run) change nothing a running job's expected end reads
    assert not news("w", phase="Pending", scheduling=speeds(("nvidia-h100", 1, 2.0)))
