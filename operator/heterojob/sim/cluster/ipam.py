"""Addresses in the emulated cluster, as a kind cluster (v0.20+, Kubernetes v1.32) hands them out.

- A Node's `spec.podCIDR`/`podCIDRs`: kube-controller-manager's range allocator (`--allocate-node-cidrs`)
  gives each new Node a free /24 (`--node-cidr-mask-size`, the IPv4 default) of the cluster CIDR, which
  kind sets to its default `podSubnet` 10.244.0.0/16; a Node that already names one keeps it.
- A Node's InternalIP: kind's nodes are containers on the `kind` docker network (172.18.0.0/16, .1 the
  gateway), and the kubelet registers the container's address.
- A pod's IP: kindnet's CNI config hands the node's podCIDR to the `host-local` IPAM plugin, which skips
  the network address and the gateway (.1), hands out addresses round-robin after the last one it reserved
  (a released address is not reused at once) and never two at a time; a pod keeps its address until it ends.
  A `hostNetwork` pod shares the node's network namespace, so its IP is the node's InternalIP.

Pure functions of what is in use, so an emulator restart or reset cannot hand out a taken address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

CLUSTER_CIDR = "10.244.0.0/16"  # kind's default networking.podSubnet
NODE_CIDR_MASK = 24  # kube-controller-manager --node-cidr-mask-size-ipv4 default
NODE_NETWORK = "172.18.0.0/16"  # the `kind` docker network


def next_node_cidr(used: Iterable[str], cluster_cidr: str = CLUSTER_CIDR, mask: int = NODE_CIDR_MASK) -> str | None:
    """The first /mask of the cluster CIDR that overlaps no CIDR in `used`; None when all are taken (the real
    allocator then leaves the Node without one and records a CIDRNotAvailable event)."""
    taken = [ipaddress.ip_network(c, strict=False) for c in used if _is_network(c)]
    for candidate in ipaddress.ip_network(cluster_cidr).subnets(new_prefix=mask):
        if not any(candidate.overlaps(t) for t in taken):
            return str(candidate)
    return None


def next_node_address(used: Iterable[str], network: str = NODE_NETWORK) -> str | None:
    """The first host address of the node network after its gateway (.1) that no node holds."""
    taken = set(used)
    net = ipaddress.ip_network(network)
    for i, host in enumerate(net.hosts()):
        if i == 0:
            continue  # the docker network's gateway
        if str(host) not in taken:
            return str(host)
    return None


def next_pod_ip(pod_cidr: str, used: Iterable[str], last: str | None = None) -> str | None:
    """host-local's choice in `pod_cidr`: the first free address after `last` (round-robin, wrapping), never
    the network address, the gateway (.1) or the broadcast address; None when the range is exhausted."""
    if not _is_network(pod_cidr):
        return None
    net = ipaddress.ip_network(pod_cidr, strict=False)
    hosts = list(net.hosts())[1:]  # .1 is the gateway
    if not hosts:
        return None
    taken = set(used)
    start = 0
    if last is not None and _is_address(last) and ipaddress.ip_address(last) in net:
        start = (int(ipaddress.ip_address(last)) - int(hosts[0])) + 1
    for k in range(len(hosts)):
        candidate = str(hosts[(start + k) % len(hosts)])
        if candidate not in taken:
            return candidate
    return None


def internal_ip(node: Mapping[str, Any]) -> str | None:
    """The Node's first InternalIP (what the kubelet reports as a pod's hostIP)."""
    for a in ((node.get("status") or {}).get("addresses") or []):
        if isinstance(a, Mapping) and a.get("type") == "InternalIP" and a.get("address"):
            return str(a["address"])
    return None


def assign_node_addresses(node: dict[str, Any], nodes: Iterable[Mapping[str, Any]]) -> None:
    """Fill a new Node's podCIDR (the range allocator) and InternalIP (the kubelet's registration) where it
    names none, avoiding what `nodes` (the others in the cluster) hold."""
    others = list(nodes)
    spec = node.setdefault("spec", {})
    if not spec.get("podCIDR") and not spec.get("podCIDRs"):
        used = [c for n in others for c in ((n.get("spec") or {}).get("podCIDRs")
                                              or [(n.get("spec") or {}).get("podCIDR")]) if c]
        cidr = next_node_cidr(used)
        if cidr is not None:
            spec["podCIDR"], spec["podCIDRs"] = cidr, [cidr]
    elif spec.get("podCIDR") and not spec.get("podCIDRs"):
        spec["podCIDRs"] = [spec["podCIDR"]]
    status = node.setdefault("status", {})
    if internal_ip(node) is None:
        address = next_node_address(ip for n in others if (ip := internal_ip(n)))
        if address is not None:
            status["addresses"] = [{"type": "InternalIP", "address": address},
                                   *[a for a in status.get("addresses") or [] if isinstance(a, Mapping)]]


def _is_network(value: Any) -> bool:
    try:
        ipaddress.ip_network(str(value), strict=False)
    except ValueError:
        return False
    return True


def _is_address(value: Any) -> bool:
    try:
        ipaddress.ip_address(str(value))
    except ValueError:
        return False
    return True
