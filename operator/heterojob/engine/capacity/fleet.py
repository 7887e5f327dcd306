"""The fleet at one instant, as plain data: nodes, device classes, regions and what is already in use."""

from __future__ import annotations

import math

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from heterojob.engine.capacity.transfer import Link


@dataclass(frozen=True)
class Node:
    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]  # resource name -> whole devices (CPU in whole cores)
    ready: bool = True
    schedulable: bool = True  # not cordoned
    taints: frozenset[str] = frozenset()  # keys of its NoSchedule/NoExecute taints
    reason: str = ""  # why it is not Ready, cordoned or tainted
    # driver / cuda / cann versions its own labels publish (engine.placing.discovery.node_software); a version it
    # does not publish is taken from its AcceleratorClass's `software`
    software: Mapping[str, str] = field(default_factory=dict)
    # resource name -> every device the node has (status.capacity: its device plugins' Unhealthy ones too);
    # empty when unknown (taken as its allocatable)
    capacity: Mapping[str, int] = field(default_factory=dict)
    # status.addresses (InternalIP, ExternalIP, Hostname): a scrape target's host may name the node by one
    addresses: tuple[str, ...] = ()

    @property
    def region(self) -> str | None:
        return self.labels.get("topology.kubernetes.io/region")

    def matches(self, selector: Mapping[str, str]) -> bool:
        return all(self.labels.get(k) == v for k, v in selector.items())

    def holds(self, resource: str) -> int:
        """Every device of `resource` the node has (capacity), usable now or not."""
        return max(self.capacity.get(resource, 0), self.allocatable.get(resource, 0))

    def withheld(self, resource: str) -> int:
        """Devices of `resource` its device plugin reports Unhealthy (capacity keeps them, allocatable not)."""
        return self.holds(resource) - self.allocatable.get(resource, 0)


@dataclass(frozen=True)
class DeviceClass:
    name: str
    resource_name: str
    node_selector: Mapping[str, str] = field(default_factory=dict)
    throughput: float = 1.0
    software: Mapping[str, str] = field(default_factory=dict)
    exporter: str = "none"  # the exporter family reporting its devices (dcgm, npu-exporter, ...)
    memory_gib: float | None = None  # device memory (AcceleratorClass spec.memoryGiB), if declared


@dataclass(frozen=True)
class RegionInfo:
    name: str
    node_selector: Mapping[str, str]
    prometheus_url: str | None = None  # its own Prometheus; None: the operator's default
    links: Mapping[str, Link] = field(default_factory=dict)  # the other region -> the link it declares


@dataclass(frozen=True)
class Allocation:
    """Devices one job holds: node -> count of `resource` (and, for quota, its class and region)."""

    resource: str
    per_node: Mapping[str, int]
    namespace: str = ""
    device_class: str = ""
    region: str = ""

    @property
    def devices(self) -> int:
        return sum(self.per_node.values())


def same_room(a: Allocation, b: Allocation) -> bool:
    """Both are devices of one resource, class and region (a job's placement and its destination)."""
    return (a.resource, a.device_class, a.region, a.namespace) == (b.resource, b.device_class, b.region, b.namespace)


CPU_RESOURCE = "cpu"  # a DeviceClass of this resourceName counts CPU cores, not accelerator devices


def cpu_classes(classes: Mapping[str, DeviceClass]) -> frozenset[str]:
    """The classes whose devices are CPU cores (resourceName `cpu`), which a '*' quota limit does not count."""
    return frozenset(name for name, cls in classes.items() if cls.resource_name == CPU_RESOURCE)


@dataclass(frozen=True)
class Limit:
    """One HeteroQuota limit: devices of `device_class` in `region` ('*' matches any region, and any
    accelerator class: CPU cores are not devices, so a CPU class is limited only by a limit naming it)."""

    device_class: str
    region: str
    devices: int
    quota: str = ""  # the HeteroQuota's name, for messages

    def covers(self, device_class: str, region: str, cpu: bool = False) -> bool:
        """Whether the limit counts `device_class` in `region`; `cpu`: the class counts CPU cores."""
        named = self.device_class == device_class or (self.device_class == "*" and not cpu)
        return named and self.region in ("*", region)


def quota_room(limits: Iterable[Limit], held: Mapping[tuple[str, str], int], device_class: str, region: str,
               need: int, cpu: Collection[str] = frozenset()) -> str | None:
    """Why `need` more devices of class/region would break a limit, or None when every limit has room.

    `held` is what the namespace holds: (class, region) -> devices. A class or region no limit covers
    is not limited (as with Kubernetes ResourceQuota). `cpu`: the classes that count CPU cores (`cpu_classes`),
    counted only by limits that name them, never by a '*' class (accelerators and cores are not added up).
    """
    for limit in limits:
        if not limit.covers(device_class, region, device_class in cpu):
            continue
        used = used_under(limit, held, cpu)
        if used + need > limit.devices:
            scope = f"{limit.device_class} in {'any region' if limit.region == '*' else limit.region}"
            return (f"quota {used}/{limit.devices} used ({limit.quota + ': ' if limit.quota else ''}{scope}; "
                    f"needs {need})")
    return None


def used_under(limit: Limit, held: Mapping[tuple[str, str], int], cpu: Collection[str] = frozenset()) -> int:
    """What the namespace holding `held` ((class, region) -> devices) counts under `limit` (`quota_room`)."""
    return sum(n for (c, r), n in held.items() if limit.covers(c, r, c in cpu))


def quota_headroom(limits: Iterable[Limit], held: Mapping[tuple[str, str], int], device_class: str, region: str,
                   cpu: Collection[str] = frozenset()) -> float:
    """The most devices of class/region `quota_room` lets the namespace add (inf: no limit covers them):
    `quota_room` refuses exactly a need above it."""
    return min((limit.devices - used_under(limit, held, cpu) for limit in limits
                if limit.covers(device_class, region, device_class in cpu)), default=math.inf)


@dataclass(frozen=True)
class Failed:
    """The devices of one node that telemetry or a firing alert says failed."""

    devices: int  # how many (distinct devices)
    why: str  # the first one and its reason, for messages
    vanished: int = 0  # of them, devices whose series vanished while the node's exporter answers
    reported: int = 0  # devices the node's exporter reports now (0 unknown)

    def counted(self, holds: int) -> int:
        """Its failed devices the node still has, of the `holds` its capacity counts: a vanished one only while
        the capacity counts more devices than the exporter reports. A device plugin restarted (or a node
        rebooted) after the device fell off the bus no longer enumerates it: capacity and allocatable both
        leave it out, and counting it would shut the node's healthy devices out until the operator restarts."""
        if not self.vanished or not self.reported:
            return self.devices
        return self.devices - self.vanished + min(self.vanished, max(0, holds - self.reported))


@dataclass
class Fleet:
    nodes: Mapping[str, Node]
    classes: Mapping[str, DeviceClass]
    regions: Mapping[str, RegionInfo] = field(default_factory=dict)
    # (node, resource) -> devices held by pods and by jobs already placed
    used: Mapping[tuple[str, str], int] = field(default_factory=dict)
    # namespace -> its HeteroQuota limits; namespace -> (class, region) -> devices its jobs hold
    quotas: Mapping[str, Sequence[Limit]] = field(default_factory=dict)
    held: Mapping[str, Mapping[tuple[str, str], int]] = field(default_factory=dict)
    # node -> why nothing new may go there (an overheating, throttled device; a firing alert asking to move off)
    unhealthy: Mapping[str, str] = field(default_factory=dict)
    # node -> its failed devices: it takes new work on the others only once its device plugin has taken as many
    # out of allocatable (`keep_off`); before that a new pod could be handed a failed one
    failed: Mapping[str, Failed] = field(default_factory=dict)
    # node -> why one of its Ascend chips cannot carry collectives (network health or RoCE link down): kept off
    # for gangs of more than one replica only (`placement.place`)
    network_down: Mapping[str, str] = field(default_factory=dict)

    def region_of(self, node: Node) -> str | None:
        """A Region whose selector the node matches; without Region objects, the node's region label."""
        for region in self.regions.values():
            if node.matches(region.node_selector):
                return region.name
        return node.region if not self.regions else None

    def class_of(self, node: Node) -> DeviceClass | None:
        """The device class a node offers: its selector matches and the node has its resource."""
        for cls in self.classes.values():
            if node.matches(cls.node_selector) and node.allocatable.get(cls.resource_name, 0) > 0:
                return cls
        return None

    def keep_off(self, node: Node, resource: str) -> str | None:
        """Why telemetry or an alert keeps every new replica off `node` (for devices of `resource`), or None. A
        node whose failed devices its device plugin already withholds offers the rest: the kubelet hands out
        only devices the plugin reports Healthy."""
        if node.name in self.unhealthy:
            return self.unhealthy[node.name]
        failed = self.failed.get(node.name)
        if failed is not None and failed.counted(node.holds(resource)) > node.withheld(resource):
            return failed.why
        return None

    def free(self, node: str, resource: str) -> int:
        total = self.nodes[node].allocatable.get(resource, 0)
        return max(0, total - self.used.get((node, resource), 0))


def holdings(allocations: Iterable[Allocation]) -> dict[str, dict[tuple[str, str], int]]:
    """namespace -> (class, region) -> devices its jobs hold."""
    out: dict[str, dict[tuple[str, str], int]] = defaultdict(lambda: defaultdict(int))
    for a in allocations:
        out[a.namespace][(a.device_class, a.region)] += a.devices
    return {ns: dict(v) for ns, v in out.items()}


def usage(allocations: Iterable[Allocation], foreign: Mapping[tuple[str, str], int] | None = None,
          ) -> dict[tuple[str, str], int]:
    """Sum the devices held per (node, resource) by jobs' allocations and by other pods."""
    used: dict[tuple[str, str], int] = defaultdict(int)
    for key, count in (foreign or {}).items():
        used[key] += count
    for alloc in allocations:
        for node, count in alloc.per_node.items():
            used[(node, alloc.resource)] += count
    return dict(used)
