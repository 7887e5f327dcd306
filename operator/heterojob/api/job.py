"""HeteroJob: one distributed training or fine-tuning job and the accelerators it may run on."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field, PrivateAttr, field_validator, model_validator

from heterojob.api.common import DNS_LABEL, JOB_NAME_MAX, Model, PrinterColumn, ResourceDef, StatusModel

MAX_REPLICAS = 1024
MAX_DEVICES_PER_REPLICA = 64  # beyond any single node built today; CPU classes count cores
MAX_CPU_PER_REPLICA = 512

ClassName = Annotated[str, Field(pattern=DNS_LABEL, max_length=63, description="an AcceleratorClass name")]
RegionName = Annotated[str, Field(pattern=DNS_LABEL, max_length=63, description="a Region name")]


class Priority(StrEnum):
    URGENT = "urgent"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"

    @property
    def rank(self) -> int:
        """Larger is more important."""
        return {"urgent": 3, "high": 2, "medium": 1, "low": 0}[self.value]


class Phase(StrEnum):
    PENDING = "Pending"
    ADMITTED = "Admitted"
    RUNNING = "Running"
    CHECKPOINTING = "Checkpointing"
    MIGRATING = "Migrating"
    RESIZING = "Resizing"
    PREEMPTED = "Preempted"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"

    @property
    def terminal(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED)


class Replicas(Model):
    min: int = Field(1, ge=1, le=MAX_REPLICAS, description="fewest replicas the job can run with")
    max: int | None = Field(None, ge=1, le=MAX_REPLICAS, description="most replicas (elastic jobs); defaults to min")
    initial: int | None = Field(None, ge=1, le=MAX_REPLICAS, description="replicas to start with; defaults to max")

    @model_validator(mode="after")
    def _ordered(self) -> Replicas:
        upper = self.max if self.max is not None else self.min
        if upper < self.min:
            raise ValueError(f"replicas.min ({self.min}) must not exceed replicas.max ({upper})")
        if self.initial is not None and not (self.min <= self.initial <= upper):
            raise ValueError(f"replicas.initial ({self.initial}) must lie within min..max ({self.min}..{upper})")
        return self

    @property
    def upper(self) -> int:
        return self.max if self.max is not None else self.min

    @property
    def start(self) -> int:
        return self.initial if self.initial is not None else self.upper


class EnvVar(Model):
    name: str = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
    value: str = ""


class TemplateOverride(Model):
    """What changes in the replica's main container on one device class (e.g. a CUDA or CANN image)."""

    image: str | None = Field(None, min_length=1)
    command: list[str] | None = None
    args: list[str] | None = None
    env: list[EnvVar] | None = None


class SoftwareRequirements(Model):
    """Version ranges (PEP 440 specifiers, e.g. '>=12.1') the class's software stack must meet."""

    driver: str | None = None
    cuda: str | None = None
    cann: str | None = None


class DeviceAlternative(Model):
    device_class: ClassName = Field(description="name of an AcceleratorClass")
    per_replica: int = Field(1, ge=1, le=MAX_CPU_PER_REPLICA, description="devices (or CPU cores) per replica")
    requires: SoftwareRequirements | None = None
    overrides: TemplateOverride | None = None


class Regions(Model):
    preferred: list[RegionName] = Field(default_factory=list, max_length=64)
    allowed: list[RegionName] = Field(default_factory=list, max_length=64, description="empty means any region")

    @model_validator(mode="after")
    def _preferred_allowed(self) -> Regions:
        if self.allowed:
            outside = [r for r in self.preferred if r not in self.allowed]
            if outside:
                raise ValueError(f"preferred regions {outside} are not in allowed {self.allowed}")
        return self


class Checkpoint(Model):
    interval_seconds: int = Field(0, ge=0, le=7 * 24 * 3600, description="periodic checkpoints; 0 turns them off")
    timeout_seconds: int = Field(120, ge=1, le=24 * 3600, description="how long to wait for every rank's ack")
    storage: str | None = Field(None, min_length=1, description="URI prefix where checkpoints are written")


class Trigger(StrEnum):
    DEVICE_FAILED = "deviceFailed"
    NODE_NOT_READY = "nodeNotReady"
    OVERHEAT = "overheat"
    STRAGGLER = "straggler"
    LOW_UTILIZATION = "lowUtilization"
    ALERT = "alert"
    MANUAL = "manual"


class Policy(Model):
    triggers: list[Trigger] = Field(
        default_factory=lambda: [Trigger.DEVICE_FAILED, Trigger.NODE_NOT_READY, Trigger.OVERHEAT,
                                 Trigger.ALERT, Trigger.MANUAL],
        description="what may migrate or resize the job",
    )
    overheat_celsius: float = Field(90.0, ge=40, le=130)
    overheat_for_seconds: int = Field(120, ge=0, le=86400)
    straggler_ratio: float = Field(0.5, gt=0, lt=1, description="a replica below this share of its peers' median")
    straggler_for_seconds: int = Field(300, ge=0, le=86400)
    low_utilization_percent: float = Field(10.0, ge=0, le=100)
    low_utilization_for_seconds: int = Field(1800, ge=0, le=7 * 86400)
    cooldown_seconds: int = Field(600, ge=0, le=86400)
    max_migrations_per_hour: int = Field(3, ge=0, le=60)
    allow_cross_region: bool = False
    allow_cross_class: bool = True


class HeteroJobSpec(Model):
    priority: Priority = Priority.MEDIUM
    replicas: Replicas = Field(default_factory=Replicas)
    devices: list[DeviceAlternative] = Field(min_length=1, max_length=8, description="alternatives, preferred first")
    template: dict[str, Any] = Field(description="pod template of one replica (metadata and spec)")
    regions: Regions = Field(default_factory=Regions)
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    policy: Policy = Field(default_factory=Policy)
    backoff_limit: int = Field(3, ge=0, le=100, description="gang restarts after a replica fails, then Failed")

    @field_validator("devices")
    @classmethod
    def _distinct_classes(cls, devices: list[DeviceAlternative]) -> list[DeviceAlternative]:
        seen: set[str] = set()
        for alt in devices:
            if alt.device_class in seen:
                raise ValueError(f"device class {alt.device_class!r} is listed twice")
            seen.add(alt.device_class)
        return devices

    @field_validator("template")
    @classmethod
    def _template_has_container(cls, template: dict[str, Any]) -> dict[str, Any]:
        spec = template.get("spec")
        if not isinstance(spec, dict):
            raise ValueError("template.spec must be a pod spec object with at least one container")
        containers = spec.get("containers")
        if not isinstance(containers, list) or not containers:
            raise ValueError("template.spec.containers must list at least one container")
        for i, c in enumerate(containers):
            if not isinstance(c, dict) or not c.get("name") or not c.get("image"):
                raise ValueError(f"template.spec.containers[{i}] needs a name and an image")
        return template


# --- status ---------------------------------------------------------------------------------------

class Placement(StatusModel):
    region: str
    device_class: str
    replicas: int
    per_replica: int
    nodes: list[str]
    generation: int = 1
    since: str | None = Field(None, description="when this placement was made")


class Condition(StatusModel):
    type: str
    status: str  # "True", "False", "Unknown"
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None


class CheckpointRef(StatusModel):
    id: str
    step: int | None = None
    uri: str | None = None
    time: str | None = None


class PendingCheckpoint(StatusModel):
    id: str
    reason: str
    requested_at: str
    deadline: str
    then: str = Field("preempt", description="what follows the checkpoint: preempt, migrate, resize or continue")
    by: str | None = Field(None, description="the job that preempts this one (namespace/name)")
    exclude: list[str] = Field(default_factory=list, description="nodes the next placement avoids (migrate)")
    replicas: int | None = Field(None, description="the replicas to restart with (resize)")


class Reservation(StatusModel):
    """Room held for a moving job: its destination (a voluntary move reserves it before the checkpoint is
    asked for) or the healthy part of its old placement (an involuntary move keeps it while re-placed)."""

    region: str
    device_class: str
    per_replica: int
    nodes: list[str] = Field(description="one per rank, or the healthy nodes of the old placement")


class MigrationState(StatusModel):
    """A move from its checkpoint request to the new placement (survives a restart)."""

    exclude: list[str] = Field(default_factory=list)
    reason: str = ""
    replicas: int | None = None
    trigger: str | None = Field(None, description="what asked for the move (manual, deviceFailed, grow, ...)")
    request: str | None = Field(None, description="the heterojob.io/migrate annotation value that asked for it")
    reserved: Reservation | None = None


class CheckpointStatus(StatusModel):
    pending: PendingCheckpoint | None = None
    last: CheckpointRef | None = None


class Utilization(StatusModel):
    """Device utilization over the monitoring window, % (from the exporters through Prometheus)."""

    average: float | None = None
    per_replica: list[float | None] = Field(default_factory=list, description="by rank; null: no data")
    stragglers: list[int] = Field(default_factory=list, description="ranks far below their peers")
    time: str | None = Field(None, description="when these figures were measured")


class HistoryEntry(StatusModel):
    time: str
    action: str
    reason: str
    from_: str | None = Field(None, alias="from")
    to: str | None = None
    duration_seconds: float | None = None
    progress_lost_steps: int | None = None
    progress_lost_seconds: float | None = Field(None, description="training time since the last checkpoint")


class HeteroJobStatus(StatusModel):
    phase: Phase | None = None
    message: str | None = None
    reason: str | None = None
    placement: Placement | None = None
    conditions: list[Condition] = Field(default_factory=list)
    restarts: int = 0
    last_generation: int = Field(0, description="the newest placement generation ever used")
    observed_generation: int | None = None
    start_time: str | None = None
    completion_time: str | None = None
    utilization: Utilization | None = None
    checkpoint: CheckpointStatus | None = None
    migration: MigrationState | None = None
    history: list[HistoryEntry] = Field(default_factory=list)
    handled: dict[str, str] = Field(default_factory=dict, description=(
        "request annotations already acted on, by kind (migrate, checkpoint): a request is never lost or "
        "acted on twice across an operator restart"))
    # fields the operator had to drop as unreadable when it read this status (rewritten, cleaned)
    _repaired: list[str] = PrivateAttr(default_factory=list)


HeteroJob = ResourceDef(
    kind="HeteroJob",
    plural="heterojobs",
    singular="heterojob",
    namespaced=True,
    spec=HeteroJobSpec,
    status=HeteroJobStatus,
    short_names=("hj",),
    description="A distributed training job placed on heterogeneous accelerators by heterojob.",
    printer_columns=(
        PrinterColumn("Phase", "string", ".status.phase"),
        PrinterColumn("Class", "string", ".status.placement.deviceClass"),
        PrinterColumn("Region", "string", ".status.placement.region"),
        PrinterColumn("Replicas", "integer", ".status.placement.replicas"),
        PrinterColumn("Util", "number", ".status.utilization.average", "average device utilization, %"),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
        PrinterColumn("Message", "string", ".status.message", priority=1),
    ),
)

__all__ = ["HeteroJob", "HeteroJobSpec", "HeteroJobStatus", "JOB_NAME_MAX", "Phase", "Priority"]
