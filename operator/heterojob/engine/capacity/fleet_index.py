"""The fleet's nodes per device class and region that may take the class's replicas, computed once per fleet
view (nodes, classes, regions, node health) and shared by every index of that view, with their free room
for the fleet's devices in use (`engine.capacity.rooms`). Pure; `engine.placing.placement` reads it."""

from __future__ import annotations

import itertools
from collections import defaultdict

from heterojob.engine.capacity.filters import node_software_mismatch, node_unfit
from heterojob.engine.capacity.fleet import DeviceClass, Fleet
from heterojob.engine.capacity.placement_types import Alternative, Rejection
from heterojob.engine.capacity.rooms import Memory, Rooms


class _View:
    """What a FleetIndex reads of a fleet but `used`: its nodes, classes, regions and node health. Holds
    the objects it was computed from, so while it is memoised their ids name them and nothing else."""

    def __init__(self, fleet: Fleet) -> None:
        self.objects = (tuple(fleet.nodes.values()), tuple(fleet.classes.values()), tuple(fleet.regions.values()))
        self.by_class: dict[str, dict[str, list[str]]] = {}
        self.unfit: dict[str, dict[str, int]] = {}
        self.unfit_why: dict[str, dict[str, dict[str, int]]] = {}  # class -> region -> why -> nodes
        # (class, needs) -> (region -> nodes that pass, region -> reason -> nodes that fail)
        self.soft: dict[tuple[object, ...], tuple[dict[str, list[str]], dict[str, dict[str, int]]]] = {}
        self.capacity: dict[str, dict[str, int]] = {}
        self.regions: dict[str, list[str]] = {}
        self.serial = next(_SERIALS)  # names this view in a `rooms.Memory`
        self.where: dict[str, dict[str, str]] = {}  # class -> usable node -> its region
        self.region_of: dict[str, str | None] = {}  # node -> its region (`FleetIndex.region_of`)
        # (class, needs) -> region -> (the usable nodes that meet them, their devices of the class)
        self.sets: dict[tuple[object, ...], dict[str, tuple[frozenset[str], int]]] = {}
        # (class, needs) -> the rejection of an alternative every usable node of the class fails
        self.soft_rejection: dict[tuple[object, ...], Rejection] = {}


_SERIALS = itertools.count(1)


_VIEWS: dict[tuple[object, ...], _View] = {}  # fleet views seen lately (a planner builds many indexes per pass)
_VIEWS_KEPT = 64


def _view(fleet: Fleet) -> _View:
    key = (tuple((name, id(node)) for name, node in fleet.nodes.items()),
           tuple((name, id(cls)) for name, cls in fleet.classes.items()),
           tuple((name, id(region)) for name, region in fleet.regions.items()),
           tuple(sorted(fleet.unhealthy.items())), tuple(sorted(fleet.failed.items())))
    view = _VIEWS.get(key)
    if view is None:
        if len(_VIEWS) >= _VIEWS_KEPT:
            del _VIEWS[next(iter(_VIEWS))]
        view = _VIEWS[key] = _View(fleet)
    return view


class FleetIndex:
    """Per class, per region: the nodes that may take its replicas (computed once per fleet view: indexes
    of fleets with the same nodes, classes, regions and node health, whatever is used, share it), and
    their free room (`rooms.Rooms`, for the fleet's `used` as it is: only `Ledger.take` may change it).

    `memory`: a `rooms.Memory` the caller keeps between scheduling cycles (what places found per region
    while its room is unchanged). `like`: an index of a fleet with the same view and devices in use, whose
    tables this one starts from (a ledger's copy of a fleet)."""

    def __init__(self, fleet: Fleet, memory: Memory | None = None, like: FleetIndex | None = None) -> None:
        self.fleet = fleet
        self._shared: _View | None = None
        self._scope: tuple[object, ...] | None = None
        if like is not None:  # its view, and every class's room (built there once, copied here)
            for cls in like.fleet.classes.values():
                like.room(cls)
            self._shared, self._scope = like._v, like._scope
        self.rooms: Rooms = Rooms(memory, like.rooms if like is not None else None)

    @property
    def _v(self) -> _View:
        if self._shared is None:
            self._shared = _view(self.fleet)
        return self._shared

    def nodes(self, cls: DeviceClass) -> dict[str, list[str]]:
        v = self._v
        if cls.name not in v.by_class:
            by_region: dict[str, list[str]] = defaultdict(list)
            unfit: dict[str, int] = defaultdict(int)
            unfit_why: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
            for node in self.fleet.nodes.values():
                why = node_unfit(node, cls, self.fleet)
                if why == "not of this class":
                    continue
                region = self.fleet.region_of(node)
                if region is None:
                    continue
                if why is None:
                    by_region[region].append(node.name)
                else:
                    unfit[region] += 1
                    unfit_why[region][why if why.startswith("unhealthy") else node.reason or why] += 1
            v.by_class[cls.name] = dict(by_region)
            v.unfit[cls.name] = dict(unfit)
            v.unfit_why[cls.name] = {r: dict(w) for r, w in unfit_why.items()}
        return v.by_class[cls.name]

    def software(self, cls: DeviceClass, alt: Alternative
                 ) -> tuple[dict[str, list[str]], dict[str, dict[str, int]]]:
        """The class's usable nodes per region that also meet `alt`'s software and label needs, and per
        region why the others do not (reason -> nodes). Cached per (class, needs) for the fleet view."""
        by_region = self.nodes(cls)
        if not alt.requires and not alt.node_labels and not alt.pod_requests:
            return by_region, {}
        key = (cls.name, alt.needs)
        soft = self._v.soft
        if key not in soft:
            ok: dict[str, list[str]] = {}
            failed: dict[str, dict[str, int]] = {}
            nodes = self.fleet.nodes
            for region, names in by_region.items():
                passing = []
                for name in names:
                    why = node_software_mismatch(nodes[name], cls, alt.requires, alt.node_labels, alt.pod_requests)
                    if why is None:
                        passing.append(name)
                    else:
                        reasons = failed.setdefault(region, {})
                        reasons[why] = reasons.get(why, 0) + 1
                ok[region] = passing
            soft[key] = (ok, failed)
        return soft[key]

    def capacity(self, cls: DeviceClass) -> dict[str, int]:
        """node -> its allocatable devices of the class's resource, for the class's usable nodes (cached)."""
        capacity = self._v.capacity
        if cls.name not in capacity:
            nodes, resource = self.fleet.nodes, cls.resource_name
            capacity[cls.name] = {n: nodes[n].allocatable.get(resource, 0)
                                  for names in self.nodes(cls).values() for n in names}
        return capacity[cls.name]

    def unfit(self, cls: DeviceClass, region: str) -> int:
        self.nodes(cls)
        return self._v.unfit[cls.name].get(region, 0)

    def unfit_reasons(self, cls: DeviceClass, region: str) -> dict[str, int]:
        """Why the class's nodes in `region` that cannot take replicas cannot (the node's own reason, e.g. a
        lost member cluster's, else not Ready / cordoned / tainted / unhealthy) -> how many nodes."""
        self.nodes(cls)
        return self._v.unfit_why[cls.name].get(region, {})

    def regions(self, cls: DeviceClass) -> list[str]:
        v = self._v
        if cls.name not in v.regions:
            self.nodes(cls)
            v.regions[cls.name] = sorted(set(v.by_class[cls.name]) | set(v.unfit[cls.name]))
        return v.regions[cls.name]

    def region_of(self, node: str) -> str | None:
        """The region of a node of the fleet (None: no such node, or in no region), cached per view."""
        known = self._v.region_of
        if node not in known:
            got = self.fleet.nodes.get(node)
            known[node] = None if got is None else self.fleet.region_of(got)
        return known[node]

    def usable(self, cls: DeviceClass, alt: Alternative) -> dict[str, tuple[frozenset[str], int]]:
        """Per region: the class's usable nodes that meet `alt`'s needs, and their devices (cached)."""
        key = (cls.name, alt.needs)
        sets = self._v.sets.get(key)
        if sets is None:
            by_region, capacity = self.software(cls, alt)[0], self.capacity(cls)
            sets = self._v.sets[key] = {r: (frozenset(names), sum(capacity[n] for n in names))
                                        for r, names in by_region.items()}
        return sets

    def room(self, cls: DeviceClass) -> dict[str, dict[str, int]]:
        """region -> node -> free devices, for the class's usable nodes with any free (`rooms.Rooms`)."""
        rooms = self.rooms
        if not rooms.built(cls.name):
            v = self._v
            where = v.where.get(cls.name)
            if where is None:
                where = v.where[cls.name] = {n: r for r, names in self.nodes(cls).items() for n in names}
            if self._scope is None:
                self._scope = (v.serial, tuple(sorted(self.fleet.network_down.items())))
            rooms.build(cls.name, cls.resource_name, where, self.capacity(cls), self.regions(cls), self.fleet.used,
                        self._scope)
        return rooms.free[cls.name]
