"""A gang is all or nothing when the API server refuses pods (issue 18, rule 5), and bad templates are
refused before any pod is built. The emulator refuses like a real v1.32 API server (sim/cluster/admission.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from heterojob.sim.cluster.harness import Emulator
from heterojob.sim.cluster.nodes import node
from tests.conftest import Cluster, eventually


def spec(replicas: int = 2, **extra: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "train:cuda12", **extra.pop("container", {})}
    return {"priority": "high", "replicas": {"min": replicas},
            "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
            "template": {"spec": {"containers": [container], **extra.pop("pod", {})}}, **extra}


def status(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.job(name).get("status") or {}


def live(cluster: Cluster, name: str) -> list[Any]:
    return [p for p in cluster.pods(name) if not p.metadata.deletion_timestamp]


@pytest.mark.harness
def test_a_pod_refused_by_pod_security_fails_the_job_with_the_servers_words(cluster: Cluster, operator: Any
                                                                            ) -> None:
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    cluster.core.patch_namespace("team-a", {"metadata": {"labels": {"pod-security.kubernetes.io/enforce":
                                                                    "restricted"}}})
    cluster.create_job("train", spec())
    eventually(lambda: status(cluster, "train").get("phase") == "Failed", what="Failed")
    s = status(cluster, "train")
    assert s["reason"] == "PodRejected" and "violates PodSecurity" in s["message"] and "placement" not in s
    assert not live(cluster, "train")
    eventually(lambda: any(e.reason == "PodRejected" for e in cluster.events("train")), what="an Event")
    # the devices came back: a job the namespace allows runs there
    cluster.core.patch_namespace("team-a", {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": None}}})
    cluster.create_job("next", spec())
    eventually(lambda: len(live(cluster, "next")) == 2, what="the next job's pods")


@pytest.mark.harness
def test_a_missing_service_account_backs_off_and_the_gang_runs_once_it_exists(cluster: Cluster, operator: Any
                                                                             ) -> None:
    """Issue 33 item 2: a ServiceAccount appears asynchronously (a new namespace's `default` is made by
    kube-controller-manager; a named one is often applied after the job), so its absence is retried with a
    backoff, as ReplicaSet and Job controllers do, never a failure for good."""
    cluster.seed([node("h100-0", "cn-east", "nvidia-h100")])
    cluster.create_job("train", spec(1, pod={"serviceAccountName": "trainer"}))
    eventually(lambda: status(cluster, "train").get("reason") == "PodsRefused", what="PodsRefused")
    s = status(cluster, "train")
    assert s["phase"] == "Pending" and 'serviceaccount "trainer" not found' in s["message"]
    assert s["backoff"]["attempts"] >= 1 and "placement" not in s
    created = next(c for c in s["conditions"] if c["type"] == "PodsCreated")
    assert created["status"] == "False" and "placing again in" not in created["message"]  # no countdown
    cluster.core.create_namespaced_service_account("team-a", {"metadata": {"name": "trainer"}})
    eventually(lambda: len(live(cluster, "train")) == 1, timeout=40, what="the gang once the account exists")
    eventually(lambda: next(c for c in status(cluster, "train")["conditions"] if c["type"] == "PodsCreated"
                            )["status"] == "True", what="PodsCreated True")
    s = status(cluster, "train")
    assert s["phase"] == "Admitted" and "backoff" not in s
    admitted = next(c for c in s["conditions"] if c["type"] == "Admitted")  # not the refusal's, written back
    assert (admitted["status"], admitted["reason"]) == ("True", "Placed"), admitted


@pytest.mark.harness
def test_a_service_an_earlier_job_of_the_name_left_is_waited_for_then_made_for_this_job(
        cluster: Cluster, emulator: Emulator, operator: Any) -> None:
    """Issue 33 item 3: a HeteroJob deleted and created again under its name while its old Service waits for
    the garbage collector. The 409 is checked against the owner's uid: the job waits (backing off) until the
    old Service is gone, then makes its own, which the collector leaves alone."""
    cluster.seed([node("h100-0", "cn-east", "nvidia-h100")])
    emulator.gc_lag(3600)  # the collector has not reached the old Service yet: the test deletes it in its place
    old_uid = "0b7d3a52-0000-4000-8000-00000000dead"  # the deleted HeteroJob's
    cluster.core.create_namespaced_service("team-a", {"metadata": {"name": "train", "ownerReferences": [
        {"apiVersion": "heterojob.io/v1alpha1", "kind": "HeteroJob", "name": "train", "uid": old_uid,
         "controller": True}]}, "spec": {"clusterIP": "None", "selector": {"heterojob.io/job": "train"},
                                         "ports": [{"name": "rendezvous", "port": 29500}]}})
    job = cluster.create_job("train", spec(1))
    eventually(lambda: status(cluster, "train").get("reason") == "PodsRefused", what="waits for the old Service")
    s = status(cluster, "train")
    assert old_uid in s["message"] and "garbage collector" in s["message"] and s["phase"] == "Pending"
    assert not live(cluster, "train")  # all or nothing: no rank runs without its Service
    cluster.core.delete_namespaced_service("train", "team-a")  # the garbage collector's turn
    eventually(lambda: len(live(cluster, "train")) == 1, timeout=40, what="the gang, after the backoff")
    svc = cluster.core.read_namespaced_service("train", "team-a")
    assert [r.uid for r in svc.metadata.owner_references] == [job["metadata"]["uid"]]


@pytest.mark.harness
def test_a_job_placed_after_waiting_and_then_refused_says_admitted_false_for_the_refusal(
        cluster: Cluster, operator: Any) -> None:
    """Issue 33 item 6: the Admitted condition says the current verdict. A job that waited (Admitted False,
    NoRoom), was placed and had its pods refused for good no longer shows the wait's old condition."""
    cluster.seed([node("h100-0", "cn-east", "nvidia-h100")])
    cluster.create_job("first", spec(1))
    eventually(lambda: live(cluster, "first"), what="the first job's pod")
    cluster.core.patch_namespace("team-a", {"metadata": {"labels": {"pod-security.kubernetes.io/enforce":
                                                                    "baseline"}}})
    cluster.create_job("train", spec(1, container={"securityContext": {"privileged": True}}))
    eventually(lambda: status(cluster, "train").get("reason") == "NoRoom", what="train waits")
    admitted = next(c for c in status(cluster, "train")["conditions"] if c["type"] == "Admitted")
    assert (admitted["status"], admitted["reason"]) == ("False", "NoRoom")
    cluster.delete_job("first")
    eventually(lambda: status(cluster, "train").get("phase") == "Failed", what="refused for good")
    s = status(cluster, "train")
    admitted = next(c for c in s["conditions"] if c["type"] == "Admitted")
    assert (admitted["status"], admitted["reason"]) == ("False", "PodRejected"), admitted
    assert "violates PodSecurity" in admitted["message"] and admitted["message"] == s["message"]


@pytest.mark.harness
def test_a_job_whose_pods_were_refused_for_good_is_placed_again_when_its_template_is_edited(
        cluster: Cluster, operator: Any) -> None:
    """Issue 33 item 8a: as an InvalidSpec job comes back when its spec is fixed, a PodRejected one (here
    PodSecurity) is placed again after an edit of its spec, and runs when the API server takes its pods."""
    from heterojob.constants import GROUP, VERSION

    cluster.seed([node("h100-0", "cn-east", "nvidia-h100")])
    cluster.core.patch_namespace("team-a", {"metadata": {"labels": {"pod-security.kubernetes.io/enforce":
                                                                    "baseline"}}})
    bad = spec(1, container={"securityContext": {"privileged": True}})
    cluster.create_job("train", bad)
    eventually(lambda: status(cluster, "train").get("reason") == "PodRejected", what="PodRejected")
    fixed = bad["template"]
    fixed["spec"]["containers"][0]["securityContext"] = {"privileged": False}
    cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, "team-a", "heterojobs", "train",
                                                  {"spec": {"template": fixed}})
    eventually(lambda: len(live(cluster, "train")) == 1, what="the gang of the edited template")
    # the refusal's condition ends with the gang that passed
    eventually(lambda: next(c for c in status(cluster, "train")["conditions"] if c["type"] == "PodsCreated"
                            )["status"] == "True", what="PodsCreated True")
    s = status(cluster, "train")
    assert s["phase"] == "Admitted" and s["observedGeneration"] == 2
    admitted = next(c for c in s["conditions"] if c["type"] == "Admitted")
    assert (admitted["status"], admitted["reason"]) == ("True", "Placed"), admitted
    eventually(lambda: any(e.reason == "SpecEdited" for e in cluster.events("train")), what="a SpecEdited Event")


@pytest.mark.harness
def test_a_quota_refusing_one_rank_takes_the_whole_gang_back_and_retries(cluster: Cluster, operator: Any) -> None:
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    cluster.core.create_namespaced_resource_quota("team-a", {
        "metadata": {"name": "pods"}, "spec": {"hard": {"pods": "1"}}})
    cluster.create_job("train", spec())
    eventually(lambda: status(cluster, "train").get("reason") == "PodsRefused", what="PodsRefused")
    s = status(cluster, "train")
    assert s["phase"] == "Pending" and "exceeded quota" in s["message"] and s["backoff"]["attempts"] >= 1
    eventually(lambda: not live(cluster, "train"), what="no rank left holding devices")
    assert next(c for c in s["conditions"] if c["type"] == "PodsCreated")["status"] == "False"
    cluster.core.delete_namespaced_resource_quota("pods", "team-a")
    eventually(lambda: len(live(cluster, "train")) == 2, timeout=40, what="the gang created after the backoff")
    eventually(lambda: "backoff" not in status(cluster, "train"), what="the backoff cleared once created")


@pytest.mark.harness
def test_a_template_of_the_wrong_shape_fails_with_field_paths(cluster: Cluster, operator: Any) -> None:
    cluster.seed([node("h100-0", "cn-east", "nvidia-h100")])
    cluster.create_job("bad", spec(1, container={"env": "A=1"}, pod={"tolerations": "all", "nodeName": "h100-0"}))
    eventually(lambda: status(cluster, "bad").get("phase") == "Failed", what="Failed")
    message = status(cluster, "bad")["message"]
    assert "spec.template.spec.containers[0].env: must be a list" in message
    assert "spec.template.spec.tolerations: must be a list" in message
    assert "spec.template.spec.nodeName: not allowed" in message
    assert not live(cluster, "bad")


@pytest.mark.harness
def test_a_rank_the_scheduler_cannot_place_moves_the_gang_elsewhere(cluster: Cluster, operator: Any) -> None:
    """Rule 6: PodScheduled False (Unschedulable) past the bound: the placement is released and the gang
    placed again avoiding that node, with the scheduler's message in the history."""
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    cluster.create_job("train", spec(1))
    (pod,) = eventually(lambda: live(cluster, "train"), what="a pod")
    first = pod.metadata.annotations["heterojob.io/node"]
    message = "0/2 nodes are available: 1 Insufficient memory, 1 node(s) didn't match Pod's node affinity."
    cluster.core.patch_namespaced_pod_status(pod.metadata.name, "team-a", {"status": {"phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    moved = eventually(lambda: [p for p in live(cluster, "train") if p.metadata.labels["heterojob.io/generation"]
                                == "2"], what="generation 2")
    assert moved[0].metadata.annotations["heterojob.io/node"] != first
    entry = next(h for h in status(cluster, "train")["history"] if h["action"] == "reschedule")
    assert "Insufficient memory" in entry["reason"] and entry["from"].startswith("cn-east/nvidia-h100 x1")


@pytest.mark.harness
def test_a_pod_the_server_finds_invalid_fails_the_job_without_a_partial_gang(cluster: Cluster, operator: Any
                                                                            ) -> None:
    """422 Invalid for what only the API server checks (here an environment variable's name)."""
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    cluster.create_job("train", spec(2, container={"env": [{"name": "NOT A NAME", "value": "1"}]}))
    eventually(lambda: status(cluster, "train").get("phase") == "Failed", what="Failed")
    s = status(cluster, "train")
    assert s["reason"] == "PodRejected" and "Invalid value" in s["message"], s["message"]
    assert not live(cluster, "train")


@pytest.mark.harness
def test_a_pod_the_scheduler_cannot_fit_names_the_schedulers_reason_on_the_job_once(cluster: Cluster,
                                                                                   operator: Any) -> None:
    """Issue 33 item 8d: while kube-scheduler refuses a rank (PodScheduled False, Unschedulable; here written
    as the scheduler would), the waiting job says why in its message, condition PodsScheduled and one Warning
    Event, in the scheduler's stable words; a pass that finds the same verdict writes nothing; the condition
    turns True once the gang is bound."""
    cluster.seed([node("h100-0", "cn-east", "nvidia-h100")])
    # more memory than the node has free beside the pods already there (placement judges only what a node
    # allocates at all: a pod no node could ever hold would wait in the queue instead)
    cluster.create_job("big", spec(1, container={"resources": {"requests": {"memory": "1900Gi"}}}))
    (pod,) = eventually(lambda: live(cluster, "big"), what="a pod")
    words = "0/8 nodes are available: 8 Insufficient memory. preemption: 0/8 nodes are available: 8 No " \
            "preemption victims found for incoming pod."

    def refuse() -> None:  # now: a refusal older than the bound (60 s) moves the gang elsewhere
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        cluster.core.patch_namespaced_pod_status(pod.metadata.name, "team-a", {"status": {"phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": words,
                            "lastTransitionTime": at}]}})

    refuse()
    eventually(lambda: status(cluster, "big").get("reason") == "Unschedulable", what="the scheduler's reason")
    s = status(cluster, "big")
    assert s["phase"] == "Admitted" and s["message"] == f"the scheduler cannot place the job's pods: {words}"
    cond = next(c for c in s["conditions"] if c["type"] == "PodsScheduled")
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "Unschedulable", s["message"])
    event = eventually(lambda: [e for e in cluster.events("big") if e.reason == "Unschedulable"], what="an Event")
    assert event[0].type == "Warning" and event[0].message == s["message"]
    version = cluster.job("big")["metadata"]["resourceVersion"]
    time.sleep(1.0)
    refuse()  # the scheduler tried again: same words
    time.sleep(1.5)
    assert cluster.job("big")["metadata"]["resourceVersion"] == version  # nothing rewritten
    again = [e for e in cluster.events("big") if e.reason == "Unschedulable"]
    assert len(again) == 1 and (again[0].count or 1) == 1
    cluster.set_pod_phase(pod.metadata.name, "Running")
    eventually(lambda: next(c for c in status(cluster, "big")["conditions"] if c["type"] == "PodsScheduled"
                            )["status"] == "True", what="PodsScheduled True once bound")
