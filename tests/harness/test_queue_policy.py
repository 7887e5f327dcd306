"""The MLFQ queue policy on the real operator (harness): attained service kept in status.scheduling across runs
and operator restarts, displacement by level through a checkpoint, the starvation bound, garbage in status.

Levels are cut at 0.01 device-hours (36 device-seconds) so they are reached in seconds: the 16-device job
`long` passes it after 2.25 s, the 1-device job `short` only after 36 s.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes.client import ApiException

from heterojob.constants import ANNOTATION_CHECKPOINT_ACK, ANNOTATION_CHECKPOINT_REQUEST, GROUP, VERSION
from heterojob.controller import ControllerConfig
from heterojob.sim.cluster.harness import Emulator, OperatorRunner
from heterojob.sim.cluster.nodes import node
from tests.conftest import Cluster, eventually

pytestmark = pytest.mark.harness

IMAGE = "ghcr.io/example/train:cuda12.4"
LEVEL_H = 0.01  # the one level boundary, device-hours


def spec(replicas: int, per_replica: int, priority: str = "medium") -> dict[str, Any]:
    return {"priority": priority, "replicas": {"min": replicas},
            "devices": [{"deviceClass": "nvidia-h100", "perReplica": per_replica}],
            "template": {"spec": {"containers": [{"name": "main", "image": IMAGE}]}},
            "checkpoint": {"timeoutSeconds": 60, "storage": "s3://ckpt"}}


def config(starvation_s: float = 3600.0) -> ControllerConfig:
    return ControllerConfig(min_runtime_s=0, queue_policy="mlfq", queue_thresholds_device_h=(LEVEL_H,),
                            starvation_s=starvation_s)


def status(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.job(name).get("status") or {}


def live(cluster: Cluster, name: str) -> list[Any]:
    return [p for p in cluster.pods(name) if not p.metadata.deletion_timestamp]


def run_all(cluster: Cluster, name: str, replicas: int) -> list[Any]:
    pods = eventually(lambda: (p := live(cluster, name)) and len(p) == replicas and p, what=f"{name}'s pods")
    for pod in pods:
        cluster.set_pod_phase(pod.metadata.name, "Running")
    eventually(lambda: status(cluster, name).get("phase") == "Running", what=f"{name} Running")
    return pods


def succeed(cluster: Cluster, name: str) -> None:
    for pod in live(cluster, name):
        cluster.set_pod_phase(pod.metadata.name, "Succeeded")
    eventually(lambda: status(cluster, name).get("phase") == "Succeeded", what=f"{name} Succeeded")


def displace_long_by_short(cluster: Cluster) -> dict[str, Any]:
    """`long` (16 devices) runs past the first level; `short` (1 device, level 0) displaces it, and only
    after `long`'s checkpoint; returns long's status once it is Preempted."""
    run_all(cluster, "long", 2)
    time.sleep(LEVEL_H * 3600 / 16 + 1.0)  # past the level boundary
    cluster.create_job("short", spec(1, 1))
    asked = eventually(lambda: (p := live(cluster, "long")) and all(
        (x.metadata.annotations or {}).get(ANNOTATION_CHECKPOINT_REQUEST) for x in p) and p,
        what="long asked to checkpoint")
    assert status(cluster, "long")["phase"] == "Checkpointing"
    assert status(cluster, "short")["reason"] == "Preempting" and live(cluster, "short") == []  # checkpoint first
    ckpt = asked[0].metadata.annotations[ANNOTATION_CHECKPOINT_REQUEST]
    for pod in asked:
        cluster.core.patch_namespaced_pod(pod.metadata.name, "team-a", {"metadata": {"annotations": {
            ANNOTATION_CHECKPOINT_ACK: f"{ckpt};300;s3://ckpt/long/{ckpt}/"}}})
    eventually(lambda: status(cluster, "long").get("phase") == "Preempted", what="long preempted")
    run_all(cluster, "short", 1)
    return status(cluster, "long")


@pytest.fixture
def fleet(cluster: Cluster) -> Cluster:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("h100-b", "cn-east", "nvidia-h100")])
    return cluster


def test_attained_service_survives_a_restart_and_a_short_job_passes_a_long_one(
        fleet: Cluster, emulator: Emulator) -> None:
    fleet.create_job("long", spec(2, 8))
    with OperatorRunner(emulator.kubeconfig, controller=config()):
        long = displace_long_by_short(fleet)
    kept = long["scheduling"]
    assert kept["attainedDeviceSeconds"] >= LEVEL_H * 3600 and kept["runSeconds"]["nvidia-h100"] >= 2
    assert kept["accountedGeneration"] == 1 and kept["waitingSince"]
    # its speed, measured from the step its checkpoint holds over the time it ran
    (speed,) = kept["speeds"]
    assert speed["deviceClass"] == "nvidia-h100" and speed["replicas"] == 2 and 0 < speed["stepsPerSecond"] <= 150
    assert long["history"][-1]["action"] == "preempt"

    # a new operator knows `long` only from its status: `newer` (no service yet) goes ahead of it
    with OperatorRunner(emulator.kubeconfig, controller=config()) as again:
        fleet.create_job("newer", spec(2, 8))
        eventually(lambda: status(fleet, "newer").get("phase") == "Pending", what="newer waits")
        assert status(fleet, "short")["phase"] == "Running"  # same level: never displaced for newer
        succeed(fleet, "short")
        run_all(fleet, "newer", 2)
        assert status(fleet, "long")["phase"] == "Preempted" and live(fleet, "long") == []
        assert status(fleet, "long")["scheduling"]["attainedDeviceSeconds"] == kept["attainedDeviceSeconds"]
    assert "Traceback" not in again.output


def test_fifo_keeps_arrival_order_for_the_same_queue(fleet: Cluster, emulator: Emulator) -> None:
    """The same queue as above under --queue-policy fifo: nobody is displaced, the oldest goes first."""
    fleet.create_job("long", spec(2, 8))
    with OperatorRunner(emulator.kubeconfig, controller=ControllerConfig(min_runtime_s=0, queue_policy="fifo")):
        run_all(fleet, "long", 2)
        time.sleep(LEVEL_H * 3600 / 16 + 1.0)
        fleet.create_job("short", spec(1, 1))
        eventually(lambda: status(fleet, "short").get("reason") == "NoRoom", what="short waits")
        time.sleep(1.1)  # creationTimestamp is in whole seconds: newer is younger (ties go by name)
        fleet.create_job("newer", spec(2, 8))
        eventually(lambda: status(fleet, "newer").get("phase") == "Pending", what="newer waits")
        assert all(not (p.metadata.annotations or {}).get(ANNOTATION_CHECKPOINT_REQUEST) for p in live(fleet, "long"))
        succeed(fleet, "long")
        run_all(fleet, "short", 1)
        assert status(fleet, "newer")["phase"] == "Pending"


def test_a_starved_job_is_promoted_and_runs_before_younger_ones(fleet: Cluster, emulator: Emulator) -> None:
    bound = 4.0
    fleet.create_job("long", spec(2, 8))
    with OperatorRunner(emulator.kubeconfig, controller=config(starvation_s=bound)):
        displace_long_by_short(fleet)
        fleet.create_job("newer", spec(2, 8))  # level 0: ahead of long until long has waited the bound
        eventually(lambda: status(fleet, "newer").get("phase") == "Pending", what="newer waits")
        time.sleep(bound + 0.5)
        succeed(fleet, "short")
        run_all(fleet, "long", 2)  # promoted to the first level, and older than newer
        s = status(fleet, "long")["scheduling"]
        assert s["promoted"] is True and s["attainedDeviceSeconds"] == 0  # counted again from zero
        assert status(fleet, "long")["placement"]["generation"] == 2
        assert status(fleet, "newer")["phase"] == "Pending"


def test_garbage_in_status_scheduling_is_refused_or_ignored_and_rewritten(
        fleet: Cluster, operator: OperatorRunner, caplog: pytest.LogCaptureFixture) -> None:
    fleet.create_job("blocker", spec(2, 8, priority="high"))
    run_all(fleet, "blocker", 2)
    fleet.create_job("odd", spec(2, 8))
    eventually(lambda: status(fleet, "odd").get("phase") == "Pending", what="odd waits")

    def patch(scheduling: Any) -> None:
        fleet.custom.patch_namespaced_custom_object_status(GROUP, VERSION, "team-a", "heterojobs", "odd",
                                                           {"status": {"scheduling": scheduling}})

    with pytest.raises(ApiException) as refused:  # what the CRD's schema says, the API server refuses
        patch({"attainedDeviceSeconds": "lots"})
    assert refused.value.status == 422 and "attainedDeviceSeconds" in refused.value.body
    # what it cannot say reaches the operator, which ignores it, says so in its log and writes it back cleaned
    patch({"waitingSince": "yesterday", "runSeconds": {"nvidia-h100": 30.0}, "attainedDeviceSeconds": 1e12})
    succeed(fleet, "blocker")
    run_all(fleet, "odd", 2)
    s = status(fleet, "odd")["scheduling"]
    assert s.get("waitingSince") != "yesterday" and s["runSeconds"] == {"nvidia-h100": 30.0}
    assert "status.scheduling: waitingSince='yesterday' is not an RFC 3339 time: ignored" in caplog.text


def test_a_job_moves_up_to_a_faster_class_when_it_frees_checkpointing_first(cluster: Cluster,
                                                                           emulator: Emulator) -> None:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100", unschedulable=True),
                  node("npu-a", "cn-east", "ascend-910b")])
    both = {**spec(1, 8), "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8},
                                      {"deviceClass": "ascend-910b", "perReplica": 8,
                                       "overrides": {"image": "ghcr.io/example/train:cann8.0"}}]}
    cluster.create_job("climber", both)
    with OperatorRunner(emulator.kubeconfig, resync_seconds=1.0, controller=config()):
        eventually(lambda: (status(cluster, "climber").get("placement") or {}).get("deviceClass") == "ascend-910b",
                   what="placed on the only class with room")
        (pod,) = run_all(cluster, "climber", 1)
        cluster.core.patch_node("h100-a", {"spec": {"unschedulable": False}})  # the faster class frees
        asked = eventually(lambda: (p := live(cluster, "climber")) and all(
            (x.metadata.annotations or {}).get(ANNOTATION_CHECKPOINT_REQUEST) for x in p) and p,
            what="climber asked to checkpoint")
        s = status(cluster, "climber")
        assert s["phase"] == "Checkpointing" and s["migration"]["trigger"] == "upgrade"
        assert s["migration"]["reserved"]["deviceClass"] == "nvidia-h100"  # make before break
        ckpt = asked[0].metadata.annotations[ANNOTATION_CHECKPOINT_REQUEST]
        cluster.core.patch_namespaced_pod(pod.metadata.name, "team-a", {"metadata": {"annotations": {
            ANNOTATION_CHECKPOINT_ACK: f"{ckpt};50;s3://ckpt/climber/{ckpt}/"}}})
        eventually(lambda: (status(cluster, "climber").get("placement") or {}).get("deviceClass") == "nvidia-h100",
                   what="moved up")
        s = status(cluster, "climber")
        assert s["placement"]["generation"] == 2
        assert s["history"][-1]["action"] == "migrate" and "move up to nvidia-h100" in s["history"][-1]["reason"]
        assert s["scheduling"]["runSeconds"].get("ascend-910b", 0) >= 0 and s["scheduling"]["accountedGeneration"] == 1


def ack_all(cluster: Cluster, name: str, step: int) -> None:
    """The SDK on every live rank answers the checkpoint asked of it, at `step`."""
    pods = eventually(lambda: (p := live(cluster, name)) and all(
        (x.metadata.annotations or {}).get(ANNOTATION_CHECKPOINT_REQUEST) for x in p) and p,
        what=f"{name} asked to checkpoint")
    ckpt = pods[0].metadata.annotations[ANNOTATION_CHECKPOINT_REQUEST]
    for pod in pods:
        cluster.core.patch_namespaced_pod(pod.metadata.name, "team-a", {"metadata": {"annotations": {
            ANNOTATION_CHECKPOINT_ACK: f"{ckpt};{step};s3://ckpt/{name}/{ckpt}/"}}})


def test_a_grown_job_that_scales_badly_goes_back_to_a_smaller_size(cluster: Cluster, emulator: Emulator) -> None:
    """Growth is a trial: the steps its checkpoints hold measure it at 1 and at 4 replicas; 4 replicas train
    barely faster than 1 (efficiency well under 0.6), so it shrinks to half that size."""
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(4)])
    cluster.create_job("blocker", spec(3, 8))
    # a running job looks for room to grow on its passes: every resync once nothing else wakes it
    with OperatorRunner(emulator.kubeconfig, resync_seconds=1.0, controller=config()):
        run_all(cluster, "blocker", 3)
        cluster.create_job("elastic", {**spec(1, 8), "replicas": {"min": 1, "max": 4, "initial": 1},
                                       "policy": {"cooldownSeconds": 0, "maxMigrationsPerHour": 10}})
        run_all(cluster, "elastic", 1)
        time.sleep(3.0)
        succeed(cluster, "blocker")  # room for 3 more replicas: it grows, through a checkpoint
        ack_all(cluster, "elastic", 1000)  # ~1000 steps in >= 3 s at 1 replica
        eventually(lambda: (status(cluster, "elastic").get("placement") or {}).get("replicas") == 4, what="grown")
        run_all(cluster, "elastic", 4)
        time.sleep(3.0)
        cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, "team-a", "heterojobs", "elastic", {
            "metadata": {"annotations": {"heterojob.io/checkpoint": "measure"}}})
        ack_all(cluster, "elastic", 2000)  # ~1000 steps in >= 3 s at 4 replicas: no faster than 1

        def shrunk() -> bool:
            if (status(cluster, "elastic").get("placement") or {}).get("replicas") == 2:
                return True
            for pod in live(cluster, "elastic"):  # the resize's checkpoint (unless the last one answers it)
                a = pod.metadata.annotations or {}
                asked = a.get(ANNOTATION_CHECKPOINT_REQUEST)
                if asked and not (a.get(ANNOTATION_CHECKPOINT_ACK) or "").startswith(f"{asked};"):
                    cluster.core.patch_namespaced_pod(pod.metadata.name, "team-a", {"metadata": {"annotations": {
                        ANNOTATION_CHECKPOINT_ACK: f"{asked};2100;s3://ckpt/elastic/{asked}/"}}})
            return False

        eventually(shrunk, what="back to 2 replicas")
        s = status(cluster, "elastic")
        assert "measured scaling too low at 4 replicas: 4 -> 2" in s["history"][-1]["reason"]
        assert sorted(m["replicas"] for m in s["scheduling"]["speeds"]) == [1, 4]
