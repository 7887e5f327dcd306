"""Fault sequences that arrive on top of one another (harness): a second fault while a job checkpoints for
the first, the operator restarted between the steps of a move, a job edited or deleted while it moves, the
destination refusing the new gang.

What the real components do, reproduced by the emulator (Kubernetes v1.32):
- a node whose kubelet stops posting status: the node lifecycle controller sets Ready=Unknown and taints
  it `node.kubernetes.io/unreachable` (NoSchedule, NoExecute); its pods keep their last status (Running)
  until taint-based eviction, 300 s later by the DefaultTolerationSeconds admission plugin's default, so
  the rank there never answers a checkpoint request (`sim.cluster.nodes.set_node_lost`);
- a ResourceQuota refusing a pod create is 403 Forbidden "exceeded quota" (transient);
- deleting a custom resource without finalizers removes it at once; its pods go by garbage collection.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from heterojob.constants import ANNOTATION_CHECKPOINT_ACK, ANNOTATION_CHECKPOINT_REQUEST, ANNOTATION_MIGRATE
from heterojob.sim.cluster.harness import OperatorRunner
from heterojob.sim.cluster.nodes import node, set_node_lost
from tests.conftest import Cluster, eventually
from tests.harness.test_migration import annotate, live_pods, run, spec, status

pytestmark = pytest.mark.harness


def asked(cluster: Cluster, name: str, generation: int = 1) -> list[Any]:
    """The job's live pods of `generation`, once every one carries a checkpoint request."""
    return eventually(lambda: (p := live_pods(cluster, name, generation)) and all(
        (x.metadata.annotations or {}).get(ANNOTATION_CHECKPOINT_REQUEST) for x in p) and p,
        what=f"{name}: checkpoint requests on generation {generation}")


def ack(cluster: Cluster, pod: Any, step: int, request: str | None = None) -> None:
    ckpt = request or pod.metadata.annotations[ANNOTATION_CHECKPOINT_REQUEST]
    cluster.core.patch_namespaced_pod(pod.metadata.name, "team-a", {"metadata": {"annotations": {
        ANNOTATION_CHECKPOINT_ACK: f"{ckpt};{step};s3://ckpt/{ckpt}/"}}})


def node_of(pod: Any) -> str:
    return str(pod.metadata.annotations["heterojob.io/node"])


def test_a_node_lost_while_the_job_checkpoints_for_a_voluntary_move_moves_it_at_once(
        cluster: Cluster, operator: Any) -> None:
    """A manual move asks for a checkpoint with a long deadline; one of the job's nodes goes unreachable
    meanwhile. The rank there will never answer (its pod still reads Running): waiting for the deadline
    would hold the job on a dead node for the whole timeout. The fault outranks the voluntary move."""
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(4)])
    cluster.create_job("mover", spec(checkpoint={"timeoutSeconds": 300, "storage": "s3://ckpt"}))
    pods = run(cluster, "mover", 2)
    annotate(cluster, "mover", "rebalance")
    requested = asked(cluster, "mover")
    assert status(cluster, "mover")["phase"] == "Checkpointing"
    ack(cluster, requested[0], 40)  # one rank saved; the other's node is lost before it answers
    dead = node_of(requested[1])
    set_node_lost(cluster.core, dead)
    new = eventually(lambda: (p := live_pods(cluster, "mover", 2)) and len(p) == 2 and p, timeout=15,
                     what="moved off the lost node without waiting out the 300 s deadline")
    assert dead not in {node_of(p) for p in new}
    s = status(cluster, "mover")
    entry = s["history"][-1]
    assert entry["action"] == "migrate" and dead in entry["reason"], entry
    assert [h["action"] for h in s["history"]].count("migrate") == 1
    eventually(lambda: not live_pods(cluster, "mover", 1), what="the old gang deleted")
    assert {p.metadata.name for p in pods}.isdisjoint({p.metadata.name for p in new})
    said = eventually(lambda: [e for e in cluster.events("mover") if e.reason == "FaultWhileCheckpointing"],
                      what="the escalation said")
    assert [e.type for e in said] == ["Warning"] and dead in said[0].message


def test_a_job_deleted_while_it_checkpoints_for_a_move_gives_its_reservation_back(
        cluster: Cluster, operator: Any) -> None:
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    cluster.create_job("mover", spec(replicas={"min": 1}, checkpoint={"timeoutSeconds": 300}))
    run(cluster, "mover", 1)
    annotate(cluster, "mover", "drain")
    asked(cluster, "mover")
    reserved = status(cluster, "mover")["migration"]["reserved"]["nodes"]
    cluster.delete_job("mover")
    # both nodes free again: the old one (its pod goes by garbage collection) and the reserved one
    cluster.create_job("next", spec(replicas={"min": 2}))
    new = run(cluster, "next", 2)
    assert reserved[0] in {node_of(p) for p in new}
    eventually(lambda: not cluster.pods("mover"), what="the deleted job's pods gone")


def test_replicas_edited_while_the_job_checkpoints_for_a_move_are_what_it_restarts_with(
        cluster: Cluster, operator: Any) -> None:
    """The move's placement is a new placement: it follows the spec as it is when it is made."""
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(4)])
    cluster.create_job("mover", spec(checkpoint={"timeoutSeconds": 300}))
    run(cluster, "mover", 2)
    annotate(cluster, "mover", "drain")
    requested = asked(cluster, "mover")
    cluster.custom.patch_namespaced_custom_object("heterojob.io", "v1alpha1", "team-a", "heterojobs", "mover",
                                                  {"spec": {"replicas": {"min": 1}}})
    for pod in requested:
        ack(cluster, pod, 10)
    new = run(cluster, "mover", 1, generation=2)
    env = {e.name: e.value for e in new[0].spec.containers[0].env}
    assert env["WORLD_SIZE"] == "1"
    assert status(cluster, "mover")["placement"]["replicas"] == 1


def asked_to_move(cluster: Cluster, nodes: int = 2) -> tuple[Any, Any]:
    """Job "mover" (1 replica, on one of `nodes` nodes) moved by hand: (its pod, that pod as asked to
    checkpoint)."""
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(nodes)])
    cluster.create_job("mover", spec(replicas={"min": 1}, checkpoint={"timeoutSeconds": 300}))
    [old] = run(cluster, "mover", 1)
    annotate(cluster, "mover", "drain")
    [requested] = asked(cluster, "mover")
    return old, requested


def refused_move(cluster: Cluster) -> Any:
    """`asked_to_move`, and once its checkpoint is saved a ResourceQuota (pods: 0) refuses the new gang.
    Returns its old pod."""
    old, requested = asked_to_move(cluster)
    cluster.core.create_namespaced_resource_quota("team-a", {"metadata": {"name": "pods"},
                                                             "spec": {"hard": {"pods": "0"}}})
    ack(cluster, requested, 10)
    eventually(lambda: status(cluster, "mover").get("reason") == "PodsRefused", what="the new gang refused")
    return old


def test_a_destination_refusing_the_new_gang_keeps_the_move_and_serves_the_request_once(
        cluster: Cluster, operator: Any) -> None:
    """Make before break, then the API server refuses the new gang (a ResourceQuota: 403, transient). The
    job waits with a backoff as a move (its origin, the nodes it left, the request it serves), and once the
    quota allows it lands, closes its history entry and lets the annotation go: moved once, not twice."""
    old = refused_move(cluster)
    s = status(cluster, "mover")
    assert "exceeded quota" in s["message"] and not live_pods(cluster, "mover", 2)
    assert s["phase"] == "Migrating", s["phase"]  # still a move: it left its node and waits to land
    version = cluster.job("mover")["metadata"]["resourceVersion"]
    time.sleep(3)  # quiet while it backs off: no status write, no Event per pass
    assert cluster.job("mover")["metadata"]["resourceVersion"] == version
    assert len([e for e in cluster.events("mover") if e.reason == "PodsRefused"]) == 1
    cluster.core.delete_namespaced_resource_quota("pods", "team-a")
    # the refused placement's generation is spent (its pods may have been seen): the next one is above it
    generation = eventually(lambda: (p := status(cluster, "mover").get("placement")) and p["generation"],
                            timeout=20, what="placed again after the backoff")
    [new] = run(cluster, "mover", 1, generation=generation)
    assert node_of(new) != node_of(old)
    s = status(cluster, "mover")
    moves = [h for h in s["history"] if h["action"] == "migrate"]
    assert len(moves) == 1 and f"generation {generation}" in (moves[0].get("to") or ""), moves
    assert "migration" not in s and s["handled"].get("migrate") == "drain"
    eventually(lambda: ANNOTATION_MIGRATE not in (cluster.job("mover")["metadata"].get("annotations") or {}),
               what="the served request's annotation let go")
    time.sleep(2)  # several passes: the request is not served a second time
    s = status(cluster, "mover")
    assert s["placement"]["generation"] == generation and s["phase"] == "Running"
    assert [h["action"] for h in s["history"]].count("migrate") == 1


def test_an_operator_restarted_between_the_checkpoint_and_the_new_gang_lands_the_move_once(
        cluster: Cluster, emulator: Any) -> None:
    """The operator stops after the checkpoint was saved and the old gang deleted, while the new gang waits
    (refused by a ResourceQuota); a new operator, from the status alone, lands that move once."""
    with OperatorRunner(emulator.kubeconfig):
        old = refused_move(cluster)
    cluster.core.delete_namespaced_resource_quota("pods", "team-a")
    assert not live_pods(cluster, "mover", 1) and status(cluster, "mover")["phase"] == "Migrating"
    with OperatorRunner(emulator.kubeconfig) as again:
        generation = eventually(lambda: (p := status(cluster, "mover").get("placement")) and p["generation"],
                                timeout=20, what="placed by the new operator")
        [new] = run(cluster, "mover", 1, generation=generation)
        assert node_of(new) != node_of(old)
        time.sleep(2)
        s = status(cluster, "mover")
        assert [h["action"] for h in s["history"]].count("migrate") == 1 and "migration" not in s
        assert s["placement"]["generation"] == generation and s["checkpoint"]["last"]["step"] == 10
        assert len([p for p in cluster.pods("mover") if not p.metadata.deletion_timestamp]) == 1
    assert "Traceback" not in again.output


def test_a_node_lost_while_the_operator_is_down_mid_checkpoint_moves_the_job_when_it_returns(
        cluster: Cluster, emulator: Any) -> None:
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(4)])
    with OperatorRunner(emulator.kubeconfig):
        cluster.create_job("mover", spec(checkpoint={"timeoutSeconds": 300, "storage": "s3://ckpt"}))
        run(cluster, "mover", 2)
        annotate(cluster, "mover", "rebalance")
        requested = asked(cluster, "mover")
    dead = node_of(requested[0])
    set_node_lost(cluster.core, dead)
    ack(cluster, requested[1], 40)
    with OperatorRunner(emulator.kubeconfig) as again:
        new = eventually(lambda: (p := live_pods(cluster, "mover", 2)) and len(p) == 2 and p, timeout=15,
                         what="moved off the lost node")
        assert dead not in {node_of(p) for p in new}
        assert [h["action"] for h in status(cluster, "mover")["history"]].count("migrate") == 1
    assert "Traceback" not in again.output


def test_a_reserved_destination_taken_by_a_foreign_pod_before_the_checkpoint_ends_sends_the_job_elsewhere(
        cluster: Cluster, operator: Any) -> None:
    """The reservation is heterojob's own bookkeeping: a pod heterojob does not manage (here one bound by
    nodeName, as the kube-scheduler binds) can still take those devices while the job checkpoints. The job
    lands where there is room, not on devices now held twice."""
    old, requested = asked_to_move(cluster, nodes=3)
    reserved = status(cluster, "mover")["migration"]["reserved"]["nodes"][0]
    cluster.core.create_namespaced_pod("team-a", {"metadata": {"name": "squatter"}, "spec": {
        "nodeName": reserved, "containers": [{"name": "c", "image": "x", "resources": {
            "limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8"}}}]}})
    time.sleep(0.5)  # the operator's pod index hears of it
    ack(cluster, requested, 10)
    [new] = run(cluster, "mover", 1, generation=2)
    assert node_of(new) not in (reserved, node_of(old)), (node_of(new), reserved)


def test_an_ack_for_an_old_request_is_not_taken_and_a_second_ack_changes_nothing(
        cluster: Cluster, operator: Any) -> None:
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    cluster.create_job("mover", spec(replicas={"min": 1}, checkpoint={"timeoutSeconds": 3, "storage": "s3://c"}))
    run(cluster, "mover", 1)
    annotate(cluster, "mover", "drain")
    [requested] = asked(cluster, "mover")
    current = requested.metadata.annotations[ANNOTATION_CHECKPOINT_REQUEST]
    ack(cluster, requested, 99, request="g1-1000000000")  # an SDK answering a request long gone
    time.sleep(1)
    assert status(cluster, "mover")["phase"] == "Checkpointing" and not live_pods(cluster, "mover", 2)
    [new] = run(cluster, "mover", 1, generation=2)  # at the deadline, from scratch: nothing was saved
    assert "HETEROJOB_RESUME_FROM" not in {e.name for e in new.spec.containers[0].env}
    s = status(cluster, "mover")
    assert f"checkpoint {current}: no answer from rank(s) [0]" in s["history"][-1]["reason"]
    assert not (s.get("checkpoint") or {}).get("last")
    # the old pod answers the real request after all (twice): it is gone, and nothing changes
    for step in (5, 6):
        try:
            ack(cluster, requested, step, request=current)
        except Exception:  # noqa: BLE001 - the pod may be deleted already (404)
            pass
    time.sleep(1)
    s = status(cluster, "mover")
    assert s["placement"]["generation"] == 2 and not (s.get("checkpoint") or {}).get("last")
    assert [h["action"] for h in s["history"]].count("migrate") == 1


def test_a_preemption_victims_node_lost_mid_checkpoint_ends_the_wait_and_the_preemptor_runs_elsewhere(
        cluster: Cluster, emulator: Any) -> None:
    """A victim checkpointing for a preemption (long deadline) loses its node: it is preempted at once from
    its last checkpoint, and the preemptor, whose room was on that node, is placed on healthy room."""
    from heterojob.controller import ControllerConfig

    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    with OperatorRunner(emulator.kubeconfig, controller=ControllerConfig(min_runtime_s=0)):
        cluster.create_job("low", spec(replicas={"min": 1}, priority="low", checkpoint={"timeoutSeconds": 300}))
        [low] = run(cluster, "low", 1)
        cluster.create_job("mid", spec(replicas={"min": 1}, priority="medium", checkpoint={"timeoutSeconds": 300}))
        [mid] = run(cluster, "mid", 1)
        cluster.create_job("vip", spec(replicas={"min": 1}, priority="urgent"))
        eventually(lambda: status(cluster, "low").get("phase") == "Checkpointing", what="low asked to yield")
        set_node_lost(cluster.core, node_of(low))
        eventually(lambda: status(cluster, "low").get("phase") == "Preempted", timeout=10,
                   what="low preempted without waiting out its deadline")
        assert status(cluster, "low")["history"][-1]["action"] == "preempt"
        # the room it gave is on a dead node: the preemptor asks the next victim, on the healthy node
        [asked_mid] = asked(cluster, "mid")
        assert not live_pods(cluster, "vip", 1)
        ack(cluster, asked_mid, 30)
        [vip] = eventually(lambda: live_pods(cluster, "vip", 1), timeout=10, what="vip placed")
        assert node_of(vip) == node_of(mid)
        assert status(cluster, "mid")["phase"] == "Preempted"


def patch_spec(cluster: Cluster, name: str, spec_patch: dict[str, Any]) -> None:
    cluster.custom.patch_namespaced_custom_object("heterojob.io", "v1alpha1", "team-a", "heterojobs", name,
                                                  {"spec": spec_patch})


def test_a_spec_made_invalid_while_the_job_checkpoints_fails_it_cleanly_and_fixing_it_runs_it_again(
        cluster: Cluster, operator: Any) -> None:
    asked_to_move(cluster)
    patch_spec(cluster, "mover", {"replicas": {"min": 2, "max": 1}})  # the schema lets it through; min > max
    eventually(lambda: status(cluster, "mover").get("phase") == "Failed", what="Failed")
    s = status(cluster, "mover")
    assert s["reason"] == "InvalidSpec" and "replicas" in s["message"] and "placement" not in s
    eventually(lambda: not live_pods(cluster, "mover", 1), what="its pods gone")
    # nothing held: another job takes both nodes
    cluster.create_job("other", spec(replicas={"min": 2}))
    run(cluster, "other", 2)
    cluster.delete_job("other")
    s = status(cluster, "mover")
    assert not (s.get("checkpoint") or {}).get("pending") and "migration" not in s  # the move ended with it
    annotate(cluster, "mover", None)  # the user withdraws the move (a standing request would be served later)
    patch_spec(cluster, "mover", {"replicas": {"min": 1, "max": 1}})
    generation = eventually(lambda: (p := status(cluster, "mover").get("placement")) and p["generation"],
                            timeout=20, what="placed again once fixed")
    run(cluster, "mover", 1, generation=generation)
    time.sleep(2)
    s = status(cluster, "mover")
    assert s["phase"] == "Running" and s["placement"]["generation"] == generation
    assert not s.get("checkpoint", {}).get("pending") and "migration" not in s, s


def test_the_device_class_edited_while_the_job_checkpoints_is_where_it_lands(
        cluster: Cluster, operator: Any) -> None:
    cluster.seed([node("h100-0", "cn-east", "nvidia-h100"), node("h100-1", "cn-east", "nvidia-h100"),
                  node("a910-0", "cn-east", "ascend-910b")])
    cluster.create_job("mover", spec(replicas={"min": 1}, checkpoint={"timeoutSeconds": 300}))
    run(cluster, "mover", 1)
    annotate(cluster, "mover", "drain")
    [requested] = asked(cluster, "mover")
    assert status(cluster, "mover")["migration"]["reserved"]["deviceClass"] == "nvidia-h100"
    patch_spec(cluster, "mover", {"devices": [{"deviceClass": "ascend-910b", "perReplica": 8}]})
    ack(cluster, requested, 10)
    [new] = run(cluster, "mover", 1, generation=2)
    assert node_of(new) == "a910-0"
    limits = new.spec.containers[0].resources.limits
    assert "nvidia.com/gpu" not in limits and any("Ascend" in k for k in limits), limits
    s = status(cluster, "mover")
    assert s["placement"]["deviceClass"] == "ascend-910b" and "migration" not in s


def test_a_reserved_destination_lost_mid_checkpoint_never_leaves_the_job_without_devices(
        cluster: Cluster, operator: Any) -> None:
    """Make before break: the destination goes NotReady while the job checkpoints for a voluntary move and
    the fleet has no other room. The job must keep its devices (the move waits) rather than give them up
    for a destination that is gone."""
    old, requested = asked_to_move(cluster)
    reserved = status(cluster, "mover")["migration"]["reserved"]["nodes"][0]
    set_node_lost(cluster.core, reserved)  # the Node's own event reaches the job holding room there
    eventually(lambda: status(cluster, "mover").get("reason") == "MoveCancelled", what="the move called off")
    ack(cluster, requested, 10)  # too late: answers a request that no longer stands
    time.sleep(2)
    s = status(cluster, "mover")
    assert s["phase"] == "Running" and s["placement"]["generation"] == 1, s
    assert reserved in s["message"] and "no longer usable" in s["message"]
    assert [p.metadata.name for p in live_pods(cluster, "mover", 1)] == [old.metadata.name]
    assert next(c for c in s["conditions"] if c["type"] == "MoveHeld")["status"] == "True"  # waits for room
    assert "migration" not in s and not (s.get("checkpoint") or {}).get("pending")
    # the node comes back: the request, still standing, is served (a new reservation, a new checkpoint)
    from heterojob.sim.cluster.nodes import set_node_ready

    set_node_ready(cluster.core, reserved)
    wanted = eventually(lambda: ((status(cluster, "mover").get("checkpoint") or {}).get("pending") or {}).get("id"),
                        what="a new checkpoint for the move")
    [again] = eventually(lambda: (p := live_pods(cluster, "mover", 1)) and p[0].metadata.annotations.get(
        ANNOTATION_CHECKPOINT_REQUEST) == wanted and p, what="the new request on the pod")
    ack(cluster, again, 20)
    [new] = run(cluster, "mover", 1, generation=2)
    assert node_of(new) == reserved
    assert status(cluster, "mover")["handled"]["migrate"] == "drain"


def test_a_job_deleted_while_its_move_waits_to_land_gives_back_the_room_it_reserved(
        cluster: Cluster, operator: Any) -> None:
    refused_move(cluster)  # waiting to land
    assert status(cluster, "mover")["migration"]["reserved"]["nodes"]
    cluster.delete_job("mover")
    cluster.core.delete_namespaced_resource_quota("pods", "team-a")
    cluster.create_job("next", spec(replicas={"min": 2}))
    run(cluster, "next", 2)  # both nodes: nothing is still held for the deleted job


def test_a_preemption_victim_deleted_mid_checkpoint_lets_the_preemptor_in_at_once(
        cluster: Cluster, emulator: Any) -> None:
    from heterojob.controller import ControllerConfig

    cluster.seed([node("h100-0", "cn-east", "nvidia-h100")])
    with OperatorRunner(emulator.kubeconfig, controller=ControllerConfig(min_runtime_s=0)):
        cluster.create_job("low", spec(replicas={"min": 1}, priority="low", checkpoint={"timeoutSeconds": 300}))
        run(cluster, "low", 1)
        cluster.create_job("vip", spec(replicas={"min": 1}, priority="urgent"))
        eventually(lambda: status(cluster, "low").get("phase") == "Checkpointing", what="low asked to yield")
        cluster.delete_job("low")
        for pod in cluster.pods("low"):  # what its node's kubelet does (this harness has none): the pod ends
            cluster.core.delete_namespaced_pod(pod.metadata.name, "team-a", grace_period_seconds=0)
        [vip] = eventually(lambda: live_pods(cluster, "vip", 1), timeout=10, what="vip placed")
        assert node_of(vip) == "h100-0"
        time.sleep(1)
        assert status(cluster, "vip")["placement"]["generation"] == 1


def test_an_urgent_job_arriving_while_a_move_checkpoints_never_shares_the_reserved_room(
        cluster: Cluster, emulator: Any) -> None:
    from heterojob.controller import ControllerConfig

    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(3)])
    with OperatorRunner(emulator.kubeconfig, controller=ControllerConfig(min_runtime_s=0)):
        cluster.create_job("mover", spec(replicas={"min": 1}, checkpoint={"timeoutSeconds": 300}))
        run(cluster, "mover", 1)
        cluster.create_job("low", spec(replicas={"min": 1}, priority="low", checkpoint={"timeoutSeconds": 1}))
        run(cluster, "low", 1)
        annotate(cluster, "mover", "drain")
        [requested] = asked(cluster, "mover")
        reserved = status(cluster, "mover")["migration"]["reserved"]["nodes"][0]
        cluster.create_job("vip", spec(replicas={"min": 1}, priority="urgent"))
        eventually(lambda: status(cluster, "low").get("phase") == "Preempted", timeout=15, what="low preempted")
        [vip] = eventually(lambda: live_pods(cluster, "vip", 1), timeout=10, what="vip placed")
        assert node_of(vip) != reserved
        ack(cluster, requested, 10)
        [new] = run(cluster, "mover", 1, generation=2)
        assert node_of(new) == reserved
        nodes = [node_of(p) for p in cluster.core.list_namespaced_pod("team-a").items
                 if not p.metadata.deletion_timestamp and p.status.phase in ("Pending", "Running")]
        assert sorted(nodes) == sorted(set(nodes)), nodes  # no node holds two gangs


@contextmanager
def yielding(cluster: Cluster, emulator: Any, victim: str, victim_priority: str, preemptor_priority: str
             ) -> Iterator[OperatorRunner]:
    """An operator (no minimum runtime) where `victim` runs on the only node and "vip" arrives and asks it to
    checkpoint and leave (a long deadline)."""
    from heterojob.controller import ControllerConfig

    cluster.seed([node("h100-0", "cn-east", "nvidia-h100")])
    with OperatorRunner(emulator.kubeconfig, controller=ControllerConfig(min_runtime_s=0)) as runner:
        cluster.create_job(victim, spec(replicas={"min": 1}, priority=victim_priority,
                                        checkpoint={"timeoutSeconds": 300}))
        run(cluster, victim, 1)
        cluster.create_job("vip", spec(replicas={"min": 1}, priority=preemptor_priority))
        asked(cluster, victim)
        assert status(cluster, victim)["checkpoint"]["pending"]["by"] == "team-a/vip"
        yield runner


def runs_on(cluster: Cluster, victim: str, cause: str) -> dict[str, Any]:
    """The victim's preemption called off: it runs on its first placement, and says why."""
    eventually(lambda: status(cluster, victim).get("reason") == "PreemptionCancelled", timeout=10,
               what=f"{victim}'s preemption called off ({cause})")
    s = status(cluster, victim)
    assert s["phase"] == "Running" and s["placement"]["generation"] == 1 and live_pods(cluster, victim, 1)
    assert cause in s["message"] and not (s.get("checkpoint") or {}).get("pending")
    [cond] = [c for c in s["conditions"] if c["type"] == "Checkpointing"]
    assert (cond["status"], cond["reason"]) == ("False", cause)
    said = eventually(lambda: [e for e in cluster.events(victim) if e.reason == "PreemptionCancelled"],
                      what="an Event")
    assert said[0].type == "Normal" and cause in said[0].message
    assert "preempt" not in [h["action"] for h in s.get("history") or []]
    return s


def test_a_victim_raised_above_its_preemptor_mid_checkpoint_runs_on_and_the_preemptor_plans_again(
        cluster: Cluster, emulator: Any) -> None:
    """As kube-scheduler re-checks a nominated pod's victims: a victim whose priority is raised above the
    preemptor's while it checkpoints to yield runs on (its checkpoint is harmless), and the preemptor plans
    again, here with nobody left to preempt: it waits."""
    with yielding(cluster, emulator, "low", "low", "high"):
        patch_spec(cluster, "low", {"priority": "urgent"})
        runs_on(cluster, "low", "NotOutranked")
        eventually(lambda: status(cluster, "vip").get("reason") == "NoRoom", timeout=10, what="vip waits")
        time.sleep(1)
        assert not cluster.pods("vip") and status(cluster, "low")["phase"] == "Running"


def test_a_preemptor_lowered_below_its_victim_mid_checkpoint_lets_the_victim_run_on(
        cluster: Cluster, emulator: Any) -> None:
    with yielding(cluster, emulator, "mid", "medium", "high"):
        patch_spec(cluster, "vip", {"priority": "low"})
        runs_on(cluster, "mid", "NotOutranked")


def test_a_preemptor_deleted_mid_checkpoint_lets_the_victim_run_on(cluster: Cluster, emulator: Any) -> None:
    with yielding(cluster, emulator, "low", "low", "urgent"):
        cluster.delete_job("vip")
        runs_on(cluster, "low", "PreemptorGone")


def test_a_victim_raised_after_it_gave_its_devices_back_stays_preempted(cluster: Cluster, emulator: Any) -> None:
    """Too late: once the checkpoint is saved and the devices given back, the preemption stands; the
    victim waits as a preempted job and says so."""
    with yielding(cluster, emulator, "low", "low", "high"):
        [pod] = asked(cluster, "low")
        ack(cluster, pod, 20)
        eventually(lambda: status(cluster, "low").get("phase") == "Preempted", what="low preempted")
        run(cluster, "vip", 1)
        patch_spec(cluster, "low", {"priority": "medium"})  # still below vip: it waits for room
        time.sleep(1)
        s = status(cluster, "low")
        assert s["phase"] == "Preempted" and s["history"][-1]["action"] == "preempt" and "placement" not in s
        assert s["checkpoint"]["last"]["step"] == 20
        assert not [e for e in cluster.events("low") if e.reason == "PreemptionCancelled"]


@contextmanager
def reclaiming(cluster: Cluster, emulator: Any, lender_priority: str, taker_priority: str
               ) -> Iterator[OperatorRunner]:
    """An operator where the elastic job "elastic" (admitted at 1 replica) has grown onto both nodes, and "taker"
    arrives and asks it to checkpoint and shrink back (a reclaim: `then=resize`, by taker; a long deadline)."""
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    with OperatorRunner(emulator.kubeconfig) as runner:
        cluster.create_job("elastic", spec(replicas={"min": 1, "max": 2, "initial": 1}, priority=lender_priority,
                                           checkpoint={"timeoutSeconds": 300}, policy={"cooldownSeconds": 0}))
        [first] = eventually(lambda: live_pods(cluster, "elastic", 1), what="elastic placed")
        cluster.set_pod_phase(first.metadata.name, "Running")  # it grows at once: asked to checkpoint first
        [grow] = asked(cluster, "elastic")
        ack(cluster, grow, 10)
        run(cluster, "elastic", 2, generation=2)
        cluster.create_job("taker", spec(replicas={"min": 1}, priority=taker_priority))
        asked(cluster, "elastic", 2)
        pending = status(cluster, "elastic")["checkpoint"]["pending"]
        assert (pending["then"], pending["by"]) == ("resize", "team-a/taker")
        yield runner


def runs_on_grown(cluster: Cluster, cause: str) -> None:
    """The reclaim called off: "elastic" runs on at its grown size, on its grown placement, and says why."""
    eventually(lambda: status(cluster, "elastic").get("reason") == "ReclaimCancelled", timeout=10,
               what=f"the reclaim called off ({cause})")
    s = status(cluster, "elastic")
    assert s["phase"] == "Running" and (s["placement"]["generation"], s["placement"]["replicas"]) == (2, 2)
    assert cause in s["message"] and not (s.get("checkpoint") or {}).get("pending") and not s.get("migration")
    [cond] = [c for c in s["conditions"] if c["type"] == "Checkpointing"]
    assert (cond["status"], cond["reason"]) == ("False", cause)
    said = eventually(lambda: [e for e in cluster.events("elastic") if e.reason == "ReclaimCancelled"],
                      what="an Event")
    assert said[0].type == "Normal" and cause in said[0].message
    time.sleep(1)
    assert len(live_pods(cluster, "elastic", 2)) == 2 and not live_pods(cluster, "elastic", 3)
    assert [h["action"] for h in status(cluster, "elastic").get("history") or []] == ["resize"]  # the growth only


def test_a_reclaim_whose_taker_is_deleted_mid_checkpoint_lets_the_grown_job_run_on(
        cluster: Cluster, emulator: Any) -> None:
    """Before, a reclaim was never re-checked: the grown job shrank for a job that no longer existed."""
    with reclaiming(cluster, emulator, "high", "high"):
        cluster.delete_job("taker")
        runs_on_grown(cluster, "PreemptorGone")


def test_a_grown_job_raised_above_its_taker_mid_checkpoint_keeps_its_lent_devices(
        cluster: Cluster, emulator: Any) -> None:
    with reclaiming(cluster, emulator, "medium", "medium"):
        patch_spec(cluster, "elastic", {"priority": "high"})
        runs_on_grown(cluster, "NotOutranked")
        eventually(lambda: status(cluster, "taker").get("reason") == "NoRoom", timeout=10, what="taker waits")


def test_an_operator_stopped_between_a_moves_placement_and_its_pods_keeps_the_move_when_they_are_refused(
        cluster: Cluster, emulator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator records a move's landing (Admitted, the new placement) and stops before it creates the
    new gang (simulated: its pod creates do nothing); the next operator's creates are refused (a
    ResourceQuota). As when the refusal comes at once (`test_a_destination_refusing_the_new_gang_...`), the job
    waits as that move: Migrating, status.migration kept (the request it serves), its history entry open;
    once the quota allows, it lands once."""
    from heterojob.controller.pods import Pods

    async def stopped(*_: Any, **__: Any) -> None:
        return None

    with OperatorRunner(emulator.kubeconfig):
        old, requested = asked_to_move(cluster)
        monkeypatch.setattr(Pods, "create", stopped)
        ack(cluster, requested, 10)
        eventually(lambda: (p := status(cluster, "mover").get("placement")) and p["generation"] == 2,
                   what="the move's new placement recorded")
    monkeypatch.undo()
    assert status(cluster, "mover")["phase"] == "Admitted" and not live_pods(cluster, "mover", 2)
    cluster.core.create_namespaced_resource_quota("team-a", {"metadata": {"name": "pods"},
                                                             "spec": {"hard": {"pods": "0"}}})
    with OperatorRunner(emulator.kubeconfig) as again:
        eventually(lambda: status(cluster, "mover").get("reason") == "PodsRefused", what="the new gang refused")
        s = status(cluster, "mover")
        assert s["phase"] == "Migrating", s["phase"]
        assert s["migration"]["request"] == "drain" and s["migration"]["trigger"] == "manual"
        assert s["history"][-1]["action"] == "migrate" and "to" not in s["history"][-1]
        cluster.core.delete_namespaced_resource_quota("pods", "team-a")
        generation = eventually(lambda: (p := status(cluster, "mover").get("placement")) and p["generation"],
                                timeout=20, what="placed again after the backoff")
        [new] = run(cluster, "mover", 1, generation=generation)
        assert node_of(new) != node_of(old)
        time.sleep(1)
        s = status(cluster, "mover")
        moves = [h for h in s["history"] if h["action"] == "migrate"]
        assert len(moves) == 1 and f"generation {generation}" in (moves[0].get("to") or ""), moves
        assert "migration" not in s and s["checkpoint"]["last"]["step"] == 10
    assert "Traceback" not in again.output
