"""The checkpoint protocol's actuation: ask (step 1), annotate pods (via the pass), finish (step 3).

`ask` records `status.checkpoint.pending` (id, reason, deadline, what follows) before anything else; the
job's own passes then annotate its pods and, through `engine.execution.lifecycle`, see every ack or the deadline.
`finish` records the checkpoint (or the progress lost) and goes on: a periodic checkpoint leaves the job
Running; a migration or resize writes Migrating/Resizing; a preemption writes Preempted. The new state
is written before the old gang is deleted, so a restarted operator goes on from there, exactly once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from heterojob.api.common import SpecError
from heterojob.api.job_spec import job_spec
from heterojob.api.job_status import CheckpointRef, HeteroJobStatus, MigrationState, PendingCheckpoint
from heterojob.controller.decisionlog import decided
from heterojob.controller.events import move_event
from heterojob.controller.pods import Pods
from heterojob.controller.status import StatusPatch, StatusWriter
from heterojob.state.job_status import read_status, where
from heterojob.engine.basics import acks
from heterojob.engine.execution import lifecycle
from heterojob.engine.execution.lifecycle import Action, Decision, PodView
from heterojob.engine.basics.phases import THEN_PHASE, Then
from heterojob.kube.api import Conflict, Kube, now_iso
from heterojob.state.cache import Cache
from heterojob.api.times import iso, timestamp

log = logging.getLogger("heterojob.controller")

MIN_SPAN_S = 2.0  # a speed is measured over at least this long (status times are whole seconds)
MAX_STEPS_PER_S = 1e9  # what status.scheduling.speeds accepts
PERIODIC = lifecycle.PERIODIC  # what follows a periodic checkpoint: the job goes on where it is
ASK_ATTEMPTS = 3  # an ask decided on a fresh read after each 409 Conflict, at most this often


def resume_from(last: CheckpointRef | None) -> str:
    """Where a job placed again starts, from its last completed checkpoint (`status.checkpoint.last`): the
    words every message about a move uses, so none promises a checkpoint the job never saved."""
    return f"resumes from {last.uri}" if last is not None and last.uri else "restarts from scratch"


class Checkpoints:
    def __init__(self, kube: Kube, writer: StatusWriter, cache: Cache, pods: Pods,
                 poke: Callable[[str], None], room_freed: Callable[[], None]) -> None:
        self.kube = kube
        self.writer = writer
        self.cache = cache
        self.pods = pods
        self.poke = poke
        self.room_freed = room_freed

    async def ask(self, key: str, then: Then | str, by: str | None, reason: str, exclude: Sequence[str] = (),
                  urgent: bool = False, replicas: int | None = None,
                  migration: MigrationState | Mapping[str, Any] | None = None,
                  handled: dict[str, str] | None = None, deadline: float | None = None,
                  job: Mapping[str, Any] | None = None) -> bool:
        """Record a pending checkpoint in the job's status (step 1); its own passes annotate the pods.

        One at a time: the first one asked goes on (a periodic one gives way). `urgent`: the job may be
        dead already (failed device); go on from the last checkpoint at once. `deadline` (unix seconds): an
        earlier one than spec.checkpoint.timeoutSeconds gives (a drain's grace period). `migration` (the move's
        state, with the room reserved for it) and `handled` (the request annotation this consumes) are
        written in the same patch: intent is in the status before any trigger is let go. False when
        nothing was asked. (`then` as a string and `migration` as API-named fields are read into `Then` and
        `MigrationState`.)

        Written onto the body the operator has (`job`, the asking pass's; else the newest it knows) with that
        version as a precondition, not after a read of its own (client-go's optimistic concurrency): only a
        409 Conflict (someone wrote since) reads the job from the API server, and the ask is decided again on
        that body, at most `ASK_ATTEMPTS` times; then nothing is asked (False) and the job's pass looks again,
        as the watch event of whoever keeps writing it would make it.
        """
        then = Then(then)
        move = MigrationState.model_validate(migration) if isinstance(migration, Mapping) else migration
        namespace, name = key.split("/", 1)
        body = self.writer.base(key, job) if job is not None else self.writer.newest(key)
        for _ in range(ASK_ATTEMPTS):
            if body is None:
                body = await self.kube.get_job(namespace, name)
                if body is None:
                    self.cache.stop_yielding(key)
                    return False
            try:
                return await self._ask(key, body, then, by, reason, exclude, urgent, replicas, move, handled,
                                       deadline)
            except Conflict:
                log.info("job %s changed since the version its checkpoint was asked on; reading it again", key)
                body = None
        log.warning("job %s: checkpoint (%s) not asked: the job changed under each of %d writes", key, reason,
                    ASK_ATTEMPTS)
        self.poke(key)
        return False

    async def _ask(self, key: str, job: Mapping[str, Any], then: Then, by: str | None, reason: str,
                   exclude: Sequence[str], urgent: bool, replicas: int | None, move: MigrationState | None,
                   handled: dict[str, str] | None, deadline: float | None) -> bool:
        """`ask` on one body of the job, written with its version as a precondition (`Conflict` when stale)."""
        status = read_status(job)
        if status.checkpoint and status.checkpoint.pending and status.checkpoint.pending.then != PERIODIC:
            return False
        try:
            timeout = job_spec(job).checkpoint.timeout_seconds
        except SpecError:
            timeout = 120
        now = time.time()
        generation = status.placement.generation if status.placement else 0
        # a fresh id: one asked in the same second as the last must not match that one's acks on the pods
        # (the pods still carry them, and the new checkpoint would count as saved before anyone saved it)
        checkpoint_id = f"g{generation}-{int(now)}"
        if status.checkpoint and checkpoint_id in {c.id for c in (status.checkpoint.last, status.checkpoint.pending)
                                                   if c is not None}:
            checkpoint_id = f"g{generation}-{int(now * 1000)}"
        if deadline is not None and not urgent:
            timeout = max(0, min(timeout, int(deadline - now)))
        pending = PendingCheckpoint(id=checkpoint_id, reason=reason, requested_at=now_iso(),
                                    deadline=iso(now if urgent else now + timeout), then=then, by=by,
                                    exclude=sorted(exclude), replicas=replicas)
        last = status.checkpoint.last if status.checkpoint else None
        message = (f"{reason}: moving at once, {resume_from(last)}" if urgent else
                   f"{reason}: checkpoint {pending.id} requested, deadline in {timeout}s")
        patch = StatusPatch(status).ask_checkpoint(pending, message, move, handled)
        if not await self.writer.write(job, patch, precondition=True):
            self.cache.stop_yielding(key)  # gone
            return False
        if then != PERIODIC and not urgent:  # an urgent move asks no rank: its Migrating Event tells it
            self.kube.post_event(job, "Normal", "CheckpointRequested", message)
        decided(key, "request-checkpoint", then=then, reason=reason)
        self.poke(key)
        return True

    async def cancel(self, job: dict[str, Any], status: HeteroJobStatus, why: str, saved: Decision | None = None,
                     what: str = "move", reason: str = "MoveCancelled", cause: str = "Cancelled") -> None:
        """Call off a move (`what`: or a preemption, a reclaim) still at its checkpoint (its pods run on): the reservation
        ends, the job runs on, and the job it yielded to (if any) plans again. `saved`: the ranks had all saved
        it (CHECKPOINT_DONE), so it becomes the last checkpoint. `reason`: the phase's and the Event's reason;
        `cause`: the Checkpointing condition's."""
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        message = f"{what} cancelled: {why}; the job runs on where it is"
        last = status.checkpoint.last if status.checkpoint else None
        pending = status.checkpoint.pending if status.checkpoint else None
        if saved is not None and saved.action == Action.CHECKPOINT_DONE and pending is not None:
            last = _saved(pending.id, pending.requested_at, saved, time.time())
        patch = StatusPatch(status).cancel_move(last, reason, cause, message)
        if not await self.writer.write(job, patch):
            return
        self.kube.post_event(job, "Normal", reason, message)
        decided(key, f"cancel-{what}", message, reason=cause)
        self.cache.disrupt(key, False)
        self.cache.stop_yielding(key)
        unreserved = self.cache.unreserve(key)
        yielded_to = pending.by if pending is not None else None
        if unreserved or yielded_to:  # room it held, or room it was to give back: the queue is planned again
            self.room_freed()
        if yielded_to:
            self.poke(yielded_to)  # it plans again: another victim, or it waits
        self.poke(key)

    async def finish(self, job: dict[str, Any], status: HeteroJobStatus, d: Decision, pods: Sequence[PodView]
                     ) -> None:
        """Step 3: record the checkpoint (or what was lost) and go on with what it was asked for."""
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        assert status.checkpoint is not None and status.checkpoint.pending is not None
        pending = status.checkpoint.pending
        last = status.checkpoint.last
        now = time.time()
        lost_s: float | None = 0.0
        if d.action == Action.CHECKPOINT_DONE:
            last = _saved(pending.id, pending.requested_at, d, now)
            for note in d.notes:  # a size or times the SDK sent that do not read: the checkpoint counts, they not
                log.warning("job %s checkpoint %s: %s", key, pending.id, note)
        else:
            since = timestamp(last.time) if last else None
            since = since or (timestamp(status.placement.since) if status.placement else None)
            lost_s = round(now - since, 1) if since else None
        then = pending.then
        patch = StatusPatch(status).end_checkpoint(last, d.reason, d.message)
        if d.action == Action.CHECKPOINT_DONE and d.step is not None:
            measure(patch, status, d.step, reached_at(d, timestamp(pending.requested_at), now))
        patch.condition("Checkpointing", "False", d.reason, d.message)
        if then == PERIODIC:
            await self.writer.write(job, patch)
            if d.action != Action.CHECKPOINT_DONE:
                self.kube.post_event(job, "Warning", "CheckpointMissed", d.message)
            self.poke(key)
            return
        requested = timestamp(pending.requested_at) or now
        patch.history(then, f"{pending.reason}; {d.message}", where(status),
                      durationSeconds=round(now - requested, 1),
                      progressLostSteps=0 if d.action == Action.CHECKPOINT_DONE else None,
                      progressLostSeconds=lost_s)
        resume = resume_from(last)
        if then in THEN_PHASE:
            phase = THEN_PHASE[then]
            message = f"{pending.reason}; {d.message}; placing again, {resume}"
            move = (status.migration or MigrationState()).model_copy(update={
                "exclude": list(pending.exclude), "reason": pending.reason, "replicas": pending.replicas})
            patch.begin_move(phase, phase.value, message, move)
        else:
            message = f"{pending.reason}; {d.message}; requeued, {resume} when room frees"
            patch.preempt(message)
        if not await self.writer.write(job, patch):
            return
        trigger = status.migration.trigger if status.migration is not None else None
        self.kube.post_event(job, *move_event(then, trigger, d.action == Action.CHECKPOINT_DONE), message)
        decided(key, then, d.message, reason=d.reason)
        self.cache.stop_yielding(key)
        await self.pods.release(key, [p.name for p in pods if not p.deleting])
        if pending.by:
            self.poke(pending.by)
        self.poke(key)


def _saved(checkpoint_id: str, requested_at: str, d: Decision, now: float) -> CheckpointRef:
    """status.checkpoint.last for a checkpoint every rank saved (`d`: CHECKPOINT_DONE). Its save time and
    completion are the ranks' own (their acks' start and end: `engine.basics.acks.recorded`), so an operator that was
    down, or slow to look, while they saved does not count into the figure the transfer model plans moves with;
    an older SDK's acks, without times, leave the operator's observation."""
    asked = timestamp(requested_at)
    seconds, ended = acks.recorded(d.save, asked, now)
    return CheckpointRef(id=checkpoint_id, step=d.step, uri=d.uri, time=iso(ended), size_bytes=d.size_bytes,
                         save_seconds=seconds)


def reached_at(d: Decision, asked: float | None, now: float) -> float:
    """When the ranks reached the step their checkpoint holds: the first rank's start of its save (within the
    span from the request to `now`), else the request."""
    if d.save is None or asked is None:
        return asked if asked is not None else now
    return min(now, max(asked, d.save.started))


def measure(patch: StatusPatch, status: HeteroJobStatus, step: int, at: float) -> None:
    """The job's steps/s at its placement's class and size, from the step a checkpoint holds (`at`: when the
    ranks were asked, so the save time is not counted) and the one before it in this placement, else the
    checkpoint it resumed from (the last one, step 0 without) at the placement's start (a restore counts in)."""
    p = status.placement
    since = timestamp(p.since) if p is not None else None
    if p is None or since is None:
        return
    prev = status.checkpoint.last if status.checkpoint else None
    prev_at = (timestamp(prev.time) or 0.0) - (prev.save_seconds or 0.0) if prev is not None else None
    if prev is not None and prev.step is not None and prev_at is not None and prev_at >= since:
        start_step, start = prev.step, prev_at
    else:
        start_step, start = (prev.step or 0) if prev is not None else 0, since
    if at - start < MIN_SPAN_S or step <= start_step:
        return
    rate = (step - start_step) / (at - start)
    if rate > MAX_STEPS_PER_S:
        log.warning("checkpoint at step %d of %s/%s implies %.3g steps/s: not taken as a speed", step,
                    p.region, p.device_class, rate)
        return
    patch.measured(p.device_class, len(p.nodes), rate, at)
