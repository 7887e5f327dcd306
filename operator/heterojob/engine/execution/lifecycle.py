"""What a job needs next, from its status and its pods: one decision per reconcile pass.

Crash safety comes from the order of writes: the operator records a decision in the job's status
before it acts on pods, so a restarted operator re-derives the same next step from what it finds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from heterojob.engine.basics.phases import Phase, Then
from heterojob.constants import EVICTED_BY_EVICTION_API
from heterojob.engine.basics.acks import Ack, SaveTime, ignored_fields, parse_ack, save_time, with_save_time

__all__ = ["Ack", "parse_ack"]  # the ack's reader lives in engine.basics.acks; imported from here before it did
from heterojob.engine.placing.placement import replicas_text


@dataclass(frozen=True)
class PodView:
    name: str
    rank: int
    generation: int
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    node: str | None = None
    deleting: bool = False
    reason: str = ""
    checkpoint_request: str = ""  # the heterojob.io/checkpoint-request annotation it carries
    checkpoint_ack: str = ""  # the SDK's answer, "<id>;<step>;<uri>[;size=<bytes>][;start=<s>;end=<s>]" (engine.basics.acks)
    checkpoint_save_time: str = ""  # written with it by the SDK: "<id>;start=<s>;end=<s>" (engine.basics.acks)
    unschedulable: str = ""  # the scheduler's message while PodScheduled is False (Unschedulable)
    unschedulable_since: float = 0.0  # unix seconds
    disruption: str = ""  # the reason of its DisruptionTarget=True condition (EvictionByEvictionAPI, ...)
    deletion_at: float | None = None  # deletionTimestamp (unix seconds): the end of its grace period
    scheduled: bool = False  # bound to a node (spec.nodeName, PodScheduled True) or past Pending


EVICTED = EVICTED_BY_EVICTION_API  # a DisruptionTarget reason: the Eviction API (kubectl drain)


@dataclass(frozen=True)
class AskedCheckpoint:
    """A checkpoint the operator asked for, and what follows it (preempt, migrate, resize)."""

    id: str
    deadline: float  # unix seconds
    then: Then
    requested: float | None = None  # unix seconds; a deadline at or before it: an urgent move that waits for none

    @property
    def urgent(self) -> bool:
        return self.requested is not None and self.deadline <= self.requested


@dataclass(frozen=True)
class JobView:
    """What the lifecycle needs of a HeteroJob, already parsed and validated."""

    phase: Phase | None
    reason: str | None
    generation: int | None  # placement generation, None when not placed
    replicas: int | None  # replicas of the current placement
    restarts: int
    backoff_limit: int
    pods: Sequence[PodView] = field(default_factory=tuple)
    spec_errors: str | None = None  # every problem of an invalid spec, or None
    checkpoint: AskedCheckpoint | None = None
    now: float = 0.0  # unix seconds: time is an argument, never read here
    unschedulable_after_s: float = 60.0  # a pod the scheduler cannot place this long: place the gang elsewhere
    cordoned: frozenset[str] = frozenset()  # nodes marked unschedulable (kubectl cordon / drain)


class Action(StrEnum):
    NONE = "none"
    REJECT = "reject"  # the spec is invalid: Failed until the user fixes it
    REVALIDATED = "revalidated"  # a fixed spec after a rejection: back to Pending
    PLACE = "place"  # Pending: find room and admit
    CREATE_PODS = "create-pods"  # admitted, some pods of the generation not created yet
    RUNNING = "running"
    RESTART = "restart"  # a replica failed or vanished: recreate the gang
    FAIL = "fail"  # backoff limit reached
    SUCCEED = "succeed"
    CLEANUP = "cleanup"  # pods of an older generation are still there
    REQUEST_CHECKPOINT = "request-checkpoint"  # annotate these pods with the pending checkpoint's id
    CHECKPOINT_DONE = "checkpoint-done"  # every rank saved: go on with what follows
    CHECKPOINT_TIMEOUT = "checkpoint-timeout"  # not every rank saved in time (or one is gone): go on anyway
    UNSCHEDULABLE = "unschedulable"  # the scheduler cannot place a rank where planned: place the gang elsewhere
    DRAIN = "drain"  # a rank was evicted (kubectl drain): a voluntary move off those nodes, no restart counted


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str = ""
    message: str = ""
    ranks: tuple[int, ...] = ()  # CREATE_PODS: which ranks
    pods: tuple[str, ...] = ()  # CLEANUP / RESTART: which pods to delete; REQUEST_CHECKPOINT: to annotate
    nodes: tuple[str, ...] = ()  # UNSCHEDULABLE / DRAIN: the nodes to avoid
    step: int | None = None  # CHECKPOINT_DONE: the step every rank saved
    uri: str | None = None  # CHECKPOINT_DONE: where
    size_bytes: int | None = None  # CHECKPOINT_DONE: the bytes every rank wrote, summed (None: a rank did not say)
    notes: tuple[str, ...] = ()  # CHECKPOINT_DONE: ack fields that were ignored, and why (for the log)
    save: SaveTime | None = None  # CHECKPOINT_DONE: when the ranks say they saved (None: a rank did not say)
    deadline: float | None = None  # DRAIN: every rank still runs until then (grace period): checkpoint by then


REASON_INVALID_SPEC = "InvalidSpec"
REASON_POD_REJECTED = "PodRejected"  # the API server refused its pods for good (invalid, PodSecurity)
REASON_SPEC_EDITED = "SpecEdited"
REASON_DRAINED = "Drained"
PERIODIC = Then.CONTINUE  # AskedCheckpoint.then of a periodic checkpoint: the job goes on where it is


def decide(job: JobView) -> Decision:
    if job.spec_errors is not None:
        if job.phase == Phase.FAILED and job.reason == REASON_INVALID_SPEC:
            return Decision(Action.NONE)
        return Decision(Action.REJECT, REASON_INVALID_SPEC, f"invalid spec: {job.spec_errors}")
    if job.phase == Phase.FAILED and job.reason == REASON_INVALID_SPEC:
        return Decision(Action.REVALIDATED, "SpecFixed", "the spec is valid now")
    if job.phase is not None and job.phase.terminal:
        return Decision(Action.NONE)

    current = [p for p in job.pods if p.generation == job.generation] if job.generation else []
    stale = tuple(p.name for p in job.pods if p.generation != job.generation and not p.deleting)

    if job.generation is None or job.replicas is None:
        if stale:
            return Decision(Action.CLEANUP, "OldGeneration", pods=stale)
        return Decision(Action.PLACE, "Unplaced")

    by_rank = {p.rank: p for p in current if not p.deleting}
    drained = _drained(job, current, by_rank)
    if drained is not None:
        return drained
    if job.checkpoint is not None:
        return _checkpointing(job, job.checkpoint, by_rank, current)
    failed = sorted((p for p in by_rank.values() if p.phase == "Failed"), key=lambda p: p.rank)
    if failed:
        first = failed[0]
        why = f"replica {first.rank} ({first.name}) failed" + (f": {first.reason}" if first.reason else "")
        return _restart_or_fail(job, why, current)

    stuck = sorted((p for p in by_rank.values() if p.phase == "Pending" and p.unschedulable
                    and job.now - p.unschedulable_since >= job.unschedulable_after_s), key=lambda p: p.rank)
    if stuck:
        first = stuck[0]
        return Decision(Action.UNSCHEDULABLE, "Unschedulable",
                        f"rank {first.rank} ({first.name}) could not be scheduled on {first.node} for "
                        f"{job.now - first.unschedulable_since:.0f}s: {first.unschedulable}",
                        pods=tuple(p.name for p in current if not p.deleting),
                        nodes=tuple(sorted({p.node for p in stuck if p.node})))

    missing = tuple(r for r in range(job.replicas) if r not in by_rank)
    if missing:
        if job.phase in (Phase.RUNNING,):
            why = f"replica {missing[0]} disappeared while running"
            return _restart_or_fail(job, why, current)
        return Decision(Action.CREATE_PODS, "CreatingPods", ranks=missing)

    if stale:
        return Decision(Action.CLEANUP, "OldGeneration", pods=stale)
    if all(p.phase == "Succeeded" for p in by_rank.values()):
        return Decision(Action.SUCCEED, "AllReplicasSucceeded", f"all {job.replicas} replicas succeeded")
    if all(p.phase in ("Running", "Succeeded") for p in by_rank.values()):
        if job.phase != Phase.RUNNING:
            return Decision(Action.RUNNING, "AllReplicasRunning", f"{replicas_text(job.replicas)} running")
    return Decision(Action.NONE)


def after_edit(phase: Phase | None, reason: str | None, spec_valid: bool) -> Decision | None:
    """What a spec edit does to a job that failed because of its spec. An invalid spec is checked on every pass
    (`decide`: SpecFixed once it is valid); a job whose pods the API server refused for good (PodRejected:
    an invalid pod, PodSecurity) can only be fixed by an edit, so any valid edit brings it back to Pending to be
    placed and its pods created again, as an InvalidSpec job comes back. None: the edit changes no phase."""
    if phase == Phase.FAILED and reason == REASON_POD_REJECTED and spec_valid:
        return Decision(Action.REVALIDATED, REASON_SPEC_EDITED,
                        "the spec was edited after the API server refused the job's pods; placing it again")
    return None


@dataclass(frozen=True)
class SchedulingVerdict:
    """A condition's status, reason and message (stable words: written, and said in an Event, only when they
    change)."""

    status: str
    reason: str
    message: str


def scheduling(job: JobView) -> SchedulingVerdict | None:
    """The PodsScheduled condition the current gang warrants: False with kube-scheduler's own words while one of
    its pods is Unschedulable (PodScheduled False: "0/8 nodes are available: 8 Insufficient memory."), True once
    every rank is bound; None while neither is known (pods not created or not looked at by the scheduler yet).
    The first refused rank's words, without pod names or times, so a gang placed again and refused again for
    the same reason says the same thing."""
    current = sorted((p for p in job.pods if job.generation and p.generation == job.generation and not p.deleting),
                     key=lambda p: p.rank)
    stuck = [p for p in current if p.phase == "Pending" and p.unschedulable]
    if stuck:
        targets = {p.node for p in stuck if p.node}
        if any(p.deleting and p.generation != job.generation and p.node in targets for p in job.pods):
            # a move onto nodes its own earlier gang still holds while its pods terminate: kube-scheduler counts
            # what they hold until they are gone, so the new gang waits for them; not a verdict on the placement
            return None
        return SchedulingVerdict("False", "Unschedulable",
                                 f"the scheduler cannot place the job's pods: {stuck[0].unschedulable}")
    if current and len(current) == job.replicas and all(p.scheduled for p in current):
        return SchedulingVerdict("True", "Scheduled", "every pod of the gang is bound to its node")
    return None


def _drained(job: JobView, current: Sequence[PodView], by_rank: dict[int, PodView]) -> Decision | None:
    """A rank of a running gang taken away by a drain, not by a fault: evicted (DisruptionTarget reason
    EvictionByEvictionAPI), or deleted, gone or ended while its node is cordoned. The job moves off those
    nodes from its last checkpoint; no restart is counted (backoffLimit is for failures)."""
    periodic = job.checkpoint is not None and job.checkpoint.then == PERIODIC
    if not (job.phase == Phase.RUNNING or job.phase == Phase.CHECKPOINTING and periodic):
        return None  # a move or preemption checkpointing goes on by its own protocol (ReplicaLost)
    evicted = sorted((p for p in current if p.phase != "Succeeded" and (
        p.disruption == EVICTED or p.deleting and p.node in job.cordoned)), key=lambda p: p.rank)
    missing = [r for r in range(job.replicas or 0) if r not in by_rank and not any(p.rank == r for p in current)]
    if not evicted and not (missing and job.cordoned):
        return None
    if any(p.disruption == EVICTED and not p.deleting and p.phase == "Running" for p in evicted):
        # the Eviction API marks the pod (DisruptionTarget), then deletes it: two writes a watch may bring apart.
        # Its deletion, with the grace period the gang may save in, is the next event: moving now would lose it.
        return Decision(Action.NONE, REASON_DRAINED, "a rank is being evicted: waiting for its deletion")
    nodes = {p.node for p in evicted if p.node} | set(job.cordoned)
    what = (f"replica {evicted[0].rank} ({evicted[0].name}) was evicted from node {evicted[0].node}"
            if evicted else f"replica {missing[0]} disappeared while node(s) {', '.join(sorted(job.cordoned))} "
            f"are cordoned")
    grace = [p.deletion_at for p in evicted if p.deleting and p.deletion_at is not None]
    every_rank_runs = not missing and all(p.phase == "Running" and (not p.deleting or _in_grace(job, p))
                                          for p in evicted)
    return Decision(Action.DRAIN, REASON_DRAINED, f"{what} (a drain, not a failure: no restart counted)",
                    pods=tuple(p.name for p in current if not p.deleting), nodes=tuple(sorted(nodes)),
                    deadline=min(grace) if grace and every_rank_runs else None)


def _in_grace(job: JobView, p: PodView) -> bool:
    """A pod being deleted that still runs within its grace period: it may still save its shard."""
    return p.deleting and p.phase == "Running" and p.deletion_at is not None and job.now < p.deletion_at


def _restart_or_fail(job: JobView, why: str, current: Sequence[PodView]) -> Decision:
    pods = tuple(p.name for p in current if not p.deleting)
    if job.restarts >= job.backoff_limit:
        return Decision(Action.FAIL, "BackoffLimitExceeded",
                        f"{why}; backoffLimit {job.backoff_limit} reached after {job.restarts} restarts", pods=pods)
    return Decision(Action.RESTART, "ReplicaFailed",
                    f"{why}; restarting the gang ({job.restarts + 1}/{job.backoff_limit})", pods=pods)


def _lost(replicas: int, alive: Mapping[int, PodView], pending: AskedCheckpoint) -> Decision:
    lost = sorted(set(range(replicas)) - set(alive))
    return Decision(Action.CHECKPOINT_TIMEOUT, "ReplicaLost", f"replica {lost[0]} is gone before checkpoint {pending.id}")


def _checkpointing(job: JobView, pending: AskedCheckpoint, by_rank: dict[int, PodView],
                   current: Sequence[PodView]) -> Decision:
    """The checkpoint protocol: ask every rank, wait for every answer or the deadline, then go on. A rank
    being deleted (evicted) that still runs within its grace period is asked too."""
    replicas = job.replicas or 0
    if by_rank and len(by_rank) == replicas and all(p.phase == "Succeeded" for p in by_rank.values()):
        return Decision(Action.SUCCEED, "AllReplicasSucceeded", f"all {replicas} replicas succeeded")
    alive = {r: p for r, p in by_rank.items() if p.phase in ("Pending", "Running")}
    alive.update({p.rank: p for p in current if p.rank not in alive and _in_grace(job, p)})
    acks = {r: with_save_time(parse_ack(p.checkpoint_ack, pending.id), p.checkpoint_save_time, pending.id)
            for r, p in alive.items()}
    if len(alive) == replicas and all(a is not None for a in acks.values()):
        done = {r: a for r, a in acks.items() if a is not None}
        step = min(a.step for a in done.values())
        uri = (done.get(0) or next(iter(done.values()))).uri
        sizes = [a.size_bytes for a in done.values()]
        return Decision(Action.CHECKPOINT_DONE, "CheckpointSaved",
                        f"checkpoint {pending.id} saved by all {replicas} replicas at step {step}", step=step, uri=uri,
                        size_bytes=sum(n for n in sizes if n is not None) if all(n is not None for n in sizes)
                        else None, notes=tuple(ignored_fields(done)), save=save_time(done.values()))
    if pending.urgent:
        # a fault's move waits for no new checkpoint (a rank on a dead node never answers): no rank is asked (one
        # all ranks had saved before it became urgent is used), the job goes on from its last completed one at
        # once, not a pass and a write per pod later
        if len(alive) < replicas:
            return _lost(replicas, alive, pending)
        return Decision(Action.CHECKPOINT_TIMEOUT, "CheckpointSkipped", "an urgent move waits for no new checkpoint")
    unasked = tuple(p.name for p in alive.values() if p.checkpoint_request != pending.id)
    if unasked:
        return Decision(Action.REQUEST_CHECKPOINT, "CheckpointRequested", pods=unasked)
    if len(alive) < replicas:
        return _lost(replicas, alive, pending)
    if job.now >= pending.deadline:
        waiting = sorted(r for r, a in acks.items() if a is None)
        return Decision(Action.CHECKPOINT_TIMEOUT, "CheckpointTimeout",
                        f"checkpoint {pending.id}: no answer from rank(s) {waiting} by the deadline")
    return Decision(Action.NONE)
