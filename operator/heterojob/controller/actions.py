"""Carrying out `engine.execution.lifecycle.decide`'s action for one job (the reconcile pass's step after the decision):
place it (through the scheduler, after a pod-creation backoff), create or clean up its pods, ask the ranks for a
checkpoint or finish one, mark it Running, restart its gang, move it off unschedulable or drained nodes, reject,
revalidate or finish it. A Running job's own next step (`engine.execution.running.decide`) is carried out after this by
`controller/moves.py`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from heterojob.api.job import HeteroJobSpec, Phase
from heterojob.api.job_status import HeteroJobStatus, MigrationState
from heterojob.api.times import timestamp
from heterojob.constants import ANNOTATION_CHECKPOINT_REQUEST
from heterojob.controller.checkpoints import Checkpoints, resume_from
from heterojob.controller.pods import Pods
from heterojob.controller.scheduler import Scheduler
from heterojob.controller.status import StatusPatch, StatusWriter
from heterojob.engine.execution import lifecycle
from heterojob.engine.execution.lifecycle import Action, Decision
from heterojob.engine.basics.phases import Then
from heterojob.kube.api import Kube
from heterojob.metrics import OperatorMetrics
from heterojob.state.cache import Cache
from heterojob.state.job_status import where


@dataclass(frozen=True)
class Actions:
    """What acts on a lifecycle decision; the `Controller` wires it once."""

    kube: Kube
    writer: StatusWriter
    cache: Cache
    pods: Pods
    checkpoints: Checkpoints
    scheduler: Scheduler
    metrics: OperatorMetrics
    poke: Callable[[str], None]  # another pass for the job
    poke_pending: Callable[[], None]  # capacity freed: the scheduler plans the queue again
    wake_at: Callable[[str, float], None]  # a pass for the job at that time
    unschedulable_after_s: float = lifecycle.JobView.unschedulable_after_s  # a rank refused this long: elsewhere

    async def act(self, job: dict[str, Any], spec: HeteroJobSpec | None, status: HeteroJobStatus,
                   d: Decision, pods: list[lifecycle.PodView]) -> None:
        meta = job["metadata"]
        ns, name = meta["namespace"], meta["name"]
        key = f"{ns}/{name}"
        pending = status.checkpoint.pending if status.checkpoint else None

        if d.action == Action.NONE:
            if pending is not None:
                self.wake_at(key, timestamp(pending.deadline) or time.time())
            stuck = [v.unschedulable_since for v in pods if v.unschedulable and v.phase == "Pending"]
            if stuck:  # look again when the first unschedulable rank has waited long enough
                self.wake_at(key, min(stuck) + self.unschedulable_after_s)
            return  # a Running job's own step: `Moves.apply`, after this
        if d.action == Action.REQUEST_CHECKPOINT:
            assert pending is not None
            await self._annotate_checkpoint(ns, d.pods, pending.id, name)
            self.wake_at(key, timestamp(pending.deadline) or time.time())
            return
        if d.action in (Action.CHECKPOINT_DONE, Action.CHECKPOINT_TIMEOUT):
            await self.checkpoints.finish(job, status, d, pods)
            return
        patch = StatusPatch(status)
        if d.action == Action.REJECT:
            patch.reject(d.reason, d.message)  # what it was doing ends with its pods
            if (pending is not None or status.migration is not None) and self.cache.unreserve(key):
                self.poke_pending()
            await self.writer.write(job, patch)
            self.kube.post_event(job, "Warning", d.reason, d.message)
            await self.pods.release(key, [p.name for p in pods if not p.deleting])
            return
        if d.action == Action.REVALIDATED:
            await self.writer.write(job, patch.revalidate(d.reason, d.message))
            self.poke(key)
            return
        assert spec is not None
        if d.action == Action.PLACE:
            until = timestamp(status.backoff.until) if status.backoff else None
            if until is not None and until > time.time():  # pods were refused for a passing reason: wait
                self.wake_at(key, until)
                return
            await self.scheduler.place(job, spec, status, max((v.generation for v in pods), default=0))
        elif d.action == Action.CREATE_PODS:
            await self.pods.create(job, spec, status, d.ranks, confirm=True)  # its body may predate its deletion
        elif d.action == Action.CLEANUP:
            await self.pods.delete(ns, d.pods, key)
        elif d.action == Action.RUNNING:
            await self.writer.write(job, patch.run(d.reason, d.message))
            self.kube.post_event(job, "Normal", "Running", d.message)
        elif d.action == Action.RESTART:
            await self.writer.write(job, patch.restart(d.reason, d.message, where(status)))
            self.kube.post_event(job, "Warning", "Restarting", d.message)
            await self.pods.release(key, d.pods)
            self.poke(key)
        elif d.action == Action.UNSCHEDULABLE:  # nothing ran: no checkpoint, the gang goes elsewhere
            p = status.placement
            assert p is not None
            message = f"{d.message}; placing the gang elsewhere"
            patch.begin_move(Phase.MIGRATING, d.reason, message, MigrationState(
                exclude=list(d.nodes), reason=f"unschedulable: {d.message}", replicas=p.replicas,
                trigger="unschedulable", involuntary=True))
            patch.history("reschedule", d.message, where(status))
            await self.writer.write(job, patch)
            self.kube.post_event(job, "Warning", d.reason, d.message)
            await self.pods.release(key, d.pods)
            self.poke(key)
        elif d.action == Action.DRAIN:  # voluntary: no restart counted
            p = status.placement
            assert p is not None
            move = MigrationState(exclude=list(d.nodes), reason=f"drain: {d.message}", replicas=p.replicas,
                                  trigger="drain", involuntary=True)
            if d.deadline is not None and d.deadline - time.time() >= 1.0:  # every rank runs: save in the grace
                if await self.checkpoints.ask(key, then=Then.MIGRATE, by=None, reason=f"drain: {d.message}",
                                              exclude=d.nodes, replicas=p.replicas, migration=move,
                                              deadline=d.deadline, job=job):
                    self.kube.post_event(job, "Normal", d.reason, f"{d.message}; checkpointing within the evicted "
                                         f"pod's grace period, then placing the gang off node(s) {', '.join(d.nodes)}")
                    self.metrics.migrations.labels("migrate", "drain").inc()
                return
            last = status.checkpoint.last if status.checkpoint else None
            message = f"{d.message}; placing the gang off node(s) {', '.join(d.nodes)}, {resume_from(last)}"
            patch.drop_pending().begin_move(Phase.MIGRATING, d.reason, message, move)
            patch.history("migrate", d.message, where(status))
            if not await self.writer.write(job, patch):
                return
            self.kube.post_event(job, "Normal", d.reason, message)
            self.metrics.migrations.labels("migrate", "drain").inc()
            await self.pods.release(key, d.pods)
            self.poke(key)
        elif d.action in (Action.FAIL, Action.SUCCEED):
            failed = d.action == Action.FAIL
            await self.writer.write(job, patch.finish(failed, d.reason, d.message))
            self.kube.post_event(job, "Warning" if failed else "Normal", d.reason, d.message)
            await self.pods.release(key, list(d.pods) if failed else [])

    async def _annotate_checkpoint(self, namespace: str, pods: Iterable[str], checkpoint: str, job: str) -> None:
        """Step 1 of the protocol on the pods: each rank sees the request it must answer."""
        kube = self.pods.kube_of(f"{namespace}/{job}")
        await asyncio.gather(*(kube.annotate_pod(namespace, p, {ANNOTATION_CHECKPOINT_REQUEST: checkpoint})
                               for p in pods))
