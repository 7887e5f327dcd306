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

import collections
import functools
import ipaddress
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

CLUSTER_CIDR = "10.244.0.0/16"  # kind's default networking.podSubnet
NODE_CIDR_MASK = 24  # kube-controller-manager --node-cidr-mask-size-ipv4 default
NODE_NETWORK = "172.18.0.0/16"  # the `kind` docker network


def next_node_cidr(used: Iterable[str], cluster_cidr: str = CLUSTER_CIDR, mask: int = NODE_CIDR_MASK) -> str | None:
    """The first /mask of the cluster CIDR that overlaps no CIDR in `used`; None when all are taken (the real
    allocator then leaves the Node without one and records a CIDRNotAvailable event)."""
    cluster = ipaddress.ip_network(cluster_cidr)
    base, size = int(cluster.network_address), 1 << (cluster.max_prefixlen - mask)
    count = cluster.num_addresses // size
    taken = bytearray(count)  # candidate i: [base + i*size, base + (i+1)*size)
    for c in used:
        span = _span(c)
        if span is None or span[1] < base or span[0] >= base + count * size:
            continue
        first, last = max(0, (span[0] - base) // size), min(count - 1, (span[1] - base) // size)
        taken[first:last + 1] = b"\x01" * (last - first + 1)
    free = taken.find(0)
    if free < 0:
        return None
    return str(ipaddress.ip_network((base + free * size, mask)))


def next_node_address(used: Iterable[str], network: str = NODE_NETWORK) -> str | None:
    """The first host address of the node network after its gateway (.1) that no node holds."""
    net = ipaddress.ip_network(network)
    taken = {a for u in used if (a := _address(u)) is not None}
    first, last = int(net.network_address) + 2, int(net.broadcast_address) - 1  # hosts() less the gateway
    if net.num_addresses <= 2:
        return None
    at = first
    while at <= last and at in taken:
        at += 1
    return str(ipaddress.ip_address(at)) if at <= last else None


class Addresses:
    """The node network's InternalIPs in use (a count per address, as several Nodes may name one) and the first
    free one after the gateway, kept as Nodes come and go: `next_node_address` of what is in use, in amortized
    O(1) instead of O(nodes) per new Node."""

    def __init__(self, network: str = NODE_NETWORK) -> None:
        net = ipaddress.ip_network(network)
        self._first, self._last = int(net.network_address) + 2, int(net.broadcast_address) - 1
        self._empty = net.num_addresses <= 2
        self.counts: collections.Counter[str] = collections.Counter()
        self._taken: collections.Counter[int] = collections.Counter()
        self._low = self._first  # every address in [first, low) is taken

    def __iter__(self) -> Iterator[str]:
        return iter(self.counts)

    def __len__(self) -> int:
        return len(self.counts)

    def add(self, text: str) -> None:
        self.counts[text] += 1
        if (a := _address(text)) is not None:
            self._taken[a] += 1

    def remove(self, text: str) -> None:
        self.counts[text] -= 1
        if self.counts[text] <= 0:
            del self.counts[text]
        if (a := _address(text)) is not None:
            self._taken[a] -= 1
            if self._taken[a] <= 0:
                del self._taken[a]
                self._low = min(self._low, max(a, self._first))

    def clear(self) -> None:
        self.counts.clear()
        self._taken.clear()
        self._low = self._first

    def first_free(self) -> str | None:
        if self._empty:
            return None
        while self._low <= self._last and self._low in self._taken:
            self._low += 1
        return str(ipaddress.ip_address(self._low)) if self._low <= self._last else None


@functools.lru_cache(maxsize=65536)
def _span(cidr: str) -> tuple[int, int] | None:
    """[first, last] address (as integers) of an IPv4 CIDR; None when it is not one."""
    try:
        net = ipaddress.ip_network(str(cidr), strict=False)
    except ValueError:
        return None
    if net.version != 4:
        return None
    return int(net.network_address), int(net.broadcast_address)


@functools.lru_cache(maxsize=65536)
def _address(text: str) -> int | None:
    try:
        return int(ipaddress.ip_address(str(text)))
    except ValueError:
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


def assign_node_addresses(node: dict[str, Any], nodes: Iterable[Mapping[str, Any]] = (), *,
                          cidrs: Iterable[str] | None = None, ips: Addresses | None = None) -> None:
    """Fill a new Node's podCIDR (the range allocator) and InternalIP (the kubelet's registration) where it
    names none, avoiding what `nodes` (the others in the cluster) hold, or, when given, the pod CIDRs `cidrs`
    and InternalIPs `ips` they hold (the emulator's index of them)."""
    others = list(nodes) if cidrs is None or ips is None else []
    spec = node.setdefault("spec", {})
    if not spec.get("podCIDR") and not spec.get("podCIDRs"):
        used = list(cidrs) if cidrs is not None else \
            [c for n in others for c in ((n.get("spec") or {}).get("podCIDRs")
                                         or [(n.get("spec") or {}).get("podCIDR")]) if c]
        cidr = next_node_cidr(used)
        if cidr is not None:
            spec["podCIDR"], spec["podCIDRs"] = cidr, [cidr]
    elif spec.get("podCIDR") and not spec.get("podCIDRs"):
        spec["podCIDRs"] = [spec["podCIDR"]]
    status = node.setdefault("status", {})
    if internal_ip(node) is None:
        address = ips.first_free() if ips is not None else \
            next_node_address(ip for n in others if (ip := internal_ip(n)))
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
