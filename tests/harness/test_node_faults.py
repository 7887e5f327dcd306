"""A fault Kubernetes itself reports keeps new work off a node before heterojob's own fault judge (which
waits for telemetry) confirms it: a preemption frees room on a healthy node, not on the faulty one.

What Kubernetes v1.32 reports, reproduced by the emulator:
- the node lifecycle controller: a node whose kubelet stops posting status goes Ready=Unknown
  (NodeStatusUnknown) with taints node.kubernetes.io/unreachable NoSchedule and NoExecute; one that
  reports NotReady gets node.kubernetes.io/not-ready (`sim.cluster.nodes.set_node_lost`);
- the taint-eviction controller: their pods (default tolerations 300 s) are deleted 300 s later
  (`sim.cluster.tainteviction`);
- the device plugins: NVIDIA's k8s-device-plugin marks a GPU Unhealthy on a fatal XID (79), the kubelet's
  device manager then leaves it out of the Node's allocatable (capacity keeps it) (`Kubelet(device_health=)`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from heterojob.controller import ControllerConfig
from heterojob.sim.cluster.harness import Emulator, OperatorRunner
from heterojob.sim.cluster.kubelet import Kubelet
from heterojob.sim.cluster.nodes import NOT_READY_TAINT, UNREACHABLE_TAINT, node, set_node_lost, set_node_ready
from heterojob.sim.cluster.tainteviction import TaintEviction
from heterojob.sim.telemetry.exporters import ExporterFleet
from tests.conftest import Cluster, eventually

pytestmark = pytest.mark.harness


def spec(priority: str) -> dict[str, Any]:
    return {"priority": priority, "replicas": {"min": 1},
            "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
            "checkpoint": {"timeoutSeconds": 5},
            "template": {"spec": {"containers": [{"name": "main", "image": "ghcr.io/example/train:cuda12"}]}}}


def status(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.job(name).get("status") or {}


def node_of(cluster: Cluster, job: str) -> str:
    return eventually(lambda: (p := status(cluster, job).get("placement")) and status(cluster, job).get("phase")
                      == "Running" and p["nodes"][0], what=f"{job} running")


@pytest.fixture
def two_nodes(cluster: Cluster) -> Cluster:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("h100-b", "cn-east", "nvidia-h100")])
    return cluster


@pytest.fixture
def preempting_operator(emulator: Emulator, two_nodes: Cluster) -> Iterator[OperatorRunner]:
    with OperatorRunner(emulator.kubeconfig, controller=ControllerConfig(min_runtime_s=0)) as runner:
        yield runner


def test_the_node_controllers_marks_read_as_real_ones(two_nodes: Cluster) -> None:
    core = two_nodes.core
    set_node_lost(core, "h100-a")
    n = core.read_node("h100-a")
    ready = next(c for c in n.status.conditions if c.type == "Ready")
    assert (ready.status, ready.reason) == ("Unknown", "NodeStatusUnknown")
    assert sorted((t.key, t.effect) for t in n.spec.taints) == [(UNREACHABLE_TAINT, "NoExecute"),
                                                                 (UNREACHABLE_TAINT, "NoSchedule")]
    set_node_lost(core, "h100-a", reachable=True)
    n = core.read_node("h100-a")
    assert next(c for c in n.status.conditions if c.type == "Ready").status == "False"
    assert {t.key for t in n.spec.taints} == {NOT_READY_TAINT}
    set_node_ready(core, "h100-a")
    n = core.read_node("h100-a")
    assert next(c for c in n.status.conditions if c.type == "Ready").status == "True" and not n.spec.taints


def test_a_preemption_avoids_a_node_the_node_controller_marked_unreachable(
        two_nodes: Cluster, preempting_operator: OperatorRunner) -> None:
    cluster = two_nodes
    kubelet = Kubelet(cluster.api, start_delay=0.2, interval=0.2, answer_checkpoints=True,
                      checkpoint_delay=0.2).start()
    try:
        cluster.create_job("low", spec("low"))
        lost = node_of(cluster, "low")
        cluster.create_job("mid", spec("medium"))
        healthy = node_of(cluster, "mid")
        set_node_lost(cluster.core, lost)  # before heterojob's own judge has seen anything
        cluster.create_job("vip", spec("high"))
        # `low` is the lowest priority, but the room it holds is on the unreachable node: `mid` gives way
        eventually(lambda: status(cluster, "mid").get("phase") == "Preempted", timeout=30, what="mid preempted")
        assert node_of(cluster, "vip") == healthy
    finally:
        kubelet.stop()


def test_a_preemption_avoids_a_node_whose_gpu_the_device_plugin_reports_unhealthy(
        two_nodes: Cluster, preempting_operator: OperatorRunner) -> None:
    cluster = two_nodes
    exporters = ExporterFleet([node("h100-a", "cn-east", "nvidia-h100"), node("h100-b", "cn-east", "nvidia-h100")])
    kubelet = Kubelet(cluster.api, start_delay=0.2, interval=0.2, answer_checkpoints=True, checkpoint_delay=0.2,
                      device_health=exporters.unhealthy_devices).start()
    try:
        cluster.create_job("low", spec("low"))
        faulty = node_of(cluster, "low")
        cluster.create_job("mid", spec("medium"))
        healthy = node_of(cluster, "mid")
        exporters.inject("fatal-xid", faulty, 3)  # XID 79: the GPU fell off the bus
        eventually(lambda: cluster.core.read_node(faulty).status.allocatable["nvidia.com/gpu"] == "7",
                   what="the faulty node's allocatable without the failed GPU")
        assert cluster.core.read_node(faulty).status.capacity["nvidia.com/gpu"] == "8"
        cluster.create_job("vip", spec("high"))
        eventually(lambda: status(cluster, "mid").get("phase") == "Preempted", timeout=30, what="mid preempted")
        assert node_of(cluster, "vip") == healthy
        assert status(cluster, "low").get("phase") == "Running"
        exporters.clear(faulty)  # the GPU is back (reset): allocatable again
        eventually(lambda: cluster.core.read_node(faulty).status.allocatable["nvidia.com/gpu"] == "8",
                   what="allocatable restored")
    finally:
        kubelet.stop()


def test_application_xids_do_not_make_a_gpu_unhealthy() -> None:
    exporters = ExporterFleet([node("h100-a", "cn-east", "nvidia-h100"), node("npu-a", "cn-north", "ascend-910b")])
    exporters.inject("application-xid", "h100-a", 0)  # XID 13: the application's own error
    assert exporters.unhealthy_devices() == {}
    exporters.inject("fatal-xid", "h100-a", 1)
    exporters.inject("npu-unhealthy", "npu-a", 2)
    exporters.inject("exporter-down", "npu-a")
    assert exporters.unhealthy_devices() == {"h100-a": 1, "npu-a": 1}


def test_the_demo_marks_a_node_in_whichever_cluster_has_it(two_nodes: Cluster, emulator: Emulator) -> None:
    from heterojob.sim.demo.inject import _node_fault

    state = {"kubeconfig": str(emulator.kubeconfig), "members": {}}
    said = _node_fault("node-unreachable", "h100-b", state)
    assert "Ready Unknown" in said and UNREACHABLE_TAINT in said
    assert {t.key for t in two_nodes.core.read_node("h100-b").spec.taints} == {UNREACHABLE_TAINT}
    _node_fault("node-ready", "h100-b", state)
    assert not two_nodes.core.read_node("h100-b").spec.taints
    with pytest.raises(ValueError, match="no node 'h100-z' in the demo's clusters"):
        _node_fault("node-notready", "h100-z", state)


def test_a_job_on_an_unreachable_node_restarts_elsewhere_while_its_old_pods_stay_terminating(
        two_nodes: Cluster, emulator: Emulator) -> None:
    """A real cluster cannot finish deleting the pods of a node whose kubelet went silent: they stay
    Terminating (deletionTimestamp set) until the node answers again (v1.32 graceful deletion; the taint-eviction
    controller's deletion 300 s later, the pods' default tolerationSeconds, is a deletion like any other). The
    job must not wait for either: it restarts on the healthy node from its last checkpoint (the silent pods answer
    no checkpoint) at once; 300 s of the controller's clock later its old pods carry the DisruptionTarget
    condition, still Terminating, and they go once the node is back."""
    cluster = two_nodes
    kubelet = Kubelet(cluster.api, start_delay=0.2, interval=0.2, answer_checkpoints=True,
                      checkpoint_delay=0.2).start()
    evictions, t0 = TaintEviction(cluster.api), 5_000.0  # stepped by hand: its clock is the test's

    def disrupted(pods: list[Any]) -> list[bool]:
        return [any(c.type == "DisruptionTarget" for c in p.status.conditions or []) for p in pods]

    try:
        with OperatorRunner(emulator.kubeconfig):
            cluster.create_job("train", spec("low"))
            lost = node_of(cluster, "train")
            first = status(cluster, "train")["placement"]["generation"]
            set_node_lost(cluster.core, lost)
            evictions.step(t0)

            def moved() -> dict[str, Any] | None:
                s = status(cluster, "train")
                p = s.get("placement") or {}
                return s if s.get("phase") == "Running" and p.get("generation", first) != first else None

            now = eventually(moved, timeout=60, what="train running again on the healthy node")
            assert lost not in now["placement"]["nodes"]
            # no checkpoint was ever saved: every word about the move says it restarts from scratch, none
            # promises a checkpoint (it said "restoring from the last checkpoint" and "going on from the last
            # completed checkpoint" beside "restarts from scratch")
            assert not (now.get("checkpoint") or {}).get("last")
            said = [e.message for e in cluster.core.list_namespaced_event("team-a").items
                    if e.involved_object.name == "train" and e.reason in ("CheckpointRequested", "Migrating")]
            said += [h["reason"] for h in now["history"]]
            assert said and all("last checkpoint" not in m and "last completed checkpoint" not in m for m in said)
            assert any("restarts from scratch" in m for m in said)
            pods = cluster.core.list_namespaced_pod("team-a").items
            old = [p for p in pods if p.spec.node_name == lost]
            assert old and all(p.metadata.deletion_timestamp is not None for p in old)  # Terminating
            assert all(p.status.phase == "Running" for p in pods if p.spec.node_name != lost)
            assert all({(t.key, t.toleration_seconds) for t in p.spec.tolerations} >= {
                (UNREACHABLE_TAINT, 300), (NOT_READY_TAINT, 300)} for p in pods)  # DefaultTolerationSeconds
            evictions.step(t0 + 299)
            assert not any(disrupted(cluster.core.list_namespaced_pod("team-a").items))
            evictions.step(t0 + 301)
            pods = cluster.core.list_namespaced_pod("team-a").items
            old = [p for p in pods if p.spec.node_name == lost]
            assert old and all(disrupted(old)) and all(p.metadata.deletion_timestamp is not None for p in old)
            assert not any(disrupted([p for p in pods if p.spec.node_name != lost]))
            assert status(cluster, "train")["phase"] == "Running"
            set_node_ready(cluster.core, lost)  # its kubelet answers again and finishes the deletions
            eventually(lambda: not [p for p in cluster.core.list_namespaced_pod("team-a").items
                                    if p.spec.node_name == lost], timeout=30, what="the old pods gone")
            assert status(cluster, "train")["phase"] == "Running"
    finally:
        kubelet.stop()
