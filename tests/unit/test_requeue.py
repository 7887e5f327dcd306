"""When a move that fits nowhere goes back to the queue (engine/placing/requeue.py), on plain data; the operator end to end
in tests/harness/test_bad_devices.py."""

from __future__ import annotations

from dataclasses import replace

from heterojob.engine.capacity.fleet import DeviceClass, Failed, Fleet, Node
from heterojob.engine.placing.requeue import REQUEUE_AFTER_S, guarded, requeue_at

R = "nvidia.com/gpu"
H100 = DeviceClass("nvidia-h100", R, {"gpu": "h100"})


def fleet(*nodes: Node, **health: object) -> Fleet:
    return Fleet(nodes={n.name: n for n in nodes}, classes={H100.name: H100}, **health)  # type: ignore[arg-type]


def gpu_node(name: str, allocatable: int = 8, capacity: int = 8, **kw: object) -> Node:
    return Node(name, {"gpu": "h100"}, {R: allocatable}, capacity={R: capacity}, **kw)  # type: ignore[arg-type]


def test_a_move_off_a_node_placement_finds_healthy_keeps_waiting() -> None:
    """kube-scheduler found the gang unschedulable on `a` (requests placement does not model), or the user asked to
    move: back in the queue nothing keeps it off `a`, it would be placed there again, forever."""
    f = fleet(gpu_node("a"))
    assert guarded(f, "a") is None
    assert requeue_at(["a"], True, 1000.0, f) is None  # trigger unschedulable: involuntary, `a` healthy
    assert requeue_at(["a"], False, 1000.0, fleet(gpu_node("a", ready=False))) is None  # a voluntary move waits
    assert requeue_at([], True, 1000.0, f) is None  # left no node (a resize): waits


def test_a_move_off_bad_nodes_goes_back_after_the_bound() -> None:
    failed = fleet(gpu_node("a", allocatable=7), failed={"a": Failed(1, "GPU-1: fatal XID 79")})
    assert "failed device withheld" in (guarded(failed, "a") or "")  # the plugin withholds it: the rest offered
    assert requeue_at(["a"], True, 1000.0, failed) == 1000.0 + REQUEUE_AFTER_S
    for bad in (fleet(gpu_node("a", ready=False)), fleet(gpu_node("a", schedulable=False)),
                fleet(gpu_node("a"), unhealthy={"a": "alert: HeteroJobGPUOverheat"}), fleet()):
        assert guarded(bad, "a") is not None
        assert requeue_at(["a"], True, 50.0, bad, after_s=10.0) == 60.0
    # one left node healthy again: the move keeps waiting with its exclusions
    assert requeue_at(["a", "b"], True, 50.0, fleet(gpu_node("a", ready=False), gpu_node("b"))) is None
    # a move whose start is unknown goes back at once
    assert requeue_at(["a"], True, None, fleet(replace(gpu_node("a"), ready=False))) == REQUEUE_AFTER_S
