"""Quotas, fallback to another class, priorities and preemption, on the real operator (harness)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client import ApiException

from heterojob.constants import ANNOTATION_CHECKPOINT_ACK, ANNOTATION_CHECKPOINT_REQUEST, GROUP, VERSION
from heterojob.controller import ControllerConfig
from heterojob.sim.cluster.harness import Emulator, OperatorRunner
from heterojob.sim.cluster.nodes import node
from tests.conftest import Cluster, eventually

pytestmark = pytest.mark.harness

CUDA, CANN = "ghcr.io/example/train:cuda12.4", "ghcr.io/example/train:cann8.0"


def spec(*classes: str, replicas: int = 2, per_replica: int = 8, priority: str = "medium", **extra: Any
         ) -> dict[str, Any]:
    images = {"nvidia-h100": CUDA, "ascend-910b": CANN}
    return {
        "priority": priority, "replicas": {"min": replicas},
        "devices": [{"deviceClass": c, "perReplica": per_replica, "overrides": {"image": images[c]}} for c in classes],
        "template": {"spec": {"containers": [{"name": "main", "image": CUDA}]}},
        **extra,
    }


def quota(cluster: Cluster, name: str, limits: list[dict[str, Any]], namespace: str = "team-a") -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "HeteroQuota",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"limits": limits}}
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "heteroquotas", body)


def status(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.job(name).get("status") or {}


def run_all(cluster: Cluster, job: str, replicas: int) -> list[Any]:
    pods = eventually(lambda: (p := [x for x in cluster.pods(job) if not x.metadata.deletion_timestamp])
                      and len(p) == replicas and p, what=f"{replicas} pods of {job}")
    for pod in pods:
        cluster.set_pod_phase(pod.metadata.name, "Running")
    eventually(lambda: status(cluster, job).get("phase") == "Running", what=f"{job} Running")
    return pods


@pytest.fixture
def fleet(cluster: Cluster) -> Cluster:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("h100-b", "cn-east", "nvidia-h100"),
                  node("npu-a", "cn-north", "ascend-910b"), node("npu-b", "cn-north", "ascend-910b")])
    return cluster


@pytest.fixture
def preempting_operator(emulator: Emulator, fleet: Cluster) -> Iterator[OperatorRunner]:
    with OperatorRunner(emulator.kubeconfig, controller=ControllerConfig(min_runtime_s=0)) as runner:
        yield runner


def test_full_h100_quota_falls_back_to_ascend_with_the_cann_image(fleet: Cluster, operator: Any) -> None:
    quota(fleet, "gpus", [{"deviceClass": "nvidia-h100", "region": "*", "devices": 16}])
    fleet.create_job("first", spec("nvidia-h100"))
    eventually(lambda: status(fleet, "first").get("phase") == "Admitted", what="first admitted")
    fleet.create_job("second", spec("nvidia-h100", "ascend-910b"))
    placed = eventually(lambda: status(fleet, "second").get("placement"), what="second placed")
    assert placed["deviceClass"] == "ascend-910b" and placed["region"] == "cn-north"
    pods = eventually(lambda: (p := fleet.pods("second")) and len(p) == 2 and p, what="second's pods")
    assert {p.spec.containers[0].image for p in pods} == {CANN}
    assert {p.spec.containers[0].resources.limits["huawei.com/Ascend910"] for p in pods} == {"8"}

    def used() -> list[dict[str, Any]] | None:
        q = fleet.custom.get_namespaced_custom_object(GROUP, VERSION, "team-a", "heteroquotas", "gpus")
        return (q.get("status") or {}).get("used")

    assert eventually(used, what="quota status.used") == [
        {"deviceClass": "nvidia-h100", "region": "cn-east", "devices": 16}]
    q = fleet.custom.get_namespaced_custom_object(GROUP, VERSION, "team-a", "heteroquotas", "gpus")
    assert q["status"]["summary"] == "nvidia-h100/*: 16/16"  # the Used/Limit column of `kubectl get hq`


def test_a_quota_naming_unknown_classes_or_regions_says_which_field(fleet: Cluster, operator: Any) -> None:
    quota(fleet, "typo", [{"deviceClass": "nvidia-h100", "region": "cn-east", "devices": 8},
                          {"deviceClass": "nvidia-h1000", "devices": 4},
                          {"deviceClass": "*", "region": "cn-esat", "devices": 4}])
    fleet.create_job("nudge", spec("nvidia-h100", replicas=1))  # the controller starts on the first job event

    def message() -> str | None:
        q = fleet.custom.get_namespaced_custom_object(GROUP, VERSION, "team-a", "heteroquotas", "typo")
        return (q.get("status") or {}).get("message")

    text = eventually(message, what="the quota's message")
    assert "spec.limits[1].deviceClass: unknown AcceleratorClass 'nvidia-h1000'" in text
    assert "spec.limits[2].region: unknown Region 'cn-esat'" in text and "spec.limits[0]" not in text


def test_raising_a_quota_admits_the_waiting_job(fleet: Cluster, operator: Any) -> None:
    quota(fleet, "gpus", [{"deviceClass": "nvidia-h100", "region": "cn-east", "devices": 8}])
    fleet.create_job("big", spec("nvidia-h100"))
    message = eventually(lambda: (s := status(fleet, "big")).get("reason") == "NoRoom" and s["message"],
                         what="big waiting on quota")
    assert "cn-east/nvidia-h100: quota 0/8 used (gpus: nvidia-h100 in cn-east; needs 16)" in message
    assert status(fleet, "big")["phase"] == "Pending"
    fleet.custom.patch_namespaced_custom_object(
        GROUP, VERSION, "team-a", "heteroquotas", "gpus",
        {"spec": {"limits": [{"deviceClass": "nvidia-h100", "region": "cn-east", "devices": 16}]}})
    eventually(lambda: status(fleet, "big").get("phase") == "Admitted", what="big admitted after the raise")


def test_lowering_a_quota_below_use_never_stops_running_jobs(fleet: Cluster, operator: Any) -> None:
    quota(fleet, "gpus", [{"deviceClass": "*", "region": "*", "devices": 32}])
    fleet.create_job("running", spec("nvidia-h100"))
    run_all(fleet, "running", 2)
    fleet.custom.patch_namespaced_custom_object(GROUP, VERSION, "team-a", "heteroquotas", "gpus",
                                                {"spec": {"limits": [{"deviceClass": "*", "devices": 4}]}})

    def summary() -> str | None:
        q = fleet.custom.get_namespaced_custom_object(GROUP, VERSION, "team-a", "heteroquotas", "gpus")
        return (q.get("status") or {}).get("summary")

    # the operator reads quotas from its watch, as any controller's cache: a job created before the edit reaches it
    # may be admitted under the old limit. The summary it writes from that view says when it has the new one.
    eventually(lambda: summary() == "*/*: 16/4", what="the operator sees the lowered quota")
    fleet.create_job("later", spec("ascend-910b", replicas=1))
    eventually(lambda: "quota 16/4 used" in (status(fleet, "later").get("message") or ""), what="later blocked")
    assert status(fleet, "running")["phase"] == "Running" and len(fleet.pods("running")) == 2


def test_urgent_job_preempts_a_low_one_after_its_checkpoint_and_the_low_one_resumes(
        fleet: Cluster, preempting_operator: OperatorRunner) -> None:
    fleet.create_job("low", spec("nvidia-h100", priority="low",
                                 checkpoint={"timeoutSeconds": 60, "storage": "s3://ckpt"}))
    low_pods = run_all(fleet, "low", 2)
    fleet.create_job("urgent", spec("nvidia-h100", replicas=1, priority="urgent"))

    # the low job is asked to checkpoint: every pod carries the request id (step 1)
    asked = eventually(lambda: (p := fleet.pods("low")) and all(
        (x.metadata.annotations or {}).get(ANNOTATION_CHECKPOINT_REQUEST) for x in p) and p,
        what="checkpoint requests on low's pods")
    ckpt = asked[0].metadata.annotations[ANNOTATION_CHECKPOINT_REQUEST]
    low = status(fleet, "low")
    assert low["phase"] == "Checkpointing" and low["checkpoint"]["pending"]["by"] == "team-a/urgent"
    assert status(fleet, "urgent")["reason"] == "Preempting"
    eventually(lambda: any("preempting 1 lower-priority job(s) (team-a/low)" in (e.message or "")
                           for e in fleet.events("urgent")), what="urgent's Preempting event")
    assert fleet.pods("urgent") == []  # nothing starts before the checkpoint

    # the SDK answers on every rank (step 2)
    for pod in low_pods:
        fleet.core.patch_namespaced_pod(pod.metadata.name, "team-a", {"metadata": {"annotations": {
            ANNOTATION_CHECKPOINT_ACK: f"{ckpt};1200;s3://ckpt/low/{ckpt}/"}}})
    eventually(lambda: status(fleet, "low").get("phase") == "Preempted", what="low preempted")
    low = status(fleet, "low")
    assert low["checkpoint"]["last"]["uri"] == f"s3://ckpt/low/{ckpt}/" and low["checkpoint"]["last"]["step"] == 1200
    entry = low["history"][-1]
    assert entry["action"] == "preempt" and entry["progressLostSteps"] == 0 and "team-a/urgent" in entry["reason"]
    eventually(lambda: any(e.reason == "Preempted" for e in fleet.events("low")), what="the Preempted event")

    urgent = run_all(fleet, "urgent", 1)
    assert status(fleet, "low")["phase"] == "Preempted"  # 8 free devices, low needs 16: still waiting
    fleet.set_pod_phase(urgent[0].metadata.name, "Succeeded")
    eventually(lambda: status(fleet, "urgent").get("phase") == "Succeeded", what="urgent done")

    again = run_all(fleet, "low", 2)  # room freed: low runs again, from its checkpoint
    env = {e.name: e.value for e in again[0].spec.containers[0].env}
    assert env["HETEROJOB_RESUME_FROM"] == f"s3://ckpt/low/{ckpt}/"
    assert status(fleet, "low")["placement"]["generation"] == 2


def test_a_job_without_the_sdk_is_preempted_at_the_deadline(fleet: Cluster,
                                                            preempting_operator: OperatorRunner) -> None:
    fleet.create_job("quiet", spec("nvidia-h100", priority="low", checkpoint={"timeoutSeconds": 1}))
    run_all(fleet, "quiet", 2)
    fleet.create_job("vip", spec("nvidia-h100", priority="high", replicas=1))
    eventually(lambda: status(fleet, "quiet").get("phase") == "Preempted", timeout=15, what="quiet preempted")
    entry = status(fleet, "quiet")["history"][-1]
    assert entry["action"] == "preempt" and "by the deadline" in entry["reason"]
    assert entry["progressLostSeconds"] >= 0 and "progressLostSteps" not in entry
    run_all(fleet, "vip", 1)


def test_equal_priority_never_preempts_and_young_jobs_are_spared(fleet: Cluster, operator: Any) -> None:
    fleet.create_job("a", spec("nvidia-h100", priority="high"))
    run_all(fleet, "a", 2)
    fleet.create_job("b", spec("nvidia-h100", priority="high", replicas=1))
    fleet.create_job("c", spec("nvidia-h100", priority="urgent", replicas=1))
    # default minimum runtime (300 s): `a` is too young to preempt, even for an urgent job
    eventually(lambda: status(fleet, "c").get("reason") == "NoRoom", what="c waits")
    assert status(fleet, "b").get("reason") == "NoRoom" and status(fleet, "a")["phase"] == "Running"


def test_an_invalid_quota_blocks_its_namespace_and_says_why(fleet: Cluster, operator: Any) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "HeteroQuota", "metadata": {"name": "typo", "namespace": "team-a"},
            "spec": {"limits": [{"deviceClass": "nvidia-h100", "devices": -3}]}}
    with pytest.raises(ApiException) as refused:  # what the CRD's schema can say, the API server refuses
        fleet.custom.create_namespaced_custom_object(GROUP, VERSION, "team-a", "heteroquotas", body)
    assert refused.value.status == 422 and "spec.limits[0].devices: Invalid value: -3" in refused.value.body
    # what it cannot (two limits for one class and region) reaches the operator, which blocks the namespace
    body["spec"] = {"limits": [{"deviceClass": "nvidia-h100", "devices": 4}, {"deviceClass": "nvidia-h100", "devices": 8}]}
    fleet.custom.create_namespaced_custom_object(GROUP, VERSION, "team-a", "heteroquotas", body)

    def message() -> str | None:
        q = fleet.custom.get_namespaced_custom_object(GROUP, VERSION, "team-a", "heteroquotas", "typo")
        return (q.get("status") or {}).get("message")

    text = eventually(message, what="the quota's status.message")
    assert "invalid spec" in text and "spec.limits" in text and "keep one" in text
    fleet.create_job("blocked", spec("nvidia-h100", replicas=1))
    eventually(lambda: "typo (invalid spec, fix it)" in (status(fleet, "blocked").get("message") or ""),
               what="the job names the broken quota")
    fleet.custom.patch_namespaced_custom_object(GROUP, VERSION, "team-a", "heteroquotas", "typo",
                                                {"spec": {"limits": [{"deviceClass": "nvidia-h100", "devices": 8}]}})
    eventually(lambda: status(fleet, "blocked").get("phase") == "Admitted", what="admitted once fixed")
    eventually(lambda: message() is None, what="the quota's message cleared")
