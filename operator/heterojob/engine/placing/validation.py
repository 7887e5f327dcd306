"""What a spec asks that the fleet can never give (pure): the second half of spec validation.

Step of the pipeline: after the API types have checked a spec on its own (api/), the controller asks
here whether it makes sense for this fleet, and rejects the job (or flags the quota) with the field and
the fix instead of leaving it Pending forever. Checked: a replica's devices above the per-replica cap of
a device class or above what any node of its class holds (a replica runs on one node); regions that do
not exist in `regions.allowed`/`preferred`; HeteroQuota limits naming unknown classes or regions.
An unknown device class in a job is not an error here: it may be created later, and placement says so.
Only jobs not placed yet are checked (a node that loses a device must never fail a running job); a job
rejected here is checked again when the job changes (a fixed spec: lifecycle's SpecFixed, back to Pending).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from heterojob.engine.capacity.fleet import DeviceClass, Node

MAX_DEVICES_PER_REPLICA = 64  # accelerators: beyond any single node built today
MAX_CPU_PER_REPLICA = 512  # CPU classes count cores
CPU_RESOURCE = "cpu"


@dataclass(frozen=True)
class SpecProblem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def _known(names: Collection[str], limit: int = 8) -> str:
    shown = sorted(names)[:limit]
    more = f", ... ({len(names)} in all)" if len(names) > limit else ""
    return ", ".join(shown) + more if shown else "none"


def node_capacity(cls: DeviceClass, nodes: Iterable[Node]) -> int | None:
    """The most devices of this class one node holds (None: no node of the class is known). Its capacity, not its
    allocatable: a device its device plugin reports Unhealthy for now leaves the node's size unchanged."""
    counts = [n.holds(cls.resource_name) for n in nodes if n.matches(cls.node_selector)]
    counts = [c for c in counts if c > 0]
    return max(counts) if counts else None


class Capacities:
    """`node_capacity` per class over one nodes mapping, kept while the same mapping is passed (a fleet view built
    again only when a node changes, `state.views.Versioned`): a waiting job's pass reads it without a walk over
    every node of the fleet."""

    def __init__(self) -> None:
        self._nodes: object = None
        self._known: dict[tuple[str, tuple[tuple[str, str], ...]], int | None] = {}

    def __call__(self, cls: DeviceClass, nodes: Mapping[str, Node]) -> int | None:
        if nodes is not self._nodes:
            self._nodes, self._known = nodes, {}
        key = (cls.resource_name, tuple(sorted(cls.node_selector.items())))
        if key not in self._known:
            self._known[key] = node_capacity(cls, nodes.values())
        return self._known[key]


def job_problems(alternatives: Sequence[tuple[str, int]], allowed: Sequence[str], preferred: Sequence[str],
                 classes: Mapping[str, DeviceClass], regions: Collection[str], nodes: Iterable[Node],
                 capacity: Callable[[DeviceClass], int | None] | None = None) -> list[SpecProblem]:
    """`alternatives`: (deviceClass, perReplica) in spec order; `regions`: the Region names that exist;
    `capacity`: `node_capacity` of a class over `nodes`, when the caller keeps it (`Capacities`)."""
    problems: list[SpecProblem] = []
    if capacity is None:
        every = list(nodes)

        def capacity(cls: DeviceClass) -> int | None:
            return node_capacity(cls, every)
    for i, (name, per_replica) in enumerate(alternatives):
        cls = classes.get(name)
        if cls is None:
            continue
        path = f"spec.devices[{i}].perReplica"
        if cls.resource_name != CPU_RESOURCE and per_replica > MAX_DEVICES_PER_REPLICA:
            problems.append(SpecProblem(path, f"{per_replica} is over the cap of {MAX_DEVICES_PER_REPLICA} devices per "
                                              f"replica of an accelerator class ({name}); use at most "
                                              f"{MAX_DEVICES_PER_REPLICA} and more replicas"))
            continue
        most = capacity(cls)
        if most is not None and per_replica > most:
            unit = "cores" if cls.resource_name == CPU_RESOURCE else "devices"
            problems.append(SpecProblem(path, f"{per_replica} is more than any node of class {name} holds "
                                              f"({most} {unit}); a replica runs on one node: use at most "
                                              f"{most} per replica and more replicas"))
    if regions:
        for field_name, listed in (("allowed", allowed), ("preferred", preferred)):
            for j, region in enumerate(listed):
                if region not in regions:
                    problems.append(SpecProblem(f"spec.regions.{field_name}[{j}]",
                                                f"unknown region {region!r}; known regions: {_known(regions)}"))
    return problems


def quota_problems(limits: Sequence[tuple[str, str]], classes: Collection[str], regions: Collection[str]
                   ) -> list[SpecProblem]:
    """`limits`: (deviceClass, region) of each spec.limits entry; '*' matches any and is always fine."""
    problems: list[SpecProblem] = []
    for i, (cls, region) in enumerate(limits):
        if classes and cls != "*" and cls not in classes:
            problems.append(SpecProblem(f"spec.limits[{i}].deviceClass", f"unknown AcceleratorClass {cls!r}; known: "
                                                                         f"{_known(classes)} (or '*' for any)"))
        if regions and region != "*" and region not in regions:
            problems.append(SpecProblem(f"spec.limits[{i}].region", f"unknown Region {region!r}; known: "
                                                                    f"{_known(regions)} (or '*' for any)"))
    return problems
