"""The job cache: what every HeteroJob holds, waits for and yields, rebuilt from the jobs' statuses.

The snapshot layer between the API and the planner (Kueue's cache). The controller syncs an entry from a
job's status on every pass and records its own decisions (a placement taken, devices released, a job
asked to yield) at once, so the next plan sees them before the status write comes back. Because each
entry follows the status, a restarted operator rebuilds the same cache by syncing every job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from heterojob.api.job import HeteroJobSpec, Phase
from heterojob.api.job_status import HeteroJobStatus
from heterojob.api.scheduling import Scheduling
from heterojob.engine.queue import estimates
from heterojob.engine.disruption.holders import Holder
from heterojob.engine.capacity.fleet import Allocation, DeviceClass, Fleet, Node, holdings, same_room, usage
from heterojob.engine.basics.phases import DISRUPTED, WAITING, YIELDS
from heterojob.engine.placing.placement import Request
from heterojob.state.requests import base_request, request_for
from heterojob.api.times import timestamp
from heterojob.state.views import FleetSource



_T = TypeVar("_T")


def _same(old: _T | None, new: _T) -> _T:
    """`old` when it equals `new` (a pass read the same again): the objects a planner keeps per identity
    between cycles stay those."""
    return old if old is not None and old == new else new


@dataclass(frozen=True)
class Placed:
    """A running job as `alerts.mapping` needs it: where each rank runs."""

    namespace: str
    name: str
    generation: int
    nodes: tuple[str, ...]  # by rank

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _measured(scheduling: Scheduling | None) -> frozenset[tuple[str, int]]:
    """The (class, replicas) pairs the job's speed was measured at."""
    return frozenset((m.device_class, m.replicas) for m in scheduling.speeds) if scheduling is not None else frozenset()


@dataclass
class Entry:
    """One job as the cache knows it."""

    priority: int = 0
    allocation: Allocation | None = None  # devices it holds
    since: float = 0.0  # when its current placement started
    placed: Placed | None = None  # where it runs, for mapping alerts to it
    # its newest placement generation (placed or not): pods of older ones being deleted are a gang it has left
    newest_generation: int = 0
    base: Request | None = None  # its admitted size, when it grew beyond it
    request: Request | None = None  # what it waits for, when it waits
    yielding_to: str | None = None  # the waiting job it gives room to
    disrupted: bool = False  # checkpointing, migrating or resizing
    reserved: Allocation | None = None  # room held for its move (destination, or healthy old nodes)
    scheduling: Scheduling | None = None  # status.scheduling: what the queue policy keeps across runs
    classes: tuple[str, ...] = ()  # the device classes its spec lists
    workload: str | None = None  # spec.workload: jobs of a namespace naming it share measured speeds
    # what pools it with jobs alike (`engine.queue.estimates.fingerprint`: spec.workload, else its template's image,
    # command and arguments with its size); None before its spec is read
    fingerprint: str | None = None
    per_replica: Mapping[str, int] = field(default_factory=dict)  # devices per replica on each class it lists
    created: float = 0.0  # metadata.creationTimestamp
    succeeded: bool = False
    # a scheduling cycle placed it for this request, on `allocation`, and its pass has not written the placement
    # yet: syncing its (still waiting) status keeps the room held for it
    planned: Request | None = None
    asked: str | None = None  # a cycle asked it to yield to this job; said in its status soon (`yielding_to`)
    # the last `holder()` and what it was made of: the same object while nothing in it changed, so what a
    # planner keeps per holder object between cycles (`engine.queue.ranking.Memo`) is found again
    _holder: tuple[tuple[object, ...], Holder] | None = field(default=None, repr=False, compare=False)

    def holder(self, key: str) -> Holder | None:
        """What it keeps from others as a planner reads it (`Cache.holders`), or None."""
        if self.allocation is not None:
            made = (self.allocation, self.base, self.reserved, self.priority, self.since, self.yielding_to,
                    self.disrupted, False)
        elif self.reserved is not None:
            made = (self.reserved, None, None, self.priority, self.since, self.yielding_to, self.disrupted,
                    self.request is not None)
        else:
            return None
        known = self._holder
        if known is not None and all(a is b for a, b in zip(known[0][:3], made[:3], strict=True)) \
                and known[0][3:] == made[3:]:
            return known[1]
        allocation, base, reserved, priority, since, yielding_to, disrupted, waiting = made
        h = Holder(key, priority, since, allocation, base, yielding_to, disrupted,
                   reserved=reserved, waiting=waiting)
        self._holder = (made, h)
        return h

    def footprint(self) -> list[Allocation]:
        """What it keeps from others now: its devices and its reservation. Where both are on one node of
        one class, the larger counts (the old pod is gone before the new one starts)."""
        held = [a for a in (self.allocation, self.reserved) if a is not None]
        if len(held) == 2 and same_room(held[0], held[1]):
            a, r = held
            per_node = {n: max(a.per_node.get(n, 0), r.per_node.get(n, 0)) for n in {*a.per_node, *r.per_node}}
            return [Allocation(a.resource, per_node, a.namespace, a.device_class, a.region)]
        return held


@dataclass
class Cache:
    entries: dict[str, Entry] = field(default_factory=dict)
    # keys whose entry was marked disrupted (a superset: pruned as `disrupted` reads it), so the budget's count,
    # asked on every running job's pass, reads the few moving jobs, not every entry
    _moving: set[str] = field(default_factory=set)
    # deleted jobs whose pods are still there (the garbage collector deletes them, each in its grace period): the
    # devices they held, counted in the fleet until the controller sees the pods gone (`departed_gone`), as
    # kube-scheduler counts them; no planner may take them from anyone
    departed: dict[str, Allocation] = field(default_factory=dict)

    def entry(self, key: str) -> Entry:
        return self.entries.setdefault(key, Entry())

    # --- following the status -------------------------------------------------------------------------

    def sync(self, key: str, job: Mapping[str, object], status: HeteroJobStatus, spec: HeteroJobSpec | None,
             classes: Mapping[str, DeviceClass], now: float) -> bool:
        """The entry follows the job's status: what it holds, since when, whom it yields to, and the devices
        it holds beyond its admitted size (lent to it while nobody waited). True when a job holding devices
        was measured on a class and size it had no measurement for: what the queue policy knows of it
        changed (its expected end, whether it fits where it runs), not a figure that moved."""
        e = self.entry(key)
        measured_before = _measured(e.scheduling)
        namespace, name = key.split("/", 1)
        planned = (e.allocation, e.since, e.scheduling) if e.planned is not None and e.allocation is not None else None
        e.priority = spec.priority.rank if spec is not None else e.priority
        e.scheduling = status.scheduling
        e.classes = tuple(a.device_class for a in spec.devices) if spec is not None else e.classes
        e.workload = spec.workload if spec is not None else e.workload
        e.fingerprint = _fingerprint(spec) if spec is not None else e.fingerprint
        e.per_replica = {a.device_class: a.per_replica for a in spec.devices} if spec is not None else e.per_replica
        meta = job.get("metadata")
        e.created = timestamp(meta.get("creationTimestamp") if isinstance(meta, Mapping) else None) or e.created
        e.succeeded = status.phase == Phase.SUCCEEDED
        p = status.placement
        e.newest_generation = max(p.generation if p is not None else 0, status.last_generation)
        if p is not None and not (status.phase and status.phase.terminal):
            cls = classes.get(p.device_class)
            per_node: dict[str, int] = {}
            for node in p.nodes:
                per_node[node] = per_node.get(node, 0) + p.per_replica
            e.allocation = _same(e.allocation, Allocation(cls.resource_name if cls else p.device_class, per_node,
                                                          namespace, p.device_class, p.region))
            e.since = timestamp(p.since) or timestamp(status.start_time) or now
            e.placed = Placed(namespace, name, p.generation, tuple(p.nodes))
            base, e.base = e.base, None
            if spec is not None and p.replicas > spec.replicas.start:
                e.base = _same(base, base_request(request_for(key, job, spec), p.device_class, p.region,
                                                  spec.replicas.start))
        else:
            e.allocation, e.placed, e.base = None, None, None
        if status.phase in DISRUPTED:  # room held for its move
            reserved = status.migration.reserved if status.migration is not None else None
        elif status.phase == Phase.PENDING and p is None and status.backoff is not None:
            reserved = status.backoff.reserved  # room kept for a gang refused for a passing reason
        else:
            reserved = None
        was, e.reserved = e.reserved, None
        if reserved is not None:
            cls = classes.get(reserved.device_class)
            per_node = {}
            for node in reserved.nodes:
                per_node[node] = per_node.get(node, 0) + reserved.per_replica
            e.reserved = _same(was, Allocation(cls.resource_name if cls else reserved.device_class, per_node,
                                               namespace, reserved.device_class, reserved.region))
        e.disrupted = status.phase in DISRUPTED
        if e.disrupted:
            self._moving.add(key)
        pending = status.checkpoint.pending if status.checkpoint else None
        e.yielding_to = pending.by if pending is not None and pending.then in YIELDS and pending.by else None
        if e.asked is not None and e.yielding_to is None:
            e.yielding_to = e.asked  # the cycle's ask is not in its status yet
        waiting = status.phase in WAITING and p is None and spec is not None
        e.request = _same(e.request, request_for(key, job, spec, status)) if waiting and spec is not None else None
        if e.planned is not None:
            if p is None and e.request == e.planned and planned is not None:
                # placed by a cycle; its status says so soon
                (e.allocation, e.since, e.scheduling), e.request = planned, None
            else:
                e.planned = None  # its status says where it is, or it no longer asks for what was planned
        return e.allocation is not None and not _measured(e.scheduling) <= measured_before

    def forget(self, key: str, pods_left: bool = False) -> bool:
        """Drop a deleted job; True when it held devices or room (room freed). `pods_left`: its pods are still
        there: the devices it held stay counted (`departed`) until they are gone."""
        for other in self.entries.values():
            if other.asked == key:
                other.asked = None
        e = self.entries.pop(key, None)
        if pods_left and e is not None and e.allocation is not None:
            self.departed[key] = e.allocation
        elif not pods_left and self.departed.pop(key, None) is not None:
            return True
        return e is not None and bool(e.footprint())

    def departed_gone(self, has_pods: Callable[[str], bool]) -> bool:
        """Let go of the deleted jobs whose pods are gone (`has_pods(key)`: False); True when any was let go."""
        gone = [key for key in self.departed if not has_pods(key)]
        for key in gone:
            del self.departed[key]
        return bool(gone)

    # --- the controller's own decisions -------------------------------------------------------------------

    def wait(self, key: str, request: Request) -> None:
        self.entry(key).request = request

    def hold(self, key: str, allocation: Allocation, priority: int, since: float) -> None:
        """A placement was decided: the job holds its room from now on, waits no more, reserves nothing."""
        e = self.entry(key)
        e.allocation, e.priority, e.since, e.request, e.reserved = allocation, priority, since, None, None
        e.planned = None

    def plan(self, key: str, allocation: Allocation, priority: int, since: float, request: Request) -> None:
        """A scheduling cycle placed the job for `request`: it holds that room until its pass writes the
        placement (`hold`), or until it no longer asks for `request` (`sync`, `unplan`)."""
        self.hold(key, allocation, priority, since)
        self.entry(key).planned = request

    def unplan(self, key: str) -> bool:
        """A cycle's placement its pass will not write (the job asks for something else now): the room goes
        back and the job waits again. True when it held a planned placement."""
        e = self.entries.get(key)
        if e is None or e.planned is None:
            return False
        e.request, e.planned, e.allocation, e.placed = e.planned, None, None, None
        return True

    def asked(self, key: str) -> None:
        """The yield a cycle asked of the job was written to its status (or could not be): its status says."""
        if key in self.entries:
            self.entries[key].asked = None

    def reserve(self, key: str, allocation: Allocation | None) -> None:
        """Room held for the job's move from now on (None: the reservation ends)."""
        self.entry(key).reserved = allocation

    def release(self, key: str) -> bool:
        """The job gave its devices back; True when it held any (room freed)."""
        e = self.entries.get(key)
        if e is None or e.allocation is None:
            return False
        e.allocation, e.placed, e.base = None, None, None
        return True

    def unreserve(self, key: str) -> bool:
        """The job's move reservation ended; True when it held one (room freed)."""
        e = self.entries.get(key)
        if e is None or e.reserved is None:
            return False
        e.reserved = None
        return True

    def yield_to(self, key: str, by: str, asked: bool = False) -> None:
        """The job gives its room to `by` (`asked`: a cycle decided it; kept until `asked(key)`)."""
        e = self.entry(key)
        e.yielding_to = by
        if asked:
            e.asked = by

    def stop_yielding(self, key: str) -> None:
        if key in self.entries:
            self.entries[key].yielding_to = None

    def yielders(self, key: str) -> list[str]:
        """The jobs asked to give their room to `key`."""
        return [k for k, e in self.entries.items() if e.yielding_to == key]

    def disrupt(self, key: str, on: bool = True) -> None:
        self.entry(key).disrupted = on
        if on:
            self._moving.add(key)

    # --- what the planner and the other steps read --------------------------------------------------------

    def holders_of(self, key: str) -> list[Holder]:
        """`holders()` of one job."""
        e = self.entries.get(key)
        if e is None:
            return []
        if e.allocation is not None:
            return [Holder(key, e.priority, e.since, e.allocation, e.base, e.yielding_to, e.disrupted,
                           reserved=e.reserved)]
        if e.reserved is not None:
            return [Holder(key, e.priority, e.since, e.reserved, None, e.yielding_to, e.disrupted,
                           waiting=e.request is not None)]
        return []

    def waiting(self) -> list[Request]:
        return [e.request for e in self.entries.values() if e.request is not None]

    def holders(self) -> list[Holder]:
        """Every job that keeps room from others: its devices, plus its reservation while it moves; a job
        that waits with only a reservation holds that (the planner gives it back to the job itself). A job's
        holder is the same object from one call to the next while nothing in it changed (`Entry.holder`)."""
        return [h for k, e in self.entries.items() if (h := e.holder(k)) is not None]

    def allocations(self) -> dict[str, Allocation]:
        """What each job's pods hold (quota status reports this)."""
        return {k: e.allocation for k, e in self.entries.items() if e.allocation is not None}

    def placed(self) -> dict[str, Placed]:
        return {k: e.placed for k, e in self.entries.items() if e.placed is not None}

    def disrupted(self) -> int:
        """The disruption budget's count: jobs that still hold devices while they move. A job that gave
        its devices back and waits for room disrupts nobody else and does not count."""
        count = 0
        for key in list(self._moving):
            e = self.entries.get(key)
            if e is None or not e.disrupted:
                self._moving.discard(key)
            elif e.allocation is not None:
                count += 1
        return count

    def fleet(self, source: FleetSource, exclude: Iterable[str] = ()) -> Fleet:
        """The fleet with every job's devices and reservations counted as used, except `exclude`'s, and what the
        pods being deleted still hold (`FleetSource.leaving`, `foreign_usage`)."""
        return self.fleet_later(source, exclude)()

    def fleet_later(self, source: FleetSource, exclude: Iterable[str] = ()) -> Callable[[], Fleet]:
        """`fleet` as of now, built when called: what it reads of the cache and the source is taken now (the
        allocations, immutable, by reference), the devices in use and held are summed when it is called (the
        scheduler calls it in its cycle's thread: at 100,000 devices the sums were 11% of the event loop)."""
        excluded = set(exclude)
        allocations = [a for k, e in self.entries.items() if k not in excluded for a in e.footprint()]
        allocations += self.departed.values()
        faults = source.faults()
        nodes, classes, regions, quotas = source.nodes(), source.classes(), source.regions(), source.quotas()
        foreign: Mapping[tuple[str, str], int] = source.foreign_usage()  # a copy
        leaving = source.leaving()
        if leaving:
            foreign = added = dict(foreign)
        left: list[Mapping[tuple[str, str], int]] = []
        for key, gangs in leaving.items():
            entry = self.entries.get(key)
            if entry is not None:
                # a live job's pods being deleted: those of its newest gang are a preemption victim's (or a
                # mover's not yet placed again), whose room a cycle gives to someone whose pods wait for them a
                # moment; counting them would make that one preempt another victim. Those of a gang it has left
                # (an older generation: a move off a failed node, a resize) count on what no job holds of their
                # node: kube-scheduler counts them there until they are gone (a node back from NotReady keeps a
                # moved job's old pods through their grace period), so a gang placed there would wait Pending
                # (an excluded job's count as its holdings do: not at all, the fleet is asked as if it held nothing)
                if key not in excluded:
                    left += [used for generation, used in gangs.items() if generation < entry.newest_generation]
                continue
            # a deleted job's pods being deleted hold their devices until gone (where its `departed` room does not
            # count them already)
            departed = self.departed.get(key)
            mine = {(n, departed.resource) for n in departed.per_node} if departed is not None else set()
            for used in gangs.values():
                for where, count in used.items():
                    if where not in mine:
                        added[where] = added.get(where, 0) + count
        def build() -> Fleet:
            used = usage(allocations, foreign)
            if left:
                _count_left(left, nodes, used)
            return Fleet(nodes=nodes, classes=classes, regions=regions, used=used,
                         quotas=quotas, held=holdings(allocations), unhealthy=faults.unhealthy, failed=faults.failed,
                         network_down=faults.network_down)

        return build


def _count_left(left: Iterable[Mapping[tuple[str, str], int]], nodes: Mapping[str, Node],
                used: dict[tuple[str, str], int]) -> None:
    """Add to `used` (the jobs' holdings and the other pods', summed) the devices of live jobs' left gangs
    (`Cache.fleet_later`), each node only up to what its allocatable leaves: where a cycle gave the node's room to a
    job (a preemptor whose pods wait for the old ones), that room is counted once, as that job's. Costs the left
    pods, not the fleet's jobs."""
    for gang in left:
        for where, count in gang.items():
            node = nodes.get(where[0])
            room = (node.allocatable.get(where[1], 0) if node is not None else 0) - used.get(where, 0)
            if room > 0:
                used[where] = used.get(where, 0) + min(count, room)


def _fingerprint(spec: HeteroJobSpec) -> str:
    """`engine.queue.estimates.fingerprint` of a spec: its workload, else its first container's image, command and
    arguments, with its replicas at start (devices per replica per class: its size on each); a workload's at that
    size (`estimates.sized`: its own row, the workload's over every size until that size is measured)."""
    pod = spec.template.get("spec")
    containers = pod.get("containers") if isinstance(pod, Mapping) else None
    first = containers[0] if isinstance(containers, list) and containers and isinstance(containers[0], Mapping) else {}
    size = spec.replicas.start * spec.devices[0].per_replica
    return estimates.sized(estimates.fingerprint(spec.workload, str(first.get("image") or ""),
                                                 list(first.get("command") or ()), list(first.get("args") or ()),
                                                 size), size)
