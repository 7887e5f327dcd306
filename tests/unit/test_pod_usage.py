"""What a pod holds on its node (`kube.convert.pod_holds`), as kube-scheduler counts it: its requests, a limit
without a request standing for it; the operator counts the pods it does not manage that way (`pod_usage`),
and the console every pod."""

from __future__ import annotations

from typing import Any

from heterojob.constants import LABEL_JOB
from heterojob.kube import convert


def pod(resources: dict[str, Any], node: str | None = "n1", phase: str = "Running",
        labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns", "labels": labels or {}},
            "spec": {"nodeName": node, "containers": [{"name": "m", "resources": resources}]},
            "status": {"phase": phase}}


def test_requests_count_and_a_limit_stands_for_a_missing_request() -> None:
    held = convert.pod_holds(pod({"requests": {"cpu": "1500m", "memory": "1Gi"},
                                  "limits": {"cpu": "4", "nvidia.com/gpu": "2"}}))
    assert held == {("n1", "cpu"): 2, ("n1", "nvidia.com/gpu"): 2}  # whole cores taken; memory not counted


def test_the_operator_counts_only_the_pods_it_does_not_manage() -> None:
    own = pod({"limits": {"nvidia.com/gpu": "8"}}, labels={LABEL_JOB: "train"})
    assert convert.pod_usage(own) == {} and convert.pod_holds(own) == {("n1", "nvidia.com/gpu"): 8}
    foreign = pod({"requests": {"cpu": "1"}, "limits": {"cpu": "4"}})
    assert convert.pod_usage(foreign) == {("n1", "cpu"): 1}


def test_an_unbound_or_finished_pod_holds_nothing() -> None:
    assert convert.pod_holds(pod({"limits": {"cpu": "4"}}, node=None)) == {}
    assert convert.pod_holds(pod({"limits": {"cpu": "4"}}, phase="Succeeded")) == {}
