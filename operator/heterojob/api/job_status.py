"""HeteroJob status: what the operator wrote about a job (its phase, placement, checkpoints, a move in
progress, firing alerts, history, symptoms' onsets, the queue policy's figures). Written by `controller/status.py`
only; read back as untrusted input by `state/job_status.py`."""

from __future__ import annotations

from typing import Any

from pydantic import Field, PrivateAttr, field_validator

from heterojob.constants import CHECKPOINT_SIZE_MAX
from heterojob.engine.basics.phases import Phase, Then
from heterojob.api.common import StatusModel
from heterojob.api.onsets import SymptomOnsets
from heterojob.api.scheduling import Scheduling

ALERTS_MAX = 32  # firing alert symptoms kept per job
SIZE_MAX = CHECKPOINT_SIZE_MAX


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
    reserved: Reservation | None = Field(None, description="room kept for the next gang: where the refused one "
                                         "was placed (for the first attempts, so that jobs it preempted are not "
                                         "placed there again meanwhile)")


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
