"""Migration: the operator moving jobs (harness). The pure judge is in tests/unit/test_migration.py."""

from __future__ import annotations

from typing import Any

import pytest

from heterojob.constants import ANNOTATION_CHECKPOINT_ACK, ANNOTATION_CHECKPOINT_REQUEST, ANNOTATION_MIGRATE
from heterojob.sim.cluster.nodes import node
from tests.conftest import Cluster, eventually


# --- harness ------------------------------------------------------------------------------------------

def spec(**extra: Any) -> dict[str, Any]:
    return {"priority": "high", "replicas": {"min": 2},
            "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
            "checkpoint": {"timeoutSeconds": 30, "storage": "s3://ckpt"},
            "template": {"spec": {"containers": [{"name": "main", "image": "train:cuda12"}]}}, **extra}


def status(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.job(name).get("status") or {}


def live_pods(cluster: Cluster, name: str, generation: int) -> list[Any]:
    return [p for p in cluster.pods(name) if not p.metadata.deletion_timestamp
            and p.metadata.labels.get("heterojob.io/generation") == str(generation)]


def running_mover(cluster: Cluster) -> None:
    """The job "mover" (2 replicas) created and Running on its first placement."""
    cluster.create_job("mover", spec())
    pods = eventually(lambda: (p := live_pods(cluster, "mover", 1)) and len(p) == 2 and p, what="2 pods")
    for pod in pods:
        cluster.set_pod_phase(pod.metadata.name, "Running")
    eventually(lambda: status(cluster, "mover").get("phase") == "Running", what="Running")


@pytest.mark.harness
def test_a_requested_migration_checkpoints_and_resumes_on_other_nodes(cluster: Cluster, operator: Any) -> None:
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(4)])
    running_mover(cluster)
    before = set(status(cluster, "mover")["placement"]["nodes"])

    cluster.custom.patch_namespaced_custom_object("heterojob.io", "v1alpha1", "team-a", "heterojobs", "mover",
                                                  {"metadata": {"annotations": {ANNOTATION_MIGRATE: "drain h100-0"}}})
    asked = eventually(lambda: (p := live_pods(cluster, "mover", 1)) and all(
        (x.metadata.annotations or {}).get(ANNOTATION_CHECKPOINT_REQUEST) for x in p) and p, what="requests")
    ckpt = asked[0].metadata.annotations[ANNOTATION_CHECKPOINT_REQUEST]
    assert status(cluster, "mover")["phase"] == "Checkpointing"
    for pod in asked:
        cluster.core.patch_namespaced_pod(pod.metadata.name, "team-a", {"metadata": {"annotations": {
            ANNOTATION_CHECKPOINT_ACK: f"{ckpt};500;s3://ckpt/mover/{ckpt}/"}}})

    new = eventually(lambda: (p := live_pods(cluster, "mover", 2)) and len(p) == 2 and p, what="generation 2")
    assert {p.metadata.annotations["heterojob.io/node"] for p in new}.isdisjoint(before)
    env = {e.name: e.value for e in new[0].spec.containers[0].env}
    assert env["HETEROJOB_RESUME_FROM"] == f"s3://ckpt/mover/{ckpt}/"
    s = status(cluster, "mover")
    entry = s["history"][-1]
    assert entry["action"] == "migrate" and entry["progressLostSteps"] == 0 and "drain h100-0" in entry["reason"]
    assert entry["from"].startswith("cn-east/nvidia-h100 x2 (generation 1)") and "generation 2" in entry["to"]
    assert ANNOTATION_MIGRATE not in (cluster.job("mover")["metadata"].get("annotations") or {})
    assert eventually(lambda: not live_pods(cluster, "mover", 1), what="old gang gone")
    # what the user asked for, done as asked: a Normal Event (Warning is for what needs attention)
    moved = eventually(lambda: [e for e in cluster.events("mover") if e.reason == "Migrating"], what="Migrating")
    assert [e.type for e in moved] == ["Normal"]

    # a second request inside the cooldown is held, with an Event saying why
    for pod in new:
        cluster.set_pod_phase(pod.metadata.name, "Running")
    eventually(lambda: status(cluster, "mover").get("phase") == "Running", what="Running again")
    cluster.custom.patch_namespaced_custom_object("heterojob.io", "v1alpha1", "team-a", "heterojobs", "mover",
                                                  {"metadata": {"annotations": {ANNOTATION_MIGRATE: "again"}}})
    eventually(lambda: any(e.reason == "MigrationHeld" and "cooldown" in (e.message or "")
                           for e in cluster.events("mover")), what="MigrationHeld event")
    assert status(cluster, "mover")["placement"]["generation"] == 2


@pytest.mark.harness
def test_an_operator_restarted_mid_migration_completes_it_exactly_once(cluster: Cluster, emulator: Any) -> None:
    from heterojob.sim.cluster.harness import OperatorRunner

    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(4)])
    with OperatorRunner(emulator.kubeconfig):
        running_mover(cluster)
        cluster.custom.patch_namespaced_custom_object(
            "heterojob.io", "v1alpha1", "team-a", "heterojobs", "mover",
            {"metadata": {"annotations": {ANNOTATION_MIGRATE: "maintenance"}}})
        asked = eventually(lambda: (p := live_pods(cluster, "mover", 1)) and all(
            (x.metadata.annotations or {}).get(ANNOTATION_CHECKPOINT_REQUEST) for x in p) and p, what="requests")
    # the operator is gone; the SDK answers meanwhile
    ckpt = asked[0].metadata.annotations[ANNOTATION_CHECKPOINT_REQUEST]
    for pod in asked:
        cluster.core.patch_namespaced_pod(pod.metadata.name, "team-a", {"metadata": {"annotations": {
            ANNOTATION_CHECKPOINT_ACK: f"{ckpt};42;s3://ckpt/mover/{ckpt}/"}}})
    assert status(cluster, "mover")["phase"] == "Checkpointing"
    with OperatorRunner(emulator.kubeconfig) as again:
        new = eventually(lambda: (p := live_pods(cluster, "mover", 2)) and len(p) == 2 and p, what="generation 2")
        for pod in new:
            cluster.set_pod_phase(pod.metadata.name, "Running")
        eventually(lambda: status(cluster, "mover").get("phase") == "Running", what="Running")
        s = status(cluster, "mover")
        assert [h["action"] for h in s["history"]].count("migrate") == 1
        assert s["placement"]["generation"] == 2 and s["checkpoint"]["last"]["step"] == 42
        assert len(live_pods(cluster, "mover", 2)) == 2 and not live_pods(cluster, "mover", 3)
    assert "Traceback" not in again.output


@pytest.mark.harness
def test_periodic_checkpoints_leave_the_job_running(cluster: Cluster, operator: Any) -> None:
    cluster.seed([node("h100-0", "cn-east", "nvidia-h100")])
    cluster.create_job("steady", {**spec(), "replicas": {"min": 1},
                                  "checkpoint": {"intervalSeconds": 1, "timeoutSeconds": 30, "storage": "s3://c"}})
    [pod] = eventually(lambda: live_pods(cluster, "steady", 1), what="pod")
    cluster.set_pod_phase(pod.metadata.name, "Running")
    eventually(lambda: status(cluster, "steady").get("phase") == "Running", what="Running")
    asked = eventually(lambda: (p := cluster.core.read_namespaced_pod(pod.metadata.name, "team-a"))
                       .metadata.annotations.get(ANNOTATION_CHECKPOINT_REQUEST) and p, what="a periodic request")
    ckpt = asked.metadata.annotations[ANNOTATION_CHECKPOINT_REQUEST]
    assert status(cluster, "steady")["phase"] == "Running"  # not a disruption
    cluster.core.patch_namespaced_pod(pod.metadata.name, "team-a", {"metadata": {"annotations": {
        ANNOTATION_CHECKPOINT_ACK: f"{ckpt};77;s3://c/steady/{ckpt}/"}}})
    last = eventually(lambda: ((status(cluster, "steady").get("checkpoint") or {}).get("last") or {}).get("step") == 77
                      and status(cluster, "steady")["checkpoint"]["last"], what="last checkpoint recorded")
    assert last["uri"] == f"s3://c/steady/{ckpt}/"
    s = status(cluster, "steady")
    assert s["phase"] == "Running" and s["placement"]["generation"] == 1
    assert not any(h["action"] in ("migrate", "preempt") for h in s.get("history", []))
    # and the next one comes about a second later
    eventually(lambda: cluster.core.read_namespaced_pod(pod.metadata.name, "team-a").metadata.annotations
               .get(ANNOTATION_CHECKPOINT_REQUEST) != ckpt, what="the next periodic request")


@pytest.mark.harness
def test_an_elastic_job_grows_into_free_room_and_shrinks_when_idle(cluster: Cluster, operator: Any) -> None:
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    cluster.create_job("elastic", {**spec(), "replicas": {"min": 1, "max": 2, "initial": 1},
                                   "checkpoint": {"timeoutSeconds": 1},
                                   "policy": {"triggers": ["lowUtilization"], "lowUtilizationPercent": 20,
                                              "lowUtilizationForSeconds": 0, "cooldownSeconds": 0}})
    [pod] = eventually(lambda: live_pods(cluster, "elastic", 1), what="one pod")
    cluster.set_pod_phase(pod.metadata.name, "Running")

    # room for a second replica: checkpoint (times out: no SDK), restart with WORLD_SIZE 2
    grown = eventually(lambda: (p := live_pods(cluster, "elastic", 2)) and len(p) == 2 and p, timeout=20,
                       what="two replicas")
    assert {e.value for p in grown for e in p.spec.containers[0].env if e.name == "WORLD_SIZE"} == {"2"}
    entry = status(cluster, "elastic")["history"][-1]
    assert entry["action"] == "resize" and entry["reason"].startswith("grow: room for 2 replicas")
    for p in grown:
        cluster.set_pod_phase(p.metadata.name, "Running")
    eventually(lambda: status(cluster, "elastic").get("phase") == "Running", what="Running with 2")

    # idle (what the monitor would write): shrink back to the minimum
    cluster.custom.patch_namespaced_custom_object_status(
        "heterojob.io", "v1alpha1", "team-a", "heterojobs", "elastic",
        {"status": {"utilization": {"average": 3.0, "perReplica": [3.0, 3.0]}}})
    shrunk = eventually(lambda: (p := live_pods(cluster, "elastic", 3)) and len(p) == 1 and p, timeout=20,
                        what="one replica again")
    assert {e.value for e in shrunk[0].spec.containers[0].env if e.name == "WORLD_SIZE"} == {"1"}
    s = status(cluster, "elastic")
    assert s["history"][-1]["reason"].startswith("lowUtilization: utilization 3% < 20%")
    assert s["placement"]["replicas"] == 1



@pytest.mark.harness
def test_a_waiting_job_takes_back_the_room_lent_to_a_grown_job(cluster: Cluster, operator: Any) -> None:
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    cluster.create_job("elastic", {**spec(), "replicas": {"min": 1, "max": 2, "initial": 1},
                                   "checkpoint": {"timeoutSeconds": 1}, "policy": {"cooldownSeconds": 0}})
    [pod] = eventually(lambda: live_pods(cluster, "elastic", 1), what="one pod")
    cluster.set_pod_phase(pod.metadata.name, "Running")
    for p in eventually(lambda: (p := live_pods(cluster, "elastic", 2)) and len(p) == 2 and p, timeout=20,
                        what="grown to both nodes"):
        cluster.set_pod_phase(p.metadata.name, "Running")
    eventually(lambda: status(cluster, "elastic").get("phase") == "Running", what="Running with 2")

    # a job of the same priority arrives: the grown job checkpoints and goes back to its admitted size
    cluster.create_job("second", {**spec(), "replicas": {"min": 1}})
    eventually(lambda: any("reclaiming lent devices: shrinking team-a/elastic to 1 replica(s)" in (e.message or "")
                           for e in cluster.events("second")), what="the reclaim explained to the waiting job")
    shrunk = eventually(lambda: (p := live_pods(cluster, "elastic", 3)) and len(p) == 1 and p, timeout=20,
                        what="the grown job back at one replica")
    [second] = eventually(lambda: live_pods(cluster, "second", 1), timeout=20, what="the waiting job placed")
    node_of = "heterojob.io/node"
    assert shrunk[0].metadata.annotations[node_of] != second.metadata.annotations[node_of]
    entry = status(cluster, "elastic")["history"][-1]
    assert entry["action"] == "resize" and entry["reason"].startswith("reclaim: team-a/second (high) needs the room")
    cluster.set_pod_phase(shrunk[0].metadata.name, "Running")
    eventually(lambda: status(cluster, "elastic").get("phase") == "Running", what="Running with 1")
    assert status(cluster, "elastic")["placement"]["replicas"] == 1  # no room left to grow into


def test_resize_rules() -> None:
    from heterojob.engine.capacity.migration import GROW, LOW_UTILIZATION, resize

    # idle long enough: halve toward the minimum
    r = resize(4, 1, 4, 5.0, 0.0, 2000.0, 10.0, 1800.0, None)
    assert r is not None and (r.trigger, r.replicas) == (LOW_UTILIZATION, 2)
    assert resize(4, 1, 4, 5.0, 1000.0, 2000.0, 10.0, 1800.0, None) is None  # not idle for long enough
    assert resize(1, 1, 4, 5.0, 0.0, 9999.0, 10.0, 0.0, None) is None  # already at the minimum
    assert resize(2, 1, 4, None, None, 9999.0, 10.0, 0.0, None) is None  # no data never shrinks
    g = resize(2, 1, 4, 80.0, None, 0.0, 10.0, 0.0, 4)
    assert g is not None and (g.trigger, g.replicas) == (GROW, 4)
    assert resize(2, 1, 4, 5.0, None, 0.0, 10.0, 1800.0, 4) is None  # idle jobs do not grow
    assert resize(4, 1, 4, 80.0, None, 0.0, 10.0, 0.0, 4) is None


@pytest.mark.harness
def test_a_job_without_the_sdk_still_migrates_at_the_deadline(cluster: Cluster, operator: Any) -> None:
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    cluster.create_job("plain", {**spec(), "replicas": {"min": 1}, "checkpoint": {"timeoutSeconds": 1}})
    [pod] = eventually(lambda: live_pods(cluster, "plain", 1), what="pod")
    cluster.set_pod_phase(pod.metadata.name, "Running")
    eventually(lambda: status(cluster, "plain").get("phase") == "Running", what="Running")
    cluster.custom.patch_namespaced_custom_object("heterojob.io", "v1alpha1", "team-a", "heterojobs", "plain",
                                                  {"metadata": {"annotations": {ANNOTATION_MIGRATE: "rebalance"}}})
    [new] = eventually(lambda: live_pods(cluster, "plain", 2), timeout=15, what="moved after the deadline")
    assert "HETEROJOB_RESUME_FROM" not in {e.name for e in new.spec.containers[0].env}  # nothing was saved
    entry = status(cluster, "plain")["history"][-1]
    assert entry["action"] == "migrate" and "by the deadline" in entry["reason"]
    assert entry["progressLostSeconds"] >= 0 and entry["durationSeconds"] >= 1


def annotate(cluster: Cluster, name: str, value: str | None) -> None:
    cluster.custom.patch_namespaced_custom_object("heterojob.io", "v1alpha1", "team-a", "heterojobs", name,
                                                  {"metadata": {"annotations": {ANNOTATION_MIGRATE: value}}})


def run(cluster: Cluster, name: str, replicas: int, generation: int = 1) -> list[Any]:
    pods = eventually(lambda: (p := live_pods(cluster, name, generation)) and len(p) == replicas and p,
                      what=f"{name}: {replicas} pods of generation {generation}")
    for pod in pods:
        cluster.set_pod_phase(pod.metadata.name, "Running")
    eventually(lambda: status(cluster, name).get("phase") == "Running", what=f"{name} Running")
    return pods


@pytest.mark.harness
def test_a_manual_move_with_nowhere_to_go_is_held_and_the_job_runs_on(cluster: Cluster, operator: Any) -> None:
    """Make before break: with the fleet full, "Migrate now" touches nothing until a destination frees."""
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    cluster.create_job("mover", spec(replicas={"min": 1}))
    cluster.create_job("other", spec(replicas={"min": 1}, priority="medium"))
    pods = run(cluster, "mover", 1)
    run(cluster, "other", 1)
    annotate(cluster, "mover", "drain")
    eventually(lambda: any(e.reason == "MigrationHeld" and "no destination" in (e.message or "")
                           for e in cluster.events("mover")), what="the move held for want of a destination")
    s = status(cluster, "mover")
    assert s["phase"] == "Running" and s["placement"]["generation"] == 1
    assert next(c for c in s["conditions"] if c["type"] == "MoveHeld")["status"] == "True"
    assert [p.metadata.name for p in live_pods(cluster, "mover", 1)] == [p.metadata.name for p in pods]
    assert status(cluster, "other")["phase"] == "Running"  # nobody was disturbed for a voluntary move
    # room appears: the request, still standing, is served; the annotation goes only once it is
    cluster.seed([node("h100-2", "cn-east", "nvidia-h100")])
    asked = eventually(lambda: (p := live_pods(cluster, "mover", 1)) and all(
        (x.metadata.annotations or {}).get(ANNOTATION_CHECKPOINT_REQUEST) for x in p) and p, what="checkpoint asked")
    reserved = status(cluster, "mover")["migration"]["reserved"]
    assert reserved["nodes"] == ["h100-2"]  # reserved before the checkpoint was asked for
    ckpt = asked[0].metadata.annotations[ANNOTATION_CHECKPOINT_REQUEST]
    cluster.core.patch_namespaced_pod(asked[0].metadata.name, "team-a", {"metadata": {"annotations": {
        ANNOTATION_CHECKPOINT_ACK: f"{ckpt};7;s3://ckpt/mover/{ckpt}/"}}})
    new = run(cluster, "mover", 1, generation=2)
    assert new[0].metadata.annotations["heterojob.io/node"] == "h100-2"
    s = status(cluster, "mover")
    assert s["handled"]["migrate"] == "drain" and "migration" not in s
    assert ANNOTATION_MIGRATE not in (cluster.job("mover")["metadata"].get("annotations") or {})


@pytest.mark.harness
def test_a_pending_manual_move_is_cancelled_by_removing_its_annotation(cluster: Cluster, operator: Any) -> None:
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    cluster.create_job("mover", spec(replicas={"min": 1}, checkpoint={"timeoutSeconds": 300}))
    pods = run(cluster, "mover", 1)
    annotate(cluster, "mover", "try")
    eventually(lambda: status(cluster, "mover").get("phase") == "Checkpointing", what="Checkpointing")
    assert status(cluster, "mover")["migration"]["reserved"]["nodes"] == ["h100-1"]
    annotate(cluster, "mover", None)
    eventually(lambda: status(cluster, "mover").get("phase") == "Running", what="Running again")
    s = status(cluster, "mover")
    assert s["reason"] == "MoveCancelled" and s["placement"]["generation"] == 1 and "migration" not in s
    assert [p.metadata.name for p in live_pods(cluster, "mover", 1)] == [p.metadata.name for p in pods]
    eventually(lambda: any(e.reason == "MoveCancelled" for e in cluster.events("mover")), what="an Event")
    # the reservation is gone: another job can have h100-1
    cluster.create_job("next", spec(replicas={"min": 1}))
    run(cluster, "next", 1)


@pytest.mark.harness
def test_a_checkpoint_asked_in_the_same_second_as_the_last_is_not_taken_as_saved_by_the_last_ones_acks(
        cluster: Cluster, operator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by the multi-cluster move test under load: a move asked within the second of a checkpoint got
    that checkpoint's id, the pods' acks of it matched at once, and the job moved with nothing saved."""
    import time as real_time

    from heterojob.constants import ANNOTATION_CHECKPOINT_NOW
    from heterojob.controller import checkpoints

    class SlowClock:  # the operator's checkpoint clock runs 1000x slower: every request falls in one second
        t0 = float(int(real_time.time()))

        @staticmethod
        def time() -> float:
            return SlowClock.t0 + (real_time.time() - SlowClock.t0) / 1000

    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(4)])
    running_mover(cluster)
    monkeypatch.setattr(checkpoints, "time", SlowClock)

    def ack_all(what: str) -> str:
        asked = eventually(lambda: (p := live_pods(cluster, "mover", 1)) and all(
            (a := x.metadata.annotations or {}).get(ANNOTATION_CHECKPOINT_REQUEST)
            and not a.get(ANNOTATION_CHECKPOINT_ACK, "").startswith(a[ANNOTATION_CHECKPOINT_REQUEST] + ";")
            for x in p) and p, what=what)
        ckpt = asked[0].metadata.annotations[ANNOTATION_CHECKPOINT_REQUEST]
        for pod in asked:
            cluster.core.patch_namespaced_pod(pod.metadata.name, "team-a", {"metadata": {"annotations": {
                ANNOTATION_CHECKPOINT_ACK: f"{ckpt};100;s3://ckpt/mover/{ckpt}/"}}})
        return ckpt

    cluster.custom.patch_namespaced_custom_object("heterojob.io", "v1alpha1", "team-a", "heterojobs", "mover",
                                                  {"metadata": {"annotations": {ANNOTATION_CHECKPOINT_NOW: "now"}}})
    first = ack_all("the first request")
    eventually(lambda: ((status(cluster, "mover").get("checkpoint") or {}).get("last") or {}).get("id") == first,
               what="the first checkpoint saved")
    cluster.custom.patch_namespaced_custom_object("heterojob.io", "v1alpha1", "team-a", "heterojobs", "mover",
                                                  {"metadata": {"annotations": {ANNOTATION_MIGRATE: "rebalance"}}})
    second = eventually(lambda: (s := status(cluster, "mover")).get("phase") == "Checkpointing"
                        and s["checkpoint"]["pending"]["id"], what="the move's checkpoint request")
    assert second != first
    assert not live_pods(cluster, "mover", 2)  # nothing moved before the ranks answer the new request
    assert ack_all("the move's request") == second
    eventually(lambda: len(live_pods(cluster, "mover", 2)) == 2, what="generation 2")
