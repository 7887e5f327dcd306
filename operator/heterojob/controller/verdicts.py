"""What a waiting job's pass does with the scheduler's verdict on it (`controller.scheduler`): a placement's
status and pods, a waiting job's status when its verdict changed and the checkpoints of the jobs it disturbs,
and a move that fits nowhere back to the queue. Acts; decides nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from heterojob.api.job import HeteroJobSpec, HeteroJobStatus, Phase
from heterojob.constants import ANNOTATION_MIGRATE
from heterojob.controller.checkpoints import Checkpoints
from heterojob.controller.decisionlog import decided
from heterojob.controller.pods import Pods
from heterojob.controller.status import StatusPatch, StatusWriter
from heterojob.engine.queue import admission as planner
from heterojob.engine.queue.admission import DisruptionKind
from heterojob.engine.queue.cycle import verdict
from heterojob.kube.api import Kube, now_iso
from heterojob.metrics import OperatorMetrics
from heterojob.state.cache import Cache
from heterojob.state.job_status import read_status
from heterojob.state.requests import MOVING, reservation
from heterojob.state.running import MIGRATE


class Verdicts:
    """Applies one cycle's verdict on one job, in that job's own pass (so one job's status is written by one
    pass at a time)."""

    def __init__(self, kube: Kube, writer: StatusWriter, cache: Cache, pods: Pods, checkpoints: Checkpoints,
                 metrics: OperatorMetrics, poke: Callable[[str], None], forget: Callable[[str], None],
                 placed: Callable[[str], None]) -> None:
        self.kube = kube
        self.writer = writer
        self.cache = cache
        self.pods = pods
        self.checkpoints = checkpoints
        self.metrics = metrics
        self.poke = poke
        self.forget = forget  # the job vanished under us
        self.placed = placed  # its placement is written: the scheduler forgets it waited

    async def wait(self, job: dict[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                    plan: planner.Admission) -> HeteroJobStatus | None:
        """A waiting job's verdict: its status when the verdict changed (outcome, what blocks it; not its live
        figures), an Event when its outcome changed or it disturbs others, and their checkpoints. Returns its
        status as it now stands (None: the job is gone), so the scheduler compares the next verdict with it."""
        phase = status.phase if status.phase in (Phase.PREEMPTED, *MOVING) else Phase.PENDING
        changed = (status.phase, status.reason) != (phase, plan.outcome.value)
        now = status
        if changed or plan.disruptions or verdict(status.reason, status.message) != verdict(plan.outcome.value,
                                                                                            plan.message):
            patch = StatusPatch(status).phase(phase, plan.outcome.value, plan.message)
            patch.condition("Admitted", "False", plan.outcome.value, plan.message)
            if not await self.writer.write(job, patch):
                meta = job["metadata"]
                self.forget(f"{meta['namespace']}/{meta['name']}")  # gone: the victims it asked run on
                return None
            now = status.model_copy(update={"phase": phase, "reason": plan.outcome.value, "message": plan.message})
            if changed or plan.disruptions:
                self.kube.post_event(job, "Normal", plan.outcome.value if plan.disruptions else "Waiting",
                                     plan.message)
        for d in plan.disruptions:
            if d.kind == DisruptionKind.PREEMPT:
                self.metrics.preemptions.inc()
                await self.checkpoints.ask(d.job, then="preempt", by=d.by, reason=d.explain(spec.priority.value))
                self.cache.asked(d.job)  # said in its status now (or not at all): its status tells from here on
            else:
                decided(d.job, "resize", trigger="reclaim", by=d.by, replicas=d.replicas)
                self.metrics.migrations.labels("resize", "reclaim").inc()
                keep = d.keep
                reserved = reservation(keep.region, keep.device_class, keep.per_replica, keep.nodes) if keep else None
                if await self.checkpoints.ask(d.job, then="resize", by=d.by, replicas=d.replicas,
                                              reason=d.explain(spec.priority.value), migration={
                                                  "exclude": [], "reason": d.explain(spec.priority.value),
                                                  "replicas": d.replicas, "trigger": "reclaim",
                                                  "reserved": reserved}) and keep is not None:
                    namespace = d.job.split("/", 1)[0]
                    self.cache.reserve(d.job, keep.allocation(namespace))
                    self.cache.disrupt(d.job)
                self.cache.asked(d.job)
        return now

    async def requeue(self, job: dict[str, Any], status: HeteroJobStatus, plan: planner.Admission) -> None:
        """A move that has fitted nowhere it may go (not even by preempting) for `engine.placing.requeue.REQUEUE_AFTER_S`
        ends, when the health filters keep it off every node it left anyway: the job goes back to the queue as
        Pending with the planner's per-candidate message, its move's history entry closed, its exclusions and
        reservation dropped, and it is placed as any waiting job when room frees."""
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        what = "resize" if status.phase == Phase.RESIZING else "move"
        patch = StatusPatch(status).phase(Phase.PENDING, plan.outcome.value, plan.message).set(migration=None)
        patch.finish_move("requeued: no room")
        patch.condition("Admitted", "False", plan.outcome.value, plan.message)
        if not await self.writer.write(job, patch):
            return
        message = f"the {what} found no room anywhere it may go; back in the queue: {plan.message}"
        self.kube.post_event(job, "Warning", "MoveRequeued", message)
        decided(key, "requeue", message, result=plan.outcome.value)
        if self.cache.unreserve(key):
            self.checkpoints.room_freed()  # the healthy part of its old room is free for anyone
        self.poke(key)

    async def admit(self, job: dict[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                     plan: planner.Admission, seen_generation: int, started: dict[str, Any]) -> None:
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        chosen = plan.candidate
        assert chosen is not None
        generation = max(_last_generation(job), seen_generation, 0) + 1
        placed = {
            "region": chosen.region, "deviceClass": chosen.device_class, "replicas": len(chosen.nodes),
            "perReplica": chosen.per_replica, "nodes": list(chosen.nodes), "generation": generation,
            "since": now_iso(),
        }
        cluster = self.pods.cluster_for(chosen.region)  # a member cluster's region: recorded before any pod
        if cluster is not None:
            placed["cluster"] = cluster
        patch = StatusPatch(status).phase(Phase.ADMITTED, "Placed", plan.message).set(
            placement=placed, lastGeneration=generation, startTime=status.start_time or now_iso())
        patch.set(scheduling=started)
        if status.checkpoint is not None and status.checkpoint.pending is not None:
            # asked of pods that are gone (untrusted status, or a placement ended without finishing it): a new
            # placement's pods must not be held to it
            last = status.checkpoint.last
            patch.set(checkpoint={"pending": None,
                                  "last": last.model_dump(by_alias=True, exclude_none=True) if last else None})
        patch.condition("Admitted", "True", "Placed", plan.message)
        if status.alerts:  # alerts about nodes it leaves were acted on: a lost resolve must not move it again
            patch.set(alerts=[a.model_dump(by_alias=True, exclude_none=True) for a in status.alerts
                              if set(a.nodes) & set(chosen.nodes)])
        request = status.migration.request if status.migration is not None else None
        if status.phase in MOVING:
            # status.migration stays until the new gang exists (`pods.create`): a refusal of it, now or by a
            # restarted operator that finds this placement without pods, keeps the job that move
            patch.finish_move(f"{chosen.region}/{chosen.device_class} x{len(chosen.nodes)} "
                              f"(generation {generation})")
            if request:  # the manual request is served: said in status before its annotation goes
                patch.set(handled={**status.handled, MIGRATE: request})
        if not await self.writer.write(job, patch):
            self.forget(key)
            return
        entry = self.cache.entries.get(key)
        if entry is not None and entry.planned is not None:  # its placement is in its status now
            self.cache.hold(key, chosen.allocation(meta["namespace"]), entry.priority, entry.since)
        self.placed(key)  # placed: when it waits again (a refused gang, a restart), that is new
        self.kube.post_event(job, "Normal", "Admitted", plan.message)
        if request and ((meta.get("annotations") or {}).get(ANNOTATION_MIGRATE) or "").strip() == request:
            await self.kube.annotate_job(meta["namespace"], meta["name"], {ANNOTATION_MIGRATE: None})
        status = read_status({**job, "status": {**(job.get("status") or {}), "placement": placed,
                                                "phase": Phase.ADMITTED.value}})
        await self.pods.create(job, spec, status, tuple(range(len(chosen.nodes))))


def _last_generation(job: dict[str, Any]) -> int:
    status = job.get("status") or {}
    try:
        return int(status.get("lastGeneration") or (status.get("placement") or {}).get("generation") or 0)
    except (TypeError, ValueError, AttributeError):
        return 0
