"""`kubectl drain` of a node a job runs on is a voluntary move, not a failure.

What Kubernetes v1.32 does, reproduced by the emulator: `kubectl drain` (k8s.io/kubectl/pkg/drain) cordons the
node (spec.unschedulable) and POSTs an Eviction for each of its pods; kube-apiserver
(pkg/registry/core/pod/storage/eviction.go, addConditionAndDeletePod) first adds the pod condition
DisruptionTarget=True reason EvictionByEvictionAPI (PodDisruptionConditions: default since v1.26, GA in v1.31),
then deletes the pod gracefully (its terminationGracePeriodSeconds). heterojob reads that as a drain: the job
moves off the cordoned node from its last checkpoint, with no restart counted against backoffLimit.
"""

from __future__ import annotations

from typing import Any

import pytest

from heterojob.sim.cluster.kubelet import Kubelet
from heterojob.sim.cluster.nodes import node
from tests.conftest import Cluster, eventually

pytestmark = pytest.mark.harness


def spec() -> dict[str, Any]:
    return {"priority": "high", "replicas": {"min": 1}, "backoffLimit": 1,
            "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
            "checkpoint": {"intervalSeconds": 1, "timeoutSeconds": 30, "storage": "s3://ckpt"},
            "template": {"spec": {"containers": [{"name": "main", "image": "ghcr.io/example/train:cuda12"}]}}}


def status(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.job(name).get("status") or {}


def running_on(cluster: Cluster, name: str, generation: int) -> str:
    def placed() -> str | None:
        s = status(cluster, name)
        p = s.get("placement") or {}
        return p["nodes"][0] if s.get("phase") == "Running" and p.get("generation") == generation else None
    return eventually(placed, timeout=20, what=f"{name} running at generation {generation}")


def evict(cluster: Cluster, pod: str) -> None:
    cluster.core.create_namespaced_pod_eviction(pod, "team-a", {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": "team-a"}})


def test_an_evicted_pod_carries_the_condition_the_eviction_api_adds(cluster: Cluster) -> None:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100")])
    cluster.core.create_namespaced_pod("team-a", {"metadata": {"name": "w", "finalizers": ["example.com/keep"]},
                                                  "spec": {"nodeName": "h100-a",
                                                           "containers": [{"name": "main", "image": "busybox"}]}})
    evict(cluster, "w")
    pod = cluster.core.read_namespaced_pod("w", "team-a")  # kept Terminating by its finalizer
    assert pod.metadata.deletion_timestamp is not None
    target = [(c.type, c.status, c.reason, c.message) for c in pod.status.conditions or []
              if c.type == "DisruptionTarget"]
    assert target == [("DisruptionTarget", "True", "EvictionByEvictionAPI", "Eviction API: evicting")]
    cluster.core.patch_namespaced_pod("w", "team-a", {"metadata": {"finalizers": None}})


def test_a_drain_moves_the_job_from_its_checkpoint_without_counting_a_restart(cluster: Cluster, operator: Any
                                                                             ) -> None:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("h100-b", "cn-east", "nvidia-h100")])
    kubelet = Kubelet(cluster.api, start_delay=0.2, interval=0.2, answer_checkpoints=True,
                      checkpoint_delay=0.2).start()
    try:
        cluster.create_job("trainer", spec())
        first = running_on(cluster, "trainer", 1)
        eventually(lambda: (status(cluster, "trainer").get("checkpoint") or {}).get("last"), timeout=20,
                   what="a periodic checkpoint saved")
        # kubectl drain: cordon, then evict every pod of the node
        cluster.core.patch_node(first, {"spec": {"unschedulable": True}})
        for pod in cluster.core.list_namespaced_pod("team-a", field_selector=f"spec.nodeName={first}").items:
            evict(cluster, pod.metadata.name)
        moved = running_on(cluster, "trainer", 2)
        s = status(cluster, "trainer")
        assert moved != first
        assert s.get("restarts", 0) == 0  # backoffLimit 1 is left whole
        move = next(h for h in s["history"] if h["action"] == "migrate")
        assert "evicted from node " + first in move["reason"] and "not a failure" in move["reason"]
        reasons = [(e.type, e.reason) for e in cluster.events("trainer")]
        assert ("Normal", "Drained") in reasons and ("Warning", "Restarting") not in reasons
        drained = next(e.message for e in cluster.events("trainer") if e.reason == "Drained")
        assert "resumes from s3://ckpt" in drained
    finally:
        kubelet.stop()
