"""Malformed HeteroJobs end Failed (or Pending) with a message naming the field; others keep running."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from kubernetes.client import ApiException

from heterojob.sim.cluster.nodes import node
from tests.conftest import Cluster, eventually

pytestmark = pytest.mark.harness

GOOD: dict[str, Any] = {
    "replicas": {"min": 1},
    "devices": [{"deviceClass": "nvidia-h100", "perReplica": 1}],
    "template": {"spec": {"containers": [{"name": "main", "image": "train:1"}]}},
}


def variant(**changes: Any) -> dict[str, Any]:
    spec = copy.deepcopy(GOOD)
    for path, value in changes.items():
        target = spec
        *parents, leaf = path.split("__")
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target.setdefault(part, {})
        if value is DROP:
            target.pop(leaf)
        else:
            target[leaf] = value
    return spec


DROP = object()

# (job name, spec, the field path the message must name)
MALFORMED: list[tuple[str, dict[str, Any], str]] = [
    ("bad-replicas-type", variant(replicas="two"), "spec.replicas"),
    ("bad-min-negative", variant(replicas__min=-2), "spec.replicas.min"),
    ("bad-min-zero", variant(replicas__min=0), "spec.replicas.min"),
    ("bad-min-over-max", variant(replicas={"min": 4, "max": 2}), "spec.replicas"),
    ("bad-replicas-absurd", variant(replicas__min=100000), "spec.replicas.min"),
    ("bad-initial-outside", variant(replicas={"min": 1, "max": 2, "initial": 5}), "spec.replicas"),
    ("bad-priority", variant(priority="critical"), "spec.priority"),
    ("bad-devices-empty", variant(devices=[]), "spec.devices"),
    ("bad-devices-missing", variant(devices=DROP), "spec.devices"),
    ("bad-devices-type", variant(devices={"deviceClass": "nvidia-h100"}), "spec.devices"),
    ("bad-per-replica-negative", variant(devices__0__perReplica=-1), "spec.devices[0].perReplica"),
    ("bad-per-replica-absurd", variant(devices__0__perReplica=4096), "spec.devices[0].perReplica"),
    ("bad-per-replica-string", variant(devices__0__perReplica="eight"), "spec.devices[0].perReplica"),
    ("bad-class-name", variant(devices__0__deviceClass="NVIDIA H100"), "spec.devices[0].deviceClass"),
    ("bad-class-twice", variant(devices=[{"deviceClass": "cpu"}, {"deviceClass": "cpu"}]), "spec.devices"),
    ("bad-template-missing", variant(template=DROP), "spec.template"),
    ("bad-template-no-containers", variant(template={"spec": {"containers": []}}), "spec.template"),
    ("bad-template-no-image", variant(template={"spec": {"containers": [{"name": "main"}]}}), "spec.template"),
    ("bad-unknown-field", variant(replica={"min": 1}), "spec.replica"),
    ("bad-backoff-negative", variant(backoffLimit=-1), "spec.backoffLimit"),
    ("bad-checkpoint-interval", variant(checkpoint={"intervalSeconds": -5}), "spec.checkpoint.intervalSeconds"),
    ("bad-region-name", variant(regions={"allowed": ["CN East"]}), "spec.regions.allowed[0]"),
    ("bad-preferred-not-allowed", variant(regions={"preferred": ["eu-west"], "allowed": ["cn-east"]}),
     "spec.regions"),
    ("bad-policy-trigger", variant(policy={"triggers": ["sunspots"]}), "spec.policy.triggers[0]"),
    ("bad-spec-not-object", ["not", "an", "object"], "spec"),  # type: ignore[list-item]
    ("bad.dotted.name", GOOD, "metadata.name"),
    ("bad-name-" + "x" * 50, GOOD, "metadata.name"),
    # 64-253 characters: a valid object name but not a label value; answered before any pod selector is built
    ("bad-name-" + "y" * 120, GOOD, "metadata.name"),
    # what can never run on this fleet (engine.placing.validation): rejected, not Pending forever
    ("bad-per-replica-over-node", variant(devices__0__perReplica=100), "spec.devices[0].perReplica"),
    ("bad-per-replica-over-cap", variant(devices__0__perReplica=65), "spec.devices[0].perReplica"),
    ("bad-requires-banana", variant(devices__0__requires={"cuda": "banana"}), "spec.devices[0].requires.cuda"),
    ("bad-region-unknown", variant(regions={"allowed": ["mars-1"]}), "spec.regions.allowed[0]"),
]


def _create_or_refusal(cluster: Cluster, name: str, spec: Any) -> str | None:
    """Create the job as `kubectl apply` would (fieldValidation=Strict); the API server's refusal, if any."""
    body = {"apiVersion": "heterojob.io/v1alpha1", "kind": "HeteroJob",
            "metadata": {"name": name, "namespace": "team-a"}, "spec": spec}
    try:
        cluster.custom.create_namespaced_custom_object("heterojob.io", "v1alpha1", "team-a", "heterojobs", body,
                                                       field_validation="Strict")
    except ApiException as exc:
        if exc.status not in (400, 422):
            raise
        return str(json.loads(exc.body)["message"])
    return None


def test_malformed_jobs_fail_with_the_field_named_and_others_keep_running(cluster: Cluster, operator: Any) -> None:
    """What the CRD's schema can say, the API server refuses (naming the field, as a real one does); the rest
    reaches the operator, which fails the job naming the field."""
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100")])
    reached: list[tuple[str, str]] = []
    for name, spec, field in MALFORMED:
        refusal = _create_or_refusal(cluster, name, spec)
        if refusal is None:
            reached.append((name, field))
        else:
            assert field in refusal, (name, refusal)
    # the schema catches types, enums, bounds, patterns, required fields and unknown fields ...
    assert {"bad-priority", "bad-min-zero", "bad-per-replica-string", "bad-unknown-field",
            "bad-devices-missing"}.isdisjoint(n for n, _ in reached)
    # ... and cross-field rules reach the operator
    assert {"bad-min-over-max", "bad-class-twice", "bad-preferred-not-allowed", "bad.dotted.name"} <= {
        n for n, _ in reached}
    cluster.create_job("good", GOOD)
    # A job naming a class nobody defined waits (the class may be created later) and says why.
    cluster.create_job("unknown-class", variant(devices__0__deviceClass="nvidia-h200"))

    for name, field in reached:
        status = eventually(lambda n=name: cluster.job(n).get("status", {}).get("phase") == "Failed"
                            and cluster.job(n)["status"], what=f"{name} Failed")
        assert field in status["message"], (name, status["message"])
        assert status["reason"] == "InvalidSpec"

    eventually(lambda: cluster.pods("good"), what="the good job still placed")
    pending = eventually(lambda: (s := cluster.job("unknown-class").get("status")) and s.get("message") and s,
                         what="unknown class message")
    assert pending["phase"] == "Pending"
    assert "nvidia-h200: unknown AcceleratorClass (known: ascend-910b, cpu, nvidia-a100, nvidia-h100)" \
        in pending["message"]


def test_fixing_a_rejected_spec_admits_the_job(cluster: Cluster, operator: Any) -> None:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100")])
    cluster.create_job("fixme", variant(replicas={"min": 4, "max": 2}))  # valid to the schema, not to the operator
    eventually(lambda: cluster.job("fixme").get("status", {}).get("phase") == "Failed", what="Failed")
    cluster.custom.patch_namespaced_custom_object("heterojob.io", "v1alpha1", "team-a", "heterojobs", "fixme",
                                                  {"spec": {"replicas": {"min": 1, "max": 2}}})
    eventually(lambda: cluster.pods("fixme"), what="admitted after the fix")


def test_a_running_job_is_never_rejected_when_its_node_shrinks(cluster: Cluster, operator: Any) -> None:
    """The fleet checks (perReplica beyond any node) read a node's capacity, not its allocatable: a device
    plugin withholding a GPU gone bad (allocatable 8 -> 7) fails neither the job that runs there nor a new
    job of 8 per replica; the new one waits (the GPU may be repaired), and one beyond the capacity is refused."""
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100")])
    cluster.create_job("runs", variant(devices__0__perReplica=8))
    pods = eventually(lambda: cluster.pods("runs"), what="placed")
    cluster.set_pod_phase(pods[0].metadata.name, "Running")
    eventually(lambda: cluster.job("runs").get("status", {}).get("phase") == "Running", what="Running")
    cluster.core.patch_node_status("h100-a", {"status": {"allocatable": {"nvidia.com/gpu": "7"}}})
    cluster.custom.patch_namespaced_custom_object("heterojob.io", "v1alpha1", "team-a", "heterojobs", "runs",
                                                  {"metadata": {"labels": {"touched": "yes"}}})  # reconciled again
    cluster.create_job("later", variant(devices__0__perReplica=8))
    eventually(lambda: cluster.job("later").get("status", {}).get("phase") == "Pending", what="later waits")
    cluster.create_job("never", variant(devices__0__perReplica=9))
    status = eventually(lambda: cluster.job("never").get("status", {}).get("phase") == "Failed"
                        and cluster.job("never")["status"], what="never rejected")
    assert "spec.devices[0].perReplica: 9 is more than any node of class nvidia-h100 holds (8 devices)" \
        in status["message"]
    assert cluster.job("later")["status"]["phase"] == "Pending"
    assert cluster.job("runs")["status"]["phase"] == "Running"
