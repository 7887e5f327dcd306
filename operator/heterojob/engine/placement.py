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

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

from heterojob.engine import versions
from heterojob.engine.fleet import Allocation, DeviceClass, Fleet, Node, cpu_classes, quota_room


@dataclass(frozen=True)
class Alternative:
    device_class: str
    per_replica: int
    requires: Mapping[str, str] = field(default_factory=dict)  # software -> PEP 440 specifier
    node_labels: Mapping[str, str] = field(default_factory=dict)  # labels every node must carry (e.g. RDMA)

    @property
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


# --- filters -------------------------------------------------------------------------------------------

def software_mismatch(cls: DeviceClass, requires: Mapping[str, str]) -> str | None:
    """Why the class's software stack does not meet `requires` (engine.versions: PEP 440 and CANN's RCs)."""
    for name, spec in sorted(requires.items()):
        mismatch = versions.check(name, cls.software.get(name), spec)
        if mismatch is not None:
            return str(mismatch)
    return None


@lru_cache(maxsize=4096)
def _version_check(name: str, have: str | None, wanted: str, own: bool) -> str | None:
    """One node's version against one requirement, short (cached: a fleet has few distinct versions)."""
    mismatch = versions.check(name, have, wanted)
    if mismatch is None:
        return None
    if have is None:
        return f"no {name} version (no node label, none declared by the class)"
    if mismatch.why.startswith(":"):
        return str(mismatch)
    return f"{name} {have} does not satisfy {wanted}" + ("" if own else " (the class's declared version)")


def node_software_mismatch(node: Node, cls: DeviceClass, requires: Mapping[str, str],
                           node_labels: Mapping[str, str] = {}) -> str | None:  # noqa: B006 - read only
    """Why this node's software (its own labels first, else the class's stack) or labels miss the needs."""
    for name, spec in sorted(requires.items()):
        own = node.software.get(name)
        why = _version_check(name, own or cls.software.get(name), spec, own is not None)
        if why is not None:
            return why
    for key, value in sorted(node_labels.items()):
        have = node.labels.get(key)
        if have != value:
            return f"label {key}={value} missing" if have is None else f"label {key} is {have!r}, not {value!r}"
    return None


def software_summary(failures: Mapping[str, int], limit: int = 2) -> str:
    """`2 node(s) fail the software check: cuda 12.2 does not satisfy >=12.4` (the commonest reasons)."""
    total = sum(failures.values())
    ranked = sorted(failures.items(), key=lambda kv: (-kv[1], kv[0]))
    if len(ranked) == 1:
        reasons = ranked[0][0]
    else:
        reasons = "; ".join(f"{why} ({n})" for why, n in ranked[:limit]) + (
            f"; and {len(ranked) - limit} more reason(s)" if len(ranked) > limit else "")
    return f"{total} node(s) fail the software check: {reasons}"


def node_unfit(node: Node, cls: DeviceClass, fleet: Fleet) -> str | None:
    """Why a node cannot take this class's replicas now, or None. Pods tolerate only the class's own taint;
    telemetry and alerts keep a node off by `Fleet.keep_off` (a failed device its device plugin does not
    withhold yet, an overheating one, a firing alert)."""
    if not node.matches(cls.node_selector) or node.allocatable.get(cls.resource_name, 0) <= 0:
        return "not of this class"
    if not node.ready:
        return "not Ready"
    if not node.schedulable:
        return "cordoned"
    if not node.taints <= {cls.resource_name}:
        return "tainted"
    why = fleet.keep_off(node, cls.resource_name)
    return None if why is None else f"unhealthy ({why})"


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
    of fleets with the same nodes, classes, regions and node health, whatever is used, share it)."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self._shared: _View | None = None

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


def pack(free: Mapping[str, int], replicas: int, per_replica: int) -> tuple[str, ...] | None:
    """Best fit: each replica goes to the node with the least free room that still holds it.

    Keeps whole nodes free for larger gangs (less fragmentation). Returns one node per rank, or None.
    """
    room = {n: f for n, f in free.items() if f >= per_replica}
    chosen: list[str] = []
    for _ in range(replicas):
        if not room:
            return None
        node = min(room, key=lambda n: (room[n], n))
        room[node] -= per_replica
        if room[node] < per_replica:
            del room[node]
        chosen.append(node)
    return tuple(chosen)


# --- the pipeline --------------------------------------------------------------------------------------

def place(request: Request, fleet: Fleet, index: FleetIndex | None = None) -> Result:
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
            # every usable node of the class fails: one rejection, in the class's words when no node
            # publishes its own version of what failed
            mismatch = software_mismatch(cls, alt.requires)
            own = any(name in index.fleet.nodes[n].software for n in _class_nodes(index, cls)
                      for name in alt.requires)
            if mismatch is not None and not own and not alt.node_labels:
                result.rejections.append(Rejection(cls.name, f"software: {mismatch}"))
            else:
                merged: dict[str, int] = {}
                for reasons in soft_failed.values():
                    for why, n in reasons.items():
                        merged[why] = merged.get(why, 0) + n
                result.rejections.append(Rejection(cls.name, f"software: {software_summary(merged)}"))
            continue
        need = request.replicas * alt.per_replica
        capacity, used, resource = index.capacity(cls), fleet.used, cls.resource_name
        for region in request.allowed_regions:
            if region not in regions:  # say why an allowed region fails, ahead of the regions not allowed
                result.rejections.append(Rejection(f"{region}/{cls.name}", f"no {cls.name} node in this region"))
        for region in regions:
            label = f"{region}/{cls.name}"
            if request.allowed_regions and region not in request.allowed_regions:
                result.rejections.append(Rejection(label, request.outside_allowed))
                continue
            over = quota_room(limits, held, cls.name, region, need, cpu)
            if over is not None:
                result.rejections.append(Rejection(label, over, quota=True))
                continue
            names = [n for n in by_region.get(region, ()) if n not in request.exclude_nodes]
            cut: list[str] = []
            if request.replicas > 1 and fleet.network_down:  # a gang's collectives cross every chip's network
                cut = [n for n in names if n in fleet.network_down]
                names = [n for n in names if n not in fleet.network_down]
            free = {n: max(0, capacity[n] - used.get((n, resource), 0)) for n in names}
            nodes = pack(free, request.replicas, alt.per_replica)
            if nodes is None:
                result.rejections.append(Rejection(label, _no_room(free, request, alt,
                                                                   index.unfit_reasons(cls, region),
                                                                   soft_failed.get(region, {}),
                                                                   {n: fleet.network_down[n] for n in cut})))
                continue
            score = _score(i, len(request.alternatives), cls, region, request, capacity, free, nodes, alt.per_replica)
            feasible.append(Candidate(region, i, cls.name, cls.resource_name, alt.per_replica, nodes, score))
    if feasible:
        result.chosen = max(feasible, key=lambda c: (c.score, -c.alternative_index, c.region))
    return result


def _class_nodes(index: FleetIndex, cls: DeviceClass) -> Iterable[str]:
    for names in index.nodes(cls).values():
        yield from names


NETWORK_DOWN = "network down"  # the filter's name in messages: a chip's network or RoCE link is down


def _no_room(free: Mapping[str, int], request: Request, alt: Alternative, unfit_why: Mapping[str, int],
             soft_failed: Mapping[str, int], network_down: Mapping[str, str] = {}) -> str:  # noqa: B006 - read only
    unfit = sum(unfit_why.values())
    if not free and not soft_failed and not network_down and len(unfit_why) == 1 and unfit:
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


def _score(index: int, n_alts: int, cls: DeviceClass, region: str, request: Request, capacity: Mapping[str, int],
           free: Mapping[str, int], nodes: tuple[str, ...], per_replica: int) -> float:
    preference = W_PREFERENCE * (n_alts - index)
    preferred = 0.0
    if region in request.preferred_regions:
        n = len(request.preferred_regions)
        preferred = W_PREFERRED_REGION * (n - list(request.preferred_regions).index(region)) / n
    throughput = W_THROUGHPUT * min(cls.throughput, 1.0)
    # packing: how full the chosen nodes are afterwards (fills partly used nodes, keeps empty ones whole)
    chosen = set(nodes)
    chosen_capacity = sum(capacity[n] for n in chosen) or 1
    left = sum(free[n] for n in chosen) - len(nodes) * per_replica
    packing = W_PACKING * (1 - left / chosen_capacity)
    # balance: prefer the region with the larger share of this class still free afterwards
    region_capacity = sum(capacity[n] for n in free) or 1
    balance = W_BALANCE * (sum(free.values()) - len(nodes) * per_replica) / region_capacity
    return preference + preferred + throughput + packing + balance


# --- a queue -------------------------------------------------------------------------------------------

class Ledger:
    """A mutable copy of what is used and held, to place several jobs one after another.

    While room is only taken, a request that did not fit never fits later: a later request of the same
    shape gets the first one's result at once (given-back room forgets these).
    """

    def __init__(self, fleet: Fleet) -> None:
        self.used: dict[tuple[str, str], int] = dict(fleet.used)
        self.held: dict[str, dict[tuple[str, str], int]] = {ns: dict(h) for ns, h in fleet.held.items()}
        self.fleet = Fleet(nodes=fleet.nodes, classes=fleet.classes, regions=fleet.regions, used=self.used,
                           quotas=fleet.quotas, held=self.held, unhealthy=fleet.unhealthy, failed=fleet.failed,
                           network_down=fleet.network_down)
        self.index = FleetIndex(self.fleet)
        self._failed: dict[tuple[object, ...], Result] = {}
        self.given_back = 0  # how many times room was given back (what failed to fit before may fit now)
        self.version = 0  # how many times room was taken or given back
        self._free: dict[str, tuple[int, int, int]] = {}  # class -> (version, free devices, most on one node)

    def take(self, allocation: Allocation, sign: int = 1) -> None:
        for node, n in allocation.per_node.items():
            self.used[(node, allocation.resource)] = self.used.get((node, allocation.resource), 0) + sign * n
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
            known = self._free.get(cls.name)
            if known is None or known[0] != self.version:
                used, resource, total, most = self.used, cls.resource_name, 0, 0
                for node, capacity in self.index.capacity(cls).items():
                    free = capacity - used.get((node, resource), 0)
                    if free > 0:
                        total += free
                        most = max(most, free)
                known = self._free[cls.name] = (self.version, total, most)
            # one node with room for a replica, and room for the gang over all (`most` > 0 only when free)
            if known[2] > 0 and known[2] >= alt.per_replica and known[1] >= request.replicas * alt.per_replica:
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
