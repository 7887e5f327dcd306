"""Member clusters (kube/members.py) on plain data: which Region names a member, when a member is lost, what
its nodes look like while it does not answer, and the RBAC the member and manager manifests grant, derived
from the calls the code makes. The behaviour against live API servers is in tests/harness/test_multicluster.py."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import yaml

from heterojob.engine.capacity.fleet import Node, RegionInfo
from heterojob.kube.members import Member, MemberRef, Members, MembersConfig, MemberUnavailable, member_ref

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "operator" / "heterojob"


def region(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "m-east"},
            "spec": {"location": {"city": "Hangzhou", "latitude": 30.3, "longitude": 120.2}, **spec}}


def test_a_region_names_a_member_only_with_spec_cluster() -> None:
    assert member_ref(region()) is None
    ref = member_ref(region(cluster={"secretRef": {"name": "east"}}))
    assert ref == MemberRef("m-east", "heterojob-members", "east", "kubeconfig", None)
    ref = member_ref(region(cluster={"secretRef": {"name": "east", "namespace": "other", "key": "config"},
                                     "lossTimeoutSeconds": 60}))
    assert ref == MemberRef("m-east", "other", "east", "config", 60.0)
    assert member_ref(region(cluster={"secretRef": {}})) is None  # invalid: logged by convert.region_info


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def members(clock: Clock, timeout: float | None = None) -> Members:
    pool = Members(local=None, refs=dict, config=MembersConfig(loss_timeout_s=300), clock=clock)  # type: ignore[arg-type]
    pool.members["m-east"] = Member(MemberRef("m-east", "heterojob-members", "east", "kubeconfig", timeout),
                                    since=clock.now)
    return pool


def test_a_member_is_lost_only_after_its_timeout_without_an_answer() -> None:
    clock = Clock()
    pool = members(clock)
    assert not pool.reachable("m-east") and not pool.lost("m-east", clock.now)  # never answered: not yet lost
    assert pool.lost("m-east", clock.now + 300)  # a whole timeout from when the manager started following it
    member = pool.members["m-east"]
    member.reachable, member.last_ok = True, clock.now + 200
    assert not pool.lost("m-east", clock.now + 10_000)  # answering: never lost, however long ago it started
    member.reachable = False
    assert pool.lost_at("m-east") == clock.now + 500 and not pool.lost("m-east", clock.now + 499)
    assert pool.lost("m-east", clock.now + 500)
    # a placement recorded in a cluster no Region names any more cannot be reached: lost at once
    assert pool.lost("m-gone", clock.now) and not pool.reachable("m-gone") and "any more" in pool.problem("m-gone")


def test_a_regions_own_loss_timeout_wins() -> None:
    clock = Clock()
    pool = members(clock, timeout=60)
    assert pool.lost_at("m-east") == clock.now + 60


def test_an_unreachable_members_nodes_take_no_new_work_and_names_never_collide() -> None:
    clock = Clock()
    pool = members(clock)
    gpu = Node("gpu-0", {"topology.kubernetes.io/region": "m-east"}, {"nvidia.com/gpu": 8})
    pool.members["m-east"].nodes = {"gpu-0": gpu}
    [seen] = pool.nodes().values()
    assert not seen.ready and "m-east is unreachable" in seen.reason
    pool.members["m-east"].reachable = True
    assert pool.nodes() == {"gpu-0": gpu}
    pool.members["m-west"] = Member(MemberRef("m-west", "heterojob-members", "west", "kubeconfig"), since=0,
                                    reachable=True, nodes={"gpu-0": Node("gpu-0", {}, {})})
    assert pool.nodes() == {"gpu-0": gpu}  # the second node of that name is ignored (and logged), not merged


def test_a_pending_message_says_a_lost_members_region_is_unreachable_since_when_and_not_counted() -> None:
    from heterojob.engine.capacity.fleet import DeviceClass, Fleet
    from heterojob.engine.placing.placement import Alternative, Request, place

    clock = Clock()
    pool = members(clock)
    label = "topology.kubernetes.io/region"
    member = pool.members["m-east"]
    member.nodes = {f"gpu-{i}": Node(f"gpu-{i}", {label: "m-east", "gpu": "h100"}, {"nvidia.com/gpu": 8})
                    for i in range(3)}
    member.last_ok = 1_795_000_000.0  # 2026-11-18T11:06:40Z: its last answer
    h100 = DeviceClass("nvidia-h100", "nvidia.com/gpu", {"gpu": "h100"})
    fleet = Fleet(pool.nodes(), {"nvidia-h100": h100}, {"m-east": RegionInfo("m-east", {label: "m-east"})})
    text = place(Request("ns/j", [Alternative("nvidia-h100", 8)], 2, allowed_regions=("m-east",)), fleet).explain()
    assert ("m-east/nvidia-h100: the member cluster of region m-east is unreachable (no answer since "
            "2026-11-18T11:06:40Z): its 3 node(s) are not counted") in text
    assert "0 free on 0 node(s)" not in text
    member.last_ok = None  # never answered: since the manager began following it
    assert "no answer since 1970-01-01T00:16:40Z" in next(iter(pool.nodes().values())).reason


def test_the_planner_sees_a_member_regions_nodes_only_in_that_member() -> None:
    clock = Clock()
    pool = members(clock)
    label = "topology.kubernetes.io/region"
    regions = {r: RegionInfo(r, {label: r}) for r in ("m-east", "cn-east")}
    local = {"here-0": Node("here-0", {label: "cn-east"}, {}), "stray-0": Node("stray-0", {label: "m-east"}, {})}
    assert set(pool.fleet_nodes(local, regions)) == {"here-0"}  # not contacted yet; a local m-east node: out
    member = pool.members["m-east"]
    member.reachable = True
    member.nodes = {"east-0": Node("east-0", {label: "m-east"}, {}), "odd-0": Node("odd-0", {label: "cn-east"}, {})}
    seen = pool.fleet_nodes(local, regions)
    assert set(seen) == {"here-0", "east-0"}  # a local node labelled m-east and a member node labelled cn-east: out
    pool.members.clear()
    assert pool.fleet_nodes(local, regions) is local  # one cluster: unchanged


def test_placements_go_to_the_member_of_their_region_and_never_fall_back_to_the_managers_cluster() -> None:
    clock = Clock()
    pool = members(clock)
    local = object()
    pool.local = local  # type: ignore[assignment]
    assert pool.cluster_of("m-east") == "m-east" and pool.cluster_of("cn-east") is None
    assert pool.kube_for(None) is local
    for cluster, words in (("m-east", "not contacted yet"), ("m-gone", "no Region names member cluster m-gone")):
        with pytest.raises(MemberUnavailable, match=words):
            pool.kube_for(cluster)


# --- RBAC, from the code ------------------------------------------------------------------------------

MEMBER_CALLS = {  # client method -> (resource, verb), for calls made against a member's API server
    "list_node": ("nodes", "list"), "list_pod_for_all_namespaces": ("pods", "list"),
    "list_service_for_all_namespaces": ("services", "list"), "delete_namespaced_service": ("services", "delete"),
    "list_namespaced_pod": ("pods", "list"), "create_namespaced_pod": ("pods", "create"),
    "create_namespaced_service": ("services", "create"), "patch_namespaced_pod": ("pods", "patch"),
    "delete_namespaced_pod": ("pods", "delete"), "read_namespaced_pod": ("pods", "get"),
    "read_namespaced_service": ("services", "get"),
    "create_namespaced_service_account": ("serviceaccounts", "create"),
    "patch_namespaced_service_account": ("serviceaccounts", "patch"),
    "create_namespaced_role": ("roles", "create"), "patch_namespaced_role": ("roles", "patch"),
    "create_namespaced_role_binding": ("rolebindings", "create"),
    "patch_namespaced_role_binding": ("rolebindings", "patch"),
}
# the Kube methods the controller calls through `Pods.route` (a member's Kube), and what they call
ROUTED = {"job_pods", "create", "create_read", "annotate_pod", "delete_pod", "delete_service"}


def calls_in(path: Path, functions: set[str] | None = None) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for func in ast.walk(tree):
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef) and (functions is None or func.name in functions):
            out |= {n.attr for n in ast.walk(func) if isinstance(n, ast.Attribute)}
            # a call's name given to `Kube.send` (kube/routes.py)
            out |= {n.value for n in ast.walk(func) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return out


def grants(path: Path) -> dict[tuple[str | None, str], set[tuple[str, str]]]:
    """(namespace or None, kind) -> {(resource, verb)} of every Role/ClusterRole in the file."""
    out: dict[tuple[str | None, str], set[tuple[str, str]]] = {}
    for obj in yaml.safe_load_all(path.read_text()):
        if obj and obj["kind"] in ("Role", "ClusterRole"):
            key = (obj["metadata"].get("namespace"), obj["metadata"]["name"])
            out[key] = {(r, v) for rule in obj["rules"] for r in rule["resources"] for v in rule["verbs"]}
    return out


def test_the_member_manifest_grants_exactly_what_the_manager_does_in_a_member() -> None:
    used = calls_in(PKG / "kube" / "members.py", {"_probe", "_collect"}) | calls_in(PKG / "kube" / "api.py", ROUTED) \
        | calls_in(PKG / "kube" / "access.py", {"_ensure"}) | calls_in(PKG / "controller" / "pods.py", {"_member_owner"})
    watched = calls_in(PKG / "kube" / "member_watch.py", {"__init__"})  # each informer lists, then watches
    needed = {MEMBER_CALLS[c] for c in used if c in MEMBER_CALLS} | {
        (MEMBER_CALLS[c][0], verb) for c in watched if c in MEMBER_CALLS for verb in ("list", "watch")}
    granted = grants(ROOT / "manifests" / "multicluster" / "member.yaml")
    assert set().union(*granted.values()) == needed
    assert not any(r == "secrets" for g in granted.values() for r, _ in g)
    writes = {(r, v) for (r, v) in needed if v not in ("list", "watch")}
    assert granted[(None, "heterojob-member-write")] == writes  # bound per job namespace by a RoleBinding
    assert all(v in ("list", "watch") for _, v in granted[(None, "heterojob-member-read")])
    assert {r for r, v in granted[(None, "heterojob-member-read")] if v == "watch"} == {"nodes", "pods", "services"}


def test_the_manager_reads_member_kubeconfigs_in_their_own_namespace_only() -> None:
    used = calls_in(PKG / "kube" / "members.py")
    assert {"read_namespaced_secret", "patch_cluster_custom_object_status"} <= used
    granted = grants(ROOT / "manifests" / "multicluster" / "manager.yaml")
    assert granted == {("heterojob-members", "heterojob-member-kubeconfigs"): {("secrets", "get")},
                       (None, "heterojob-operator-members"): {("regions/status", "patch")}}


