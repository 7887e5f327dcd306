"""`kubectl drain` of a node a job runs on is a voluntary move, not a failure.

What Kubernetes v1.32 does, reproduced by the emulator: `kubectl drain` (k8s.io/kubectl/pkg/drain) cordons the
node (spec.unschedulable) and POSTs an Eviction for each of its pods; kube-apiserver
(pkg/registry/core/pod/storage/eviction.go, addConditionAndDeletePod) first adds the pod condition
DisruptionTarget=True reason EvictionByEvictionAPI (PodDisruptionConditions: default since v1.26, GA in v1.31),
then deletes the pod gracefully (its terminationGracePeriodSeconds; `kubectl drain --grace-period` overrides it).
heterojob reads that as a drain: the job moves off the cordoned node, with no restart counted against
backoffLimit, from a checkpoint every rank saves within the evicted pod's grace period when its SDK answers in
time (`sdk.Checkpointer(checkpoint_on_eviction=True)`, played by the emulator's kubelet), else from its last one.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from heterojob.constants import ANNOTATION_CHECKPOINT_ACK, ANNOTATION_CHECKPOINT_REQUEST
from heterojob_sdk import Checkpointer, PodClient
from heterojob.sim.cluster.harness import Emulator
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


def evict(cluster: Cluster, pod: str, grace: int | None = None) -> None:
    body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                            "metadata": {"name": pod, "namespace": "team-a"}}
    if grace is not None:  # kubectl drain --grace-period
        body["deleteOptions"] = {"gracePeriodSeconds": grace}
    cluster.core.create_namespaced_pod_eviction(pod, "team-a", body)


def drain(cluster: Cluster, node_name: str, kubeconfig: Path, grace: int | None = None) -> None:
    """`kubectl drain` (the one on PATH), or without one what it does: cordon, then evict the node's pods."""
    kubectl = shutil.which("kubectl")
    if kubectl:
        args = [kubectl, "--kubeconfig", str(kubeconfig), "drain", node_name, "--timeout=60s",
                *([f"--grace-period={grace}"] if grace is not None else [])]
        done = subprocess.run(args, capture_output=True, text=True, timeout=90)
        assert done.returncode == 0 and f"node/{node_name} drained" in done.stdout, done.stdout + done.stderr
        return
    cluster.core.patch_node(node_name, {"spec": {"unschedulable": True}})
    for pod in cluster.core.list_namespaced_pod("team-a", field_selector=f"spec.nodeName={node_name}").items:
        evict(cluster, pod.metadata.name, grace)


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


@pytest.fixture
def kubelet(cluster: Cluster) -> Iterator[Kubelet]:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("h100-b", "cn-east", "nvidia-h100")])
    k = Kubelet(cluster.api, start_delay=0.2, interval=0.2, answer_checkpoints=True, checkpoint_delay=0.2).start()
    yield k
    k.stop()


def drained(cluster: Cluster, kubeconfig: Path, grace: int | None) -> tuple[str, str, dict[str, Any]]:
    """Drain the node of a running job that has saved a checkpoint: (the node, the checkpoint before the
    drain, the status once the job runs again)."""
    cluster.create_job("trainer", spec())
    first = running_on(cluster, "trainer", 1)
    before = eventually(lambda: (status(cluster, "trainer").get("checkpoint") or {}).get("last"), timeout=20,
                        what="a periodic checkpoint saved")
    drain(cluster, first, kubeconfig, grace)
    moved = running_on(cluster, "trainer", 2)
    assert moved != first
    s = status(cluster, "trainer")
    assert s.get("restarts", 0) == 0  # backoffLimit 1 is left whole
    move = next(h for h in s["history"] if h["action"] == "migrate")
    assert first in move["reason"] and "a drain, not a failure" in move["reason"]
    reasons = [(e.type, e.reason) for e in cluster.events("trainer")]
    assert ("Normal", "Drained") in reasons and ("Warning", "Restarting") not in reasons
    return first, before["id"], s


def test_a_drain_moves_the_job_from_a_checkpoint_taken_in_the_grace_period(
        cluster: Cluster, emulator: Emulator, operator: Any, kubelet: Kubelet) -> None:
    first, before, s = drained(cluster, emulator.kubeconfig, None)  # the pod's own grace period (30 s)
    move = next(h for h in s["history"] if h["action"] == "migrate")
    assert f"evicted from node {first}" in move["reason"]
    assert move["progressLostSteps"] == 0 and "CheckpointSaved" not in move["reason"]  # saved, nothing lost
    resumed = [e.message for e in cluster.events("trainer") if e.reason == "Migrating"]
    assert resumed and "resumes from s3://ckpt/trainer/" in resumed[0]
    assert resumed[0].split("resumes from ")[1] != f"s3://ckpt/trainer/{before}/"  # not the one before the drain


def test_a_drain_without_grace_moves_the_job_from_its_last_checkpoint(
        cluster: Cluster, emulator: Emulator, operator: Any, kubelet: Kubelet) -> None:
    first, before, s = drained(cluster, emulator.kubeconfig, 0)  # kubectl drain --grace-period=0: the rank is gone at once
    message = next(e.message for e in cluster.events("trainer") if e.reason == "Drained")
    assert f"resumes from s3://ckpt/trainer/{before}/" in message and "cordoned" in message


@pytest.fixture
def sigterm() -> Iterator[None]:
    """The SDK installs its own SIGTERM handler: the test process gets its own back."""
    old = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, old)


def sdk_pod(cluster: Cluster, name: str, evicted: bool) -> Checkpointer:
    cluster.core.create_namespaced_pod("team-a", {
        "metadata": {"name": name, "finalizers": ["example.com/keep"],
                     "annotations": {ANNOTATION_CHECKPOINT_REQUEST: "g1-7"}},
        "spec": {"nodeName": "h100-a", "containers": [{"name": "main", "image": "train:cuda12"}]}})
    if evicted:
        evict(cluster, name)
    else:
        cluster.core.delete_namespaced_pod(name, "team-a")
    return Checkpointer(directory="s3://ckpt/j", pod=name, namespace="team-a", podinfo="/nonexistent",
                        api=PodClient(cluster.api.configuration.host, token="emulator"),
                        poll_s=0.0, checkpoint_on_eviction=True)


def test_the_sdk_answers_a_checkpoint_after_an_eviction_then_exits(cluster: Cluster, sigterm: None) -> None:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100")])
    ckpt, saved = sdk_pod(cluster, "evicted", evicted=True), []
    os.kill(os.getpid(), signal.SIGTERM)  # the kubelet's SIGTERM: the process lives on
    assert ckpt.terminating
    with pytest.raises(SystemExit) as done:
        ckpt.maybe_checkpoint(12, saved.append)
    assert done.value.code == 143 and saved == ["s3://ckpt/j/g1-7/"]
    pod = cluster.core.read_namespaced_pod("evicted", "team-a")
    assert pod.metadata.annotations[ANNOTATION_CHECKPOINT_ACK] == "g1-7;12;s3://ckpt/j/g1-7/"
    cluster.core.patch_namespaced_pod("evicted", "team-a", {"metadata": {"finalizers": None}})


def test_the_sdk_ends_at_once_on_a_sigterm_that_is_no_eviction(cluster: Cluster, sigterm: None) -> None:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100")])
    ckpt, saved = sdk_pod(cluster, "deleted", evicted=False), []
    os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(SystemExit) as done:
        ckpt.maybe_checkpoint(12, saved.append)
    assert done.value.code == 143 and saved == []
    cluster.core.patch_namespaced_pod("deleted", "team-a", {"metadata": {"finalizers": None}})
