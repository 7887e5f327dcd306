"""A manual move whose checkpoint is saved while the operator is down (killed), its request removed around the
restarts: a restarted operator re-derives the next step from the job's status alone (intent before action).
Saved before the removal was read: the move goes on and lands on the room reserved for it at once, whatever
else waits in the queue; removed before: the move is called off, the saved checkpoint kept, the room freed.
(bench/chaos.py found such a job `Migrating` without pods, its reservation in `status.migration.reserved`.)"""

from __future__ import annotations

from typing import Any

import pytest

from heterojob.constants import ANNOTATION_CHECKPOINT_ACK, ANNOTATION_CHECKPOINT_REQUEST, ANNOTATION_MIGRATE
from heterojob.sim.cluster.harness import Emulator, OperatorRunner
from heterojob.sim.cluster.nodes import node
from tests.conftest import Cluster, eventually


def spec(cls: str, priority: str) -> dict[str, Any]:
    return {"priority": priority, "replicas": {"min": 1}, "devices": [{"deviceClass": cls, "perReplica": 8}],
            "checkpoint": {"timeoutSeconds": 60, "storage": "s3://ckpt"}, "policy": {"cooldownSeconds": 0},
            "template": {"spec": {"containers": [{"name": "main", "image": "train:cuda12"}]}}}


def status(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.job(name).get("status") or {}


def live(cluster: Cluster, name: str, generation: int) -> list[Any]:
    return [p for p in cluster.pods(name) if not p.metadata.deletion_timestamp
            and p.metadata.labels.get("heterojob.io/generation") == str(generation)]


def running(cluster: Cluster, name: str, generation: int) -> list[Any]:
    pods = eventually(lambda: live(cluster, name, generation), what=f"{name}: pods of generation {generation}")
    for pod in pods:
        cluster.set_pod_phase(pod.metadata.name, "Running")
    eventually(lambda: status(cluster, name).get("phase") == "Running", what=f"{name} Running")
    return pods


def ask_move(cluster: Cluster, name: str, generation: int, value: str) -> tuple[str, dict[str, Any]]:
    """Set the migrate annotation; wait until its checkpoint is asked of the pods (the room is reserved)."""
    cluster.custom.patch_namespaced_custom_object("heterojob.io", "v1alpha1", "team-a", "heterojobs", name,
                                                  {"metadata": {"annotations": {ANNOTATION_MIGRATE: value}}})
    [pod] = eventually(lambda: (p := live(cluster, name, generation)) and all(
        (x.metadata.annotations or {}).get(ANNOTATION_CHECKPOINT_REQUEST) for x in p) and p, what="checkpoint asked")
    s = status(cluster, name)
    assert s["phase"] == "Checkpointing" and s["migration"]["reserved"]["nodes"], s
    return pod.metadata.annotations[ANNOTATION_CHECKPOINT_REQUEST], s["migration"]["reserved"]


def ack(cluster: Cluster, name: str, generation: int, checkpoint: str, step: int) -> str:
    uri = f"s3://ckpt/{name}/{checkpoint}/"
    for pod in live(cluster, name, generation):
        cluster.core.patch_namespaced_pod(pod.metadata.name, "team-a", {"metadata": {"annotations": {
            ANNOTATION_CHECKPOINT_ACK: f"{checkpoint};{step};{uri}"}}})
    return uri


def unannotate(cluster: Cluster, name: str) -> None:
    cluster.custom.patch_namespaced_custom_object("heterojob.io", "v1alpha1", "team-a", "heterojobs", name,
                                                  {"metadata": {"annotations": {ANNOTATION_MIGRATE: None}}})


@pytest.mark.harness
def test_a_manual_move_saved_and_cancelled_around_operator_restarts_never_strands_the_job(
        cluster: Cluster, emulator: Emulator) -> None:
    # two H100 nodes (one for the mover, one free for its destination); the A100 node busy, and a job of
    # lower priority waiting for an A100: the queue holds a job behind the moving one that cannot start now
    cluster.seed([node("h100-0", "cn-east", "nvidia-h100"), node("h100-1", "cn-east", "nvidia-h100"),
                  node("a100-0", "cn-east", "nvidia-a100")])
    outputs = []
    with OperatorRunner(emulator.kubeconfig) as first:
        cluster.create_job("mover", spec("nvidia-h100", "high"))
        running(cluster, "mover", 1)
        cluster.create_job("busy", spec("nvidia-a100", "medium"))
        running(cluster, "busy", 1)
        cluster.create_job("waiter", spec("nvidia-a100", "low"))
        eventually(lambda: status(cluster, "waiter").get("reason") == "NoRoom", what="waiter waits")
        checkpoint, reserved = ask_move(cluster, "mover", 1, "first")
    outputs.append(first.output)
    # the operator is gone (as after kill -9): every rank saves meanwhile
    uri = ack(cluster, "mover", 1, checkpoint, 42)
    old_node = status(cluster, "mover")["placement"]["nodes"]
    with OperatorRunner(emulator.kubeconfig) as second:
        # the restarted operator reads a saved checkpoint for a move still asked for: the move goes on, and
        # the job lands on the room it reserved, not left Migrating without pods behind the waiting job
        eventually(lambda: status(cluster, "mover").get("phase") in ("Migrating", "Admitted", "Running")
                   and not live(cluster, "mover", 1), what="the move went on")
        unannotate(cluster, "mover")  # the request removed after the checkpoint was saved: too late to cancel
        new = eventually(lambda: live(cluster, "mover", 2), timeout=10, what="the mover placed again")
        assert [p.metadata.annotations["heterojob.io/node"] for p in new] == reserved["nodes"] != old_node
        env = {e.name: e.value for e in new[0].spec.containers[0].env}
        assert env["HETEROJOB_RESUME_FROM"] == uri
        running(cluster, "mover", 2)
        s = status(cluster, "mover")
        assert s["placement"]["generation"] == 2 and not s.get("migration") and s["checkpoint"]["last"]["step"] == 42
        assert [h["action"] for h in s["history"]].count("migrate") == 1
        assert status(cluster, "waiter")["phase"] == "Pending" and not live(cluster, "waiter", 1)

        # again, the request removed while the operator is down, after the ranks saved: called off on restart
        checkpoint, reserved = ask_move(cluster, "mover", 2, "second")
    outputs.append(second.output)
    uri = ack(cluster, "mover", 2, checkpoint, 77)
    unannotate(cluster, "mover")
    with OperatorRunner(emulator.kubeconfig) as third:
        eventually(lambda: status(cluster, "mover").get("reason") == "MoveCancelled", what="the move called off")
        s = status(cluster, "mover")
        assert s["phase"] == "Running" and s["placement"]["generation"] == 2 and not s.get("migration")
        assert s["checkpoint"]["last"]["step"] == 77 and s["checkpoint"]["last"]["uri"] == uri  # the save is kept
        assert not (s["checkpoint"].get("pending"))
        assert len(live(cluster, "mover", 2)) == 1 and not live(cluster, "mover", 3)
        assert [h["action"] for h in s["history"]].count("migrate") == 1
    outputs.append(third.output)
    failures = ("Traceback", "failed (attempt", "cycle failed")
    assert not any(f in o for o in outputs for f in failures), "\n".join(outputs)[-3000:]
