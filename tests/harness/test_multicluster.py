"""One cluster per region (docs/multicluster.md): the manager (the session's emulator) places jobs in three
member clusters, each a separate API emulator process named by a Region's kubeconfig Secret.

What is reproduced from the reference (Kueue MultiKueue, v0.9 docs "MultiKueue" and its
`MultiKueueCluster` `Active` condition): a kubeconfig per worker in a Secret of the manager; the job's
objects created in the worker; status mirrored back; a worker unreachable past a timeout has its jobs
placed again; what it left behind removed when it returns. A partition is a frozen process (SIGSTOP):
its port stays open and nothing answers, so the manager sees request timeouts, not refusals.
"""

from __future__ import annotations

import subprocess
from typing import Any

import kubernetes
import pytest

from heterojob.constants import ANNOTATION_CHECKPOINT_ACK, ANNOTATION_CHECKPOINT_REQUEST, GROUP, LABEL_JOB, VERSION
from heterojob.sim.cluster.harness import Emulator, OperatorRunner, apply
from tests.conftest import Cluster, eventually
from tests.harness.members import FAST, Member, condition, join, region, secret, spec, status

@pytest.mark.harness
def test_a_job_runs_in_its_member_and_moves_when_the_member_is_lost_without_running_twice(
        cluster: Cluster, emulator: Emulator, members: dict[str, Emulator]) -> None:
    m = join(cluster, members)
    with OperatorRunner(emulator.kubeconfig, members=FAST) as runner:
        cluster.create_job("far", spec(["m-east"], checkpoint={"intervalSeconds": 1, "timeoutSeconds": 30,
                                                               "storage": "s3://ckpt"}))
        # dispatch: the gang and its Service are created in m-east, nothing in the manager or elsewhere
        pods = eventually(lambda: (p := m["m-east"].pods("far")) and len(p) == 2 and p, what="2 pods in m-east")
        assert not cluster.pods("far") and not m["m-west"].pods("far") and not m["m-north"].pods("far")
        assert all(not p.metadata.owner_references for p in pods)  # no HeteroJob in the member to own them
        svc = m["m-east"].core.read_namespaced_service("far", "team-a")
        assert svc.spec.cluster_ip == "None"
        # what its pods may do there (kube/access.py): run as the job's account, whose Role lets them get and
        # patch (acknowledge checkpoints on) their own gang's pods; owned by the job's Service in the member
        assert {p.spec.service_account_name for p in pods} == {"far-heterojob"}
        assert _access_owners(m["m-east"], "far") == {svc.metadata.uid}
        role = kubernetes.client.RbacAuthorizationV1Api(m["m-east"].api).read_namespaced_role("far-heterojob", "team-a")
        assert role.rules[0].resource_names == ["far-g1-0", "far-g1-1"] and set(role.rules[0].verbs) == {"get", "patch"}
        assert status(cluster, "far")["placement"]["cluster"] == "m-east"  # recorded before any pod was made
        seen = subprocess.run(["kubectl", "--kubeconfig", str(members["m-east"].kubeconfig), "get", "pods", "-n",
                               "team-a", "-l", f"{LABEL_JOB}=far", "-o", "name"], capture_output=True, text=True,
                              timeout=60, check=True).stdout.split()
        seen.sort()
        assert seen == ["pod/far-g1-0", "pod/far-g1-1"]  # kubectl against the member sees the job's pods
        assert eventually(lambda: condition(cluster, "m-east").get("status") == "True", what="m-east reachable")

        # status mirroring: the member's pods running make the job Running in the manager
        for pod in pods:
            m["m-east"].core.patch_namespaced_pod_status(pod.metadata.name, "team-a", {"status": {"phase": "Running"}})
        eventually(lambda: status(cluster, "far").get("phase") == "Running", what="Running")

        # the checkpoint protocol through the member's pods: a periodic request, answered by every rank
        asked = eventually(lambda: (p := m["m-east"].pods("far")) and all(
            (x.metadata.annotations or {}).get(ANNOTATION_CHECKPOINT_REQUEST) for x in p) and p, what="requests")
        ckpt = asked[0].metadata.annotations[ANNOTATION_CHECKPOINT_REQUEST]
        for pod in asked:
            m["m-east"].core.patch_namespaced_pod(pod.metadata.name, "team-a", {"metadata": {"annotations": {
                ANNOTATION_CHECKPOINT_ACK: f"{ckpt};700;s3://ckpt/far/{ckpt}/"}}})
        eventually(lambda: ((status(cluster, "far").get("checkpoint") or {}).get("last") or {}).get("step") == 700,
                   what="checkpoint recorded")

        # m-east freezes: not lost before its timeout (slow is not a fault), then placed again in m-west
        members["m-east"].pause()
        try:
            eventually(lambda: condition(cluster, "m-east").get("status") == "False", what="m-east unreachable")
            assert status(cluster, "far")["placement"]["region"] == "m-east"
            new = eventually(lambda: (p := m["m-west"].pods("far")) and len(p) == 2 and p, timeout=30,
                             what="2 pods in m-west")
            s = status(cluster, "far")
            assert s["placement"]["region"] == "m-west" and s["placement"]["generation"] == 2
            env = {e.name: e.value for e in new[0].spec.containers[0].env}
            assert env["HETEROJOB_RESUME_FROM"] == f"s3://ckpt/far/{ckpt}/"
            assert any(h["action"] == "migrate" and "m-east" in h["reason"] for h in s["history"])
            eventually(lambda: any(e.reason == "MemberLost" for e in cluster.events("far")), what="MemberLost")
        finally:
            members["m-east"].resume()

        # m-east returns with the old gang still there: removed, the job runs in m-west only
        eventually(lambda: not m["m-east"].pods("far"), timeout=20, what="leftovers removed from m-east")
        eventually(lambda: not _services(m["m-east"], "far"), what="leftover Service removed")
        eventually(lambda: not _access_owners(m["m-east"], "far"), what="its access objects collected with it")
        assert len(_access_owners(m["m-west"], "far")) == 1  # the new gang's, owned by its Service in m-west
        assert len(m["m-west"].pods("far")) == 2 and status(cluster, "far")["placement"]["region"] == "m-west"
        assert eventually(lambda: condition(cluster, "m-east").get("status") == "True", what="m-east back")

        # deleting the job removes its pods and Service in the member
        cluster.delete_job("far")
        eventually(lambda: not m["m-west"].pods("far") and not _services(m["m-west"], "far"), timeout=20,
                   what="member side cleaned up")
    assert "Traceback" not in runner.output


def _access_owners(member: Member, job: str) -> set[str]:
    """The owners' uids of the job's ServiceAccount, Role and RoleBinding in the member (empty: none there)."""
    rbac = kubernetes.client.RbacAuthorizationV1Api(member.api)
    found = []
    for read in (lambda: member.core.read_namespaced_service_account(f"{job}-heterojob", "team-a"),
                 lambda: rbac.read_namespaced_role(f"{job}-heterojob", "team-a"),
                 lambda: rbac.read_namespaced_role_binding(f"{job}-heterojob", "team-a")):
        try:
            found.append(read())
        except kubernetes.client.ApiException as exc:
            if exc.status != 404:
                raise
    return {r.uid for o in found for r in o.metadata.owner_references or []} | ({""} if any(
        not o.metadata.owner_references for o in found) else set())


def _services(member: Member, job: str) -> list[Any]:
    return member.core.list_namespaced_service("team-a", label_selector=f"{LABEL_JOB}={job}").items


@pytest.mark.harness
def test_a_members_missing_or_wrong_kubeconfig_is_a_clear_condition_and_others_work(
        cluster: Cluster, emulator: Emulator, members: dict[str, Emulator]) -> None:
    m = join(cluster, members, regions=("m-west",))
    broken = members["m-north"].kubeconfig.read_text().replace("token: emulator", "token: s3cr3t-t0ken")
    broken = broken.replace(members["m-north"].url, "http://127.0.0.1:9")  # nothing listens there
    apply(cluster.api, [
        region("m-north", "north-kubeconfig"),  # no such Secret
        secret("east-kubeconfig", {"config": "x"}), region("m-east", "east-kubeconfig"),  # wrong key
        secret("south-kubeconfig", {"kubeconfig": "token: s3cr3t-t0ken\n[unclosed"}),
        region("m-south", "south-kubeconfig"),  # not a kubeconfig
        secret("far-kubeconfig", {"kubeconfig": broken}), region("m-far", "far-kubeconfig"),  # does not answer
    ])
    with OperatorRunner(emulator.kubeconfig, members=FAST) as runner:
        cluster.create_job("near", spec(["m-west"]))
        eventually(lambda: len(m["m-west"].pods("near")) == 2, what="the working member runs the job")
        expected = {"m-north": ("SecretNotFound", "heterojob-members/north-kubeconfig"),
                    "m-east": ("KubeconfigMissing", "has no key 'kubeconfig' (its keys: config)"),
                    "m-south": ("KubeconfigInvalid", "south-kubeconfig"),
                    "m-far": ("Unreachable", "did not answer")}
        for name, (reason, words) in expected.items():
            c = eventually(lambda n=name: (c := condition(cluster, n)) and c.get("reason") == reason and c,
                           what=f"{name} {reason}")
            assert c["status"] == "False" and words in c["message"], c
        assert condition(cluster, "m-west")["status"] == "True"
        regions = cluster.custom.list_cluster_custom_object(GROUP, VERSION, "regions")
    assert "s3cr3t" not in runner.output and "s3cr3t" not in str(regions)
    assert "Traceback" not in runner.output


@pytest.mark.harness
def test_a_restarted_manager_keeps_the_job_in_its_member_and_a_short_blip_moves_nothing(
        cluster: Cluster, emulator: Emulator, members: dict[str, Emulator]) -> None:
    m = join(cluster, members)
    with OperatorRunner(emulator.kubeconfig, members=FAST):
        cluster.create_job("stay", spec(["m-north"], ["m-north"]))
        pods = eventually(lambda: (p := m["m-north"].pods("stay")) and len(p) == 2 and p, what="2 pods in m-north")
        for pod in pods:
            m["m-north"].core.patch_namespaced_pod_status(pod.metadata.name, "team-a", {"status": {"phase": "Running"}})
        eventually(lambda: status(cluster, "stay").get("phase") == "Running", what="Running")
    # the manager is gone; the member freezes for less than the loss timeout while a new manager starts
    members["m-north"].pause()
    try:
        with OperatorRunner(emulator.kubeconfig, members=FAST) as again:
            eventually(lambda: condition(cluster, "m-north").get("status") == "False", what="m-north unreachable")
            members["m-north"].resume()
            eventually(lambda: condition(cluster, "m-north").get("status") == "True", what="m-north back")
            pods = m["m-north"].pods("stay")
            for pod in pods:  # the job looks again and carries on where it was
                m["m-north"].core.patch_namespaced_pod(pod.metadata.name, "team-a",
                                                       {"metadata": {"labels": {"poke": "1"}}})
            eventually(lambda: status(cluster, "stay").get("phase") == "Running", what="still Running")
            s = status(cluster, "stay")
            assert s["placement"] == {**s["placement"], "region": "m-north", "generation": 1}
            assert [p.metadata.name for p in m["m-north"].pods("stay")] == ["stay-g1-0", "stay-g1-1"]
            assert not m["m-east"].pods("stay") and not m["m-west"].pods("stay") and not cluster.pods("stay")
            assert not any(h["action"] == "migrate" for h in s.get("history") or [])
    finally:
        members["m-north"].resume()
    assert "Traceback" not in again.output


@pytest.mark.harness
def test_a_job_pinned_to_its_region_waits_for_its_lost_member_and_resumes_there_once(
        cluster: Cluster, emulator: Emulator, members: dict[str, Emulator]) -> None:
    m = join(cluster, members)
    with OperatorRunner(emulator.kubeconfig, members=FAST) as runner:
        cluster.create_job("pinned", {**spec(["m-west"], ["m-west", "m-east"]), "policy": {"allowCrossRegion": False}})
        pods = eventually(lambda: (p := m["m-west"].pods("pinned")) and len(p) == 2 and p, what="2 pods in m-west")
        for pod in pods:
            m["m-west"].core.patch_namespaced_pod_status(pod.metadata.name, "team-a", {"status": {"phase": "Running"}})
        eventually(lambda: status(cluster, "pinned").get("phase") == "Running", what="Running")
        members["m-west"].pause()
        try:
            eventually(lambda: any(e.reason == "MemberLost" for e in cluster.events("pinned")), timeout=30,
                       what="lost")
            eventually(lambda: "m-east/nvidia-h100: a move stays in m-west (spec.policy.allowCrossRegion is false)" in (
                status(cluster, "pinned").get("message") or ""), what="waiting for its region")
            assert "placement" not in status(cluster, "pinned")
            assert not m["m-east"].pods("pinned") and not m["m-north"].pods("pinned")  # its policy keeps it home
        finally:
            members["m-west"].resume()
        # back: the old gang is removed and the job starts again there, once
        new = eventually(lambda: (p := m["m-west"].pods("pinned")) and [x.metadata.name for x in p] == [
            "pinned-g2-0", "pinned-g2-1"] and p, timeout=30, what="generation 2 alone in m-west")
        assert status(cluster, "pinned")["placement"]["region"] == "m-west"
        assert not m["m-east"].pods("pinned") and not m["m-north"].pods("pinned")
        assert len(new) == 2
    assert "Traceback" not in runner.output
