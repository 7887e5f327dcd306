"""Where a job goes when devices are bad (harness): one GPU broken on every node of a region, a rescue move
next to an overheating node.

What the real components do, reproduced here:
- NVIDIA's k8s-device-plugin marks a GPU Unhealthy on a fatal XID; the kubelet's device manager then leaves
  it out of the Node's allocatable, capacity keeps it (`Kubelet(device_health=)`, as in test_node_faults.py);
- Prometheus with heterojob's shipped rules fires `HeteroJobGPUFatalXID` per GPU (labels `UUID`, `Hostname`,
  `gpu`) and `HeteroJobGPUOverheat` per hot device; Alertmanager posts them to the operator's receiver
  (webhook v4, as in test_alerts_http.py). The harness runs no Prometheus: the test posts what it would.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from heterojob.controller.reconcile import ControllerConfig
from heterojob.sim.cluster.harness import Emulator, OperatorRunner
from heterojob.sim.cluster.kubelet import Kubelet
from heterojob.sim.cluster.nodes import node
from heterojob.sim.telemetry.exporters import ExporterFleet
from heterojob.sim.telemetry.prometheus import free_port
from tests.conftest import Cluster, eventually
from tests.harness.test_alerts_http import TOKEN, alert, notification

pytestmark = pytest.mark.harness
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def spec(per_replica: int) -> dict[str, Any]:
    return {"priority": "high", "replicas": {"min": 1},
            "devices": [{"deviceClass": "nvidia-h100", "perReplica": per_replica}],
            "checkpoint": {"timeoutSeconds": 30, "storage": "s3://ckpt"},
            "template": {"spec": {"containers": [{"name": "main", "image": "train:cuda12"}]}}}


def status(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.job(name).get("status") or {}


def running_on(cluster: Cluster, name: str, generation: int = 1) -> str:
    """The node of the job's one replica, once that placement runs."""
    def placed() -> str | None:
        s = status(cluster, name)
        p = s.get("placement") or {}
        return p["nodes"][0] if s.get("phase") == "Running" and p.get("generation") == generation else None
    return str(eventually(placed, timeout=30, what=f"{name} running (generation {generation})"))


def fatal_xid(node_name: str, gpu: int) -> dict[str, Any]:
    return alert(f"xid-{node_name}-{gpu}", Hostname=node_name, gpu=str(gpu), UUID=f"GPU-{node_name}-{gpu}")


def overheat(node_name: str, gpu: int) -> dict[str, Any]:
    a = alert(f"hot-{node_name}-{gpu}", Hostname=node_name, gpu=str(gpu), UUID=f"GPU-{node_name}-{gpu}")
    a["labels"]["alertname"] = "HeteroJobGPUOverheat"  # the shipped table's action: migrate
    a["annotations"] = {"summary": f"device on {node_name} at 97°C"}
    return a


@pytest.fixture
def kubelet(cluster: Cluster) -> Iterator[tuple[Kubelet, ExporterFleet]]:
    nodes = [node("h100-0", "cn-east", "nvidia-h100"), node("h100-1", "cn-east", "nvidia-h100")]
    cluster.seed(nodes)
    exporters = ExporterFleet(nodes)
    k = Kubelet(cluster.api, start_delay=0.2, interval=0.2, answer_checkpoints=True, checkpoint_delay=0.2,
                device_health=exporters.unhealthy_devices).start()
    try:
        yield k, exporters
    finally:
        k.stop()


def test_one_bad_gpu_on_every_node_lands_what_still_fits_and_requeues_the_rest(
        cluster: Cluster, emulator: Emulator, kubelet: tuple[Kubelet, ExporterFleet]) -> None:
    """The user trial: one GPU broken on each node of the region. The 4-GPU job still fits on the 7 healthy GPUs
    of the other node and lands there; the 8-GPU job fits nowhere: it waits in Migrating for the bound
    (`--move-requeue-after`, 4 s here), its room kept, then goes back to the queue as Pending with the
    per-candidate message, not left in Migrating; and nothing hot-loops on it."""
    _, exporters = kubelet
    port = free_port()
    url = f"http://127.0.0.1:{port}/alerts"
    with OperatorRunner(emulator.kubeconfig, alerts_port=port, alert_token=TOKEN,
                        controller=ControllerConfig(move_requeue_after_s=4.0)) as operator:
        cluster.create_job("whole", spec(8))
        whole = running_on(cluster, "whole")
        cluster.create_job("half", spec(4))
        half = running_on(cluster, "half")
        assert half != whole
        for n in ("h100-0", "h100-1"):
            exporters.inject("fatal-xid", n, 5)
        eventually(lambda: all(cluster.core.read_node(n).status.allocatable["nvidia.com/gpu"] == "7"
                               for n in ("h100-0", "h100-1")), what="allocatable without the failed GPUs")
        r = requests.post(url, json=notification(fatal_xid("h100-0", 5), fatal_xid("h100-1", 5)), headers=AUTH,
                          timeout=5)
        assert r.status_code == 200
        # the 4-GPU job leaves its node (the alert names it) and lands on the other node's healthy GPUs
        assert running_on(cluster, "half", generation=2) == whole
        # the 8-GPU job fits on no node with 7 healthy GPUs: first it waits for the bound (a shortage may pass)
        s = eventually(lambda: (s := status(cluster, "whole")).get("reason") == "NoRoom" and s, what="no room")
        assert s["phase"] == "Migrating" and s["migration"]["exclude"] == ["h100-0"], s
        # then back in the queue, saying why per candidate
        s = eventually(lambda: (s := status(cluster, "whole")).get("phase") == "Pending" and s, timeout=30,
                       what="whole back in the queue as Pending")
        assert s.get("placement") is None and not s.get("migration")
        assert "cn-east/nvidia-h100: room for 0 of 1 replicas" in s["message"], s["message"]
        moved = [h for h in s["history"] if h["action"] == "migrate"]
        assert len(moved) == 1 and moved[0].get("to"), moved  # the move's entry is closed, not left open
        version = cluster.job("whole")["metadata"]["resourceVersion"]
        time.sleep(2)  # passes that would follow (a write wakes the job's watch) have run
        assert cluster.job("whole")["metadata"]["resourceVersion"] == version  # no write loop on the waiting job
        assert status(cluster, "whole")["phase"] == "Pending"
    assert "Traceback" not in operator.output


def test_a_rescue_move_does_not_land_on_an_overheating_node(cluster: Cluster, emulator: Emulator) -> None:
    """A job leaves a node with a dead GPU; of the two other nodes the one that fits it best is overheating
    (a firing HeteroJobGPUOverheat names it): a throttled device takes nothing new, so the job lands on the
    cool node."""
    cluster.seed([node("h100-0", "cn-east", "nvidia-h100", devices=4), node("h100-1", "cn-east", "nvidia-h100"),
                  node("h100-2", "cn-east", "nvidia-h100")])
    port = free_port()
    url = f"http://127.0.0.1:{port}/alerts"
    k = Kubelet(cluster.api, start_delay=0.2, interval=0.2, answer_checkpoints=True, checkpoint_delay=0.2).start()
    try:
        with OperatorRunner(emulator.kubeconfig, alerts_port=port, alert_token=TOKEN) as operator:
            cluster.create_job("rescued", spec(4))
            assert running_on(cluster, "rescued") == "h100-0"  # best fit: the smallest node that holds it
            other = {**spec(4), "policy": {"triggers": ["nodeNotReady"]}}  # it stays where it is, hot or not
            cluster.create_job("neighbour", other)
            assert running_on(cluster, "neighbour") == "h100-1"
            r = requests.post(url, json=notification(overheat("h100-1", 2)), headers=AUTH, timeout=5)
            assert r.status_code == 200
            eventually(lambda: status(cluster, "neighbour").get("alerts"), what="the overheat heard")
            r = requests.post(url, json=notification(fatal_xid("h100-0", 1)), headers=AUTH, timeout=5)
            assert r.status_code == 200
            # best fit alone would pick h100-1 (4 free): it overheats, so h100-2
            assert running_on(cluster, "rescued", generation=2) == "h100-2"
        assert "Traceback" not in operator.output
    finally:
        k.stop()


def test_a_gang_unschedulable_on_the_only_node_that_fits_waits_instead_of_cycling(
        cluster: Cluster, emulator: Emulator) -> None:
    """kube-scheduler cannot fit the gang on h100-0 (requests placement does not model: memory here), the only
    node of its class. The move off it fits nowhere; placement finds h100-0 healthy, so back in the queue the job
    would be placed there again, found unschedulable again, forever (pods, Events, history). It waits in
    Migrating with h100-0 excluded instead. The scheduler's verdict is held as the real one would hold it: every
    new pod on h100-0 is marked Unschedulable (PodScheduled False, as kube-scheduler v1.32 writes it)."""
    cluster.seed([node("h100-0", "cn-east", "nvidia-h100")])
    message = "0/1 nodes are available: 1 Insufficient memory. preemption: 0/1 nodes are available."
    marked: set[str] = set()
    with OperatorRunner(emulator.kubeconfig) as operator:
        cluster.create_job("fat", spec(8))
        deadline = time.monotonic() + 8  # several passes: the loop went round within ~1 s a cycle
        while time.monotonic() < deadline:
            for pod in cluster.pods("fat"):
                if pod.metadata.deletion_timestamp or pod.metadata.name in marked:
                    continue
                cluster.core.patch_namespaced_pod_status(pod.metadata.name, "team-a", {"status": {
                    "phase": "Pending", "conditions": [{
                        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})  # past the 60 s bound: acted on at once
                marked.add(pod.metadata.name)
            time.sleep(0.1)
        s = status(cluster, "fat")
        generations = {p.metadata.labels["heterojob.io/generation"] for p in cluster.pods("fat")}
        assert s["phase"] == "Migrating" and s["migration"]["exclude"] == ["h100-0"], s
        assert "placement" not in s and len(marked) == 1, (marked, generations)
        assert not [e for e in cluster.events("fat") if e.reason == "MoveRequeued"]
        assert [h["action"] for h in s["history"]].count("reschedule") == 1, s["history"]
    assert "Traceback" not in operator.output
