"""The replay's fleet state: which devices each running job holds, which nodes are down, and the snapshots
the policies read (a `Fleet`, the free room per class and region), each recomputed only when devices are
taken or given back or a node fails or is repaired."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from heterojob.engine.capacity.fleet import Fleet, Node
from heterojob.replay.traces import CLASSES, TraceJob

T = TypeVar("T")


@dataclass
class Run:
    """A job running on the replay's fleet."""

    job: TraceJob
    cls: str
    region: str
    replicas: int
    per_node: dict[str, int]
    held: float  # devices taken
    started: float  # progress begins (after a restore)
    steps_at_start: float
    raw: float  # steps/s while training at this size
    eff: float  # steps/s including periodic checkpoint saves
    token: int

    @property
    def devices(self) -> int:
        return sum(self.per_node.values())

    def done(self, now: float) -> float:
        return min(self.job.total_steps, self.steps_at_start + max(0.0, now - self.started) * self.eff)


class Devices:
    """Devices in use per (node, class), nodes down, the running jobs; `version` changes with any of them."""

    def __init__(self, base: Fleet) -> None:
        self.base = base
        self.used: dict[tuple[str, str], int] = {}
        self.version = 0  # bumped whenever devices are taken or given back or a node fails or is repaired
        self.seen: dict[str, tuple[int, Any]] = {}  # what the snapshots below computed, at which version
        self.down: set[str] = set()
        # a new mapping on every failure and repair, never changed in place: a `Fleet` handed out keeps its nodes,
        # and the planner's findings kept between cycles (`engine.queue.settled`) take the same mapping for the
        # same nodes
        self.nodes_view: dict[str, Node] = dict(base.nodes)
        self.running: dict[int, Run] = {}
        self.busy = 0  # devices held

    def take(self, run: Run) -> None:
        for n, c in run.per_node.items():
            self.used[(n, run.cls)] = self.used.get((n, run.cls), 0) + c
        self.version += 1
        self.busy += run.devices
        self.running[run.job.id] = run

    def give_back(self, run: Run) -> None:
        for n, c in run.per_node.items():
            self.used[(n, run.cls)] -= c
        self.version += 1
        self.busy -= run.devices
        del self.running[run.job.id]

    def fail(self, node: str) -> list[Run]:
        """The node goes NotReady; the runs on it (still holding their devices)."""
        self.down.add(node)
        v = self.base.nodes[node]
        self.nodes_view = {**self.nodes_view, node: Node(v.name, v.labels, v.allocatable, ready=False)}
        self.version += 1
        return [r for r in self.running.values() if node in r.per_node]

    def repair(self, node: str) -> str:
        """The node is Ready again; its class."""
        self.down.discard(node)
        self.nodes_view = {**self.nodes_view, node: self.base.nodes[node]}
        self.version += 1
        return self.base.nodes[node].labels["class"]

    # --- snapshots ------------------------------------------------------------------------------------

    def current_fleet(self, without: Run | None = None) -> Fleet:
        """The fleet now (a snapshot of what is used; the same object until something changes), or as it
        would be without `without`'s devices."""
        if without is None:
            return self._memo("fleet", lambda: Fleet(self.nodes_view, self.base.classes, used=dict(self.used)))
        used = dict(self.used)
        for n, c in without.per_node.items():
            used[(n, without.cls)] -= c
        return Fleet(self.nodes_view, self.base.classes, used=used)

    def room(self) -> dict[str, tuple[int, int]]:
        """`room` of the fleet now."""
        return self._memo("room", lambda: room(self.current_fleet(), self.down))

    def region_free(self) -> dict[tuple[str, str], int]:
        """(class, region) -> free devices on Ready nodes now."""
        def compute() -> dict[tuple[str, str], int]:
            out: dict[tuple[str, str], int] = defaultdict(int)
            for name, node in self.base.nodes.items():
                if name not in self.down:
                    cls = node.labels["class"]
                    out[(cls, node.labels["topology.kubernetes.io/region"])] += (
                        node.allocatable[cls] - self.used.get((name, cls), 0))
            return out
        return self._memo("region_free", compute)

    def by_id(self) -> list[Run]:
        """The running jobs by job id (a list of their own: kept until devices are taken or given back)."""
        return self._memo("by_id", lambda: sorted(self.running.values(), key=lambda r: r.job.id))

    def _memo(self, what: str, compute: Callable[[], T]) -> T:
        at, value = self.seen.get(what, (-1, None))
        if at != self.version:
            value = compute()
            self.seen[what] = (self.version, value)
        return value  # type: ignore[no-any-return]  # what `compute` returned at this version


def fits(room_: dict[str, tuple[int, int]], key: tuple[Sequence[str], int, int]) -> bool:
    """Whether `room` leaves a class of `key` (classes, replicas, devices per replica) room enough."""
    classes, replicas, per = key
    return any(room_[c][0] >= replicas * per and room_[c][1] >= per for c in classes)


def room(fleet: Fleet, down: set[str]) -> dict[str, tuple[int, int]]:
    """class -> (most free devices in one region, most free on one node), over Ready nodes."""
    per_region: dict[tuple[str, str], int] = defaultdict(int)
    per_node: dict[str, int] = defaultdict(int)
    for name, node in fleet.nodes.items():
        if name in down:
            continue
        cls = node.labels["class"]
        free = fleet.free(name, cls)
        per_region[(cls, node.labels["topology.kubernetes.io/region"])] += free
        per_node[cls] = max(per_node[cls], free)
    best_region: dict[str, int] = defaultdict(int)
    for (cls, _), free in per_region.items():
        best_region[cls] = max(best_region[cls], free)
    return {c: (best_region[c], per_node[c]) for c in CLASSES}
