"""A replica's pod requests (cpu, memory, ...) against what a node allocates at all: a node that can never run
the pod is filtered out by placement, with kube-scheduler's reason in the job's words, instead of being chosen
and then refused by kube-scheduler (which moved the gang elsewhere every minute, for ever)."""

from __future__ import annotations

from heterojob.engine.capacity.fleet import DeviceClass, Fleet
from heterojob.engine.placing.placement import Alternative, Request, place
from heterojob.kube.convert import node_view, template_requests
from heterojob.sim.cluster.nodes import node as node_obj

H100 = DeviceClass("nvidia-h100", "nvidia.com/gpu", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, 1.0)
CPU = DeviceClass("cpu", "cpu", {"heterojob.io/pool": "cpu"}, 0.01)
GI = 1 << 30


def _fleet(*names: str) -> Fleet:
    nodes = [node_view(node_obj(n, "cn-east", "nvidia-h100")) for n in names]
    return Fleet({x.name: x for x in nodes}, {"nvidia-h100": H100})


def test_template_requests_sum_containers_default_to_limits_and_take_the_largest_init_container() -> None:
    template = {"spec": {
        "containers": [
            {"name": "a", "image": "x", "resources": {"requests": {"cpu": "1500m", "memory": "3000Gi"}}},
            {"name": "b", "image": "x", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}},  # request = limit
            {"name": "c", "image": "x", "resources": {"limits": {"cpu": "4"}, "requests": {"cpu": "1"}}},
        ],
        "initContainers": [{"name": "i", "image": "x", "resources": {"requests": {"cpu": "8", "memory": "1Gi"}}}],
    }}
    # cpu: max(1.5 + 2 + 1, 8) = 8; memory: max(3000Gi + 1Gi, 1Gi)
    assert template_requests(template) == {"cpu": 8, "memory": 3001 * GI}
    assert template_requests({"spec": {"containers": [{"name": "a", "image": "x"}]}}) == {}
    assert template_requests({}) == {}


def test_a_pod_larger_than_every_node_is_refused_with_the_resource_named() -> None:
    fleet = _fleet("h1", "h2")
    too_big = Alternative("nvidia-h100", 8, pod_requests={"memory": 3000 * GI, "cpu": 16})
    result = place(Request("ns/j", [too_big], 1), fleet)
    assert result.chosen is None
    assert ("2 node(s) fail the software check: the pod requests 2.93Ti of memory, more than the node "
            "allocates (2Ti)") in result.explain(), result.explain()
    fits = Alternative("nvidia-h100", 8, pod_requests={"memory": 2000 * GI, "cpu": 192})
    assert place(Request("ns/j", [fits], 2), fleet).chosen is not None


def test_only_the_nodes_large_enough_are_used() -> None:
    big = node_view(node_obj("big", "cn-east", "nvidia-h100"))
    small_obj = node_obj("small", "cn-east", "nvidia-h100")
    small_obj["status"]["allocatable"]["memory"] = "512Gi"
    small = node_view(small_obj)
    fleet = Fleet({"big": big, "small": small}, {"nvidia-h100": H100})
    alt = Alternative("nvidia-h100", 4, pod_requests={"memory": 600 * GI})
    assert place(Request("ns/j", [alt], 2), fleet).chosen.nodes == ("big", "big")
    result = place(Request("ns/j", [alt], 3), fleet)
    assert result.chosen is None
    assert "1 node(s) fail the software check: the pod requests 600Gi of memory" in result.explain()


def test_the_class_resource_and_unreported_resources_are_not_judged() -> None:
    # a CPU-class replica's cores are the class's devices (placement counts them against free room), and a
    # resource the node does not report is left to kube-scheduler
    cpu_node = node_view(node_obj("c1", "cn-east", "cpu"))
    fleet = Fleet({"c1": cpu_node}, {"cpu": CPU})
    alt = Alternative("cpu", 8, pod_requests={"cpu": 1000, "example.com/fpga": 1})
    assert place(Request("ns/j", [alt], 1), fleet).chosen is not None
