"""The emulator's indexed store, node address assignment and the kubelet's mirror: each answers exactly what a
scan of every object (or a list) answers, in the same order, at a cost that lets a fleet's scale through."""

from __future__ import annotations

import ipaddress
import json
import random
import time
from collections import Counter
from typing import Any

from heterojob.sim.cluster import ipam
from heterojob.sim.cluster.mirror import Mirror
from heterojob.sim.cluster.store import Bucket, Store


def _obj(ns: str | None, name: str, uid: str, owners: tuple[str, ...] = (), kind: str = "Pod",
         cidr: str | None = None, ip: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": uid}
    if ns is not None:
        meta["namespace"] = ns
    if owners:
        meta["ownerReferences"] = [{"uid": o, "kind": "HeteroJob", "name": o} for o in owners]
    obj: dict[str, Any] = {"kind": kind, "metadata": meta}
    if cidr is not None:
        obj["spec"] = {"podCIDR": cidr, "podCIDRs": [cidr]}
    if ip is not None:
        obj["status"] = {"addresses": [{"type": "InternalIP", "address": ip}]}
    return obj


def _owners(obj: dict[str, Any]) -> set[str]:
    return {r["uid"] for r in obj["metadata"].get("ownerReferences") or []}


def test_a_bucket_answers_what_a_scan_answers_in_the_same_order() -> None:
    rng = random.Random(7)
    bucket, plain = Bucket(), {}
    names = [f"o{i}" for i in range(40)]
    for step in range(3000):
        key = (rng.choice(["a", "b", None]), rng.choice(names))
        roll = rng.random()
        if roll < 0.6:
            obj = _obj(key[0], key[1], f"u{step}", tuple(rng.sample(["x", "y", "z"], rng.randint(0, 2))))
            bucket[key], plain[key] = obj, obj
        elif roll < 0.8 and key in plain:
            assert bucket.pop(key) is plain.pop(key)
        elif key in plain:
            del bucket[key], plain[key]
        assert list(bucket.items()) == list(plain.items())
        for ns in ("a", "b", None):
            assert list(bucket.in_namespace(ns).items()) == [(n, o) for (s, n), o in plain.items() if s == ns]
        for uid in ("x", "y", "z"):
            assert bucket.owned_by(uid) == [o for o in plain.values() if uid in _owners(o)]
        assert bucket.uids == {o["metadata"]["uid"]: k for k, o in plain.items()}
    bucket.clear()
    assert not bucket and bucket.in_namespace("a") == {} and bucket.owned_by("x") == [] and not bucket.uids


def test_a_store_finds_dependents_and_live_uids_across_resources() -> None:
    store = Store()
    store[("", "pods")][("a", "p1")] = _obj("a", "p1", "pod-1", ("job-1",))
    store[("", "services")][("a", "s1")] = _obj("a", "s1", "svc-1", ("job-1",), kind="Service")
    store[("", "pods")][("a", "p2")] = _obj("a", "p2", "pod-2", ("job-2",))
    assert [(rk, o["metadata"]["name"]) for rk, o in store.dependents("job-1")] == [(("", "pods"), "p1"),
                                                                                   (("", "services"), "s1")]
    assert store.holds_uid("pod-2") and not store.holds_uid("job-1")
    assert store.get(("x", "absent")) is None and isinstance(store[("x", "absent")], Bucket)


def test_node_address_index_follows_nodes_as_they_come_and_go() -> None:
    nodes = Store()[("", "nodes")]
    nodes[(None, "n1")] = _obj(None, "n1", "1", kind="Node", cidr="10.244.0.0/24", ip="172.18.0.2")
    nodes[(None, "n2")] = _obj(None, "n2", "2", kind="Node", cidr="10.244.1.0/24", ip="172.18.0.3")
    assert set(nodes.cidrs) == {"10.244.0.0/24", "10.244.1.0/24"} and nodes.ips.first_free() == "172.18.0.4"
    nodes[(None, "n1")] = _obj(None, "n1", "1", kind="Node", cidr="10.244.0.0/24", ip="172.18.0.9")
    assert nodes.ips.first_free() == "172.18.0.2"
    del nodes[(None, "n2")]
    assert set(nodes.cidrs) == {"10.244.0.0/24"} and set(nodes.ips) == {"172.18.0.9"}
    # pods are not indexed as nodes, whatever they hold
    pods = Store()[("", "pods")]
    pods[("a", "p")] = _obj("a", "p", "3", cidr="10.244.5.0/24")
    assert not pods.cidrs


def _reference_cidr(used: list[str], cluster: str = ipam.CLUSTER_CIDR, mask: int = ipam.NODE_CIDR_MASK) -> str | None:
    """The allocator as written before the index: every candidate against every CIDR in use."""
    taken = []
    for c in used:
        try:
            taken.append(ipaddress.ip_network(c, strict=False))
        except ValueError:
            pass
    for candidate in ipaddress.ip_network(cluster).subnets(new_prefix=mask):
        if not any(candidate.overlaps(t) for t in taken if t.version == 4):
            return str(candidate)
    return None


def _reference_address(used: set[str], network: str = ipam.NODE_NETWORK) -> str | None:
    for i, host in enumerate(ipaddress.ip_network(network).hosts()):
        if i and str(host) not in used:
            return str(host)
    return None


def test_node_cidrs_and_addresses_are_the_ones_the_scan_picked() -> None:
    rng = random.Random(3)
    for _ in range(300):
        used = [f"10.244.{rng.randrange(256)}.0/24" for _ in range(rng.randrange(0, 300))]
        used += rng.sample(["10.244.0.0/23", "10.244.4.0/22", "10.0.0.0/8", "10.244.7.128/25", "not-a-cidr",
                            "10.245.0.0/24", "192.168.0.0/16"], rng.randrange(0, 3))
        assert ipam.next_node_cidr(used) == _reference_cidr(used), used
    assert ipam.next_node_cidr([f"10.244.{i}.0/24" for i in range(256)]) is None
    addresses = ipam.Addresses()
    held: Counter[str] = Counter()
    for _ in range(2000):
        if held and rng.random() < 0.3:
            gone = rng.choice(sorted(held))
            addresses.remove(gone)
            held[gone] -= 1
            held += Counter()  # drop zero counts
        else:
            ip = f"172.18.0.{rng.randrange(2, 60)}"
            addresses.add(ip)
            held[ip] += 1
        assert addresses.first_free() == _reference_address(set(held)) == ipam.next_node_address(held)
        assert set(addresses) == set(held)


def test_thousands_of_nodes_get_addresses_without_a_scan_of_every_node() -> None:
    nodes = Store()[("", "nodes")]
    started = time.perf_counter()
    for i in range(3000):
        obj = _obj(None, f"n{i}", str(i), kind="Node")
        ipam.assign_node_addresses(obj, cidrs=nodes.cidrs, ips=nodes.ips)
        nodes[(None, f"n{i}")] = obj
    took = time.perf_counter() - started
    assert nodes[(None, "n255")]["spec"]["podCIDR"] == "10.244.255.0/24"
    assert "podCIDR" not in nodes[(None, "n256")]["spec"]  # kind's /16 holds 256 nodes' /24s (CIDRNotAvailable)
    assert ipam.internal_ip(nodes[(None, "n2999")]) == "172.18.11.185"  # .0.2 + 2999
    assert took < 20, f"{took:.1f} s for 3,000 nodes (the scan of every node took minutes)"


class _FakeList:
    """A list call as the kubernetes client makes it against the emulator: a list, or the watch events since a
    resourceVersion (timeoutSeconds=0), or 410 when that is older than the history."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.history: list[tuple[int, str, dict[str, Any]]] = []
        self.rv = 1
        self.oldest = 0
        self.lists = 0

    def put(self, name: str, value: int) -> None:
        self.rv += 1
        obj = {"metadata": {"name": name, "namespace": "a", "resourceVersion": str(self.rv)}, "v": value}
        self.history.append((self.rv, "MODIFIED" if name in self.objects else "ADDED", obj))
        self.objects[name] = obj

    def delete(self, name: str) -> None:
        self.rv += 1
        obj = self.objects.pop(name)
        self.history.append((self.rv, "DELETED", {**obj, "metadata": {**obj["metadata"],
                                                                      "resourceVersion": str(self.rv)}}))

    def __call__(self, watch: bool = False, resource_version: str | None = None, timeout_seconds: int | None = None,
                 _preload_content: bool = True) -> Any:
        class Answer:
            data: bytes

        answer = Answer()
        if not watch:
            self.lists += 1
            answer.data = json.dumps({"metadata": {"resourceVersion": str(self.rv)},
                                      "items": list(self.objects.values())}).encode()
        elif int(resource_version or 0) < self.oldest:
            answer.data = json.dumps({"type": "ERROR", "object": {"code": 410, "reason": "Expired"}}).encode()
        else:
            answer.data = b"\n".join(json.dumps({"type": t, "object": o}).encode()
                                     for rv, t, o in self.history if rv > int(resource_version or 0))
        return answer


def test_a_mirror_is_what_a_list_answers_and_lists_again_when_history_is_gone() -> None:
    server = _FakeList()
    for i in range(5):
        server.put(f"p{i}", i)
    mirror = Mirror(server)
    assert mirror.sync() == list(server.objects.values()) and server.lists == 1
    server.put("p2", 20)  # updated: keeps its place
    server.delete("p0")
    server.put("p9", 9)  # created: last
    server.delete("p3")
    server.put("p3", 33)  # created again: last
    assert mirror.sync() == list(server.objects.values()) and server.lists == 1
    assert [o["metadata"]["name"] for o in mirror.sync()] == ["p1", "p2", "p4", "p9", "p3"]
    server.oldest = server.rv + 1  # the history no longer reaches back
    server.put("p5", 5)
    assert mirror.sync() == list(server.objects.values()) and server.lists == 2 and mirror.relists == 2


def test_a_kinds_definition_is_looked_up_in_an_index_built_once(monkeypatch: Any) -> None:
    """Every write of a built-in kind (a pod, a Role, an Event) looks its kind's definition up: a scan of every
    definition per write was 6% of the emulator's CPU in an admission burst. The index answers what the scan
    answered (the first definition of the group, version and kind), and the definitions are walked once."""
    import pytest

    from heterojob.sim.cluster import builtin, openapi

    defs = openapi.builtin_definitions()
    if not defs:
        pytest.skip("kubernetes-validate is not installed: no built-in definitions")

    def scanned(group: str, version: str, kind: str) -> Any:
        for d in defs.values():
            for gvk in d.get("x-kubernetes-group-version-kind") or []:
                if (gvk.get("group", ""), gvk.get("version"), gvk.get("kind")) == (group, version, kind):
                    return d
        return None

    walks = []
    monkeypatch.setattr(openapi, "builtin_definitions", lambda: walks.append(1) or defs)
    builtin._definitions_by_kind.cache_clear()
    try:
        kinds = [("", "v1", "Pod"), ("", "v1", "ServiceAccount"), ("rbac.authorization.k8s.io", "v1", "Role"),
                 ("rbac.authorization.k8s.io", "v1", "RoleBinding"), ("", "v1", "Event"), ("", "v1", "Nope")]
        for _ in range(3):
            for kind in kinds:
                assert builtin.definition_of(*kind) is scanned(*kind)
        assert builtin.definition_of("", "v1", "Pod") is not None
        assert len(walks) == 1
    finally:
        builtin._definitions_by_kind.cache_clear()
