"""What a placement is asked and what it answers, as plain data: a gang's request (its device alternatives,
replicas, regions, priority), a candidate (class, region, one node per rank), a rejection with the reason a
user reads, and the result. `engine.placing.placement` fills them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from heterojob.engine.capacity.fleet import Allocation


@dataclass(frozen=True)
class Alternative:
    device_class: str
    per_replica: int
    requires: Mapping[str, str] = field(default_factory=dict)  # software -> PEP 440 specifier
    node_labels: Mapping[str, str] = field(default_factory=dict)  # labels every node must carry (e.g. RDMA)
    # what one replica's pod requests besides the class's devices (resource -> whole units, CPU cores and memory
    # bytes rounded down): a node whose allocatable is smaller can never run it (kube-scheduler's NodeResourcesFit)
    pod_requests: Mapping[str, int] = field(default_factory=dict)

    @cached_property
    def needs(self) -> tuple[tuple[tuple[str, object], ...], ...]:
        """What the per-node filter checks, as a hashable key."""
        return (tuple(sorted(self.requires.items())), tuple(sorted(self.node_labels.items())),
                tuple(sorted(self.pod_requests.items())))


OUTSIDE_ALLOWED = "region not in spec.regions.allowed"  # a Request's default refusal outside its allowed regions


@dataclass(frozen=True)
class Request:
    job: str  # namespace/name
    alternatives: Sequence[Alternative]
    replicas: int
    allowed_regions: Sequence[str] = ()
    preferred_regions: Sequence[str] = ()
    exclude_nodes: frozenset[str] = frozenset()
    priority: int = 0  # larger is more important
    created: float = 0.0  # unix seconds: older first among equal priorities
    outside_allowed: str = OUTSIDE_ALLOWED  # why a region outside allowed_regions is refused
    # the priority it preempts with, when lower than the one it is ordered by (a job the queue policy
    # moved up, e.g. promoted after waiting, that takes the next room first but displaces fewer for it) ...
    preempts: int | None = None
    # ... and the running jobs between the two it may preempt nonetheless (expected to run longer than it)
    also_preempts: frozenset[str] = frozenset()

    @property
    def preempt_priority(self) -> int:
        """Running jobs of strictly lower priority than this may be preempted for it (and `also_preempts`)."""
        return self.priority if self.preempts is None else min(self.priority, self.preempts)

    def may_preempt(self, priority: int, job: str) -> bool:
        """Whether a running job of this (effective) priority may be preempted for this one."""
        return priority < self.preempt_priority or priority < self.priority and job in self.also_preempts

    @cached_property
    def namespace(self) -> str:
        return self.job.split("/", 1)[0]

    @cached_property
    def order(self) -> tuple[int, float, str]:
        return (-self.priority, self.created, self.job)

    @cached_property
    def shape(self) -> tuple[object, ...]:
        """Everything placement looks at but the scorers: equal shapes fit, or not, alike."""
        return (tuple((a.device_class, a.per_replica, a.needs) for a in self.alternatives),
                self.replicas, tuple(self.allowed_regions), self.exclude_nodes, self.namespace, self.outside_allowed)


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

    def allocation(self, namespace: str) -> Allocation:
        return Allocation(self.resource, self.per_node, namespace, self.device_class, self.region)


def replicas_text(n: int) -> str:
    """'1 replica', '2 replicas': how messages count a gang."""
    return f"{n} replica" if n == 1 else f"{n} replicas"


@dataclass(frozen=True)
class Rejection:
    candidate: str  # "region/class" or "class"
    reason: str
    quota: bool = False  # a HeteroQuota limit refuses it (the devices may well be free)

    def __str__(self) -> str:
        return f"{self.candidate}: {self.reason}"


@dataclass
class Result:
    chosen: Candidate | None
    rejections: list[Rejection] = field(default_factory=list)

    def explain(self, limit: int = 8) -> str:
        if self.chosen is not None:
            c = self.chosen
            return f"placed on {c.region}/{c.device_class}: {replicas_text(len(c.nodes))} on {len(set(c.nodes))} node(s)"
        if not self.rejections:
            return "no candidate: the job lists no device alternatives"
        return f"no room: {listed(self.rejections, limit)}"


def listed(items: Sequence[object], limit: int = 8) -> str:
    """`items` joined by '; ', at most `limit` of them, then how many more: how messages stay bounded."""
    shown = "; ".join(str(r) for r in items[:limit])
    more = len(items) - limit
    return shown + (f"; and {more} more" if more > 0 else "")
