"""Editing a running job's spec (issue from the user trial: `kubectl patch hj nightly-eval` did nothing, silently).

As with Kueue and the Kubeflow training operator, a running gang keeps what it was admitted with: the edit
is read (status.observedGeneration advances, as every Kubernetes controller reports what it has seen), an
Event names which fields apply at the next placement and which now, and an invalid edit still fails the job
with its field path. The emulator bumps metadata.generation on spec changes only, as a v1.32 API server does
for custom resources with a status subresource."""

from __future__ import annotations

from typing import Any

import pytest

from heterojob.constants import GROUP, VERSION
from heterojob.sim.cluster.nodes import node
from tests.conftest import Cluster, eventually
from tests.harness.test_harness_quota_priority import run_all, spec, status

pytestmark = pytest.mark.harness


def edit(cluster: Cluster, name: str, change: dict[str, Any]) -> int:
    job = cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, "team-a", "heterojobs", name,
                                                        {"spec": change})
    return int(job["metadata"]["generation"])


def test_a_running_jobs_spec_edit_is_read_and_said_and_deferred_to_its_next_placement(cluster: Cluster,
                                                                                    operator: Any) -> None:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("h100-b", "cn-east", "nvidia-h100")])
    cluster.create_job("nightly-eval", spec("nvidia-h100", replicas=1))
    pods = run_all(cluster, "nightly-eval", 1)
    before = status(cluster, "nightly-eval")
    assert before["observedGeneration"] == 1
    generation = edit(cluster, "nightly-eval", {"replicas": {"min": 2}, "priority": "high"})
    assert generation == 2
    eventually(lambda: status(cluster, "nightly-eval").get("observedGeneration") == 2, what="observedGeneration 2")
    event = eventually(lambda: next((e for e in cluster.events("nightly-eval")
                                     if e.reason == "SpecChangeDeferred"), None), what="a SpecChangeDeferred Event")
    assert event.type == "Normal"
    assert event.message.startswith("spec generation 2 read: replicas.min at the next placement or restart")
    assert "priority now (queue order and preemption)" in event.message
    assert "devices" not in event.message and "replicas.max" not in event.message  # only what changed
    after = status(cluster, "nightly-eval")  # the running gang is left as it was
    assert after["phase"] == "Running" and after["placement"] == before["placement"]
    assert [p.metadata.name for p in cluster.pods("nightly-eval")] == [p.metadata.name for p in pods]
    # an edit the operator refuses still fails the job, naming the field, and is read all the same
    edit(cluster, "nightly-eval", {"template": {"spec": {"containers": [{"name": "main", "image": "x",
                                                                         "env": "A=1"}]}}})
    eventually(lambda: status(cluster, "nightly-eval").get("phase") == "Failed", what="Failed")
    failed = status(cluster, "nightly-eval")
    assert "spec.template.spec.containers[0].env: must be a list" in failed["message"]
    assert failed["observedGeneration"] == 3
