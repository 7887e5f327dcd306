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
restart with. Preemption and reclaim are planned in `engine.disruption.preemption`; the planner that combines them is
`engine.queue.admission`.

Cost: a region is judged from its nodes with free devices only (`engine.capacity.rooms`: a full node is never
picked, and the message counts free devices), and what was found there for a gang of a given size (its
nodes and scorers, or why it does not fit) is kept while the region's free room is unchanged, within a
plan and, with a `rooms.Memory`, across plans. `fits` answers whether `place` would choose a candidate,
without messages or scores. `engine.reference` keeps the straightforward scan these must equal.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import cast

from heterojob.engine.capacity.filters import (
    node_unfit, software_mismatch, software_summary,
)
from heterojob.engine.capacity.fleet import Allocation, DeviceClass, Fleet, cpu_classes, quota_room, used_under
from heterojob.engine.capacity.fleet_index import FleetIndex, _View, _view  # noqa: F401 - re-exported
from heterojob.engine.capacity.placement_types import (
    OUTSIDE_ALLOWED, Alternative, Candidate, Rejection, Request, Result, listed, replicas_text,
)
from heterojob.engine.placing.rejections import NETWORK_DOWN, _no_room, _soft_rejection
from heterojob.engine.capacity.rooms import RoomVerdict

__all__ = [  # what other modules import from here (re-exports included)
    "Alternative", "Candidate", "DeviceClass", "FleetIndex", "Ledger", "NETWORK_DOWN", "OUTSIDE_ALLOWED",
    "Rejection", "Request", "Result", "_replica_slots", "fits", "fits_where", "listed", "node_unfit", "pack",
    "place", "replicas_text", "room_to_grow", "schedule", "software_mismatch", "software_summary", "still_fits", "usable_alternatives",
]


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
    quota = _Quota(fleet, request.namespace)
    allowed = request.allowed_regions
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
        room = _Room(index, fleet, cls, alt, soft_failed)
        rooms = index.rooms
        if rooms.root:  # the fleet as given (not a ledger's steps): what this alternative found may be known
            key = (alt.device_class, alt.per_replica, alt.needs, i, len(request.alternatives), request.replicas,
                   tuple(allowed), request.exclude_nodes, request.outside_allowed, tuple(request.preferred_regions),
                   quota.key)
            stamp = tuple(rooms.versions[(cls.name, r)] for r in regions)
            part = rooms.memory.parts.get(key)
            if part is not None and part[0] == stamp:
                result.rejections.extend(part[1])
                feasible.extend(part[2])
                continue
            rejected, fit = _alternative(request, i, alt, cls, regions, quota, room)
            rooms.memory.parts[key] = (stamp, rejected, fit)
        else:
            rejected, fit = _alternative(request, i, alt, cls, regions, quota, room)
        result.rejections.extend(rejected)
        feasible.extend(fit)
    if feasible:
        result.chosen = max(feasible, key=lambda c: (c.score, -c.alternative_index, c.region))
    return result


def _alternative(request: Request, i: int, alt: Alternative, cls: DeviceClass, regions: Sequence[str],
                 quota: _Quota, room: _Room) -> tuple[list[Rejection], list[Candidate]]:
    """What `place` finds for one alternative of `request` in each of its class's regions: why a region is
    refused, or the candidate there. It reads the request's shape, preferred regions and alternative's index,
    the namespace's quota (`_Quota.key`) and the free room of the class's regions (their versions)."""
    rejected: list[Rejection] = []
    fit: list[Candidate] = []
    need = request.replicas * alt.per_replica
    allowed = request.allowed_regions
    for region in allowed:
        if region not in regions:  # say why an allowed region fails, ahead of the regions not allowed
            rejected.append(Rejection(f"{region}/{cls.name}", f"no {cls.name} node in this region"))
    for region in regions:
        if allowed and region not in allowed:
            rejected.append(Rejection(f"{region}/{cls.name}", request.outside_allowed))
            continue
        over = quota.refuses(cls.name, region, need)
        if over is not None:
            rejected.append(Rejection(f"{region}/{cls.name}", over, quota=True))
            continue
        verdict = room.verdict(region, request)
        if verdict.nodes is None:
            rejected.append(Rejection(f"{region}/{cls.name}", verdict.reason))
            continue
        score = _score(i, len(request.alternatives), cls, region, request, verdict)
        fit.append(Candidate(region, i, cls.name, cls.resource_name, alt.per_replica, verdict.nodes, score))
    return rejected, fit


def fits(request: Request, fleet: Fleet, index: FleetIndex | None = None) -> bool:
    """Whether `place` would choose a candidate (`place(...).chosen is not None`), without its messages and
    scores: the same filters, and a region passes once its free room holds the gang."""
    return fits_where(request, fleet, index) is not None


def usable_alternatives(request: Request, fleet: Fleet, index: FleetIndex
                        ) -> Iterator[tuple[Alternative, DeviceClass, list[str], dict[str, dict[str, int]]]]:
    """Each alternative of `request` whose class is known and has nodes in some region of which some meet its
    software and label needs: (alternative, class, its regions, per region why nodes failed the software check)."""
    for alt in request.alternatives:
        cls = fleet.classes.get(alt.device_class)
        if cls is None:
            continue
        regions = index.regions(cls)
        if not regions:
            continue
        by_region, soft_failed = index.software(cls, alt)
        if soft_failed and not any(by_region.values()):
            continue
        yield alt, cls, regions, soft_failed


def fits_where(request: Request, fleet: Fleet, index: FleetIndex | None = None) -> tuple[DeviceClass, str] | None:
    """`fits`, saying where: the first (class, region) whose room holds the gang, or None."""
    index = index or FleetIndex(fleet)
    quota = _Quota(fleet, request.namespace)
    allowed = request.allowed_regions
    for alt, cls, regions, soft_failed in usable_alternatives(request, fleet, index):
        need = request.replicas * alt.per_replica
        room = _Room(index, fleet, cls, alt, soft_failed)
        for region in regions:
            if allowed and region not in allowed or quota.refuses(cls.name, region, need) is not None:
                continue
            if room.holds(region, request):
                return cls, region
    return None


def still_fits(where: tuple[DeviceClass, str], taken: Allocation, request: Request, index: FleetIndex) -> bool:
    """Whether `request`, which fit in `where` (`fits_where`), still fits there once `taken` is taken: yes
    when `taken` uses none of the class's usable nodes in that region and, should the request's namespace
    have a quota, is of another namespace (nothing else `fits_where` reads there changed). False: ask again."""
    cls, region = where
    if taken.namespace == request.namespace and index.fleet.quotas.get(request.namespace):
        return False
    if taken.resource != cls.resource_name:
        return True
    index.room(cls)
    usable = index._v.where[cls.name]
    return all(usable.get(node) != region for node in taken.per_node)


class _Quota:
    """`fleet.quota_room` for one namespace, with what it holds under each limit summed once."""

    def __init__(self, fleet: Fleet, namespace: str) -> None:
        self.limits = fleet.quotas.get(namespace, ())
        self.held: Mapping[tuple[str, str], int] = fleet.held.get(namespace, {}) if self.limits else {}
        self.cpu = cpu_classes(fleet.classes) if self.limits else frozenset()  # cores: only a limit naming them
        self._spent: list[int | None] = [None] * len(self.limits)
        self._said: dict[tuple[int, int], str | None] = {}

    @property
    def key(self) -> tuple[object, ...] | None:
        """What `refuses` reads besides its arguments (None: no limit, it refuses nothing)."""
        if not self.limits:
            return None
        return tuple(self.limits), tuple(self.held.items())

    def refuses(self, device_class: str, region: str, need: int) -> str | None:
        if not self.limits:
            return None
        cpu = self.cpu
        for k, limit in enumerate(self.limits):
            if not limit.covers(device_class, region, device_class in cpu):
                continue
            used = self._spent[k]
            if used is None:
                used = self._spent[k] = used_under(limit, self.held, cpu)
            if used + need > limit.devices:
                key = (k, need)  # the message names the limit, what it counts and the need
                if key not in self._said:
                    self._said[key] = quota_room((limit,), self.held, device_class, region, need, cpu)
                return self._said[key]
        return None


_NO_NODES: tuple[frozenset[str], int] = (frozenset(), 0)


class _Room:
    """One alternative's class on one fleet index: per region, where a request's gang packs (`verdict`) or
    whether it does (`holds`), from the region's nodes with free room only (`rooms`), kept per version of
    that room (what a verdict depends on besides: the gang's size, `alt`'s needs and the request's excluded
    nodes in the region)."""

    def __init__(self, index: FleetIndex, fleet: Fleet, cls: DeviceClass, alt: Alternative,
                 soft_failed: Mapping[str, Mapping[str, int]]) -> None:
        self.index, self.fleet, self.cls, self.alt, self.soft_failed = index, fleet, cls, alt, soft_failed
        self.sets = index.usable(cls, alt)
        self.free = index.room(cls)
        self.rooms = index.rooms

    def _key(self, region: str, request: Request) -> tuple[frozenset[str], tuple[object, ...]]:
        names = self.sets.get(region, _NO_NODES)[0]
        exclude = request.exclude_nodes
        excluded = names & exclude if exclude and names else frozenset()
        return excluded, (self.alt.needs, request.replicas, self.alt.per_replica, excluded)

    def holds(self, region: str, request: Request) -> bool:
        """`verdict(region, request).nodes is not None`, without a message when it does not."""
        excluded, key = self._key(region, request)
        verdicts = self.rooms.verdicts(self.cls.name, region)
        known = cast(RoomVerdict | None, verdicts.get(key))
        if known is not None:
            return known.nodes is not None
        per, replicas = self.alt.per_replica, request.replicas
        if replicas <= 0 or per <= 0:
            return self.verdict(region, request).nodes is not None
        held = ("holds", key)
        answer = cast(RoomVerdict | None, verdicts.get(held))
        if answer is None:
            free, _ = self._free(region, request, excluded)
            answer = verdicts[held] = RoomVerdict(() if sum(f // per for f in free.values()) >= replicas else None)
        return answer.nodes is not None

    def _free(self, region: str, request: Request, excluded: frozenset[str]
              ) -> tuple[Mapping[str, int], dict[str, str]]:
        """The region's free devices per node the gang may use (nodes without any left out when `per` > 0), and
        the nodes left out for a chip's network down (a gang of more than one replica)."""
        names = self.sets.get(region, _NO_NODES)[0]
        room, alt, down = self.free[region], self.alt, self.fleet.network_down
        cut: dict[str, str] = {}
        if request.replicas > 1 and down:  # a gang's collectives cross every chip's network
            cut = {n: down[n] for n in (down if len(down) <= len(names) else names)
                   if n in names and n in down and n not in excluded}
        if alt.per_replica <= 0:  # every usable node counts, full or not
            capacity, used, resource = self.index.capacity(self.cls), self.fleet.used, self.cls.resource_name
            return {n: max(0, capacity[n] - used.get((n, resource), 0))
                    for n in names if n not in excluded and n not in cut}, cut
        if alt.requires or alt.node_labels or alt.pod_requests and self.soft_failed:
            return {n: f for n, f in room.items() if n in names and n not in excluded and n not in cut}, cut
        if excluded or cut:
            return {n: f for n, f in room.items() if n not in excluded and n not in cut}, cut
        return room, cut

    def verdict(self, region: str, request: Request) -> RoomVerdict:
        excluded, key = self._key(region, request)
        verdicts = self.rooms.verdicts(self.cls.name, region)
        known = cast(RoomVerdict | None, verdicts.get(key))
        if known is not None:
            return known
        names, devices = self.sets.get(region, _NO_NODES)
        per, cls = self.alt.per_replica, self.cls
        free, cut = self._free(region, request, excluded)
        nodes = pack(free, request.replicas, per)
        capacity = self.index.capacity(cls)
        if nodes is None:
            counted = len(names) - len(excluded) - len(cut) > 0  # a node of the region is counted, free or not
            verdict = RoomVerdict(None, reason=_no_room(free, request, self.alt, self.index.unfit_reasons(cls, region),
                                                        self.soft_failed.get(region, {}), cut, counted))
        else:
            # packing: how full the chosen nodes are afterwards (fills partly used nodes, keeps empty ones whole)
            chosen = set(nodes)
            chosen_capacity = sum(capacity[n] for n in chosen) or 1
            left = sum(free[n] for n in chosen) - len(nodes) * per
            # balance: prefer the region with the larger share of this class still free afterwards
            region_capacity = (devices - sum(capacity[n] for n in excluded) - sum(capacity[n] for n in cut)) or 1
            verdict = RoomVerdict(nodes, W_PACKING * (1 - left / chosen_capacity),
                                  W_BALANCE * (sum(free.values()) - len(nodes) * per) / region_capacity)
        verdicts[key] = verdict
        return verdict


# weights: a step in preference order outweighs everything else together
W_PREFERENCE, W_PREFERRED_REGION, W_THROUGHPUT, W_PACKING, W_BALANCE = 100.0, 50.0, 10.0, 5.0, 3.0


def _score(index: int, n_alts: int, cls: DeviceClass, region: str, request: Request, verdict: RoomVerdict) -> float:
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
        self._unfit: set[tuple[object, ...]] = set()  # shapes `fits` said no to, while room is only taken
        self.given_back = 0  # how many times room was given back (what failed to fit before may fit now)
        self.version = 0  # how many times room was taken or given back

    @classmethod
    def reading(cls, fleet: Fleet, index: FleetIndex) -> Ledger:
        """A ledger only read, never taken on (`admission.may_act`): it reads `index` (of `fleet`) as it is,
        instead of copying its tables."""
        out = cls.__new__(cls)
        out.used, out.held = dict(fleet.used), {ns: dict(h) for ns, h in fleet.held.items()}
        out.fleet = _LedgerFleet(nodes=fleet.nodes, classes=fleet.classes, regions=fleet.regions, used=out.used,
                                 quotas=fleet.quotas, held=out.held, unhealthy=fleet.unhealthy, failed=fleet.failed,
                                 network_down=fleet.network_down)
        out.index, out._failed, out._unfit, out.given_back, out.version = index, {}, set(), 0, 0
        return out

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
            self._unfit.clear()
            self.given_back += 1

    def take_all(self, allocations: Iterable[Allocation], sign: int = 1) -> None:
        """`take` each of `allocations` (or give them back), the free room of their nodes brought up to date
        once."""
        used, held, nodes = self.used, self.held, dict[str, set[str]]()
        for allocation in allocations:
            resource = allocation.resource
            for node, n in allocation.per_node.items():
                used[(node, resource)] = used.get((node, resource), 0) + sign * n
            nodes.setdefault(resource, set()).update(allocation.per_node)
            mine = held.setdefault(allocation.namespace, {})
            key = (allocation.device_class, allocation.region)
            mine[key] = mine.get(key, 0) + sign * allocation.devices
        if not nodes:
            return
        for resource, names in nodes.items():
            self.index.rooms.changed(names, resource, used)
        self.version += 1
        if sign < 0:
            self._failed.clear()
            self._unfit.clear()
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

    def fits(self, request: Request) -> bool:
        """`self.place(request).chosen is not None`, without placing it or making its message (`fits`); a shape
        that does not fit is remembered as `place` remembers it."""
        shape = request.shape
        if shape in self._unfit or shape in self._failed:
            return False
        if fits(request, self.fleet, self.index):
            return True
        self._unfit.add(shape)
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
