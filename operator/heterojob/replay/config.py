"""What a replay is asked to do (`Config`: the fleet, its failures, moves' costs, heterojob's knobs) and the constants
the replay's parts share (the regions, the namespace, the classes' declared throughput, what the operator knows).
Below every other module of the replay (`replay.replay` runs it)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from heterojob.engine.basics import queueing
from heterojob.replay.traces import CLASSES
from heterojob.telemetry.steps import STEPS_WINDOW_S

REGIONS = ("cn-east", "cn-north", "eu-west", "us-west", "ap-south")
K8S_EVICTION_S = 40.0 + 300.0
NAMESPACE = "t"
POLICIES = ("static", "kueue", "heterojob")
# AcceleratorClass spec.throughput of the fleet's classes (relative to the fastest): round figures near
# the mean speed of Gavel's job types on V100, P100 and K80, as a vendor's sheet would give them
DECLARED = {"nvidia-h100": 1.0, "nvidia-a100": 0.8, "ascend-910b": 0.3}
KNOWLEDGE = ("default", "informed")  # what the operator knows (module docstring)
MONITOR_S = 30.0  # the operator's monitoring cycle: a measured step rate reaches status.scheduling within one


@dataclass(frozen=True)
class Config:
    nodes_per_class_region: int = 2
    regions: int = 3
    devices_per_node: int = 8
    arrival_scale: float = 1.0  # arrivals at t * scale: < 1 compresses the trace (more load)
    mtbf_h: float = 50_000.0  # per device
    repair_h: float = 4.0
    checkpoint_s: float = 1800.0
    save_s: float = 20.0
    restore_s: float = 60.0
    recovery_s: float = 1.0  # heterojob: fault seen -> replacement pods (bench/recovery.py measures 0.1 s)
    elastic: bool = True  # heterojob: data-parallel jobs may grow into idle room
    # heterojob: growth only to sizes where each extra replica brings at least this share of a replica's
    # work at the admitted size, as measured (`engine.queue.completion.growth_limit`); 0 grows as far as room allows
    growth_efficiency: float = 0.6
    min_runtime_s: float = 300.0  # heterojob: a job younger than this is never preempted (operator default)
    disruption_budget: int = 5  # heterojob: jobs checkpointing or moving at once (operator default)
    within: float = 0.0  # heterojob: a job lists the classes where it runs at least this share of its best speed
    queue: queueing.QueueSettings = field(default_factory=queueing.QueueSettings)  # heterojob's queue order
    upgrades: bool = True  # heterojob: move running jobs up onto faster free room when it pays
    # heterojob: probe a class whose speed for a job is only the sheet's guess when the probe may cost at
    # most this share of its expected remaining time (`engine.queue.completion.plan_upgrades`); 0: never
    probe_share: float = 0.05
    # heterojob: past the knee, the fluid optimum's prices guide which classes a waiting job takes
    # (`engine.queue.guidance`), built again every this many seconds (None: no guide)
    guide_s: float | None = 600.0
    guide_above: float = 1.0  # ... while the waiting jobs ask for at least this multiple of the fleet's devices
    window: tuple[int, int] | None = None  # Gavel's measurement window: trace positions [a, b)
    seed: int = 0
    knowledge: str = "default"  # KNOWLEDGE: what the operator knows (module docstring)
    periodic: bool | None = None  # periodic checkpoints every `checkpoint_s` (None: in the informed mode only)
    workloads: bool | None = None  # each job names its type as spec.workload (None: in the informed mode only)
    learn_s: float | None = None  # training on a class before its speed is known (None: by `knowledge`)
    # devices per class in one region (`--cluster v100:16,p100:16,k80:16`, `traces.cluster`), in nodes of
    # `devices_per_node` (the last one holds the rest); () : `regions` x `nodes_per_class_region` per class
    cluster: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if self.knowledge not in KNOWLEDGE:
            raise ValueError(f"knowledge must be one of {', '.join(KNOWLEDGE)}, not {self.knowledge!r}")

    @property
    def informed(self) -> bool:
        return self.knowledge == "informed"

    @property
    def period_s(self) -> float:
        """Seconds of training between periodic checkpoints (inf: none, only on demand)."""
        return self.checkpoint_s if (self.informed if self.periodic is None else self.periodic) else math.inf

    @property
    def named(self) -> bool:
        """Whether jobs name their workload (`spec.workload`), so jobs of a type share measured speeds."""
        return self.informed if self.workloads is None else self.workloads

    @property
    def learn_after_s(self) -> float:
        """Seconds a job trains on a class before the operator knows its speed there."""
        if self.learn_s is not None:
            return self.learn_s
        return 0.0 if self.informed else STEPS_WINDOW_S + MONITOR_S

    @property
    def devices(self) -> int:
        return sum(self.per_class.values())

    @property
    def per_class(self) -> dict[str, int]:
        """Devices of each class, over every region."""
        if self.cluster:
            return dict(self.cluster)
        return dict.fromkeys(CLASSES, self.nodes_per_class_region * self.regions * self.devices_per_node)

    @property
    def largest_gang(self) -> int:
        """The most devices a gang can hold: one region's devices of a class (a gang never spans regions)."""
        if self.cluster:
            return max(self.per_class.values())
        return self.nodes_per_class_region * self.devices_per_node
