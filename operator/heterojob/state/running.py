"""The views `engine.execution.running.decide` reads of a running job, from its spec, status and annotations (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from heterojob.api.job import HeteroJobSpec
from heterojob.api.job_status import HeteroJobStatus
from heterojob.api.times import timestamp
from heterojob.engine.capacity import migration
from heterojob.engine.queue import completion
from heterojob.engine.execution.lifecycle import Action
from heterojob.engine.execution.running import CheckpointInProgress, Elastic, RunningRules, RunningState
from heterojob.state.knowledge import sizes_on

CHECKPOINT = "checkpoint"  # status.handled key of heterojob.io/checkpoint-now (and MIGRATE of heterojob.io/migrate)
MIGRATE = "migrate"
MOVE_ACTIONS = ("migrate", "resize")  # status.history actions the cooldown and the hourly cap count


def moves(status: HeteroJobStatus) -> tuple[float, ...]:
    """When the job was migrated or resized before (from its history)."""
    return tuple(t for h in status.history if h.action in MOVE_ACTIONS and (t := timestamp(h.time)))


def migration_rules(spec: HeteroJobSpec, budget: int, advisory: bool, extra: Iterable[str] = ()) -> migration.Rules:
    """The safety rules of the job's spec.policy with the operator's budget and advisory mode."""
    p = spec.policy
    return migration.Rules(
        triggers=frozenset(t.value for t in p.triggers) | frozenset(extra),
        overheat_for_s=p.overheat_for_seconds, straggler_for_s=p.straggler_for_seconds,
        cooldown_s=p.cooldown_seconds, max_per_hour=p.max_migrations_per_hour, budget=budget, advisory=advisory)


def rules(spec: HeteroJobSpec, budget: int, advisory: bool, by_level: bool) -> RunningRules:
    return RunningRules(migration_rules(spec, budget, advisory), low_percent=spec.policy.low_utilization_percent,
                 low_for_s=spec.policy.low_utilization_for_seconds, by_level=by_level)


def growth_limit(spec: HeteroJobSpec, status: HeteroJobStatus) -> int:
    """The most replicas growth may reach on the job's class: as far as spec.replicas.max until its measured
    scaling there says otherwise (`completion.growth_limit`, from status.scheduling.speeds; with no speed
    measured at its admitted size, growing is the trial that measures it)."""
    p = status.placement
    base, upper = spec.replicas.start, spec.replicas.upper
    if p is None:
        return upper
    measured = sizes_on(status.scheduling, p.device_class)
    if base not in measured:
        return upper
    return completion.growth_limit(base, upper, measured)


def view(spec: HeteroJobSpec | None, status: HeteroJobStatus,
         symptoms: Sequence[migration.Symptom], lifecycle: Action, now: float, checkpoint_request: str = ""
         ) -> RunningState:
    """The job as `decide` reads it. `checkpoint_request`: the heterojob.io/checkpoint-now value."""
    pending = status.checkpoint.pending if status.checkpoint else None
    checkpoint = None
    if pending is not None:
        requested, deadline = timestamp(pending.requested_at), timestamp(pending.deadline)
        checkpoint = CheckpointInProgress(
            pending.then,
            # a yield needs the victim's spec and placement to be weighed: without them it is not weighed
            by=pending.by if spec is not None and status.placement is not None else None,
            urgent=requested is not None and deadline is not None and deadline <= requested, reason=pending.reason)
    p, elastic = status.placement, None
    if spec is not None and p is not None:
        noted = next((c for c in status.conditions if c.type == "LowUtilization"), None)
        idle = noted is not None and noted.status == "True"
        elastic = Elastic(p.replicas, spec.replicas.min, spec.replicas.upper, spec.replicas.start,
                          growth_limit(spec, status), status.utilization.average if status.utilization else None,
                          idle, timestamp(noted.last_transition_time) if idle and noted else None)
    last = status.checkpoint.last if status.checkpoint else None
    since = (timestamp(last.time) if last else None) or (timestamp(p.since) if p else None)
    handled = status.handled.get(CHECKPOINT)
    return RunningState(
        now=now, phase=status.phase, lifecycle=lifecycle, checkpoint=checkpoint, symptoms=tuple(symptoms),
        moves=moves(status), checkpoint_request=checkpoint_request if checkpoint_request != handled else "",
        priority=spec.priority.rank if spec is not None else 0, elastic=elastic,
        interval_s=spec.checkpoint.interval_seconds if spec is not None and p is not None else None,
        last_checkpoint_at=since)
