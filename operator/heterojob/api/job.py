"""HeteroJob: one distributed training or fine-tuning job and the accelerators it may run on."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, Field, PrivateAttr, field_validator, model_validator

from heterojob.constants import CHECKPOINT_SIZE_MAX
from heterojob.engine.phases import Phase, Then
from heterojob.engine.versions import parse_requirement
from heterojob.api.onsets import SymptomOnsets
from heterojob.api.names import LABEL_VALUE, NAME_MAX, label_key_problem
from heterojob.api.template import QUANTITY, problems as template_problems
from heterojob.api.common import DNS_LABEL, JOB_NAME_MAX, Model, NestedProblems, PrinterColumn, ResourceDef, StatusModel

MAX_REPLICAS = 1024
ALERTS_MAX = 32  # firing alert symptoms kept per job
MAX_DEVICES_PER_REPLICA = 64  # beyond any single node built today; CPU classes count cores
MAX_CPU_PER_REPLICA = 512
SIZE_MAX = CHECKPOINT_SIZE_MAX



def _label_key(key: str) -> str:
    """A key no Node can carry (kube-apiserver's IsQualifiedName, its lengths included) is refused up front."""
    if problem := label_key_problem(key):
        raise ValueError(f"not a label key a Node can carry: {problem}")
    return key


# one check (`names.label_key_problem`: shape and lengths, which pydantic's lookahead-free patterns cannot hold
# together), so a refusal says which part is wrong and how to fix it
LabelKey = Annotated[str, Field(description="a node label key"), AfterValidator(_label_key)]
LabelValue = Annotated[str, Field(max_length=NAME_MAX, pattern=f"^{LABEL_VALUE}$", description="a node label value")]
ClassName = Annotated[str, Field(pattern=DNS_LABEL, max_length=NAME_MAX, description="an AcceleratorClass name")]
RegionName = Annotated[str, Field(pattern=DNS_LABEL, max_length=NAME_MAX, description="a Region name")]


class Priority(StrEnum):
    """Queue order and who may preempt whom: urgent > high > medium > low."""

    URGENT = "urgent"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"

    @property
    def rank(self) -> int:
        """Larger is more important."""
        return {"urgent": 3, "high": 2, "medium": 1, "low": 0}[self.value]


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
    """An environment variable of the main container."""

    name: str = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$",
                      description="variable name")
    value: str = Field("", description="its value")


class TemplateOverride(Model):
    """What changes in the replica's main container on one device class (e.g. a CUDA or CANN image)."""

    image: str | None = Field(None, min_length=1, description="container image on this class")
    command: list[str] | None = Field(None, description="replaces the container's command")
    args: list[str] | None = Field(None, description="replaces the container's args")
    env: list[EnvVar] | None = Field(None, description="added to (or replacing) the container's env")


class SoftwareRequirements(Model):
    """Version ranges the class's software stack must meet: PEP 440 specifiers such as '>=12.1';
    CANN's release candidates are understood ('>=8.0.RC1': 8.0.RC1 < 8.0.RC3 < 8.0.0 < 8.1.RC1)."""

    driver: str | None = Field(None, max_length=200, description="driver version range, e.g. '>=550'")
    cuda: str | None = Field(None, max_length=200, description="CUDA version range, e.g. '>=12.1'")
    cann: str | None = Field(None, max_length=200, description="CANN version range, e.g. '>=8.0.RC1'")
    node_labels: dict[LabelKey, LabelValue] | None = Field(
        None, max_length=16,
        description="labels every node used must carry, e.g. {'feature.node.kubernetes.io/rdma.available': "
                    "'true'} for RDMA (Node Feature Discovery); exact values")

    @field_validator("driver", "cuda", "cann")
    @classmethod
    def _is_a_range(cls, value: str | None) -> str | None:
        if value is not None:
            parse_requirement(value)  # RequirementError is a ValueError: pydantic reports it on the field
        return value

    def versions(self) -> dict[str, str]:
        """software -> range, for the placement filter (only those set)."""
        return {k: v for k, v in (("driver", self.driver), ("cuda", self.cuda), ("cann", self.cann)) if v}


class DeviceAlternative(Model):
    """One kind of accelerator the job can run on, with how many per replica and what software it needs."""

    device_class: ClassName = Field(description="name of an AcceleratorClass")
    per_replica: int = Field(1, ge=1, le=MAX_CPU_PER_REPLICA, description="devices (or CPU cores) per replica")
    requires: SoftwareRequirements | None = Field(None, description="software version ranges the class must meet")
    overrides: TemplateOverride | None = Field(None, description="container changes on this class")


class Regions(Model):
    """Where the job may run and where it would rather run."""

    preferred: list[RegionName] = Field(default_factory=list, max_length=64,
                                        description="regions tried first, within allowed")
    allowed: list[RegionName] = Field(default_factory=list, max_length=64, description="empty means any region")

    @model_validator(mode="after")
    def _preferred_allowed(self) -> Regions:
        if self.allowed:
            outside = [r for r in self.preferred if r not in self.allowed]
            if outside:
                raise ValueError(f"preferred regions {outside} are not in allowed {self.allowed}")
        return self


class Checkpoint(Model):
    """How the job saves its progress (asked before a migration, resize or preemption)."""

    interval_seconds: int = Field(0, ge=0, le=7 * 24 * 3600, description="periodic checkpoints; 0 turns them off")
    timeout_seconds: int = Field(120, ge=1, le=24 * 3600, description="how long to wait for every rank's ack")
    storage: str | None = Field(None, min_length=1, description="URI prefix where checkpoints are written")
    size_hint: str | None = Field(
        None, max_length=64, pattern=QUANTITY,
        description="expected size of one whole checkpoint (a quantity, e.g. '40Gi'), used until the SDK reports "
                    "one; without either, the planner assumes devices x device memory")

    @field_validator("size_hint")
    @classmethod
    def _a_size(cls, value: str | None) -> str | None:
        if value is not None and quantity_bytes(value) is None:
            raise ValueError(f"sizeHint {value!r} is not a whole number of bytes >= 0 (e.g. '40Gi', '500M')")
        return value

    @property
    def size_hint_bytes(self) -> int | None:
        return quantity_bytes(self.size_hint) if self.size_hint is not None else None


class Trigger(StrEnum):
    """A reason to migrate or resize a job."""

    DEVICE_FAILED = "deviceFailed"
    NODE_NOT_READY = "nodeNotReady"
    OVERHEAT = "overheat"
    STRAGGLER = "straggler"
    LOW_UTILIZATION = "lowUtilization"
    ALERT = "alert"
    MANUAL = "manual"


class Policy(Model):
    """When heterojob may migrate or resize the job, and how often."""

    triggers: list[Trigger] = Field(
        default_factory=lambda: [Trigger.DEVICE_FAILED, Trigger.NODE_NOT_READY, Trigger.OVERHEAT,
                                 Trigger.ALERT, Trigger.MANUAL],
        description="what may migrate or resize the job",
    )
    overheat_celsius: float = Field(90.0, ge=40, le=130, description="a device this hot is overheating, °C")
    overheat_for_seconds: int = Field(120, ge=0, le=86400, description="for this long before the job moves")
    straggler_ratio: float = Field(0.5, gt=0, lt=1, description="a replica below this share of its peers' median")
    straggler_for_seconds: int = Field(300, ge=0, le=86400, description="for this long before it counts")
    low_utilization_percent: float = Field(10.0, ge=0, le=100, description="below this average the job may shrink")
    low_utilization_for_seconds: int = Field(1800, ge=0, le=7 * 86400, description="for this long")
    cooldown_seconds: int = Field(600, ge=0, le=86400, description="no new migration this soon after the last")
    max_migrations_per_hour: int = Field(3, ge=0, le=60, description="at most this many migrations an hour")
    allow_cross_region: bool = Field(False, description="a migration may move the job to another region")
    allow_cross_class: bool = Field(True, description="a migration may move it to another device class")


class HeteroJobSpec(Model):
    """What the job runs, on which accelerators and where, and how it may be moved."""

    priority: Priority = Field(Priority.MEDIUM, description="urgent, high, medium (default) or low")
    replicas: Replicas = Field(default_factory=Replicas, description="how many replicas (a gang: all or none)")
    devices: list[DeviceAlternative] = Field(min_length=1, max_length=8, description="alternatives, preferred first")
    template: dict[str, Any] = Field(description="pod template of one replica (metadata and spec)")
    regions: Regions = Field(default_factory=Regions, description="where the job may and would rather run")
    checkpoint: Checkpoint = Field(default_factory=Checkpoint, description="how the job saves its progress")
    policy: Policy = Field(default_factory=Policy, description="when it may be migrated or resized")
    backoff_limit: int = Field(3, ge=0, le=100, description="gang restarts after a replica fails, then Failed")
    workload: str | None = Field(
        None, max_length=63, pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
        description="what it trains, e.g. 'llama3-8b-sft-bs32': jobs of one namespace naming the same workload "
                    "share their measured speeds, so a job is placed by its peers' steps/s on classes it has "
                    "not run on yet instead of the classes' declared throughput")

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
    def _template_shape(cls, template: dict[str, Any]) -> dict[str, Any]:
        found = template_problems(template)
        if found:
            raise NestedProblems(found)
        return template


# --- status ---------------------------------------------------------------------------------------

class Placement(StatusModel):
    """Where the job runs now."""

    region: str = Field(description="the Region")
    device_class: str = Field(description="the AcceleratorClass")
    replicas: int = Field(description="replicas placed")
    per_replica: int = Field(description="devices per replica")
    nodes: list[str] = Field(description="the node of each replica, by rank")
    generation: int = Field(1, description="placement generation; it names the pods (<job>-g<generation>-<rank>)")
    since: str | None = Field(None, description="when this placement was made")
    cluster: str | None = Field(None, description="the member cluster holding its pods (named by its Region); "
                                                  "unset: the operator's own cluster")


class Condition(StatusModel):
    """A Kubernetes-style condition."""

    type: str = Field(description="e.g. Admitted, Running, Checkpointed")
    status: str = Field(description="True, False or Unknown")
    reason: str = Field("", description="a CamelCase reason")
    message: str = Field("", description="what happened, for people")
    last_transition_time: str | None = Field(None, description="when status last changed")


class CheckpointRef(StatusModel):
    """A checkpoint every rank acknowledged."""

    id: str = Field(description="checkpoint id")
    step: int | None = Field(None, description="training step it holds")
    uri: str | None = Field(None, description="where it was written")
    time: str | None = Field(None, description="when it completed (the last rank's end of saving, when the acks "
                                                "say it)")
    size_bytes: int | None = Field(None, ge=0, le=SIZE_MAX, description=(
        "its size in bytes, summed over the ranks' acks (absent when a rank did not report one)"))
    save_seconds: float | None = Field(None, ge=0, le=7 * 86400, description=(
        "the ranks' save, from the first rank's start to the last one's end as their acks say them (an older "
        "SDK's acks: from the request to the last ack); the planner's save and restore time for a move"))

    @field_validator("size_bytes", "save_seconds", mode="wrap")
    @classmethod
    def _untrusted(cls, value: Any, handler: Any) -> Any:
        """Status is untrusted: a figure that does not read is dropped (None), never the checkpoint's URI."""
        if isinstance(value, bool):
            return None
        try:
            return handler(value)
        except ValueError:
            return None


class PendingCheckpoint(StatusModel):
    """A checkpoint asked for and not yet acknowledged by every rank."""

    id: str = Field(description="checkpoint id the ranks acknowledge")
    reason: str = Field(description="why it was asked for")
    requested_at: str = Field(description="when it was asked for")
    deadline: str = Field(description="when heterojob stops waiting for it")
    then: Then = Field(Then.PREEMPT, description="what follows the checkpoint: preempt, migrate, resize or continue "
                                                "(a periodic checkpoint: the job goes on where it is)")
    by: str | None = Field(None, description="the job that preempts this one (namespace/name)")
    exclude: list[str] = Field(default_factory=list, description="nodes the next placement avoids (migrate)")
    replicas: int | None = Field(None, description="the replicas to restart with (resize)")


class Reservation(StatusModel):
    """Room held for a moving job: its destination (a voluntary move reserves it before the checkpoint is
    asked for) or the healthy part of its old placement (an involuntary move keeps it while re-placed)."""

    region: str = Field(description="the region of the reserved nodes")
    device_class: str = Field(description="the device class of the reserved devices")
    per_replica: int = Field(description="devices per replica")
    nodes: list[str] = Field(description="one per rank, or the healthy nodes of the old placement")


class MigrationState(StatusModel):
    """A move from its checkpoint request to the new placement (survives a restart)."""

    exclude: list[str] = Field(default_factory=list, description="nodes the new placement avoids")
    reason: str = Field("", description="why the job migrates")
    replicas: int | None = Field(None, description="replicas to restart with")
    trigger: str | None = Field(None, description="what asked for the move (manual, deviceFailed, grow, ...)")
    request: str | None = Field(None, description="the heterojob.io/migrate annotation value that asked for it")
    reserved: Reservation | None = Field(None, description="room held for the move")
    involuntary: bool | None = Field(None, description=(
        "the job had to leave (a dead device, a NotReady node, a lost member): placed again wherever it fits, "
        "the cheapest checkpoint transfer first"))


class AlertSymptom(StatusModel):
    """A firing Alertmanager alert that names where the job runs (kept until it resolves)."""

    fingerprint: str = Field(description="Alertmanager's fingerprint of the alert")
    since: str = Field(description=(
        "when its firing episode began (Alertmanager's startsAt, never later than when heterojob heard it)"))
    starts_at: str | None = Field(None, description=(
        "Alertmanager's startsAt of the firing episode, to the millisecond: a later one (the alert resolved and "
        "fired again) is a new firing, with a new since"))
    nodes: list[str] = Field(default_factory=list, description="the nodes it names")
    message: str = Field("", description="alert name and summary")
    urgent: bool = Field(False, description="the device is dead: move from the last checkpoint at once")


class Backoff(StatusModel):
    """Pod creation refused for a reason that may pass (a ResourceQuota, API server load): wait, then retry."""

    attempts: int = Field(0, description="refusals in a row")
    until: str | None = Field(None, description="no new placement before this time")
    reason: str = Field("", description="the API server's answer")


class CheckpointStatus(StatusModel):
    """Checkpoints: the one in progress and the last completed."""

    pending: PendingCheckpoint | None = Field(None, description="the checkpoint in progress")
    last: CheckpointRef | None = Field(None, description="the last completed checkpoint")


class Utilization(StatusModel):
    """Device utilization over the monitoring window, % (from the exporters through Prometheus)."""

    average: float | None = Field(None, description="average over all ranks, %")
    per_replica: list[float | None] = Field(default_factory=list, description="by rank; null: no data")
    stragglers: list[int] = Field(default_factory=list, description="ranks far below their peers")
    time: str | None = Field(None, description="when these figures were measured")


class HistoryEntry(StatusModel):
    """One placement, migration, resize, preemption or restart of the job."""

    time: str = Field(description="when it happened")
    action: str = Field(description="placed, migrated, resized, preempted, restarted, ...")
    reason: str = Field(description="why")
    from_: str | None = Field(None, alias="from", description="where the job was (region/class)")
    to: str | None = Field(None, description="where it went (region/class)")
    duration_seconds: float | None = Field(None, description="how long the move took")
    progress_lost_steps: int | None = Field(None, description="training steps since the last checkpoint")
    progress_lost_seconds: float | None = Field(None, description="training time since the last checkpoint")


SPEEDS_MAX = 32  # measured (class, replicas) speeds kept per job, newest win
SERVICE_MAX_S = 1e13  # device-seconds: 100,000 devices for 3,000 years; a larger figure is clamped
RUN_CLASSES_MAX = 16


class MeasuredSpeed(StatusModel):
    """The job's own training speed at one device class and size, from its checkpoint acks."""

    device_class: str = Field(min_length=1, max_length=63, description="the AcceleratorClass it ran on")
    replicas: int = Field(ge=1, le=MAX_REPLICAS, description="replicas it ran with")
    steps_per_second: float = Field(gt=0, le=1e9, allow_inf_nan=False, description="training steps a second")
    time: str | None = Field(None, description="when it was measured")


class Scheduling(StatusModel):
    """What the queue policy (`--queue-policy mlfq`) needs to survive the job's runs and operator restarts.

    Status is untrusted: `clean` drops what does not read and clamps what is out of range, and says what
    (the operator logs it and rewrites the field cleaned)."""

    attained_device_seconds: float = Field(0.0, ge=0, le=SERVICE_MAX_S, allow_inf_nan=False, description=(
        "devices x seconds the job held devices since its last promotion, over its ended placements (the "
        "current one counts from placement.since)"))
    waiting_since: str | None = Field(None, description=(
        "when it last started waiting (arrival, or when its last placement ended): the starvation bound's clock"))
    promoted: bool = Field(False, description="its current (or next) run was started by a starvation promotion")
    run_seconds: dict[str, float] = Field(default_factory=dict, description=(
        "seconds it held devices per device class, over its ended placements (its work done, in the planner's "
        "estimates)"))
    accounted_generation: int = Field(0, ge=0, description=(
        "the last placement generation counted into attainedDeviceSeconds and runSeconds (never twice)"))
    speeds: list[MeasuredSpeed] = Field(default_factory=list, description=(
        "measured steps/s per device class and replicas, newest last (at most 32)"))

    @model_validator(mode="wrap")
    @classmethod
    def _untrusted(cls, value: Any, handler: Any) -> Any:
        """Never refuse the whole field: what does not read is dropped or clamped (see `clean`)."""
        cleaned, notes = clean_scheduling(value)
        out = handler(cleaned)
        out._notes = notes
        out._dropped = sorted(set(value) - set(cleaned)) if isinstance(value, dict) else []
        return out

    _notes: list[str] = PrivateAttr(default_factory=list)
    _dropped: list[str] = PrivateAttr(default_factory=list)  # keys status had that did not read


def clean_scheduling(value: Any) -> tuple[dict[str, Any], list[str]]:
    """status.scheduling as far as it reads, and a note per part dropped or clamped."""
    import math

    if isinstance(value, Scheduling):
        return value.model_dump(by_alias=True, exclude_none=True), []
    if not isinstance(value, dict):
        return {}, [f"not an object ({type(value).__name__}): ignored"]
    out: dict[str, Any] = {}
    notes: list[str] = []

    def number(name: str, raw: Any, top: float) -> float | None:
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or math.isnan(raw):
            notes.append(f"{name}={str(raw)[:40]!r} is not a number: ignored")
            return None
        if raw < 0:
            notes.append(f"{name}={raw} is negative: taken as 0")
            return 0.0
        if raw > top:
            notes.append(f"{name}={raw} is beyond {top:g}: clamped")
            return top
        return float(raw)

    for key, raw in value.items():
        if key == "attainedDeviceSeconds":
            n = number(key, raw, SERVICE_MAX_S)
            if n is not None:
                out[key] = n
        elif key == "waitingSince":
            from heterojob.api.times import timestamp

            if timestamp(raw) is None:
                notes.append(f"waitingSince={str(raw)[:40]!r} is not an RFC 3339 time: ignored")
            else:
                out[key] = raw
        elif key == "promoted":
            if isinstance(raw, bool):
                out[key] = raw
            else:
                notes.append(f"promoted={str(raw)[:40]!r} is not a boolean: ignored")
        elif key == "accountedGeneration":
            if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
                out[key] = raw
            else:
                notes.append(f"accountedGeneration={str(raw)[:40]!r} is not a whole number >= 0: ignored")
        elif key == "runSeconds":
            if not isinstance(raw, dict):
                notes.append("runSeconds is not an object: ignored")
                continue
            runs = {}
            for cls_name, seconds in list(raw.items())[:RUN_CLASSES_MAX]:
                n = number(f"runSeconds[{str(cls_name)[:63]}]", seconds, SERVICE_MAX_S)
                if n is not None and isinstance(cls_name, str) and 0 < len(cls_name) <= 63:
                    runs[cls_name] = n
            if len(raw) > RUN_CLASSES_MAX:
                notes.append(f"runSeconds has {len(raw)} classes: the first {RUN_CLASSES_MAX} kept")
            out[key] = runs
        elif key == "speeds":
            if not isinstance(raw, list):
                notes.append("speeds is not a list: ignored")
                continue
            kept = []
            for item in raw[-SPEEDS_MAX:]:
                try:
                    kept.append(MeasuredSpeed.model_validate(item).model_dump(by_alias=True, exclude_none=True))
                except ValueError:
                    notes.append(f"speeds entry {str(item)[:80]!r} does not read: ignored")
            if len(raw) > SPEEDS_MAX:
                notes.append(f"speeds has {len(raw)} entries: the newest {SPEEDS_MAX} kept")
            out[key] = kept
        else:  # a field of a newer version: kept as it is
            out[key] = raw
    return out, notes


class HeteroJobStatus(StatusModel):
    """What heterojob did with the job (written by the operator only)."""

    phase: Phase | None = Field(None, description="Pending, Admitted, Running, Checkpointing, Migrating, Resizing, "
                                                  "Preempted, Succeeded or Failed")
    message: str | None = Field(None, description="why the job is in this phase, for people")
    reason: str | None = Field(None, description="why, as a CamelCase reason")
    placement: Placement | None = Field(None, description="where the job runs now")
    conditions: list[Condition] = Field(default_factory=list, description="Kubernetes-style conditions")
    restarts: int = Field(0, description="gang restarts after a failed replica")
    last_generation: int = Field(0, description="the newest placement generation ever used")
    observed_generation: int | None = Field(None, description="the metadata.generation this status is about")
    observed_spec: dict[str, str] = Field(default_factory=dict, max_length=64, description=(
        "a digest of each spec field as read at observedGeneration: which fields a later edit changes"))
    start_time: str | None = Field(None, description="when the job first ran")
    completion_time: str | None = Field(None, description="when it succeeded or failed")
    utilization: Utilization | None = Field(None, description="device utilization from telemetry")
    checkpoint: CheckpointStatus | None = Field(None, description="checkpoint in progress and last completed")
    migration: MigrationState | None = Field(None, description="a move in progress")
    history: list[HistoryEntry] = Field(default_factory=list, description="placements and moves, newest last")
    backoff: Backoff | None = Field(None, description="waiting after a transient pod creation refusal")
    alerts: list[AlertSymptom] = Field(default_factory=list, max_length=ALERTS_MAX, description=(
        "firing alerts about this job's devices, kept in status so that an operator restart loses none"))
    handled: dict[str, str] = Field(default_factory=dict, description=(
        "request annotations already acted on, by kind (migrate, checkpoint): a request is never lost or "
        "acted on twice across an operator restart"))
    symptoms: SymptomOnsets | None = Field(None, description=(
        "when each symptom that must last (overheat, straggler) began on the current placement"))
    scheduling: Scheduling | None = Field(None, description=(
        "what the queue policy keeps across runs and restarts: attained service, the starvation clock, time "
        "run per class, measured speeds"))
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
        PrinterColumn("Workload", "string", ".spec.workload", "jobs naming it share measured speeds", priority=1),
        PrinterColumn("Message", "string", ".status.message", priority=1),
    ),
)

__all__ = ["HeteroJob", "HeteroJobSpec", "HeteroJobStatus", "JOB_NAME_MAX", "Phase", "Priority"]


def quantity_bytes(value: str) -> int | None:
    """A Kubernetes quantity ('40Gi', '1.5T', '500M') as whole bytes, or None when it is not one (or < 0)."""
    from decimal import Decimal

    from kubernetes.utils.quantity import parse_quantity

    try:
        parsed = parse_quantity(value)
    except (ValueError, TypeError, ArithmeticError):
        return None
    if parsed < 0 or parsed > SIZE_MAX:
        return None
    return int(parsed.to_integral_value()) if isinstance(parsed, Decimal) else int(parsed)
