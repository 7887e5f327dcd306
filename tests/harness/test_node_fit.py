"""A pod template no node can ever hold (its memory request above every node's allocatable), on the harness: the
job waits, Pending, with kube-scheduler's reason in its message, and no pod is created. Before, placement chose a
node by devices alone, kube-scheduler refused the pod ("Insufficient memory"), and the operator moved the gang
elsewhere every minute for ever."""

from __future__ import annotations

from typing import Any

import pytest

from heterojob.sim.cluster.harness import OperatorRunner
from heterojob.sim.cluster.nodes import node
from tests.conftest import Cluster, eventually

pytestmark = pytest.mark.harness


def _spec(memory: str) -> dict[str, Any]:
    return {"replicas": {"min": 1}, "devices": [{"deviceClass": "nvidia-h100", "perReplica": 4}],
            "template": {"spec": {"containers": [{"name": "main", "image": "ghcr.io/example/train:cuda12",
                                                  "resources": {"requests": {"memory": memory, "cpu": "8"}}}]}}}


def test_a_pod_larger_than_any_node_waits_with_the_reason_and_creates_no_pod(
        cluster: Cluster, operator: OperatorRunner) -> None:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("h100-b", "cn-east", "nvidia-h100")])
    cluster.create_job("huge", _spec("3000Gi"))
    cluster.create_job("fits", _spec("64Gi"))
    (pod,) = eventually(lambda: cluster.pods("fits"), what="the fitting job's pod")
    assert pod.spec.containers[0].resources.requests["memory"] == "64Gi"
    status = eventually(lambda: (s := cluster.job("huge").get("status") or {}).get("message") and s,
                        what="the too-large job's verdict")
    assert status["phase"] == "Pending", status
    assert "the pod requests 2.93Ti of memory, more than the node allocates (2Ti)" in status["message"], status
    assert not cluster.pods("huge")
    assert "placement" not in status or not status["placement"]
