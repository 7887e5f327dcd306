"""Pod and node addresses in the emulated cluster, as a kind cluster (Kubernetes v1.32, kindnet) gives them.

kube-controller-manager's range allocator gives each Node a /24 of kind's podSubnet 10.244.0.0/16
(`spec.podCIDR`, `spec.podCIDRs`); kindnet's host-local IPAM gives each running pod its own address in its
node's podCIDR (.1 is the gateway), kept for the pod's life; the pod's hostIP is the node's InternalIP, and
a hostNetwork pod's podIP is the node's address too.
"""

from __future__ import annotations

import ipaddress
import time
from typing import Any

import pytest

from heterojob.constants import ANNOTATION_NODE, LABEL_HOSTNAME, LABEL_JOB
from heterojob.sim.cluster.ipam import next_node_cidr, next_pod_ip
from heterojob.sim.cluster.kubelet import Kubelet
from heterojob.sim.cluster.nodes import node
from tests.conftest import Cluster, eventually

pytestmark = pytest.mark.harness


def pod(name: str, on: str, host_network: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox",
                                            "env": [{"name": "HETEROJOB_SIM_DURATION", "value": "3600"}]}]}
    if host_network:
        spec["hostNetwork"] = True
    spec["nodeSelector"] = {LABEL_HOSTNAME: on}  # the scheduler places it there, as the operator's affinity does
    return {"apiVersion": "v1", "kind": "Pod", "spec": spec,
            "metadata": {"name": name, "labels": {LABEL_JOB: "j"}, "annotations": {ANNOTATION_NODE: on}}}


def addresses(cluster: Cluster) -> dict[str, tuple[str | None, str | None, list[str]]]:
    """pod -> (hostIP, podIP, podIPs)."""
    return {p.metadata.name: (p.status.host_ip, p.status.pod_ip, [i.ip for i in p.status.pod_ips or []])
            for p in cluster.core.list_namespaced_pod("team-a").items}


def test_nodes_get_their_own_pod_cidr_and_internal_ip(cluster: Cluster) -> None:
    mine = node("c", "cn-east", "cpu")
    mine["spec"]["podCIDR"] = "10.244.0.0/24"  # a Node that names its range keeps it, and others avoid it
    cluster.seed([mine, node("a", "cn-east", "cpu"), node("b", "cn-east", "cpu")])
    nodes = {n.metadata.name: n for n in cluster.core.list_node().items}
    cidrs = {name: n.spec.pod_cidr for name, n in nodes.items()}
    assert cidrs["c"] == "10.244.0.0/24" and nodes["c"].spec.pod_cidrs == ["10.244.0.0/24"]
    assert len(set(cidrs.values())) == 3
    for name, n in nodes.items():
        assert ipaddress.ip_network(n.spec.pod_cidr).subnet_of(ipaddress.ip_network("10.244.0.0/16"))
        assert ipaddress.ip_network(n.spec.pod_cidr).prefixlen == 24 and n.spec.pod_cidrs == [n.spec.pod_cidr]
    ips = [next(a.address for a in n.status.addresses if a.type == "InternalIP") for n in nodes.values()]
    assert len(set(ips)) == 3 and all(ipaddress.ip_address(ip) in ipaddress.ip_network("172.18.0.0/16") for ip in ips)
    assert all(ip != "172.18.0.1" for ip in ips)  # the docker network's gateway


def test_each_running_pod_has_its_own_ip_from_its_nodes_range_for_its_whole_life(cluster: Cluster) -> None:
    cluster.seed([node("a", "cn-east", "cpu"), node("b", "cn-east", "cpu")])
    for name, on in (("p1", "a"), ("p2", "a"), ("p3", "b"), ("h", "b")):
        cluster.core.create_namespaced_pod("team-a", pod(name, on, host_network=name == "h"))
    kubelet = Kubelet(cluster.api, start_delay=0)
    kubelet.step(time.monotonic())
    first = addresses(cluster)
    nodes = {n.metadata.name: n for n in cluster.core.list_node().items}
    node_ip = {k: next(a.address for a in n.status.addresses if a.type == "InternalIP") for k, n in nodes.items()}

    ips = [first[p][1] for p in ("p1", "p2", "p3")]
    assert None not in ips and len(set(ips)) == 3, first
    for name, on in (("p1", "a"), ("p2", "a"), ("p3", "b")):
        host_ip, pod_ip, pod_ips = first[name]
        assert host_ip == node_ip[on] and pod_ips == [pod_ip]
        assert ipaddress.ip_address(pod_ip) in ipaddress.ip_network(nodes[on].spec.pod_cidr)
        assert not pod_ip.endswith(".0") and not pod_ip.endswith(".1")  # network address, gateway
    assert first["h"][:2] == (node_ip["b"], node_ip["b"])  # hostNetwork: the node's own address

    for _ in range(3):
        kubelet.step(time.monotonic())
    assert addresses(cluster) == first  # stable while the pods run

    # a new pod on a node never gets an address a running pod holds, not even from a fresh kubelet
    cluster.core.create_namespaced_pod("team-a", pod("p4", "a"))
    Kubelet(cluster.api, start_delay=0).step(time.monotonic())
    assert addresses(cluster)["p4"][1] not in ips


def test_host_local_order_skips_the_gateway_and_goes_round_robin() -> None:
    assert next_pod_ip("10.244.3.0/24", set()) == "10.244.3.2"
    assert next_pod_ip("10.244.3.0/24", {"10.244.3.2"}, last="10.244.3.2") == "10.244.3.3"
    assert next_pod_ip("10.244.3.0/24", set(), last="10.244.3.5") == "10.244.3.6"  # .2-.5 released: not reused
    assert next_pod_ip("10.244.3.0/24", set(), last="10.244.3.254") == "10.244.3.2"  # wraps past broadcast
    full = {f"10.244.3.{i}" for i in range(2, 255)}
    assert next_pod_ip("10.244.3.0/24", full) is None
    assert next_node_cidr(["10.244.0.0/24", "10.244.2.0/24"]) == "10.244.1.0/24"


def test_a_jobs_ranks_have_distinct_ips_and_master_addr_names_rank_0(cluster: Cluster, operator: Any) -> None:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("h100-b", "cn-east", "nvidia-h100")])
    cluster.create_job("train", {
        "priority": "high", "replicas": {"min": 4}, "devices": [{"deviceClass": "nvidia-h100", "perReplica": 4}],
        "template": {"spec": {"containers": [{"name": "main", "image": "ghcr.io/example/train:cuda12"}]}}})
    kubelet = Kubelet(cluster.api, start_delay=0, interval=0.2).start()
    try:
        pods = eventually(lambda: (p := cluster.pods("train")) and len(p) == 4
                          and all(x.status.pod_ip for x in p) and p, what="4 running pods with IPs")
    finally:
        kubelet.stop()
    assert len({p.status.pod_ip for p in pods}) == 4
    # MASTER_ADDR is <hostname>.<subdomain>.<namespace>.svc: cluster DNS answers it with the address of the pod
    # whose hostname and subdomain those are, selected by the headless Service named after the subdomain
    svc = cluster.core.read_namespaced_service("train", "team-a")
    master = {e.name: e.value for e in pods[0].spec.containers[0].env}["MASTER_ADDR"]
    host, sub, ns = master.split(".")[:3]
    answered = [p for p in pods if p.spec.hostname == host and p.spec.subdomain == sub == svc.metadata.name
                and p.metadata.namespace == ns
                and all(p.metadata.labels.get(k) == v for k, v in svc.spec.selector.items())]
    assert len(answered) == 1 and {e.name: e.value for e in answered[0].spec.containers[0].env}["RANK"] == "0"
    assert answered[0].status.pod_ip not in {p.status.pod_ip for p in pods if p is not answered[0]}
