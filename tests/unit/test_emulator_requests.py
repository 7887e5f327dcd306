"""The emulator's request helpers on plain data: list paging, eviction decisions, strategic-merge directives,
protobuf bodies, resource quota status.
Each expectation is kube-apiserver v1.32's behaviour (sources in the modules' docstrings)."""

from __future__ import annotations

import pytest

from heterojob.sim.cluster import evictions, paging, patching, protobuf, quotas
from heterojob.sim.cluster.errors import ApiError


def _obj(name: str, namespace: str | None = "a") -> dict:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"metadata": meta}


def test_pages_walk_every_item_once_in_key_order() -> None:
    items = [_obj(n, ns) for ns, n in (("b", "x"), ("a", "z"), ("a", "y"), ("a-b", "w"))]
    seen, token, rounds = [], None, 0
    while True:
        page = paging.Page.of({"limit": "2", **({"continue": token} if token else {})}, 7)
        got, meta = page.cut(items, 7, with_remaining=True)
        seen += [paging.key_of(i) for i in got]
        rounds += 1
        token = meta.get("continue")
        if token is None:
            break
        assert meta["resourceVersion"] == "7" and meta["remainingItemCount"] == len(items) - len(seen)
    assert seen == ["a-b/w", "a/y", "a/z", "b/x"] and rounds == 2  # etcd key order: '-' sorts before '/'


def test_a_bad_continue_token_is_a_bad_request() -> None:
    with pytest.raises(ApiError) as bad:
        paging.Page.of({"continue": "bm90LWEtdG9rZW4"}, 1)
    assert bad.value.code == 400 and bad.value.message.startswith("continue key is not valid")
    token = paging.encode(3, "a/x")
    with pytest.raises(ApiError) as both:
        paging.Page.of({"continue": token, "resourceVersion": "5"}, 9)
    assert both.value.message == "specifying resource version is not allowed when using continue"


def _pod(name: str, ready: bool, phase: str = "Running", labels: dict | None = None) -> dict:
    return {"metadata": {"name": name, "namespace": "a", "labels": labels or {"app": "t"}},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


PDB = {"metadata": {"name": "b", "namespace": "a", "generation": 1},
       "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "t"}}}}


def test_eviction_respects_the_budget() -> None:
    pods = [_pod("p0", True), _pod("p1", True)]
    refused = evictions.decide(pods[0], [PDB], pods, "now")
    assert refused.refusal is not None and refused.refusal.code == 429
    assert refused.refusal.details["causes"] == [{"reason": "DisruptionBudget", "message":
                                                  "The disruption budget b needs 2 healthy pods and has 2 currently"}]
    pods.append(_pod("p2", True))
    allowed = evictions.decide(pods[0], [PDB], pods, "now")
    assert allowed.refusal is None and allowed.budget_status is not None
    assert allowed.budget_status["disruptionsAllowed"] == 0 and allowed.budget_status["disruptedPods"] == {"p0": "now"}


def test_eviction_skips_budgets_for_pending_pods_and_refuses_two_budgets() -> None:
    pending = _pod("p0", False, "Pending")
    assert evictions.decide(pending, [PDB], [pending], "now") == evictions.EvictionVerdict()
    pods = [_pod("p0", True), _pod("p1", True), _pod("p2", True)]
    two = evictions.decide(pods[0], [PDB, {**PDB, "metadata": {**PDB["metadata"], "name": "c"}}], pods, "now")
    assert two.failure_status is not None and two.failure_status["code"] == 500


def test_percentages_round_up_and_empty_selectors_match_nothing() -> None:
    pods = [_pod(f"p{i}", True) for i in range(3)]
    half = {**PDB, "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "t"}}}}
    assert evictions.budget(half, pods) == evictions.Budget(3, 2, 3)
    assert evictions.matching_budgets(pods[0], [{**PDB, "spec": {"selector": {}}}]) == []


def test_strategic_merge_directives() -> None:
    target = {"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}],
                       "finalizers": ["x", "y"]}}
    patched = patching.strategic_merge_patch(target, {"spec": {
        "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}], "containers": [{"name": "a", "image": "9"}],
        "$deleteFromPrimitiveList/finalizers": ["x"]}})
    assert patched == {"spec": {"containers": [{"name": "b", "image": "2"}, {"name": "a", "image": "9"}],
                                "finalizers": ["y"]}}
    deleted = patching.strategic_merge_patch(target, {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}})
    assert [c["name"] for c in deleted["spec"]["containers"]] == ["b"]


def test_custom_resources_take_no_strategic_merge_patch() -> None:
    with pytest.raises(ApiError) as refused:
        patching.check_type(patching.STRATEGIC_MERGE_PATCH, custom_resource=True)
    assert refused.value.code == 415 and "application/strategic-merge-patch+json" not in refused.value.message
    patching.check_type(patching.STRATEGIC_MERGE_PATCH, custom_resource=False)


def _field(num: int, payload: bytes | int) -> bytes:
    if isinstance(payload, int):
        return bytes([num << 3]) + _varint(payload)
    return bytes([num << 3 | 2]) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = b""
    while True:
        byte, value = value & 0x7F, value >> 7
        out += bytes([byte | (0x80 if value else 0)])
        if not value:
            return out


def test_a_protobuf_pod_disruption_budget_decodes() -> None:
    selector = _field(1, _field(1, b"app") + _field(2, b"web"))
    spec = _field(1, _field(1, 1) + _field(3, b"50%")) + _field(2, selector)
    raw = _field(1, _field(1, b"p1")) + _field(2, spec)
    body = protobuf.MAGIC + _field(1, _field(1, b"policy/v1") + _field(2, b"PodDisruptionBudget")) + _field(2, raw)
    assert protobuf.decode(body) == {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                                     "metadata": {"name": "p1"},
                                     "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}}}


def _quota_pod(phase: str, cpu: str, memory: str) -> dict:
    return {"spec": {"containers": [{"name": "m", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
            "status": {"phase": phase}}


def test_quota_status_counts_live_pods_and_objects_in_canonical_quantities() -> None:
    # pkg/controller/resourcequota: used for every key of spec.hard; Succeeded/Failed pods do not count;
    # resource.Quantity prints 0.75 cpu as 750m, 1536Mi of binary inputs as 1536Mi, 2000 as 2k
    quota = {"spec": {"hard": {"pods": "2000", "requests.cpu": "2", "requests.memory": "4Gi", "services": "3",
                               "count/heterojobs.heterojob.io": "5", "requests.nvidia.com/gpu": "8"}}}
    pods = [_quota_pod("Running", "500m", "1Gi"), _quota_pod("Pending", "250m", "512Mi"),
            _quota_pod("Succeeded", "4", "8Gi")]
    counts = {"services": 1, "heterojobs.heterojob.io": 3}
    got = quotas.status(quota, pods, lambda resource: counts.get(resource, 0))
    assert got["hard"]["pods"] == "2k" and got["hard"]["requests.memory"] == "4Gi"
    assert got["used"] == {"pods": "2", "requests.cpu": "750m", "requests.memory": "1536Mi", "services": "1",
                           "count/heterojobs.heterojob.io": "3", "requests.nvidia.com/gpu": "0"}
