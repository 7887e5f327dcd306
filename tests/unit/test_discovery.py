"""Compute discovery on plain data, and placement's per-node software filter.

Fixtures are shaped like real Node labels:
- NVIDIA GPU Feature Discovery, NVIDIA/k8s-device-plugin internal/lm/nvml.go (v0.17): new
  `nvidia.com/cuda.driver-version.*` / `cuda.runtime-version.*` keys and the deprecated `cuda.driver.major|minor|rev`,
  `cuda.runtime.major|minor`; MIG labels from docs/gpu-feature-discovery/README.md (single and mixed strategies).
- Ascend device plugin, Ascend/mind-cluster ascend-common label constants (2026): `huawei.com/npu.*` keys dual-written
  with the deprecated `node.kubernetes.io/npu.chip.name`, `mind-cluster/npu-chip-memory`, `servertype`,
  `huawei.com/driver.version`.
- Node Feature Discovery source/custom/static_features.go: `rdma.capable`, `rdma.available`.
"""

from __future__ import annotations

from heterojob.engine.placing import discovery
from heterojob.engine.capacity.fleet import DeviceClass, Fleet, Node
from heterojob.engine.placing.placement import Alternative, Request, place
from heterojob.kube.convert import node_view
from heterojob.sim.cluster.nodes import node as node_obj

GFD_B200 = {  # a GFD v0.17 node, both key generations
    "nvidia.com/gpu.product": "NVIDIA-B200", "nvidia.com/gpu.memory": "183359", "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.family": "blackwell", "nvidia.com/cuda.driver-version.full": "570.124.06",
    "nvidia.com/cuda.driver-version.major": "570", "nvidia.com/cuda.driver.major": "570",
    "nvidia.com/cuda.driver.minor": "124", "nvidia.com/cuda.driver.rev": "06",
    "nvidia.com/cuda.runtime-version.full": "12.8", "nvidia.com/cuda.runtime.major": "12",
    "nvidia.com/cuda.runtime.minor": "8", "nvidia.com/mig.capable": "true",
    "feature.node.kubernetes.io/rdma.capable": "true", "feature.node.kubernetes.io/rdma.available": "true",
}
OLD_GFD = {"nvidia.com/gpu.product": "Tesla-V100-SXM2-32GB", "nvidia.com/gpu.memory": "32768",
           "nvidia.com/cuda.driver.major": "470", "nvidia.com/cuda.driver.minor": "82", "nvidia.com/cuda.driver.rev": "01",
           "nvidia.com/cuda.runtime.major": "11", "nvidia.com/cuda.runtime.minor": "4"}
ASCEND_NEW = {"accelerator": "huawei-Ascend910", "huawei.com/npu.chip.name": "910B4", "huawei.com/npu.chip.memory": "32G",
              "huawei.com/npu.driver.version": "25.0.rc1", "huawei.com/npu.server.type": "Ascend910B-20",
              "heterojob.io/cann.version": "8.1.RC1"}
ASCEND_OLD = {"accelerator": "huawei-Ascend910", "node.kubernetes.io/npu.chip.name": "910B3", "servertype": "Ascend910B-20",
              "huawei.com/driver.version": "24.1.rc2", "mind-cluster/npu-chip-memory": "64G"}
H100 = DeviceClass("nvidia-h100", "nvidia.com/gpu", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, 1.0,
                   {"driver": "550.54.15", "cuda": "12.4"})


def n(name: str, labels: dict[str, str], alloc: dict[str, int], region: str = "cn-east") -> Node:
    labels = {**labels, "topology.kubernetes.io/region": region}
    return Node(name, labels, alloc, software=discovery.node_software(labels))


def test_software_from_new_and_deprecated_gfd_keys_and_both_ascend_generations() -> None:
    assert discovery.node_software(GFD_B200) == {"driver": "570.124.06", "cuda": "12.8"}
    assert discovery.node_software(OLD_GFD) == {"driver": "470.82.01", "cuda": "11.4"}
    assert discovery.node_software(ASCEND_NEW) == {"driver": "25.0.rc1", "cann": "8.1.RC1"}
    assert discovery.node_software(ASCEND_OLD) == {"driver": "24.1.rc2"}
    assert discovery.node_software({"kubernetes.io/os": "linux"}) == {}


def test_devices_read_model_memory_count_and_network_features() -> None:
    [b200] = discovery.devices(n("b", GFD_B200, {"nvidia.com/gpu": 8}))
    assert (b200.vendor, b200.model, b200.count, b200.memory_mib) == ("nvidia", "NVIDIA-B200", 8, 183359)
    assert {"rdma", "rdma-capable"} <= set(b200.network)
    [npu] = discovery.devices(n("a", ASCEND_OLD, {"huawei.com/Ascend910": 8}))
    assert (npu.model, npu.memory_mib, npu.server_type) == ("910B3", 64 * 1024, "Ascend910B-20")
    assert npu.node_selector == {"accelerator": "huawei-Ascend910", "node.kubernetes.io/npu.chip.name": "910B3"}
    shared = discovery.devices(n("s", {**GFD_B200, "nvidia.com/gpu.product": "NVIDIA-B200-SHARED"}, {"nvidia.com/gpu": 32}))
    assert shared[0].model == "NVIDIA-B200" and shared[0].shared
    assert discovery.devices(n("cpu", {}, {"cpu": 64})) == []
    # a GPU label without the device plugin's resource is no device to place on
    assert discovery.devices(n("x", GFD_B200, {})) == []


def test_mig_strategies() -> None:
    single = {"nvidia.com/gpu.product": "A100-SXM4-40GB-MIG-1g.5gb", "nvidia.com/mig.strategy": "single",
              "nvidia.com/gpu.count": "56", "nvidia.com/gpu.memory": "5120"}
    [d] = discovery.devices(n("m1", single, {"nvidia.com/gpu": 56}))
    assert d.mig == "1g.5gb" and d.count == 56 and discovery.class_name(d) == "nvidia-a100-sxm4-40gb-mig-1g-5gb"
    mixed = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/mig.strategy": "mixed",
             "nvidia.com/mig-3g.20gb.count": "2", "nvidia.com/mig-3g.20gb.memory": "20096"}
    found = discovery.devices(n("m2", mixed, {"nvidia.com/mig-3g.20gb": 2}))
    assert [(d.resource, d.mig, d.count, d.memory_mib) for d in found] == [("nvidia.com/mig-3g.20gb", "3g.20gb", 2, 20096)]


def test_a_new_model_is_proposed_once_with_its_observed_range_and_a_covered_one_is_not() -> None:
    nodes = [n("h", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, {"nvidia.com/gpu": 8}),
             n("b1", GFD_B200, {"nvidia.com/gpu": 8}),
             n("b2", {**GFD_B200, "nvidia.com/cuda.driver-version.full": "565.57.01",
                      "nvidia.com/cuda.runtime-version.full": "12.7"}, {"nvidia.com/gpu": 8}),
             n("a", ASCEND_NEW, {"huawei.com/Ascend910": 16})]
    found = discovery.proposals(nodes, {"nvidia-h100": H100})
    assert [p.name for p in found] == ["ascend-910b4", "nvidia-b200"]
    b200 = found[1]
    assert b200.nodes == ("b1", "b2") and b200.devices == 16
    assert b200.spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-B200"}
    assert b200.spec["resourceName"] == "nvidia.com/gpu" and b200.spec["exporter"] == "dcgm"
    assert b200.spec["memoryGiB"] == 179.1 and b200.spec["software"] == {"driver": "565.57.01", "cuda": "12.7"}
    assert (b200.software["cuda"].oldest, b200.software["cuda"].newest) == ("12.7", "12.8")
    # the manifest is a valid AcceleratorClass
    from heterojob.api.accelerator import AcceleratorClassSpec
    from heterojob.api.common import parse_spec
    for p in found:
        parse_spec(AcceleratorClassSpec, p.manifest("heterojob.io/v1alpha1")["spec"])
    # a name already taken by another class gets a suffix
    taken = DeviceClass("nvidia-b200", "nvidia.com/gpu", {"nvidia.com/gpu.product": "something-else"})
    assert [p.name for p in discovery.proposals(nodes[1:3], {"nvidia-b200": taken})] == ["nvidia-b200-2"]


def test_observed_range_orders_cann_release_candidates() -> None:
    cls = DeviceClass("ascend-910b", "huawei.com/Ascend910", {"accelerator": "huawei-Ascend910"})
    nodes = [n(f"a{i}", {**ASCEND_NEW, "heterojob.io/cann.version": v}, {"huawei.com/Ascend910": 8})
             for i, v in enumerate(["8.0.0", "8.0.RC3", "8.1.RC1", "not-a-version"])]
    obs = discovery.observed(nodes, {cls.name: cls})[cls.name]
    assert (obs.nodes, obs.devices) == (4, 32)
    assert obs.software["cann"].as_status() == {"oldest": "8.0.RC3", "newest": "8.1.RC1", "nodes": 3}


# --- placement's per-node software filter -----------------------------------------------------------------

def h100(name: str, cuda: str | None, driver: str = "550.54.15", **labels: str) -> Node:
    obj = node_obj(name, "cn-east", "nvidia-h100", software={"cuda": cuda, "driver": driver} if cuda else None,
                   labels=labels or None)
    if cuda is None:  # a node whose GFD publishes no CUDA version: the class's declared one applies
        for key in [k for k in obj["metadata"]["labels"] if k.startswith("nvidia.com/cuda.runtime")]:
            del obj["metadata"]["labels"][key]
    return node_view(obj)


def test_a_job_needing_cuda_12_4_never_lands_on_the_classs_12_2_node_and_says_so() -> None:
    nodes = {x.name: x for x in (h100("new-a", "12.4"), h100("old", "12.2", "535.183.06"))}
    f = Fleet(nodes, {"nvidia-h100": H100})
    req = Request("ns/j", [Alternative("nvidia-h100", 8, {"cuda": ">=12.4"})], 1)
    assert place(req, f).chosen.nodes == ("new-a",)
    two = Request("ns/j", [Alternative("nvidia-h100", 8, {"cuda": ">=12.4"})], 2)
    result = place(two, f)
    assert result.chosen is None
    assert "1 node(s) fail the software check: cuda 12.2 does not satisfy >=12.4" in result.explain()
    # no requirement: both nodes serve
    assert sorted(place(Request("ns/j", [Alternative("nvidia-h100", 8)], 2), f).chosen.nodes) == ["new-a", "old"]


def test_every_node_failing_is_one_class_rejection_counting_nodes_and_reasons() -> None:
    nodes = {x.name: x for x in (h100("o1", "12.2"), h100("o2", "12.2"), h100("o3", "12.3"))}
    result = place(Request("ns/j", [Alternative("nvidia-h100", 8, {"cuda": ">=12.4"})], 1),
                   Fleet(nodes, {"nvidia-h100": H100}))
    assert result.chosen is None
    assert ("nvidia-h100: software: 3 node(s) fail the software check: cuda 12.2 does not satisfy >=12.4 (2); "
            "cuda 12.3 does not satisfy >=12.4 (1)") in result.explain()


def test_a_node_without_its_own_label_falls_back_to_the_class_stack() -> None:
    nodes = {x.name: x for x in (h100("bare", None),)}
    assert "cuda" not in nodes["bare"].software
    f = Fleet(nodes, {"nvidia-h100": H100})
    assert place(Request("ns/j", [Alternative("nvidia-h100", 8, {"cuda": ">=12.4"})], 1), f).chosen is not None
    result = place(Request("ns/j", [Alternative("nvidia-h100", 8, {"cuda": ">=12.6"})], 1), f)
    assert "software: cuda 12.4 does not satisfy >=12.6" in result.explain()


def test_driver_and_network_label_requirements_are_per_node() -> None:
    nodes = {x.name: x for x in (h100("rdma", "12.4"),
                                 h100("plain", "12.4", **{"feature.node.kubernetes.io/rdma.available": "false"}))}
    f = Fleet(nodes, {"nvidia-h100": H100})
    need = Alternative("nvidia-h100", 8, {"driver": ">=550"}, {"feature.node.kubernetes.io/rdma.available": "true"})
    assert place(Request("ns/j", [need], 1), f).chosen.nodes == ("rdma",)
    result = place(Request("ns/j", [need], 2), f)
    assert "1 node(s) fail the software check: label feature.node.kubernetes.io/rdma.available is 'false', not 'true'" \
        in result.explain()


def test_an_upgraded_node_changes_placement() -> None:
    old = h100("n", "12.2", "535.183.06")
    req = Request("ns/j", [Alternative("nvidia-h100", 8, {"cuda": ">=12.4"})], 1)
    assert place(req, Fleet({"n": old}, {"nvidia-h100": H100})).chosen is None
    new = h100("n", "12.6", "560.35.03")
    assert place(req, Fleet({"n": new}, {"nvidia-h100": H100})).chosen.nodes == ("n",)


def test_spec_accepts_node_labels_and_refuses_bad_keys() -> None:
    import pytest

    from heterojob.api.common import SpecError, parse_spec
    from heterojob.api.job import HeteroJobSpec
    spec = {"devices": [{"deviceClass": "nvidia-h100", "perReplica": 8,
                         "requires": {"cuda": ">=12.4", "nodeLabels": {"feature.node.kubernetes.io/rdma.available": "true"}}}],
            "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}}
    parsed = parse_spec(HeteroJobSpec, spec)
    assert parsed.devices[0].requires.versions() == {"cuda": ">=12.4"}
    spec["devices"][0]["requires"]["nodeLabels"] = {"bad key!": "true"}
    with pytest.raises(SpecError, match="nodeLabels"):
        parse_spec(HeteroJobSpec, spec)


def test_the_planners_request_carries_versions_and_node_labels_apart() -> None:
    from heterojob.api.common import parse_spec
    from heterojob.api.job import HeteroJobSpec
    from heterojob.state.requests import request_for
    spec = parse_spec(HeteroJobSpec, {
        "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8,
                     "requires": {"driver": ">=550", "nodeLabels": {"feature.node.kubernetes.io/rdma.available": "true"}}},
                    {"deviceClass": "ascend-910b", "perReplica": 8}],
        "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}})
    req = request_for("ns/j", {"metadata": {"name": "j", "namespace": "ns"}}, spec)
    gpu, npu = req.alternatives
    assert gpu.requires == {"driver": ">=550"}
    assert gpu.node_labels == {"feature.node.kubernetes.io/rdma.available": "true"}
    assert (npu.requires, npu.node_labels) == ({}, {})


def test_the_software_range_parses_each_distinct_version_once_and_equals_the_node_by_node_range() -> None:
    """`software_range` groups the nodes' version texts first; the same range and node counts as taking every
    node's versions one by one (1.0 and 1.0.0 are equal versions: the lower text wins the tie either way)."""
    import random

    from packaging.version import InvalidVersion

    from heterojob.engine.basics import versions

    def node_by_node(stacks: list[dict[str, str]]) -> dict[str, discovery.Range]:
        seen: dict[str, list[tuple[object, str]]] = {}
        for stack in stacks:
            for name, text in stack.items():
                try:
                    seen.setdefault(name, []).append((versions.parse_version(text), text))
                except InvalidVersion:
                    continue
        return {n: discovery.Range(min(vs)[1], max(vs)[1], len(vs))  # type: ignore[type-var]  # Version pairs
                for n, vs in sorted(seen.items()) if vs}

    texts = ["535.104.05", "570.124.06", "1.0", "1.0.0", "12.8", "12.10", "8.0.RC2", "8.0.0", "7.0.RC1.alpha003",
             "garbage!", "", "24.1.rc3"]
    rng = random.Random(7)
    for _ in range(200):
        stacks = [{name: rng.choice(texts) for name in rng.sample(["driver", "cuda", "cann"], rng.randint(0, 3))}
                  for _ in range(rng.randint(0, 40))]
        assert discovery.software_range(stacks) == node_by_node(stacks)


def test_a_node_turning_not_ready_does_not_wake_discovery_but_a_label_change_does() -> None:
    """Discovery reads what a node offers (`discovery.reads`), not its health: a fault's Node event no longer
    starts a pass over every node in front of the faulted jobs' passes."""
    from types import SimpleNamespace

    from heterojob import handlers

    pokes: list[None] = []
    runtime = SimpleNamespace(controller=SimpleNamespace(node_news=lambda name, view: True),
                              discovery=SimpleNamespace(poke=lambda: pokes.append(None)))
    ready = node_view(node_obj("h100-0", "cn-east", "nvidia-h100"))
    down = node_view(node_obj("h100-0", "cn-east", "nvidia-h100", ready=False))
    relabelled = node_view(node_obj("h100-0", "cn-east", "nvidia-h100", software={"driver": "580.1.1"}))
    handlers._node_news(runtime, "h100-0", "MODIFIED", ready, down)  # type: ignore[arg-type]  # the parts it uses
    handlers._node_news(runtime, "h100-0", "MODIFIED", down, ready)  # type: ignore[arg-type]
    assert pokes == [] and not down.ready
    handlers._node_news(runtime, "h100-0", "MODIFIED", ready, relabelled)  # type: ignore[arg-type]
    handlers._node_news(runtime, "h100-0", "DELETED", ready, ready)  # type: ignore[arg-type]
    handlers._node_news(runtime, "h100-1", "ADDED", None, ready)  # type: ignore[arg-type]
    assert len(pokes) == 3
