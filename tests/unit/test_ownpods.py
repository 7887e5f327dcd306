"""`kube.ownpods`: a job's pods as a pass reads them from the watch, with the operator's own creates and deletes."""

from __future__ import annotations

from typing import Any

from heterojob.constants import LABEL_JOB
from heterojob.kube.ownpods import OwnPods, kept


def pod(name: str, rv: str, job: str = "j", **meta: Any) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"namespace": "ns", "name": name, "resourceVersion": rv,
                                        "labels": {LABEL_JOB: job}, **meta},
            "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "x"}]}, "status": {"phase": "Pending"}}


def names(pods: list[Any]) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in pods}


def test_a_pod_created_is_read_before_its_watch_event_comes_and_its_echo_is_known() -> None:
    own = OwnPods()
    own.written("ns", "j-g1-0", pod("j-g1-0", "10"))
    own.written("ns", "k-g1-0", pod("k-g1-0", "11", job="k"))
    assert names(own.merged("ns", "j", [])) == {"j-g1-0": "10"}  # another job's pod is not this job's
    assert own.seen("ns", "j-g1-0", pod("j-g1-0", "10"), "ADDED")  # its ADDED event: the pod as created
    assert names(own.merged("ns", "j", [pod("j-g1-0", "10")])) == {"j-g1-0": "10"}
    assert not own.seen("ns", "j-g1-0", pod("j-g1-0", "12"), "MODIFIED")  # changed since: a pass looks


def test_a_pod_annotated_is_read_as_annotated_before_its_watch_event_comes() -> None:
    own = OwnPods()
    own.written("ns", "j-g1-0", pod("j-g1-0", "15", annotations={"heterojob.io/checkpoint-request": "c1"}))
    (read,) = own.merged("ns", "j", [pod("j-g1-0", "10")])
    assert read["metadata"]["annotations"] == {"heterojob.io/checkpoint-request": "c1"}
    assert own.seen("ns", "j-g1-0", pod("j-g1-0", "15"), "MODIFIED")  # its echo


def test_a_pod_changed_before_its_first_event_is_not_taken_for_the_echo() -> None:
    own = OwnPods()
    own.written("ns", "j-g1-0", pod("j-g1-0", "10"))
    assert not own.seen("ns", "j-g1-0", pod("j-g1-0", "14"), "ADDED")
    assert names(own.merged("ns", "j", [pod("j-g1-0", "14")])) == {"j-g1-0": "14"}


def test_a_first_event_while_the_create_is_on_its_way_is_the_creators() -> None:
    own = OwnPods()
    own.making.add(("ns", "j-g1-0"))
    assert own.seen("ns", "j-g1-0", pod("j-g1-0", "10"), "ADDED")
    assert not own.seen("ns", "j-g1-0", pod("j-g1-0", "11"), "MODIFIED")  # a change is a change


def test_a_pod_deleted_reads_as_being_deleted_until_the_watch_says_more() -> None:
    own = OwnPods()
    deleting = pod("j-g1-0", "20", deletionTimestamp="2026-01-01T00:00:00Z")
    own.deleted("ns", "j-g1-0", deleting)
    watched = [pod("j-g1-0", "10"), pod("j-g1-1", "11")]
    assert own.merged("ns", "j", watched)[0]["metadata"].get("deletionTimestamp")
    own.seen("ns", "j-g1-0", deleting, "MODIFIED")
    assert not own.merged("ns", "j", watched)[0]["metadata"].get("deletionTimestamp")  # the watch's from here on


def test_a_pod_deleted_at_once_or_gone_already_reads_as_gone_until_its_deleted_event() -> None:
    own = OwnPods()
    own.deleted("ns", "j-g1-0", pod("j-g1-0", "20"))  # the answer of a delete without a grace period
    own.deleted("ns", "j-g1-1", None)  # not found: gone already
    watched = [pod("j-g1-0", "10"), pod("j-g1-1", "11"), pod("j-g1-2", "12")]
    assert names(own.merged("ns", "j", watched)) == {"j-g1-2": "12"}
    own.seen("ns", "j-g1-1", pod("j-g1-1", "13"), "MODIFIED")  # an update from before the delete: still gone
    assert names(own.merged("ns", "j", watched)) == {"j-g1-2": "12"}
    own.seen("ns", "j-g1-0", pod("j-g1-0", "21"), "DELETED")
    own.seen("ns", "j-g1-1", pod("j-g1-1", "21"), "DELETED")
    assert names(own.merged("ns", "j", watched)) == {"j-g1-0": "10", "j-g1-1": "11", "j-g1-2": "12"}


def test_what_the_index_keeps_of_a_pod_is_what_a_pass_reads() -> None:
    full = pod("j-g1-0", "10", annotations={"a": "b"}, ownerReferences=[{"uid": "u"}])
    small = kept(full)
    assert small["metadata"] == {"name": "j-g1-0", "namespace": "ns", "labels": {LABEL_JOB: "j"},
                                 "annotations": {"a": "b"}, "resourceVersion": "10"}
    assert small["spec"] == {"nodeName": "n1"} and small["status"] == {"phase": "Pending"}


def test_the_jobs_given_pods_not_yet_seen_are_known() -> None:
    """A member that stops answering pokes the jobs of the pods created there since its last listing, too: a pass
    reads a member job's pods from the poll, and would not call the member to find it gone."""
    from heterojob.kube.ownpods import OwnPods

    own = OwnPods()
    for name, job in (("a-g1-0", "a"), ("a-g1-1", "a"), ("b-g2-0", "b")):
        own.written("team", name, {"kind": "Pod", "metadata": {"name": name, "namespace": "team",
                                                               "resourceVersion": "7", "labels": {"heterojob.io/job": job}}})
    assert own.jobs() == {"team/a", "team/b"}
    own.seen("team", "b-g2-0", {"metadata": {"resourceVersion": "7"}}, None)
    assert own.jobs() == {"team/a"}
