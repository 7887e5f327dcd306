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
