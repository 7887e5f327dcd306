"""HeteroJob: one distributed training or fine-tuning job and the accelerators it may run on: the resource's
definition (its CRD: `HeteroJob`) and its spec. Its status is in `api/job_status.py`, `status.scheduling` in
`api/scheduling.py`."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, Field, field_validator, model_validator

from heterojob.constants import CHECKPOINT_SIZE_MAX
from heterojob.engine.basics.phases import Phase
from heterojob.engine.basics.versions import parse_requirement
from heterojob.api.job_status import HeteroJobStatus
from heterojob.api.names import LABEL_VALUE, NAME_MAX, label_key_problem
from heterojob.api.scheduling import Scheduling
from heterojob.api.template import QUANTITY, problems as template_problems
from heterojob.api.common import DNS_LABEL, JOB_NAME_MAX, MAX_REPLICAS, Model, NestedProblems, PrinterColumn, ResourceDef

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

# `Scheduling`: controller/scheduler.py imports it from here (api/scheduling.py is where it lives)
__all__ = ["HeteroJob", "HeteroJobSpec", "HeteroJobStatus", "JOB_NAME_MAX", "MAX_REPLICAS", "Phase", "Priority",
           "Scheduling"]



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
