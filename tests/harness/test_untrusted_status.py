"""Status is the operator's memory but untrusted input (issue 18, rule 7): what anyone writes there is
repaired from what the pods show, never a loop, never devices given away under running pods."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes.client import ApiException

from heterojob.sim.cluster.nodes import node
from tests.conftest import Cluster, eventually
from tests.harness.test_refusals import live, spec, status


def write_status(cluster: Cluster, name: str, patch: dict[str, Any]) -> None:
    cluster.custom.patch_namespaced_custom_object_status("heterojob.io", "v1alpha1", "team-a", "heterojobs", name,
                                                         {"status": patch})


def running(cluster: Cluster, name: str, replicas: int) -> list[Any]:
    pods = eventually(lambda: (p := live(cluster, name)) and len(p) == replicas and p, what=f"{replicas} pods")
    for pod in pods:
        cluster.set_pod_phase(pod.metadata.name, "Running")
    eventually(lambda: status(cluster, name).get("phase") == "Running", what="Running")
    return pods


@pytest.mark.harness
def test_a_status_that_makes_no_sense_is_refused_or_survived_never_looped_on(cluster: Cluster, operator: Any
                                                                           ) -> None:
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    cluster.create_job("train", spec(1))
    running(cluster, "train", 1)
    with pytest.raises(ApiException) as refused:  # the CRD's schema refuses what is not even the right shape
        write_status(cluster, "train", {"history": [{"x": 1}]})
    assert refused.value.status == 422
    # right shape, no sense: times that are not times, a lower lastGeneration
    write_status(cluster, "train", {"lastGeneration": 0, "startTime": "yesterday",
                                    "history": [{"time": "never", "action": "migrate", "reason": "?"}],
                                    "placement": {**status(cluster, "train")["placement"], "since": "soon"}})
    time.sleep(3)  # several passes' worth
    s = status(cluster, "train")
    assert s["placement"]["generation"] == 1 and s["phase"] == "Running"
    assert len(live(cluster, "train")) == 1


@pytest.mark.harness
def test_succeeded_written_on_a_running_job_is_repaired_and_its_devices_kept(cluster: Cluster, operator: Any
                                                                           ) -> None:
    cluster.seed([node("h100-0", "cn-east", "nvidia-h100")])
    cluster.create_job("train", spec(1))
    pods = running(cluster, "train", 1)
    write_status(cluster, "train", {"phase": "Succeeded"})
    eventually(lambda: status(cluster, "train").get("reason") == "StatusRepaired", what="repaired")
    eventually(lambda: status(cluster, "train").get("phase") == "Running", what="Running again")
    cluster.create_job("other", spec(1))  # the only node is still the running job's
    eventually(lambda: status(cluster, "other").get("phase") == "Pending", what="other waits")
    time.sleep(1)
    assert not live(cluster, "other")
    assert [p.metadata.name for p in live(cluster, "train")] == [p.metadata.name for p in pods]
