"""Whether a waiting job fits as running jobs give their room back or take it again, without placing it. Pure.

Step of the pipeline: none of its own; `engine.disruption.preemption` adds victims lowest priority first until the job
fits, then spares those it fits without. `Search` answers "does it fit now?" (`placement.fits`) after each
such step in constant time per node a victim holds: for each (alternative, region) the job may use it keeps
the replicas the free room of the nodes it may use there holds (the sum of free devices // devices per
replica: what `placement.pack` needs to place the gang) and whether its namespace's quota lets it in, and
updates them as a victim's room comes back or is taken again. The filters are `placement.fits_where`'s: the
class exists and has nodes, some usable node meets the alternative's needs, the region is allowed, the
excluded nodes and (for a gang) the nodes with a chip's network down are left out. The search does not
change the ledger it starts from; a caller that changes it too tells the search first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from heterojob.engine.capacity.fleet import Allocation, DeviceClass, Limit, cpu_classes
from heterojob.engine.placing.placement import Ledger, Request, usable_alternatives


class _Pair:
    """One (alternative, region) the job may use: its nodes, the replicas their free room holds, and the
    limits of its namespace's quota that cover it."""

    __slots__ = ("cls", "region", "need", "per", "names", "out", "slots", "limits", "ok")

    def __init__(self, cls: DeviceClass, region: str, need: int, per: int, names: frozenset[str],
                 out: frozenset[str], slots: int, limits: list[int]) -> None:
        self.cls, self.region, self.need, self.per = cls, region, need, per
        self.names, self.out = names, out  # its nodes: the usable ones meeting its needs, but those left out
        self.slots, self.limits, self.ok = slots, limits, False


class Search:
    """`request` on `ledger` as rooms are given back (`give`) or taken again (`take`); `fits` says whether
    `placement.fits` would now. `known` is False when it cannot tell (a replica of no devices, or no
    replicas): then ask `placement.fits`. Should the ledger change as well, tell the search of each change
    before the ledger makes it."""

    def __init__(self, request: Request, ledger: Ledger) -> None:
        fleet, index = ledger.fleet, ledger.index
        self.replicas = replicas = request.replicas
        self.known = replicas > 0
        self.namespace = request.namespace
        self.pairs: list[_Pair] = []
        self._at: dict[str, dict[str, list[_Pair]]] = {}  # class -> region -> its pairs
        self._good = 0  # pairs that hold the gang and whose quota lets it in
        if not self.known:
            return
        limits = fleet.quotas.get(request.namespace, ())
        cpu = cpu_classes(fleet.classes) if limits else frozenset()  # cores: counted only by a limit naming them
        self._limits = [(limit.devices, _covers(limit, cpu)) for limit in limits]
        held = ledger.held.get(request.namespace, {}) if limits else {}
        self._spent = [sum(n for (c, r), n in held.items() if covers(c, r)) for _, covers in self._limits]
        down = fleet.network_down.keys() if replicas > 1 and fleet.network_down else None
        classes: dict[str, DeviceClass] = {}
        for alt, cls, regions, _ in usable_alternatives(request, fleet, index):
            per = alt.per_replica
            if per <= 0:
                self.known = False
                return
            sets, free = index.usable(cls, alt), index.room(cls)
            for region in regions:
                if request.allowed_regions and region not in request.allowed_regions:
                    continue
                names = sets[region][0] if region in sets else frozenset()
                out = names & request.exclude_nodes if request.exclude_nodes and names else frozenset()
                if down is not None:
                    out = out | {n for n in (down if len(down) <= len(names) else names) if n in names and n in down}
                # the replicas the room holds there (kept with the region's verdicts while its room is unchanged)
                verdicts = index.rooms.verdicts(cls.name, region)
                key = ("slots", alt.needs, per, out)
                slots = verdicts.get(key)
                if slots is None:
                    slots = verdicts[key] = sum(f // per for n, f in free[region].items()
                                                if n in names and n not in out)
                pair = _Pair(cls, region, replicas * per, per, names, out, slots,  # type: ignore[arg-type]  # mypy reads the slots tuple loosely
                             [j for j, (_, covers) in enumerate(self._limits) if covers(cls.name, region)])
                self.pairs.append(pair)
                self._at.setdefault(cls.name, {}).setdefault(region, []).append(pair)
                classes[cls.name] = cls
        for pair in self.pairs:
            self._judge(pair)
        self._where = {c: index._v.where[c] for c in classes}
        self._capacity = {c: index.capacity(cls) for c, cls in classes.items()}
        self._by_resource: dict[str, list[str]] = {}
        for c, cls in classes.items():
            self._by_resource.setdefault(cls.resource_name, []).append(c)
        self._used = ledger.used
        self._base: dict[tuple[str, str], int] = {}  # devices in use per node when first told of it
        self._given: dict[tuple[str, str], int] = {}  # devices given back (less taken again) per node since

    def fits(self) -> bool:
        return self._good > 0

    def give(self, room: Allocation) -> bool:
        """`room` comes back (a victim). False: it changes nothing the search reads (none of its nodes is one
        the job may use, and it is not of the job's namespace under quota), now or whenever."""
        return self._change(room, 1)

    def take(self, room: Allocation) -> bool:
        """`room` is taken again (a victim spared); False as for `give`."""
        return self._change(room, -1)

    def _judge(self, pair: _Pair) -> None:
        ok = pair.slots >= self.replicas
        if ok and pair.limits:
            spent, limits, need = self._spent, self._limits, pair.need
            ok = all(spent[j] + need <= limits[j][0] for j in pair.limits)
        if ok != pair.ok:
            pair.ok = ok
            self._good += 1 if ok else -1

    def _change(self, room: Allocation, sign: int) -> bool:
        touched = False
        names = self._by_resource.get(room.resource)
        if names:
            used, given, base, where, at = self._used, self._given, self._base, self._where, self._at
            for node, devices in room.per_node.items():
                read, before, after = False, 0, 0
                for c in names:
                    region = where[c].get(node)
                    if region is None:
                        continue
                    pairs = at[c].get(region)
                    if not pairs:
                        continue  # on no node the job may use: its devices there are never read
                    if not read:
                        read = touched = True
                        key = (node, room.resource)
                        start = base.get(key)
                        if start is None:  # the ledger's, before anything the search was told of
                            start = base[key] = used.get(key, 0)
                        before = start - given.get(key, 0)
                        given[key] = given.get(key, 0) + sign * devices
                        after = before - sign * devices
                    cap = self._capacity[c][node]
                    was, now = max(0, cap - before), max(0, cap - after)
                    if was == now:
                        continue
                    for pair in pairs:
                        if node in pair.names and node not in pair.out:
                            pair.slots += now // pair.per - was // pair.per
                            self._judge(pair)
        if self._limits and room.namespace == self.namespace:
            changed = False
            for j, (_, covers) in enumerate(self._limits):
                if covers(room.device_class, room.region):
                    self._spent[j] -= sign * room.devices
                    changed = True
            if changed:
                touched = True
                for pair in self.pairs:
                    self._judge(pair)
        return touched


def first_fit(search: Search, rooms: Iterable[Allocation]) -> int | None:
    """The fewest of `rooms` (a prefix, at least one) that, given back, let the job fit (`Search.fits`), or
    None when all of them do not; they stay given back on `search`. `rooms` is read only as far as the
    answer."""
    rooms = iter(rooms)
    if not search.pairs:
        return None
    if search.fits():  # it fits already: the first victim is added before it is asked
        first = next(rooms, None)
        if first is None:
            return None
        search.give(first)
        return 1
    for k, room in enumerate(rooms, 1):
        search.give(room)
        if search.fits():
            return k
    return None


def _covers(limit: Limit, cpu: frozenset[str]) -> Callable[[str, str], bool]:
    """`limit.covers` of a class and region, CPU classes counted apart (`engine.capacity.fleet.Limit.covers`)."""
    return lambda device_class, region: limit.covers(device_class, region, device_class in cpu)
