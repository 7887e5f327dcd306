"""Live views of the cluster the planner's callers read: Nodes, AcceleratorClasses, Regions, HeteroQuotas,
pods heterojob does not own, and the monitor's last telemetry snapshot (Kopf indexes in the operator;
fixed dicts in tests, benchmarks and the console)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from heterojob.engine.capacity.fleet import DeviceClass, Limit, Node, RegionInfo
from heterojob.kube import convert
from heterojob.state.faults import Faults
from heterojob.telemetry.snapshot import Snapshot


T = TypeVar("T")


class Versioned(Generic[T]):
    """A view computed again only when `version()` changed since it was last computed (a big one, such as
    every Node of the fleet, read on every reconcile pass but changed by a few events)."""

    def __init__(self, compute: Callable[[], T], version: Callable[[], object]) -> None:
        self.compute = compute
        self.version = version
        self._seen: object = _NEVER
        self._value: T | None = None

    def __call__(self) -> T:
        v = self.version()
        if v != self._seen or self._value is None:
            self._value, self._seen = self.compute(), v
        return self._value


_NEVER = object()


@dataclass
class FleetSource:
    """Live views of the cluster (Kopf indexes in the operator; plain dicts in tests)."""

    nodes: Callable[[], Mapping[str, Node]]
    classes: Callable[[], Mapping[str, DeviceClass]]
    regions: Callable[[], Mapping[str, RegionInfo]]
    foreign_usage: Callable[[], Mapping[tuple[str, str], int]]
    # (namespace, name) -> a HeteroQuota's (limits, spec error); what telemetry and alerts say of nodes' devices
    quota_objects: Callable[[], Mapping[tuple[str, str], tuple[Sequence[Limit], str | None]]] = dict
    faults: Callable[[], Faults] = Faults
    telemetry: Callable[[], Snapshot | None] = lambda: None  # the monitor's last fleet snapshot
    # "namespace/job" -> placement generation -> (node, resource) -> devices its pods being deleted still hold until
    # they are gone
    leaving: Callable[[], Mapping[str, Mapping[int, Mapping[tuple[str, str], int]]]] = dict

    def quotas(self) -> dict[str, list[Limit]]:
        """namespace -> every limit of its HeteroQuotas (all of them apply)."""
        out: dict[str, list[Limit]] = {}
        for (namespace, _), (limits, _) in self.quota_objects().items():
            out.setdefault(namespace, []).extend(limits)
        return out

    @classmethod
    def from_objects(cls, objects: Iterable[Mapping[str, Any]]) -> FleetSource:
        """A fixed view from Node, AcceleratorClass and Region objects (tests, benchmarks, tools)."""
        nodes, classes, regions, quotas = {}, {}, {}, {}
        for obj in objects:
            name, kind = obj["metadata"]["name"], obj.get("kind")
            if kind == "Node":
                nodes[name] = convert.node_view(obj)
            elif kind == "AcceleratorClass" and (c := convert.device_class(obj)) is not None:
                classes[name] = c
            elif kind == "Region" and (r := convert.region_info(obj)) is not None:
                regions[name] = r
            elif kind == "HeteroQuota":
                quotas[(obj["metadata"].get("namespace", ""), name)] = convert.quota_limits(obj)
        return cls(nodes=lambda: nodes, classes=lambda: classes, regions=lambda: regions, foreign_usage=dict,
                   quota_objects=lambda: quotas)
