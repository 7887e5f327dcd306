"""Gang placement: choose a device class, a region and a node per replica, or explain why none fits.

Shaped like the Kubernetes scheduler framework. Candidates are (alternative x region). Filters, in
order: the class exists; its nodes' software (each node's own driver/CUDA/CANN labels, else the class's
declared stack) meets the alternative's `requires` and the node carries its required labels (per node:
a node that fails is not used, and the message counts it); the region is allowed; the namespace's
HeteroQuota has room; there is room for the whole gang on Ready, schedulable, untainted, healthy nodes
with each replica on one node. Survivors are scored: preference order first,
then preferred regions, the class's throughput, packing (fuller nodes first) and region balance.
Every rejected candidate keeps the reason a user reads in the job's message, e.g.
`cn-east/nvidia-h100: quota 16/16 used (nvidia-h100 in any region; needs 16)`.

`schedule` places a queue in priority order (urgent > high > medium > low, then age), so a job never
takes room that one ahead of it can use now; `room_to_grow` is the most replicas an elastic job could
restart with. Preemption and reclaim are planned in `engine.preemption`; the planner that combines them is
`engine.admission`.
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from heterojob.engine.filters import (  # noqa: F401 - re-exported: placement's filters
    _version_check,
    node_software_mismatch,
    node_unfit,
    software_mismatch,
    software_summary,
)
from heterojob.engine.fleet import Allocation, DeviceClass, Fleet, cpu_classes, quota_room
from heterojob.engine.rooms import Memory, Rooms, Verdict


@dataclass(frozen=True)
class Alternative:
    device_class: str
    per_replica: int
    requires: Mapping[str, str] = field(default_factory=dict)  # software -> PEP 440 specifier
    node_labels: Mapping[str, str] = field(default_factory=dict)  # labels every node must carry (e.g. RDMA)

    @cached_property
    def needs(self) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
        """What the per-node software filter checks, as a hashable key."""
        return tuple(sorted(self.requires.items())), tuple(sorted(self.node_labels.items()))


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

    @property
    def namespace(self) -> str:
        return self.job.split("/", 1)[0]

    @property
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


# --- the fleet's usable nodes per class and region ---------------------------------------------------

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
        self._shared: _View | None = like._shared if like is not None else None
        self.rooms: Rooms = Rooms(memory, like.rooms if like is not None else None)
        self._scope: tuple[object, ...] | None = like._scope if like is not None else None

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
        if not alt.requires and not alt.node_labels:
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
                    why = node_software_mismatch(nodes[name], cls, alt.requires, alt.node_labels)
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


def pack(free: Mapping[str, int], replicas: int, per_replica: int) -> tuple[str, ...] | None:
    """Best fit: each replica goes to the node with the least free room that still holds it.

    Keeps whole nodes free for larger gangs (less fragmentation). Returns one node per rank, or None.
    Ties go to the node first by name.
    """
    if replicas <= 0:
        return ()
    if per_replica > 0 and sum(f // per_replica for f in free.values() if f >= per_replica) < replicas:
        return None  # the whole gang cannot fit: no need to pick
    heap = [(f, n) for n, f in free.items() if f >= per_replica]
    heapq.heapify(heap)
    chosen: list[str] = []
    for _ in range(replicas):
        if not heap:
            return None
        f, node = heap[0]
        f -= per_replica
        if f < per_replica:
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (f, node))
        chosen.append(node)
    return tuple(chosen)


# --- the pipeline --------------------------------------------------------------------------------------

def place(request: Request, fleet: Fleet, index: FleetIndex | None = None) -> Result:
    """Where `request` goes on `fleet` now, or why it cannot (the pipeline in the module docstring). `index`:
    the fleet's `FleetIndex` (a ledger's, or one shared by many calls on the same fleet)."""
    index = index or FleetIndex(fleet)
    result = Result(chosen=None)
    feasible: list[Candidate] = []
    limits = fleet.quotas.get(request.namespace, ())
    held = fleet.held.get(request.namespace, {})
    cpu = cpu_classes(fleet.classes) if limits else frozenset()
    for i, alt in enumerate(request.alternatives):
        cls = fleet.classes.get(alt.device_class)
        if cls is None:
            known = ", ".join(sorted(fleet.classes)) or "none"
            result.rejections.append(Rejection(alt.device_class, f"unknown AcceleratorClass (known: {known})"))
            continue
        regions = index.regions(cls)
        if not regions:
            mismatch = software_mismatch(cls, alt.requires)
            reason = f"software: {mismatch}" if mismatch else "no node of this class in any region"
            result.rejections.append(Rejection(cls.name, reason))
            continue
        by_region, soft_failed = index.software(cls, alt)
        if soft_failed and not any(by_region.values()):
            result.rejections.append(_soft_rejection(index, cls, alt, soft_failed))
            continue
        need = request.replicas * alt.per_replica
        for region in request.allowed_regions:
            if region not in regions:  # say why an allowed region fails, ahead of the regions not allowed
                result.rejections.append(Rejection(f"{region}/{cls.name}", f"no {cls.name} node in this region"))
        for region in regions:
            label = f"{region}/{cls.name}"
            if request.allowed_regions and region not in request.allowed_regions:
                result.rejections.append(Rejection(label, request.outside_allowed))
                continue
            over = quota_room(limits, held, cls.name, region, need, cpu) if limits else None
            if over is not None:
                result.rejections.append(Rejection(label, over, quota=True))
                continue
            verdict = _verdict(index, fleet, cls, alt, region, request, soft_failed)
            if verdict.nodes is None:
                result.rejections.append(Rejection(label, verdict.reason))
                continue
            score = _score(i, len(request.alternatives), cls, region, request, verdict)
            feasible.append(Candidate(region, i, cls.name, cls.resource_name, alt.per_replica, verdict.nodes, score))
    if feasible:
        result.chosen = max(feasible, key=lambda c: (c.score, -c.alternative_index, c.region))
    return result


def _soft_rejection(index: FleetIndex, cls: DeviceClass, alt: Alternative,
                    soft_failed: Mapping[str, Mapping[str, int]]) -> Rejection:
    """Every usable node of the class fails `alt`'s software or labels: one rejection, in the class's words
    when no node publishes its own version of what failed (cached per fleet view)."""
    key = (cls.name, alt.needs)
    known = index._v.soft_rejection.get(key)
    if known is None:
        mismatch = software_mismatch(cls, alt.requires)
        own = any(name in index.fleet.nodes[n].software for n in _class_nodes(index, cls) for name in alt.requires)
        if mismatch is not None and not own and not alt.node_labels:
            known = Rejection(cls.name, f"software: {mismatch}")
        else:
            merged: dict[str, int] = {}
            for reasons in soft_failed.values():
                for why, n in reasons.items():
                    merged[why] = merged.get(why, 0) + n
            known = Rejection(cls.name, f"software: {software_summary(merged)}")
        index._v.soft_rejection[key] = known
    return known


_NO_NODES: tuple[frozenset[str], int] = (frozenset(), 0)


def _verdict(index: FleetIndex, fleet: Fleet, cls: DeviceClass, alt: Alternative, region: str, request: Request,
             soft_failed: Mapping[str, Mapping[str, int]]) -> Verdict:
    """Where `request`'s gang of `alt` packs in `region` and the scorers that depend on the room there, or why
    it does not fit: from the region's nodes with free room only (`rooms`), and kept per version of that room
    (what it depends on besides: the gang's size, `alt`'s needs and the request's excluded nodes there)."""
    per, replicas = alt.per_replica, request.replicas
    names, devices = index.usable(cls, alt).get(region, _NO_NODES)
    exclude = request.exclude_nodes
    excluded = names & exclude if exclude and names else frozenset()
    room = index.room(cls)[region]
    verdicts = index.rooms.verdicts(cls.name, region)
    key = (alt.needs, replicas, per, excluded)
    known = verdicts.get(key)
    if known is not None:
        return known
    down = fleet.network_down
    cut: dict[str, str] = {}
    if replicas > 1 and down:  # a gang's collectives cross every chip's network
        cut = {n: down[n] for n in (down if len(down) <= len(names) else names)
               if n in names and n in down and n not in excluded}
    capacity = index.capacity(cls)
    if per <= 0:  # every usable node counts, full or not
        free = {n: max(0, capacity[n] - fleet.used.get((n, cls.resource_name), 0))
                for n in names if n not in excluded and n not in cut}
    elif alt.requires or alt.node_labels:
        free = {n: f for n, f in room.items() if n in names and n not in excluded and n not in cut}
    elif excluded or cut:
        free = {n: f for n, f in room.items() if n not in excluded and n not in cut}
    else:
        free = room
    nodes = pack(free, replicas, per)
    if nodes is None:
        counted = len(names) - len(excluded) - len(cut) > 0  # a node of the region is counted, free or not
        verdict = Verdict(None, reason=_no_room(free, request, alt, index.unfit_reasons(cls, region),
                                                soft_failed.get(region, {}), cut, counted))
    else:
        # packing: how full the chosen nodes are afterwards (fills partly used nodes, keeps empty ones whole)
        chosen = set(nodes)
        chosen_capacity = sum(capacity[n] for n in chosen) or 1
        left = sum(free[n] for n in chosen) - len(nodes) * per
        # balance: prefer the region with the larger share of this class still free afterwards
        region_capacity = (devices - sum(capacity[n] for n in excluded) - sum(capacity[n] for n in cut)) or 1
        verdict = Verdict(nodes, W_PACKING * (1 - left / chosen_capacity),
                          W_BALANCE * (sum(free.values()) - len(nodes) * per) / region_capacity)
    verdicts[key] = verdict
    return verdict


def _class_nodes(index: FleetIndex, cls: DeviceClass) -> Iterable[str]:
    for names in index.nodes(cls).values():
        yield from names


NETWORK_DOWN = "network down"  # the filter's name in messages: a chip's network or RoCE link is down


def _no_room(free: Mapping[str, int], request: Request, alt: Alternative, unfit_why: Mapping[str, int],
             soft_failed: Mapping[str, int], network_down: Mapping[str, str] = {},  # noqa: B006 - read only
             counted: bool | None = None) -> str:
    """Why the gang does not fit the region's `free` room (nodes without free devices may be left out of it:
    `counted` then says whether the region has any node counted, full or not)."""
    unfit = sum(unfit_why.values())
    if counted is None:
        counted = bool(free)
    if not counted and not soft_failed and not network_down and len(unfit_why) == 1 and unfit:
        # no node of the region counts, for one reason (a lost member cluster, all NotReady...): say that,
        # not "0 free on 0 node(s)"
        why = next(iter(unfit_why))
        return f"{why}: its {unfit} node(s) are not counted"
    fit = sum(f // alt.per_replica for f in free.values())
    total = sum(free.values())
    text = (f"room for {fit} of {request.replicas} replicas ({total} free on "
            f"{sum(1 for f in free.values() if f)} node(s), {alt.per_replica} per replica)")
    if unfit:
        whys = ", ".join(f"{why} ({n})" if len(unfit_why) > 1 else why
                         for why, n in sorted(unfit_why.items(), key=lambda kv: (-kv[1], kv[0]))[:3])
        text += f"; {unfit} node(s) not Ready, cordoned, tainted or unhealthy: {whys}"
    if network_down:
        first = sorted(network_down)[0]
        text += (f"; {len(network_down)} node(s) left out, {NETWORK_DOWN} (an Ascend chip's collectives cannot "
                 f"cross it; a job of {request.replicas} replicas needs them): {first}: {network_down[first]}"
                 + (f" and {len(network_down) - 1} more" if len(network_down) > 1 else ""))
    return text + (f"; {software_summary(soft_failed)}" if soft_failed else "")


# weights: a step in preference order outweighs everything else together
W_PREFERENCE, W_PREFERRED_REGION, W_THROUGHPUT, W_PACKING, W_BALANCE = 100.0, 50.0, 10.0, 5.0, 3.0


def _score(index: int, n_alts: int, cls: DeviceClass, region: str, request: Request, verdict: Verdict) -> float:
    """A feasible candidate's score: preference order, preferred region, throughput, then the region's
    packing and balance (`_verdict`)."""
    preference = W_PREFERENCE * (n_alts - index)
    preferred = 0.0
    if region in request.preferred_regions:
        n = len(request.preferred_regions)
        preferred = W_PREFERRED_REGION * (n - list(request.preferred_regions).index(region)) / n
    throughput = W_THROUGHPUT * min(cls.throughput, 1.0)
    return preference + preferred + throughput + verdict.packing + verdict.balance


# --- a queue -------------------------------------------------------------------------------------------

class _LedgerFleet(Fleet):
    """A ledger's fleet: brings the ledger's index along, so a ledger made from it starts from its tables."""

    ledger_index: FleetIndex | None = None


class Ledger:
    """A mutable copy of what is used and held, to place several jobs one after another.

    While room is only taken, a request that did not fit never fits later: a later request of the same
    shape gets the first one's result at once (given-back room forgets these).
    """

    def __init__(self, fleet: Fleet, index: FleetIndex | None = None) -> None:
        """`index`: `fleet`'s index, whose tables the ledger's own starts from (a ledger's fleet brings its
        ledger's index along by itself)."""
        self.used: dict[tuple[str, str], int] = dict(fleet.used)
        self.held: dict[str, dict[tuple[str, str], int]] = {ns: dict(h) for ns, h in fleet.held.items()}
        self.fleet = _LedgerFleet(nodes=fleet.nodes, classes=fleet.classes, regions=fleet.regions, used=self.used,
                                  quotas=fleet.quotas, held=self.held, unhealthy=fleet.unhealthy, failed=fleet.failed,
                                  network_down=fleet.network_down)
        if index is None or index.fleet is not fleet:
            index = fleet.ledger_index if isinstance(fleet, _LedgerFleet) else None
        self.index = FleetIndex(self.fleet, like=index)
        self.fleet.ledger_index = self.index
        self._failed: dict[tuple[object, ...], Result] = {}
        self.given_back = 0  # how many times room was given back (what failed to fit before may fit now)
        self.version = 0  # how many times room was taken or given back

    def take(self, allocation: Allocation, sign: int = 1) -> None:
        used, resource = self.used, allocation.resource
        for node, n in allocation.per_node.items():
            used[(node, resource)] = used.get((node, resource), 0) + sign * n
        self.index.rooms.changed(allocation.per_node, resource, used)
        mine = self.held.setdefault(allocation.namespace, {})
        key = (allocation.device_class, allocation.region)
        mine[key] = mine.get(key, 0) + sign * allocation.devices
        self.version += 1
        if sign < 0:
            self._failed.clear()
            self.given_back += 1

    def may_fit(self, request: Request) -> bool:
        """False only when `place` cannot fit `request` now: no alternative's class has, over its usable
        nodes, one node with room for a replica and room for the whole gang in all (what `place` checks per
        region and node, before quota and software, which only refuse more). Cheap: no messages."""
        for alt in request.alternatives:
            cls = self.fleet.classes.get(alt.device_class)
            if cls is None:
                continue
            self.index.room(cls)
            total, most = self.index.rooms.tally(cls.name)
            # one node with room for a replica, and room for the gang over all (`most` > 0 only when free)
            if most > 0 and most >= alt.per_replica and total >= request.replicas * alt.per_replica:
                return True
        return False

    def place(self, request: Request) -> Result:
        shape = request.shape
        if shape in self._failed:
            return self._failed[shape]
        result = place(request, self.fleet, self.index)
        if result.chosen is not None:
            self.take(result.chosen.allocation(request.namespace))
        else:
            self._failed[shape] = result
        return result


def schedule(requests: Iterable[Request], fleet: Fleet) -> dict[str, Result]:
    """Place a queue in priority order; each placement takes its room before the next is tried."""
    ledger = Ledger(fleet)
    return {r.job: ledger.place(r) for r in sorted(requests, key=lambda r: r.order)}


def room_to_grow(request: Request, fleet: Fleet, current: int, maximum: int, device_class: str,
                 region: str) -> int | None:
    """The most replicas (more than `current`, up to `maximum`) the job could restart with now, in its
    region and class; `fleet` must not count the job's own devices as used. None when it cannot grow."""
    alternatives = [a for a in request.alternatives if a.device_class == device_class]
    index = FleetIndex(fleet)
    maximum = min(maximum, _replica_slots(alternatives, fleet, index, region))
    for target in range(maximum, current, -1):
        trial = Request(request.job, alternatives, target, allowed_regions=(region,), priority=request.priority,
                        created=request.created)
        if place(trial, fleet, index).chosen is not None:
            return target
    return None


def _replica_slots(alternatives: Sequence[Alternative], fleet: Fleet, index: FleetIndex, region: str) -> int:
    """An upper bound on the replicas `place` can fit in `region` for any of `alternatives`: replicas of one
    size pack onto nodes independently, so at most each usable node's free devices // devices per replica
    (quota, software and excluded nodes only refuse more)."""
    most = 0
    for alt in alternatives:
        cls = fleet.classes.get(alt.device_class)
        if cls is None:
            continue
        if alt.per_replica <= 0:
            return 1 << 30  # no bound
        capacity, used, resource = index.capacity(cls), fleet.used, cls.resource_name
        names = index.nodes(cls).get(region, ())
        most = max(most, sum(max(0, capacity[n] - used.get((n, resource), 0)) // alt.per_replica for n in names))
    return most
