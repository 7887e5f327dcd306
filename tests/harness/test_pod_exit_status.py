"""What the stand-in kubelet writes when a pod's containers exit, as the v1.32 kubelet does for a pod with
restartPolicy Never: phase Succeeded/Failed and each container `state.terminated` (exitCode, reason
`Completed` or `Error`, startedAt kept, finishedAt), `ready: false`, `started: false`; so `kubectl get pods`
reads `0/1 Completed` (kubectl's printPod shows a terminated container's reason), and the operator reads a
failed replica's exit code (`kube.convert.pod_view`). Before, a finished pod kept `state.running` and
`ready: true`: `1/1 Succeeded`, as no real cluster shows it."""

from __future__ import annotations

import time
from typing import Any

import pytest

from heterojob.constants import ANNOTATION_NODE, LABEL_JOB
from heterojob.kube.convert import pod_view
from heterojob.sim.cluster.kubelet import Kubelet
from heterojob.sim.cluster.nodes import node
from heterojob.sim.cluster.tables import _pod_row
from tests.conftest import Cluster

pytestmark = pytest.mark.harness


def pod(name: str, fail: bool) -> dict[str, Any]:
    env = [{"name": "HETEROJOB_SIM_DURATION", "value": "0"},
           {"name": "HETEROJOB_SIM_FAIL", "value": "1" if fail else "0"}]
    return {"apiVersion": "v1", "kind": "Pod",
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "env": env}]},
            "metadata": {"name": name, "labels": {LABEL_JOB: "j", "heterojob.io/rank": "0",
                                                  "heterojob.io/generation": "1"},
                         "annotations": {ANNOTATION_NODE: "a"}}}


def test_a_finished_pods_containers_are_terminated_not_running(cluster: Cluster) -> None:
    cluster.seed([node("a", "cn-east", "cpu")])
    cluster.core.create_namespaced_pod("team-a", pod("ok", fail=False))
    cluster.core.create_namespaced_pod("team-a", pod("bad", fail=True))
    kubelet = Kubelet(cluster.api, start_delay=0)
    kubelet.step(time.monotonic())  # bound and running
    kubelet.step(time.monotonic())  # its 0 s are up
    pods = {p["metadata"]["name"]: p for p in cluster.api.sanitize_for_serialization(
        cluster.core.list_namespaced_pod("team-a").items)}
    for name, phase, code, reason in (("ok", "Succeeded", 0, "Completed"), ("bad", "Failed", 1, "Error")):
        status = pods[name]["status"]
        assert status["phase"] == phase
        (cs,) = status["containerStatuses"]
        term = cs["state"].get("terminated")
        assert term and term["exitCode"] == code and term["reason"] == reason and "running" not in cs["state"]
        assert term["startedAt"] <= term["finishedAt"] and not cs["ready"] and not cs["started"]
        row = _pod_row(pods[name])
        assert row[1:3] == ["0/1", reason]  # READY, STATUS as kubectl prints them
    view = pod_view(pods["bad"])
    assert view is not None and "exited with code 1 (Error)" in view.reason
