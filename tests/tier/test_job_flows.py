"""A job's life on both sites (tests/tier/conftest.py): moves asked for and forced by a lost node, preemption
(also when the preemptor's first gang is refused), quotas, a namespace still without its `default` account, and
what a finished or deleted job leaves behind."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import kubernetes
import pytest

from heterojob.constants import (ANNOTATION_CHECKPOINT_REQUEST, ANNOTATION_MIGRATE, GROUP, LABEL_JOB, VERSION)
from heterojob.sim.cluster.nodes import node
from tests.conftest import eventually
from tests.tier.conftest import GRACE_S, Flow

pytestmark = pytest.mark.tier


def job_spec(replicas: int = 2, per_replica: int = 8, priority: str = "medium", duration: int = 600,
             **extra: Any) -> dict[str, Any]:
    return {"priority": priority, "replicas": {"min": replicas},
            "devices": [{"deviceClass": "nvidia-h100", "perReplica": per_replica}],
            "checkpoint": {"timeoutSeconds": 30, "storage": "s3://ckpt"},
            "template": {"spec": {"containers": [{"name": "main", "image": "ghcr.io/example/train:cuda12", "env": [
                {"name": "HETEROJOB_SIM_DURATION", "value": str(duration)}]}]}}, **extra}


def generation_of(pods: list[Any]) -> set[str]:
    return {p.metadata.labels["heterojob.io/generation"] for p in pods}


def test_a_requested_move_checkpoints_through_the_sdk_and_lands_elsewhere(flow: Flow) -> None:
    ns = flow.namespace("team")
    flow.nodes([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(4)])
    flow.create_job("mover", job_spec(), ns)
    flow.operator()
    first = flow.phase("mover", ns, "Running")["placement"]
    flow.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "heterojobs", "mover", {
        "metadata": {"annotations": {ANNOTATION_MIGRATE: "maintenance"}}})
    eventually(lambda: (s := flow.status("mover", ns)).get("phase") == "Running"
               and s["placement"]["generation"] == 2 and s, timeout=60, what="generation 2 running")
    new = flow.pods("mover", ns)
    assert generation_of(new) == {"2"} and {p.spec.node_name for p in new}.isdisjoint(first["nodes"])
    acked = {pod for pod, _ in flow.acks}
    assert {f"mover-g1-{r}" for r in range(2)} <= acked  # both ranks answered, with their own pod-bound tokens
    env = {e.name: e.value for e in new[0].spec.containers[0].env}
    assert env["HETEROJOB_RESUME_FROM"].startswith("s3://ckpt")
    entry = flow.status("mover", ns)["history"][-1]
    assert entry["action"] == "migrate" and "maintenance" in entry["reason"] and "generation 2" in entry["to"]


def test_a_node_whose_kubelet_stops_is_marked_by_the_node_lifecycle_controller_and_its_job_moves(flow: Flow) -> None:
    ns = flow.namespace("team")
    names = flow.nodes([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(3)])
    flow.create_job("steady", job_spec(replicas=1), ns)
    flow.operator()
    lost = flow.phase("steady", ns, "Running")["placement"]["nodes"][0]
    flow.kubelet.silence(lost)  # no Lease renewal, no status: the controller marks it after its grace period

    def unknown() -> bool:
        ready = next(c for c in flow.core.read_node(lost).status.conditions if c.type == "Ready")
        return ready.status == "Unknown" and ready.reason == "NodeStatusUnknown"

    eventually(unknown, timeout=GRACE_S + 40, what=f"{lost} Ready Unknown")
    eventually(lambda: "node.kubernetes.io/unreachable" in {  # the taints follow the condition a moment later
        t.key for t in flow.core.read_node(lost).spec.taints or []}, timeout=30, what=f"{lost} tainted unreachable")
    s = eventually(lambda: (s := flow.status("steady", ns)).get("phase") == "Running"
                   and s["placement"]["generation"] >= 2 and s, timeout=60, what="moved off the lost node")
    assert lost not in s["placement"]["nodes"] and set(s["placement"]["nodes"]) <= set(names)
    assert any(h["action"] in ("migrate", "restart", "reschedule") for h in s["history"])


def test_a_refused_preemptor_keeps_the_room_and_its_victim_is_asked_once(flow: Flow) -> None:
    """The preemptor's first gang is refused by a ResourceQuota (a refusal that passes): the room its victim gave
    stays the preemptor's through the backoff, the victim is not placed there again meanwhile, and it is asked to
    checkpoint exactly once. The Preempted victim, without pods, no longer says its pods were created."""
    low_ns, high_ns = flow.namespace("low"), flow.namespace("high")
    flow.nodes([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    flow.core.create_namespaced_resource_quota(high_ns, {"metadata": {"name": "pods"}, "spec": {"hard": {"pods": "0"}}})
    flow.create_job("victim", job_spec(priority="low"), low_ns)
    flow.operator("--preemption-min-runtime", "0")
    flow.phase("victim", low_ns, "Running")
    flow.create_job("boss", job_spec(priority="urgent"), high_ns)
    eventually(lambda: flow.status("boss", high_ns).get("backoff"), timeout=60, what="the boss's gang refused")
    refused = flow.status("boss", high_ns)
    assert refused["backoff"]["reserved"]["deviceClass"] == "nvidia-h100"
    assert flow.status("victim", low_ns)["phase"] == "Preempted"
    flow.core.patch_namespaced_resource_quota("pods", high_ns, {"spec": {"hard": {"pods": "10"}}})
    s = flow.phase("boss", high_ns, "Running", timeout=90)
    assert s["placement"]["generation"] == 2 and not s.get("backoff")  # its second gang: the first was refused
    victim = flow.status("victim", low_ns)
    assert victim["phase"] == "Preempted" and not victim.get("placement")
    asked = [e for e in flow.events("victim", low_ns) if e.reason == "CheckpointRequested"]
    assert sum(e.count or 1 for e in asked) == 1, [(e.message, e.count) for e in asked]
    assert len({ack.split(";")[0] for pod, ack in flow.acks if pod.startswith("victim-")}) == 1
    assert [h["action"] for h in victim["history"]].count("preempt") == 1
    created = next((c for c in victim["conditions"] if c["type"] == "PodsCreated"), None)
    assert created is None or created["status"] == "False"


def test_a_quota_holds_a_job_until_it_is_raised(flow: Flow) -> None:
    ns = flow.namespace("team")
    flow.nodes([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    flow.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "heteroquotas", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "HeteroQuota", "metadata": {"name": "gpus", "namespace": ns},
        "spec": {"limits": [{"deviceClass": "nvidia-h100", "region": "cn-east", "devices": 8}]}})
    flow.create_job("big", job_spec(), ns)
    flow.operator()
    message = eventually(lambda: (s := flow.status("big", ns)).get("reason") == "NoRoom" and s["message"],
                         timeout=60, what="big waiting on its quota")
    assert "quota 0/8 used (gpus: nvidia-h100 in cn-east; needs 16)" in message
    assert not flow.pods("big", ns)
    flow.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "heteroquotas", "gpus", {
        "spec": {"limits": [{"deviceClass": "nvidia-h100", "region": "cn-east", "devices": 16}]}})
    flow.phase("big", ns, "Running")
    used = eventually(lambda: (flow.custom.get_namespaced_custom_object(GROUP, VERSION, ns, "heteroquotas", "gpus")
                               .get("status") or {}).get("summary"), what="the quota's summary")
    assert used == "nvidia-h100/*: 16/16" or "16/16" in used


def test_a_job_in_a_namespace_made_a_moment_ago_runs(flow: Flow) -> None:
    """The job comes with its namespace, before the controller manager has made the namespace's `default`
    ServiceAccount: its first gang is made as its own account, and is not refused."""
    flow.nodes([node("h100-0", "cn-east", "nvidia-h100")])
    flow.operator()
    ns = flow.namespace("fresh", wait_account=False)
    flow.create_job("early", job_spec(replicas=1), ns)
    s = flow.phase("early", ns, "Running")
    assert s["placement"]["generation"] == 1
    assert "PodsRefused" not in [e.reason for e in flow.events("early", ns)]


def test_a_finished_and_a_deleted_job_leave_nothing_behind(flow: Flow) -> None:
    ns = flow.namespace("team")
    flow.nodes([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    flow.create_job("short", job_spec(replicas=1, duration=3), ns)
    flow.create_job("long", job_spec(replicas=1), ns)
    flow.operator()
    flow.phase("short", ns, "Succeeded", timeout=90)
    flow.phase("long", ns, "Running")
    for name in ("short", "long"):
        flow.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "heterojobs", name)

    def leftovers() -> list[str]:
        selector = f"{LABEL_JOB}"
        found = [f"pod/{p.metadata.name}" for p in flow.core.list_namespaced_pod(ns).items]
        found += [f"service/{s.metadata.name}" for s in flow.core.list_namespaced_service(ns).items]
        found += [f"serviceaccount/{a.metadata.name}" for a in flow.core.list_namespaced_service_account(
            ns, label_selector=selector).items]
        found += [f"role/{r.metadata.name}" for r in flow.rbac.list_namespaced_role(ns).items]
        found += [f"rolebinding/{b.metadata.name}" for b in flow.rbac.list_namespaced_role_binding(ns).items]
        jobs = flow.custom.list_namespaced_custom_object(GROUP, VERSION, ns, "heterojobs")["items"]
        return found + [f"heterojob/{j['metadata']['name']}" for j in jobs]

    eventually(lambda: not leftovers(), timeout=90, what="nothing left")


def test_a_deleted_jobs_pods_keep_their_devices_through_their_grace_period(flow: Flow) -> None:
    """kube-scheduler counts a Terminating pod on its node until it is gone: so does the operator. A job made
    just as another is deleted waits for the deleted job's pods to go (its trainer flushes for a few seconds on
    SIGTERM) instead of having its gang made on devices the cluster still counts as held: no rank of it is ever
    refused by the scheduler, and its first gang runs."""
    ns = flow.namespace("team")
    flow.nodes([node("h100-0", "cn-east", "nvidia-h100")])
    slow = job_spec(replicas=1)
    slow["template"]["spec"]["terminationGracePeriodSeconds"] = 30
    slow["template"]["spec"]["containers"][0]["env"].append({"name": "HETEROJOB_SIM_EXIT_SECONDS", "value": "8"})
    flow.create_job("old", slow, ns)
    flow.operator()
    flow.phase("old", ns, "Running")
    flow.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "heterojobs", "old")
    flow.create_job("new", job_spec(replicas=1), ns)
    s = flow.phase("new", ns, "Running", timeout=90)
    assert s["placement"]["generation"] == 1
    refused = [(e.involved_object.name, e.reason, e.message) for e in flow.core.list_namespaced_event(ns).items
               if e.involved_object.name.startswith("new") and e.reason in ("FailedScheduling", "Unschedulable")]
    assert not refused, refused


def test_a_job_pods_token_is_refused_on_another_jobs_pods(flow: Flow) -> None:
    ns = flow.namespace("team")
    flow.nodes([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    flow.create_job("one", job_spec(replicas=1), ns)
    flow.create_job("two", job_spec(replicas=1), ns)
    flow.operator()
    flow.phase("one", ns, "Running")
    flow.phase("two", ns, "Running")
    [mine], [theirs] = flow.pods("one", ns), flow.pods("two", ns)
    client = flow.pod_client(flow.pod_token(mine))
    assert client.get_pod(ns, mine.metadata.name)["metadata"]["name"] == mine.metadata.name
    client.patch_pod(ns, mine.metadata.name, {"metadata": {"annotations": {"example.com/seen": "yes"}}})
    from heterojob_sdk import ApiError

    for call in (lambda: client.get_pod(ns, theirs.metadata.name),
                 lambda: client.patch_pod(ns, theirs.metadata.name, {"metadata": {"annotations": {
                     ANNOTATION_CHECKPOINT_REQUEST: "forged"}}})):
        with pytest.raises(ApiError) as refused:
            call()
        assert refused.value.status == 403
    assert ANNOTATION_CHECKPOINT_REQUEST not in (flow.core.read_namespaced_pod(
        theirs.metadata.name, ns).metadata.annotations or {})
    with pytest.raises(kubernetes.client.ApiException):  # nor may it list pods
        kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(_with_token(flow, flow.pod_token(mine)))
                                    ).list_namespaced_pod(ns)


def _with_token(flow: Flow, token: str) -> kubernetes.client.Configuration:
    config = kubernetes.client.Configuration()
    config.host = flow.api.configuration.host
    config.ssl_ca_cert = flow.site.ca_file
    config.verify_ssl = flow.site.ca_file is not None
    config.api_key = {"authorization": f"Bearer {token}"}
    return config


def test_conditions_say_what_is_current_after_a_fixed_spec_runs(flow: Flow) -> None:
    """A spec rejected, then fixed, then placed: SpecValid no longer says the job waits for room once it runs."""
    ns = flow.namespace("team")
    flow.nodes([node("h100-0", "cn-east", "nvidia-h100")])
    flow.create_job("typo", job_spec(replicas=1, regions={"allowed": ["cn-esat"]}), ns)
    flow.operator()
    assert "cn-esat" in flow.phase("typo", ns, "Failed")["message"]
    flow.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "heterojobs", "typo", {
        "spec": {"regions": {"allowed": ["cn-east"]}}})
    flow.phase("typo", ns, "Running")
    valid = flow.condition("typo", ns, "SpecValid")
    assert valid["status"] == "True" and "waiting" not in valid["message"], valid


def test_kubectl_drain_moves_the_job_from_a_checkpoint_taken_in_the_grace_period(flow: Flow) -> None:
    """`kubectl drain` of the job's node: the API server's eviction marks the rank (DisruptionTarget) and deletes it
    gracefully; its SDK answers the checkpoint the operator asks within the grace period; the job moves off the
    cordoned node with nothing lost and no restart counted."""
    ns = flow.namespace("team")
    flow.nodes([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    flow.create_job("trainer", job_spec(replicas=1, backoffLimit=1), ns)
    flow.operator()
    first = flow.phase("trainer", ns, "Running")["placement"]["nodes"][0]
    env = {**os.environ, "KUBECONFIG": str(flow.site.kubeconfig), "HOME": str(flow.tmp)}
    done = subprocess.run(["kubectl", "drain", first, "--timeout=90s"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and f"node/{first} drained" in done.stdout, done.stdout + done.stderr
    s = eventually(lambda: (s := flow.status("trainer", ns)).get("phase") == "Running"
                   and s["placement"]["generation"] == 2 and s, timeout=90, what="running again, moved")
    assert s["placement"]["nodes"] != [first] and s.get("restarts", 0) == 0
    move = next(h for h in s["history"] if h["action"] == "migrate")
    assert "a drain, not a failure" in move["reason"] and move["progressLostSteps"] == 0
    reasons = [(e.type, e.reason) for e in flow.events("trainer", ns)]
    assert ("Normal", "Drained") in reasons and ("Warning", "Restarting") not in reasons
