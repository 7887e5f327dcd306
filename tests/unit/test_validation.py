"""What a spec asks that the fleet can never give (engine.placing.validation), the quota summary, leader moves."""

from __future__ import annotations

from heterojob.engine.capacity.fleet import DeviceClass, Limit, Node
from heterojob.engine.basics.leadership import LeaseMove, LeaseRecord, next_move
from heterojob.engine.capacity.quota_usage import summary
from heterojob.engine.placing.validation import job_problems, quota_problems

H100 = DeviceClass("nvidia-h100", "nvidia.com/gpu", {"gpu": "h100"})
CPU = DeviceClass("cpu", "cpu", {"cpu-only": "true"})
NODES = [Node("g1", {"gpu": "h100"}, {"nvidia.com/gpu": 8}), Node("c1", {"cpu-only": "true"}, {"cpu": 96})]
CLASSES = {"nvidia-h100": H100, "cpu": CPU}


def test_per_replica_beyond_any_node_or_the_cap_names_the_field_and_the_fix() -> None:
    assert job_problems([("nvidia-h100", 8), ("cpu", 96)], [], [], CLASSES, {"cn-east"}, NODES) == []
    [p] = job_problems([("nvidia-h100", 16)], [], [], CLASSES, {"cn-east"}, NODES)
    assert p.path == "spec.devices[0].perReplica" and "(8 devices)" in p.message and "use at most 8" in p.message
    [p] = job_problems([("cpu", 8), ("nvidia-h100", 65)], [], [], CLASSES, {"cn-east"}, NODES)
    assert p.path == "spec.devices[1].perReplica" and "cap of 64" in p.message
    assert job_problems([("cpu", 200)], [], [], CLASSES, set(), NODES)[0].message.startswith("200 is more")
    # no node of the class known (yet), or an unknown class: not a spec error, placement says why it waits
    assert job_problems([("nvidia-h100", 16), ("nvidia-h200", 99)], [], [], CLASSES, set(), []) == []


def test_unknown_regions_are_named() -> None:
    problems = job_problems([("nvidia-h100", 1)], ["cn-east", "mars-1"], ["mars-1"], CLASSES, {"cn-east"}, NODES)
    assert [p.path for p in problems] == ["spec.regions.allowed[1]", "spec.regions.preferred[0]"]
    assert "known regions: cn-east" in problems[0].message


def test_quota_problems_and_summary() -> None:
    problems = quota_problems([("nvidia-h100", "*"), ("h1000", "cn-east"), ("*", "mars")], {"nvidia-h100"},
                              {"cn-east"})
    assert [p.path for p in problems] == ["spec.limits[1].deviceClass", "spec.limits[2].region"]
    limits = [Limit("nvidia-h100", "*", 16), Limit("*", "cn-east", 20)]
    held = {("nvidia-h100", "cn-east"): 8, ("cpu", "cn-east"): 4, ("nvidia-h100", "eu-west"): 2}
    assert summary(limits, held) == "nvidia-h100/*: 10/16, */cn-east: 12/20"
    assert summary([], {}) == "no limits"


def test_leader_moves_judge_expiry_on_the_local_clock() -> None:
    assert next_move(None, "a", 0, 0) == LeaseMove.CREATE
    held = LeaseRecord("b", 15, "2026-01-01T00:00:00Z", "7")
    assert next_move(held, "a", unchanged_since=100, now=110) == LeaseMove.WAIT
    assert next_move(held, "a", unchanged_since=100, now=115) == LeaseMove.TAKE  # unchanged for a whole duration
    assert next_move(held, "b", unchanged_since=100, now=999) == LeaseMove.RENEW
    assert next_move(LeaseRecord(None, 1, None, "8"), "a", 0, 0) == LeaseMove.TAKE  # released


def test_capacities_are_node_capacity_kept_while_the_nodes_are_the_same_mapping() -> None:
    """A waiting job's pass checks its perReplica against the biggest node of each class: computed once per fleet
    view (a walk over every node of the fleet on every pass before), and again when the nodes change."""
    from heterojob.engine.capacity.fleet import DeviceClass, Node
    from heterojob.engine.placing.validation import Capacities, job_problems, node_capacity

    h100 = DeviceClass("nvidia-h100", "nvidia.com/gpu", {"class": "h100"})
    walks = []

    class Nodes(dict[str, Node]):
        def values(self):  # type: ignore[override]
            walks.append(1)
            return super().values()

    small = Nodes({f"n{i}": Node(f"n{i}", {"class": "h100"}, {"nvidia.com/gpu": 8}) for i in range(3)})
    assert node_capacity(h100, small.values()) == 8
    walks.clear()
    keep = Capacities()
    assert [keep(h100, small) for _ in range(5)] == [8] * 5
    assert len(walks) == 1
    big = Nodes({**small, "n9": Node("n9", {"class": "h100"}, {"nvidia.com/gpu": 16})})
    assert keep(h100, big) == 16  # another fleet view: computed again
    problems = job_problems([("nvidia-h100", 12)], [], [], {"nvidia-h100": h100}, set(), small.values(),
                            lambda cls: keep(cls, small))
    assert [p.path for p in problems] == ["spec.devices[0].perReplica"] and "(8 devices)" in problems[0].message
