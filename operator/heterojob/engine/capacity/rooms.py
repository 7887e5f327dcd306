"""Free room per class, region and node for one state of a fleet's devices in use, kept current as a ledger
takes and gives back room; and `Memory`, what a scheduling cycle may carry to the next. Pure.

Step of the pipeline: none of its own; `fleet_index.FleetIndex` holds a `Rooms` and `placement.Ledger.take`
tells it which nodes changed. Only nodes with free devices matter to a placement (`placement.pack` never
picks a full node and the "no room" message counts only free devices), so `place` reads the few nodes with
room of a region instead of every node of it, and a busy fleet of 100,000 devices costs what its free room
costs.

Each (class, region) carries a version that changes whenever the free room of one of its nodes changes;
versions are unique in the process, so a version stands for one free room of one fleet view (nodes,
classes, regions, node health, network-down chips). What `place` found in a region for a gang of a given
size (where it packs, or why it does not fit: `RoomVerdict`) is kept per version and reused while that room is
unchanged, within a plan and, with a `Memory` the caller keeps, from one cycle to the next: a region's
"does not fit" (and its message) holds until its free room changes. `victims.Search` keeps its counts of the
replicas a region's room holds there too.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from heterojob.engine.capacity.placement_types import Candidate, Rejection

_VERSIONS = itertools.count(1)


@dataclass(frozen=True)
class RoomVerdict:
    """What `place` finds in one region for one gang shape: the nodes (one per rank) and the two scorers that
    depend on the room, or None and why not."""

    nodes: tuple[str, ...] | None
    packing: float = 0.0
    balance: float = 0.0
    reason: str = ""


@dataclass
class Memory:
    """What one scheduling cycle's plan leaves for the next (optional: a plan is the same without it). Per class
    and region: the free room the last plan started from, its version, and the verdicts found for every version
    still current. A new cycle whose room in a region equals the last one's keeps that region's version and
    verdicts; a changed fleet view drops everything. Holds one fleet at a time: keep one per fleet planned."""

    scope: Hashable = None  # the fleet view and network-down chips the rooms below are of
    rooms: dict[tuple[str, str], tuple[dict[str, int], int]] = field(default_factory=dict)
    verdicts: dict[int, dict[Hashable, object]] = field(default_factory=dict)  # a `RoomVerdict`, or a count
    # what `placement.place` found for one alternative of a request on a starting room: its key (the request's
    # shape as that alternative reads it, the namespace's quota) -> the versions of its class's regions, and the
    # rejections and candidates found there
    parts: dict[Hashable, tuple[tuple[int, ...], list[Rejection], list[Candidate]]] = field(default_factory=dict)

    # the last plan's holders (as given) and the pool of those it may disturb (`pool._Pool.of`)
    pool: tuple[tuple[object, ...], object] | None = None
    # what the last whole plan found steps 4-5 could do nothing for, and under what (`settled.Settled`)
    settled: object | None = None

    PARTS_KEPT = 50_000  # past this many, `parts` starts again at the next plan

    def begin(self) -> None:
        """A new plan: forget the verdicts of rooms that were not a plan's starting room (a ledger's steps)."""
        base = {version for _, version in self.rooms.values()}
        for version in [v for v in self.verdicts if v not in base]:
            del self.verdicts[version]
        if len(self.parts) > self.PARTS_KEPT:
            self.parts = {}

    def version(self, scope: Hashable, device_class: str, region: str, room: dict[str, int]) -> int:
        """The version of this starting room: the last one's when equal, else a new one."""
        if scope != self.scope:
            self.scope, self.rooms, self.verdicts, self.parts = scope, {}, {}, {}
        key = (device_class, region)
        known = self.rooms.get(key)
        if known is not None and known[0] == room:
            return known[1]
        if known is not None:
            self.verdicts.pop(known[1], None)
        version = next(_VERSIONS)
        self.rooms[key] = (dict(room), version)  # a copy: a ledger's room changes
        return version


class _Source:
    """What a class's room is computed from: its resource, usable node -> region, node -> devices."""

    __slots__ = ("resource", "where", "capacity")

    def __init__(self, resource: str, where: Mapping[str, str], capacity: Mapping[str, int]) -> None:
        self.resource, self.where, self.capacity = resource, where, capacity


class Rooms:
    """Per class (built on first use): region -> node -> free devices (> 0) of its usable nodes, a version per
    region, and the total and largest free room over the class (`tally`, what `Ledger.may_fit` reads)."""

    def __init__(self, memory: Memory | None = None, parent: Rooms | None = None) -> None:
        self.root = parent is None
        self.memory: Memory = memory if memory is not None else parent.memory if parent is not None else Memory()
        self.free: dict[str, dict[str, dict[str, int]]] = {}
        self.versions: dict[tuple[str, str], int] = {}
        # (class, region) -> changes whenever the devices in use on one of its usable nodes change, whether or
        # not its free room does (an overcommitted node's)
        self.touched: dict[tuple[str, str], int] = {}
        self._sources: dict[str, _Source] = {}
        self._by_resource: dict[str, list[str]] = {}
        self._total: dict[str, int] = {}
        self._sizes: dict[str, dict[int, int]] = {}  # class -> free devices on a node -> how many nodes
        if parent is not None:
            self.free = {c: {r: dict(room) for r, room in regions.items()} for c, regions in parent.free.items()}
            self.versions = dict(parent.versions)
            self.touched = dict(parent.touched)
            self._sources = dict(parent._sources)
            self._by_resource = {r: list(cs) for r, cs in parent._by_resource.items()}
            self._total = dict(parent._total)
            self._sizes = {c: dict(s) for c, s in parent._sizes.items()}
        elif memory is not None:
            memory.begin()

    def built(self, device_class: str) -> bool:
        return device_class in self.free

    def build(self, device_class: str, resource: str, where: Mapping[str, str], capacity: Mapping[str, int],
              regions: Iterable[str], used: Mapping[tuple[str, str], int], scope: Hashable) -> None:
        """The class's room from `used`: `where` maps each usable node to its region, `regions` every region
        the class has nodes in (usable or not)."""
        free: dict[str, dict[str, int]] = {r: {} for r in regions}
        total = 0
        sizes: dict[int, int] = {}
        for node, region in where.items():
            f = capacity[node] - used.get((node, resource), 0)
            if f > 0:
                free.setdefault(region, {})[node] = f
                total += f
                sizes[f] = sizes.get(f, 0) + 1
        self.free[device_class] = free
        for region, room in free.items():
            self.versions[(device_class, region)] = (
                self.memory.version(scope, device_class, region, room) if self.root else next(_VERSIONS))
            self.touched[(device_class, region)] = next(_VERSIONS)
        self._sources[device_class] = _Source(resource, where, capacity)
        self._by_resource.setdefault(resource, []).append(device_class)
        self._total[device_class], self._sizes[device_class] = total, sizes

    def changed(self, nodes: Iterable[str], resource: str, used: Mapping[tuple[str, str], int]) -> None:
        """`used` changed for these nodes' `resource`: bring every built class of it up to date."""
        classes = self._by_resource.get(resource)
        if not classes:
            return
        for device_class in classes:
            source = self._sources[device_class]
            regions, sizes = self.free[device_class], self._sizes[device_class]
            for node in nodes:
                region = source.where.get(node)
                if region is None:
                    continue
                room = regions[region]
                self.touched[(device_class, region)] = next(_VERSIONS)
                f = max(0, source.capacity[node] - used.get((node, resource), 0))
                old = room.get(node, 0)
                if f == old:
                    continue
                if old:
                    sizes[old] -= 1
                    if not sizes[old]:
                        del sizes[old]
                if f:
                    room[node] = f
                    sizes[f] = sizes.get(f, 0) + 1
                else:
                    del room[node]
                self._total[device_class] += f - old
                self.versions[(device_class, region)] = next(_VERSIONS)

    def tally(self, device_class: str) -> tuple[int, int]:
        """(free devices, the most free on one node) over the class's usable nodes."""
        sizes = self._sizes[device_class]
        return self._total[device_class], max(sizes) if sizes else 0

    def verdicts(self, device_class: str, region: str) -> dict[Hashable, object]:
        """What was found for the current room of (class, region): `RoomVerdict`s, and counts
        (`victims.Search`)."""
        version = self.versions[(device_class, region)]
        table = self.memory.verdicts.get(version)
        if table is None:
            table = self.memory.verdicts[version] = {}
        return table
