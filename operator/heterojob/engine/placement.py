"""Gang placement: choose a device class, a region and a node per replica, or explain why none fits.

Shaped like the Kubernetes scheduler framework: candidates (alternative x region) go through filters,
the survivors are scored, the best wins. Every rejected candidate keeps the reason a user reads in the
job's message, e.g. `cn-east/nvidia-h100: room for 1 of 2 replicas (8 free on 1 node, 8 per replica)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from heterojob.engine.fleet import DeviceClass, Fleet, Node


@dataclass(frozen=True)
class Alternative:
    device_class: str
    per_replica: int


@dataclass(frozen=True)
class Request:
    job: str  # namespace/name, for logs
    alternatives: Sequence[Alternative]
    replicas: int
    allowed_regions: Sequence[str] = ()
    preferred_regions: Sequence[str] = ()
    exclude_nodes: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Candidate:
    region: str
    alternative_index: int
    device_class: str
    resource: str
    per_replica: int
    nodes: tuple[str, ...]  # one per rank
    score: float = 0.0

    @property
    def per_node(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for node in self.nodes:
            out[node] = out.get(node, 0) + self.per_replica
        return out


@dataclass(frozen=True)
class Rejection:
    candidate: str  # "region/class" or "class"
    reason: str

    def __str__(self) -> str:
        return f"{self.candidate}: {self.reason}"


@dataclass
class Result:
    chosen: Candidate | None
    rejections: list[Rejection] = field(default_factory=list)

    def explain(self, limit: int = 8) -> str:
        if self.chosen is not None:
            c = self.chosen
            return f"placed on {c.region}/{c.device_class}: {len(c.nodes)} replicas on {len(set(c.nodes))} node(s)"
        if not self.rejections:
            return "no candidate: the job lists no device alternatives"
        shown = "; ".join(str(r) for r in self.rejections[:limit])
        more = len(self.rejections) - limit
        return f"no room: {shown}" + (f"; and {more} more" if more > 0 else "")


def _eligible(node: Node, cls: DeviceClass, exclude: frozenset[str]) -> bool:
    """Pods of a class tolerate a taint keyed by the class's resource name (e.g. nvidia.com/gpu), no other."""
    return (node.ready and node.schedulable and node.taints <= {cls.resource_name} and node.name not in exclude
            and node.matches(cls.node_selector) and node.allocatable.get(cls.resource_name, 0) > 0)


def pack(free: dict[str, int], replicas: int, per_replica: int) -> tuple[str, ...] | None:
    """Best fit: each replica goes to the node with the least free room that still holds it.

    Keeps whole nodes free for larger gangs (less fragmentation). Returns one node per rank, or None.
    """
    room = dict(free)
    chosen: list[str] = []
    for _ in range(replicas):
        fits = [(n, f) for n, f in room.items() if f >= per_replica]
        if not fits:
            return None
        node = min(fits, key=lambda nf: (nf[1], nf[0]))[0]
        room[node] -= per_replica
        chosen.append(node)
    return tuple(chosen)


def _replicas_that_fit(free: dict[str, int], per_replica: int) -> int:
    return sum(f // per_replica for f in free.values())


def place(request: Request, fleet: Fleet) -> Result:
    result = Result(chosen=None)
    feasible: list[Candidate] = []
    n_alts = len(request.alternatives)
    for index, alt in enumerate(request.alternatives):
        cls = fleet.classes.get(alt.device_class)
        if cls is None:
            known = ", ".join(sorted(fleet.classes)) or "none"
            result.rejections.append(Rejection(alt.device_class, f"unknown AcceleratorClass (known: {known})"))
            continue
        by_region: dict[str, dict[str, int]] = {}
        for node in fleet.nodes.values():
            if not _eligible(node, cls, request.exclude_nodes):
                continue
            region = fleet.region_of(node)
            if region is None:
                continue
            by_region.setdefault(region, {})[node.name] = fleet.free(node.name, cls.resource_name)
        if not by_region:
            result.rejections.append(Rejection(cls.name, "no Ready, schedulable node of this class in any region"))
            continue
        for region in sorted(by_region):
            label = f"{region}/{cls.name}"
            if request.allowed_regions and region not in request.allowed_regions:
                result.rejections.append(Rejection(label, "region not in spec.regions.allowed"))
                continue
            free = by_region[region]
            nodes = pack(free, request.replicas, alt.per_replica)
            if nodes is None:
                fit = _replicas_that_fit(free, alt.per_replica)
                total = sum(free.values())
                result.rejections.append(Rejection(
                    label,
                    f"room for {fit} of {request.replicas} replicas "
                    f"({total} free on {sum(1 for f in free.values() if f)} node(s), {alt.per_replica} per replica)",
                ))
                continue
            score = _score(index, n_alts, cls, region, request)
            feasible.append(Candidate(region, index, cls.name, cls.resource_name, alt.per_replica, nodes, score))
    if feasible:
        result.chosen = max(feasible, key=lambda c: (c.score, -c.alternative_index, c.region))
    return result


def _score(index: int, n_alts: int, cls: DeviceClass, region: str, request: Request) -> float:
    """Preference order dominates; then a preferred region; then the class's throughput."""
    preference = (n_alts - index) * 100.0
    preferred = 0.0
    if region in request.preferred_regions:
        n = len(request.preferred_regions)
        preferred = 50.0 * (n - list(request.preferred_regions).index(region)) / n
    return preference + preferred + min(cls.throughput, 9.0)
