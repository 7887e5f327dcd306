"""The placement engine on plain data: choices, explanations, and invariants under random fleets."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from heterojob.engine.fleet import Allocation, DeviceClass, Fleet, Node, usage
from heterojob.engine.placement import Alternative, Request, pack, place

H100 = DeviceClass("nvidia-h100", "nvidia.com/gpu", {"gpu": "h100"}, throughput=1.0)
NPU = DeviceClass("ascend-910b", "huawei.com/Ascend910", {"npu": "910b"}, throughput=0.6)
CLASSES = {c.name: c for c in (H100, NPU)}


def gpu_node(name: str, region: str = "cn-east", devices: int = 8, **kw: object) -> Node:
    return Node(name, {"gpu": "h100", "topology.kubernetes.io/region": region}, {"nvidia.com/gpu": devices}, **kw)


def npu_node(name: str, region: str = "cn-north", devices: int = 8) -> Node:
    return Node(name, {"npu": "910b", "topology.kubernetes.io/region": region}, {"huawei.com/Ascend910": devices})


def fleet(*nodes: Node, used: dict | None = None) -> Fleet:
    return Fleet({n.name: n for n in nodes}, CLASSES, used=used or {})


def request(replicas: int = 2, per: int = 8, classes: tuple[str, ...] = ("nvidia-h100",), **kw: object) -> Request:
    return Request("ns/job", [Alternative(c, per) for c in classes], replicas, **kw)  # type: ignore[arg-type]


def test_whole_gang_in_one_region_one_replica_per_node_when_full_nodes_needed() -> None:
    result = place(request(), fleet(gpu_node("a"), gpu_node("b"), gpu_node("c", region="eu-west")))
    assert result.chosen is not None
    assert result.chosen.region == "cn-east" and sorted(result.chosen.nodes) == ["a", "b"]


def test_gang_does_not_span_regions() -> None:
    result = place(request(), fleet(gpu_node("a"), gpu_node("c", region="eu-west")))
    assert result.chosen is None
    assert "cn-east/nvidia-h100: room for 1 of 2 replicas (8 free on 1 node(s), 8 per replica)" in result.explain()
    assert "eu-west/nvidia-h100: room for 1 of 2 replicas" in result.explain()


def test_not_ready_cordoned_and_excluded_nodes_are_never_used() -> None:
    nodes = [gpu_node("a", ready=False), gpu_node("b", schedulable=False), gpu_node("c"), gpu_node("d")]
    result = place(request(), fleet(*nodes))
    assert result.chosen is not None and sorted(result.chosen.nodes) == ["c", "d"]
    assert place(request(exclude_nodes=frozenset({"c"})), fleet(*nodes)).chosen is None


def test_devices_already_used_are_not_free() -> None:
    f = fleet(gpu_node("a"), gpu_node("b"), used=usage([Allocation("nvidia.com/gpu", {"a": 4})]))
    assert place(request(), f).chosen is None
    assert place(request(per=4), f).chosen is not None


def test_falls_back_to_the_next_alternative_in_preference_order() -> None:
    f = fleet(gpu_node("a"), npu_node("n1"), npu_node("n2"))
    result = place(request(classes=("nvidia-h100", "ascend-910b")), f)
    assert result.chosen is not None and result.chosen.device_class == "ascend-910b"
    # With room for both, the first alternative wins even though the second has more room.
    f = fleet(gpu_node("a"), gpu_node("b"), npu_node("n1"), npu_node("n2"))
    assert place(request(classes=("nvidia-h100", "ascend-910b")), f).chosen.device_class == "nvidia-h100"


def test_allowed_and_preferred_regions() -> None:
    f = fleet(gpu_node("a"), gpu_node("b"), gpu_node("c", "eu-west"), gpu_node("d", "eu-west"))
    assert place(request(preferred_regions=("eu-west",)), f).chosen.region == "eu-west"
    result = place(request(allowed_regions=("cn-east",)), f)
    assert result.chosen.region == "cn-east"
    result = place(request(allowed_regions=("us-west",)), f)
    assert result.chosen is None and "eu-west/nvidia-h100: region not in spec.regions.allowed" in result.explain()


def test_unknown_class_is_explained_with_the_known_ones() -> None:
    result = place(request(classes=("nvidia-h200",)), fleet(gpu_node("a")))
    assert result.explain() == "no room: nvidia-h200: unknown AcceleratorClass (known: ascend-910b, nvidia-h100)"


def test_best_fit_packing_keeps_whole_nodes_free() -> None:
    # Node a has 2 free, b has 8 free: a 2-device replica goes to a, leaving b whole.
    assert pack({"a": 2, "b": 8}, 1, 2) == ("a",)
    assert pack({"a": 8, "b": 8}, 4, 4) == ("a", "a", "b", "b")
    assert pack({"a": 3}, 1, 4) is None


node_st = st.builds(
    lambda i, region, devices, ready, schedulable: gpu_node(f"n{i}", region, devices, ready=ready,
                                                            schedulable=schedulable),
    st.integers(0, 10_000), st.sampled_from(["r1", "r2", "r3"]), st.integers(0, 8), st.booleans(), st.booleans())


@settings(max_examples=300, deadline=None)
@given(nodes=st.lists(node_st, min_size=1, max_size=12, unique_by=lambda n: n.name),
       used=st.dictionaries(st.integers(0, 11), st.integers(0, 8)),
       replicas=st.integers(1, 6), per=st.integers(1, 8))
def test_placement_never_exceeds_capacity_or_uses_unusable_nodes(nodes: list[Node], used: dict[int, int],
                                                                 replicas: int, per: int) -> None:
    names = [n.name for n in nodes]
    f = fleet(*nodes, used={(names[i % len(names)], "nvidia.com/gpu"): c for i, c in used.items()})
    result = place(request(replicas, per), f)
    if result.chosen is None:
        assert result.rejections
        return
    chosen = result.chosen
    assert len(chosen.nodes) == replicas
    regions = {f.nodes[n].region for n in chosen.nodes}
    assert len(regions) == 1
    for name, count in chosen.per_node.items():
        node = f.nodes[name]
        assert node.ready and node.schedulable
        assert count <= f.free(name, "nvidia.com/gpu")


def test_a_taint_keyed_by_the_class_resource_is_tolerated_and_any_other_blocks() -> None:
    from heterojob.kube.convert import node_view
    from heterojob.sim.nodes import node as node_obj

    tainted = node_obj("gpu-1", "cn-east", "nvidia-h100")
    tainted["spec"]["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    view = node_view(tainted)
    assert view.taints == {"nvidia.com/gpu"} and view.schedulable
    h100 = DeviceClass("nvidia-h100", "nvidia.com/gpu", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    f = Fleet({view.name: view}, {h100.name: h100})
    assert place(request(replicas=1), f).chosen is not None  # our pods tolerate nvidia.com/gpu

    tainted["spec"]["taints"].append({"key": "maintenance", "effect": "NoExecute"})
    view = node_view(tainted)
    assert "taint maintenance:NoExecute" in view.reason
    assert place(request(replicas=1), Fleet({view.name: view}, {h100.name: h100})).chosen is None
