"""The first vertical slice on the harness: admission, pods, phases, restarts, deletion."""

from __future__ import annotations

import time
from typing import Any

import pytest

from heterojob.sim.cluster.nodes import node
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
    # Events are posted after the status is written: wait for them
    eventually(lambda: {"Admitted", "Running", "AllReplicasSucceeded"} <= {e.reason for e in cluster.events("train")},
               what="the Admitted, Running and AllReplicasSucceeded events")


def test_ascend_job_gets_the_ascend_extended_resource(cluster: Cluster, operator: Any) -> None:
    cluster.seed([node("npu-a", "cn-north", "ascend-910b")])
    spec = job_spec("ascend-910b", replicas=1, per_replica=4)
    spec["devices"][0]["overrides"] = {"image": "swr.cn-north-4.myhuaweicloud.com/train:cann8"}
    cluster.create_job("npu", spec)
    (pod,) = eventually(lambda: cluster.pods("npu"), what="the pod")
    container = pod.spec.containers[0]
    assert container.resources.limits == {"huawei.com/Ascend910": "4"}
    assert container.image == "swr.cn-north-4.myhuaweicloud.com/train:cann8"
    assert pod.spec.node_selector["accelerator"] == "huawei-Ascend910"
    assert pod.spec.node_selector["node.kubernetes.io/npu.chip.name"] == "910B3"
    assert env_of(pod)["HETEROJOB_DEVICE_CLASS"] == "ascend-910b"


def test_job_that_cannot_fit_stays_pending_with_its_reason(cluster: Cluster, operator: Any) -> None:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("h100-b", "cn-east", "nvidia-h100", ready=False)])
    cluster.create_job("big", job_spec(replicas=2))
    # The job may be seen before the AcceleratorClasses seeded with it ("unknown AcceleratorClass" for a moment):
    # the class's arrival re-plans it, so wait for the message about room.
    expected = "cn-east/nvidia-h100: room for 1 of 2 replicas"
    status = eventually(lambda: (s := cluster.job("big").get("status")) and expected in s.get("message", "") and s,
                        what="the room message")
    assert status["phase"] == "Pending"
    assert not cluster.pods("big")

    # Room appears (the node comes back): the waiting job is admitted without being touched.
    cluster.core.patch_node_status("h100-b", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    eventually(lambda: len(cluster.pods("big")) == 2, what="admission once the node is Ready")


def test_failing_replica_restarts_the_gang_up_to_the_backoff_limit(cluster: Cluster, operator: Any) -> None:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("h100-b", "cn-east", "nvidia-h100")])
    cluster.create_job("flaky", job_spec(backoffLimit=1))

    first = eventually(lambda: (p := cluster.pods("flaky")) and len(p) == 2 and p, what="generation 1")
    assert {p.metadata.labels["heterojob.io/generation"] for p in first} == {"1"}
    cluster.set_pod_phase(first[1].metadata.name, "Failed", exit_code=137)

    second = eventually(lambda: (p := cluster.pods("flaky")) and len(p) == 2
                        and all(x.metadata.labels["heterojob.io/generation"] == "2" for x in p) and p,
                        what="generation 2")
    status = cluster.job("flaky")["status"]
    assert status["restarts"] == 1
    assert status["history"][-1]["action"] == "restart"
    assert "exited with code 137" in status["history"][-1]["reason"]

    cluster.set_pod_phase(second[0].metadata.name, "Failed", exit_code=1)
    eventually(lambda: cluster.job("flaky")["status"].get("phase") == "Failed", what="Failed")
    status = cluster.job("flaky")["status"]
    assert "backoffLimit 1 reached" in status["message"]
    eventually(lambda: not cluster.pods("flaky"), what="the failed gang's pods deleted")
    # the Event is posted after the status is written: wait for it, as `kubectl get events` would
    eventually(lambda: "BackoffLimitExceeded" in {e.reason for e in cluster.events("flaky")},
               what="the BackoffLimitExceeded event")


def test_deleting_a_job_removes_its_pods_and_service(cluster: Cluster, operator: Any) -> None:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100")])
    cluster.create_job("short", job_spec(replicas=1))
    eventually(lambda: cluster.pods("short"), what="the pod")
    cluster.delete_job("short")
    eventually(lambda: not cluster.pods("short"), what="pods gone")
    services = cluster.core.list_namespaced_service("team-a").items
    assert [s.metadata.name for s in services] == []

    # The devices it held are free again: a job needing the whole node is admitted.
    cluster.create_job("next", job_spec(replicas=1))
    eventually(lambda: cluster.pods("next"), what="the next job's pod")


def test_the_service_of_a_finished_or_failed_job_goes_with_its_gang(cluster: Cluster, operator: Any) -> None:
    """Issue 33 item 8b: a finished job's headless Service resolves nothing and counts against the namespace's
    `services` ResourceQuota: it is deleted when the gang ends (Succeeded, Failed), not when the HeteroJob is.
    A Service of the name that is not the job's is left alone."""
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("h100-b", "cn-east", "nvidia-h100")])
    cluster.create_job("done", job_spec(replicas=1))
    cluster.create_job("broken", job_spec(replicas=1, backoffLimit=0))
    for name in ("done", "broken"):
        eventually(lambda n=name: cluster.pods(n), what=f"{name}'s pod")
        assert cluster.core.read_namespaced_service(name, "team-a").spec.cluster_ip == "None"
    (ok,), (bad,) = cluster.pods("done"), cluster.pods("broken")
    cluster.set_pod_phase(ok.metadata.name, "Succeeded")
    cluster.set_pod_phase(bad.metadata.name, "Failed", exit_code=1)
    eventually(lambda: phase(cluster, "done") == "Succeeded" and phase(cluster, "broken") == "Failed",
               what="Succeeded and Failed")
    services = lambda: {s.metadata.name for s in cluster.core.list_namespaced_service("team-a").items}  # noqa: E731 - a one-line probe
    eventually(lambda: not services() & {"done", "broken"}, what="both Services deleted")
    assert [p.metadata.name for p in cluster.pods("done")] == [ok.metadata.name]  # its pods stay, for their logs
    # someone's own Service named like a finished job is not the operator's to delete
    cluster.core.create_namespaced_service("team-a", {"metadata": {"name": "done"}, "spec": {
        "clusterIP": "None", "ports": [{"port": 80}]}})
    cluster.custom.patch_namespaced_custom_object("heterojob.io", "v1alpha1", "team-a", "heterojobs", "done",
                                                  {"metadata": {"labels": {"touched": "yes"}}})  # another pass
    time.sleep(1.0)
    assert "done" in services()


def test_operator_restart_resumes_from_status_without_duplicating_pods(cluster: Cluster, emulator: Any) -> None:
    from heterojob.sim.cluster.harness import OperatorRunner

    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("h100-b", "cn-east", "nvidia-h100")])
    with OperatorRunner(emulator.kubeconfig) as first:
        cluster.create_job("keep", job_spec())
        pods = eventually(lambda: (p := cluster.pods("keep")) and len(p) == 2 and p, what="2 pods")
    assert "job=team-a/keep action=place" in first.output  # the decision log an SRE reads

    with OperatorRunner(emulator.kubeconfig):
        # The restarted operator knows the devices are held: a second full-node job must wait.
        cluster.create_job("other", job_spec(replicas=1))
        status = eventually(lambda: (s := cluster.job("other").get("status")) and s.get("message") and s,
                            what="other's message")
        assert status["phase"] == "Pending"
        for pod in pods:
            cluster.set_pod_phase(pod.metadata.name, "Running")
        eventually(lambda: phase(cluster, "keep") == "Running", what="Running after the restart")
        assert [p.metadata.name for p in cluster.pods("keep")] == [p.metadata.name for p in pods]
        assert cluster.job("keep")["status"]["placement"]["generation"] == 1
