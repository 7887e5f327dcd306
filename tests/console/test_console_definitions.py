"""The console uses the operator's definitions, never copies of its own: what a pod holds on its node
(`kube.convert.pod_holds`), a node's class and region (`engine.capacity.fleet.Fleet.class_of`, `region_of`), and a
waiting job's queue position in the order the operator's planner takes the queue (its queue policy, from
each job's status.scheduling)."""

from __future__ import annotations

import time

import pytest

from heterojob.constants import GROUP, VERSION
from heterojob.sim.cluster.nodes import node
from heterojob_console import preview
from heterojob_console.data import read_cluster
from tests.conftest import Cluster

SPEC = {"replicas": {"min": 1}, "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
        "template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}}


@pytest.mark.parametrize(("policy", "order"), [("", ["young", "old"]), ("mlfq", ["young", "old"]),
                                               ("fifo", ["old", "young"])])
def test_queue_positions_are_the_order_the_operator_plans(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch, policy: str, order: list[str]) -> None:
    """Under mlfq (the operator's default) the job with less attained service comes first, however old the
    other; under fifo the older one. A job the operator cannot read the spec of is not in its queue."""
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100")])
    cluster.create_job("old", SPEC)
    cluster.custom.patch_namespaced_custom_object_status(GROUP, VERSION, "team-a", "heterojobs", "old", {
        "status": {"scheduling": {"attainedDeviceSeconds": 50 * 3600 * 8}}})  # 400 device-hours: the last level
    time.sleep(1.1)  # creationTimestamp has whole seconds: "young" is younger
    cluster.create_job("young", SPEC)
    monkeypatch.setenv("HETEROJOB_QUEUE_POLICY", policy)
    jobs = read_cluster(cluster.api).jobs.set_index("name")
    assert [jobs.loc[name, "queue"] for name in order] == [1, 2]


def test_an_unknown_queue_policy_still_numbers_the_queue(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100")])
    cluster.create_job("train", SPEC)
    monkeypatch.setenv("HETEROJOB_QUEUE_POLICY", "lifo")  # the Quotas page says it names no policy
    assert list(read_cluster(cluster.api).jobs["queue"]) == [1]


def test_what_a_pod_holds_and_a_nodes_region_are_what_the_operator_counts(cluster: Cluster) -> None:
    cluster.seed([node("cpu-a", "cn-east", "cpu"), node("cpu-x", "mars-1", "cpu")])  # no Region selects mars-1
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "etl", "namespace": "team-a"},
           "spec": {"nodeName": "cpu-a", "containers": [{"name": "m", "image": "i", "resources": {
               "requests": {"cpu": "1500m"}, "limits": {"cpu": "4"}}}]}}
    cluster.core.create_namespaced_pod("team-a", pod)
    read = read_cluster(cluster.api)
    nodes = read.nodes.set_index("node")
    foreign = preview.source(read).foreign_usage()  # what the operator's placement counts as taken
    assert nodes.loc["cpu-a", "held"] == foreign[("cpu-a", "cpu")] == 2  # the request, in whole cores taken
    assert nodes.loc["cpu-a", "region"] == "cn-east" and nodes.loc["cpu-a", "class"] == "cpu"
    assert nodes.loc["cpu-x", "region"] == "-"  # the operator places nothing there: in no Region
