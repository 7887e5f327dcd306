"""The kube-scheduler stand-in's filters and message, on plain data (sim/cluster/scheduling.py).

Expected messages follow kube-scheduler's FitError.Error() (pkg/scheduler/framework/types.go): "0/N nodes are
available: " + the "<count> <reason>" histogram sorted as strings + DefaultPreemption's "preemption: ..." part."""

from __future__ import annotations

from typing import Any

from heterojob.sim.cluster import scheduling
from heterojob.sim.cluster.nodes import node


def pod(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    return {"metadata": {"name": "p", "namespace": "team-a", "uid": "u"},
            "spec": {"containers": [{"name": "main", "image": "x", "resources": resources}], **spec}}


def diagnose(p: dict[str, Any], nodes: list[dict[str, Any]], used: dict[str, dict[str, int]] | None = None
             ) -> tuple[str, list[str]]:
    requests = scheduling.pod_requests(p)
    found, fits = scheduling.diagnose(p, requests, ((n, (used or {}).get(n["metadata"]["name"], {}), 0, None)
                                                     for n in nodes))
    return scheduling.message(found, len(nodes)), [n["metadata"]["name"] for n in fits]


def test_memory_no_node_has_is_kube_schedulers_message_word_for_word() -> None:
    nodes = [node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(8)]
    text, fits = diagnose(pod({"memory": "3000Gi"}), nodes)
    assert fits == []
    assert text == ("0/8 nodes are available: 8 Insufficient memory. preemption: 0/8 nodes are available: "
                    "8 No preemption victims found for incoming pod.")


def test_each_node_counts_the_first_filter_that_refuses_it_and_resources_count_each_shortfall() -> None:
    cordoned = node("cordoned", "cn-east", "nvidia-h100", unschedulable=True)
    tainted = node("tainted", "cn-east", "nvidia-h100")
    tainted["spec"]["taints"] = [{"key": "example.com/maintenance", "value": "disk", "effect": "NoSchedule"}]
    elsewhere = node("elsewhere", "cn-west", "nvidia-h100")
    full = node("full", "cn-east", "nvidia-h100")
    small = node("small", "cn-east", "nvidia-h100")
    p = pod({"cpu": "100", "memory": "1Ti"}, {"nvidia.com/gpu": "8"},
            nodeSelector={"topology.kubernetes.io/region": "cn-east"})
    text, fits = diagnose(p, [cordoned, tainted, elsewhere, full, small],
                          used={"full": {"nvidia.com/gpu": 1}, "small": {"cpu": 100_000, "memory": 1536 * 2**30}})
    assert fits == []
    assert text == (
        "0/5 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, 1 Insufficient nvidia.com/gpu, "
        "1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint "
        "{example.com/maintenance: disk}, 1 node(s) were unschedulable. preemption: 0/5 nodes are available: "
        "2 No preemption victims found for incoming pod, 3 Preemption is not helpful for scheduling.")


def test_tolerations_affinity_and_room_let_a_pod_fit() -> None:
    target = node("h100-a", "cn-east", "nvidia-h100")
    target["spec"]["taints"] = [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    other = node("h100-b", "cn-east", "nvidia-h100")
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["h100-a"]}]}]}}}
    p = pod(limits={"nvidia.com/gpu": "4"}, affinity=affinity,
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    assert diagnose(p, [target, other], used={"h100-a": {"nvidia.com/gpu": 4}})[1] == ["h100-a"]
    text, fits = diagnose(p, [target, other], used={"h100-a": {"nvidia.com/gpu": 5}})
    assert fits == [] and text.startswith(
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node affinity/selector.")
    untolerated = pod(limits={"nvidia.com/gpu": "4"}, affinity=affinity)
    assert "1 node(s) had untolerated taint {nvidia.com/gpu: }" in diagnose(untolerated, [target, other])[0]


def test_a_full_node_refuses_the_next_pod_with_too_many_pods() -> None:
    n = node("cpu-a", "cn-east", "cpu")
    n["status"]["allocatable"]["pods"] = "2"
    v = scheduling.verdict(pod({"cpu": "1"}), {"cpu": 1000}, n, {}, 2)
    assert v == scheduling.FilterVerdict(("Too many pods",), True)
    assert scheduling.verdict(pod({"cpu": "1"}), {"cpu": 1000}, n, {}, 1).fits


def test_requests_default_to_limits_and_init_containers_take_their_peak() -> None:
    p = pod({"cpu": "500m"}, {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "2"})
    p["spec"]["initContainers"] = [
        {"name": "fetch", "image": "x", "resources": {"requests": {"memory": "4Gi"}}},
        {"name": "proxy", "image": "x", "restartPolicy": "Always", "resources": {"requests": {"cpu": "250m"}}}]
    p["spec"]["overhead"] = {"memory": "100Mi"}
    assert scheduling.pod_requests(p) == {"cpu": 750, "memory": 4 * 2**30 + 100 * 2**20, "nvidia.com/gpu": 2}


def test_node_affinity_operators() -> None:
    n = node("a", "cn-east", "nvidia-h100", labels={"gpus": "8"})

    def matches(*expressions: dict[str, Any], fields: list[dict[str, Any]] | None = None) -> bool:
        term: dict[str, Any] = {"matchExpressions": list(expressions)}
        if fields:
            term["matchFields"] = fields
        return scheduling.node_affinity_matches({"spec": {"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}}}, n)

    assert matches({"key": "gpus", "operator": "Gt", "values": ["4"]})
    assert not matches({"key": "gpus", "operator": "Lt", "values": ["4"]})
    assert matches({"key": "missing", "operator": "DoesNotExist"}, {"key": "gpus", "operator": "Exists"})
    assert not matches({"key": "gpus", "operator": "NotIn", "values": ["8"]})
    assert matches(fields=[{"key": "metadata.name", "operator": "In", "values": ["a"]}])
    assert not matches()  # an empty term matches no node


def test_a_pod_pinned_to_hostnames_names_them() -> None:
    def terms(*values: list[str]) -> dict[str, Any]:
        return {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": v}]} for v in values]}}}}}

    assert scheduling.pinned_hostnames(terms(["a"], ["b", "c"])) == {"a", "b", "c"}
    assert scheduling.pinned_hostnames({"spec": {"nodeSelector": {"kubernetes.io/hostname": "x"}}}) == {"x"}
    assert scheduling.pinned_hostnames({"spec": {"nodeSelector": {"pool": "cpu"}}}) is None
    loose = terms(["a"])
    loose["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"].append({"matchExpressions": [{"key": "pool", "operator": "Exists"}]})
    assert scheduling.pinned_hostnames(loose) is None  # one term does not pin: any node may fit
