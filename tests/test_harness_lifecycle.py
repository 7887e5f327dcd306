"""The first vertical slice on the harness: admission, pods, phases, restarts, deletion."""

from __future__ import annotations

from typing import Any

import pytest

from heterojob.sim.nodes import node
from tests.conftest import Cluster, eventually

pytestmark = pytest.mark.harness


def job_spec(device_class: str = "nvidia-h100", replicas: int = 2, per_replica: int = 8, **extra: Any
             ) -> dict[str, Any]:
    return {
        "priority": "high",
        "replicas": {"min": replicas},
        "devices": [{"deviceClass": device_class, "perReplica": per_replica}],
        "template": {"spec": {"containers": [{"name": "main", "image": "ghcr.io/example/train:cuda12"}]}},
        **extra,
    }


def phase(cluster: Cluster, name: str) -> str | None:
    return (cluster.job(name).get("status") or {}).get("phase")


def env_of(pod: Any) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env}


def test_two_replica_h100_job_runs_and_succeeds(cluster: Cluster, operator: Any) -> None:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("h100-b", "cn-east", "nvidia-h100")])
    cluster.create_job("train", job_spec())

    pods = eventually(lambda: (p := cluster.pods("train")) and len(p) == 2 and p, what="2 pods")
    assert phase(cluster, "train") == "Admitted"
    assert sorted(p.metadata.annotations["heterojob.io/node"] for p in pods) == ["h100-a", "h100-b"]
    for rank, pod in enumerate(pods):
        assert pod.spec.containers[0].resources.limits == {"nvidia.com/gpu": "8"}
        assert pod.spec.node_selector == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                          "topology.kubernetes.io/region": "cn-east"}
        env = env_of(pod)
        assert env["RANK"] == str(rank) and env["WORLD_SIZE"] == "2"
        assert env["MASTER_ADDR"] == "train-0.train.team-a.svc" and env["MASTER_PORT"] == "29500"
        assert env["HETEROJOB_DEVICE_CLASS"] == "nvidia-h100" and env["HETEROJOB_REGION"] == "cn-east"
        owner = pod.metadata.owner_references[0]
        assert (owner.kind, owner.name, owner.controller) == ("HeteroJob", "train", True)
    svc = cluster.core.read_namespaced_service("train", "team-a")
    assert svc.spec.cluster_ip == "None" and svc.spec.selector == {"heterojob.io/job": "train"}

    for pod in pods:
        cluster.set_pod_phase(pod.metadata.name, "Running")
    eventually(lambda: phase(cluster, "train") == "Running", what="Running")
    status = cluster.job("train")["status"]
    assert status["placement"]["region"] == "cn-east" and status["placement"]["deviceClass"] == "nvidia-h100"

    for pod in pods:
        cluster.set_pod_phase(pod.metadata.name, "Succeeded")
    eventually(lambda: phase(cluster, "train") == "Succeeded", what="Succeeded")
    reasons = {e.reason for e in cluster.events("train")}
    assert {"Admitted", "Running", "AllReplicasSucceeded"} <= reasons
