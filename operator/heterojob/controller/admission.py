"""Admission: ask the planner about one waiting job and apply its answer.

Under one lock, the plan (`engine.admission.plan_one`) is computed on the cache and its bookkeeping
applied at once (the placement held, the victims marked as yielding), so the next job's plan sees it.
Then, outside the lock: a placed job gets its status (Admitted, placement, generation) and its pods; a
job that waits gets its reason and message (written only when they changed) and, when the plan says so,
the jobs ahead that fit first are woken and victims or lenders are asked to checkpoint.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from heterojob.api.job import HeteroJobSpec, HeteroJobStatus, Phase
from heterojob.controller.checkpoints import Checkpoints
from heterojob.controller.decisionlog import decided
from heterojob.controller.pods import Pods
from heterojob.controller.status import StatusPatch, StatusWriter, read_status
from heterojob.engine import admission as planner
from heterojob.engine.admission import DisruptionKind, Outcome
from heterojob.engine.fleet import Fleet
from heterojob.kube.api import Kube, now_iso
from heterojob.metrics import OperatorMetrics
from heterojob.state.cache import Cache
from heterojob.constants import ANNOTATION_MIGRATE
from heterojob.controller.disruption import MIGRATE
from heterojob.state.requests import MOVING, request_for, reservation

class Admission:
    def __init__(self, kube: Kube, writer: StatusWriter, cache: Cache, pods: Pods, checkpoints: Checkpoints,
                 fleet: Callable[[], Fleet], settings: planner.Settings, metrics: OperatorMetrics,
                 poke: Callable[[str], None], forget: Callable[[str], None]) -> None:
        self.kube = kube
        self.writer = writer
        self.cache = cache
        self.pods = pods
        self.checkpoints = checkpoints
        self.fleet = fleet  # every job's holdings counted as used
        self.settings = settings
        self.metrics = metrics
        self.poke = poke
        self.forget = forget  # the job vanished under us
        self._lock = asyncio.Lock()

    async def place(self, job: dict[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                    seen_generation: int = 0) -> None:
        """Plan and apply one waiting job; `seen_generation` is the newest generation its pods carry (a
        new placement's generation is above it even when the status was lost)."""
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        request = request_for(key, job, spec, status)
        self.cache.wait(key, request)
        async with self._lock:
            now = time.time()
            plan = planner.plan_one(request, self.cache.waiting(), self.cache.holders(), self.fleet(), now,
                                    self.settings)
            if plan.outcome == Outcome.PLACED:
                assert plan.candidate is not None
                self.cache.hold(key, plan.candidate.allocation(meta["namespace"]), request.priority, now)
            for d in plan.disruptions:
                self.cache.yield_to(d.job, key)
        decided(key, "place", plan.message, result=plan.outcome.value)
        if plan.outcome != Outcome.PLACED:
            await self._wait(job, spec, status, plan)
            return
        await self._admit(job, spec, status, plan, seen_generation)

    async def _wait(self, job: dict[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                    plan: planner.Admission) -> None:
        phase = status.phase if status.phase in (Phase.PREEMPTED, *MOVING) else Phase.PENDING
        if (status.phase, status.reason, status.message) != (phase, plan.outcome.value, plan.message):
            patch = StatusPatch(status).phase(phase, plan.outcome.value, plan.message)
            patch.condition("Admitted", "False", plan.outcome.value, plan.message)
            await self.writer.write(job, patch)
            self.kube.post_event(job, "Normal", plan.outcome.value if plan.disruptions else "Waiting", plan.message)
        for key in plan.wake:
            self.poke(key)
        for d in plan.disruptions:
            if d.kind == DisruptionKind.PREEMPT:
                self.metrics.preemptions.inc()
                await self.checkpoints.ask(d.job, then="preempt", by=d.by, reason=d.explain(spec.priority.value))
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

    async def _admit(self, job: dict[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                     plan: planner.Admission, seen_generation: int) -> None:
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
        patch.condition("Admitted", "True", "Placed", plan.message)
        request = status.migration.request if status.migration is not None else None
        if status.phase in MOVING:
            patch.finish_move(f"{chosen.region}/{chosen.device_class} x{len(chosen.nodes)} "
                              f"(generation {generation})").set(migration=None)
            if request:  # the manual request is served: said in status before its annotation goes
                patch.set(handled={**status.handled, MIGRATE: request})
        if not await self.writer.write(job, patch):
            self.forget(key)
            return
        self.kube.post_event(job, "Normal", "Admitted", plan.message)
        if request and ((meta.get("annotations") or {}).get(ANNOTATION_MIGRATE) or "").strip() == request:
            await self.kube.annotate_job(meta["namespace"], meta["name"], {ANNOTATION_MIGRATE: None})
        status = read_status({**job, "status": {**(job.get("status") or {}), "placement": placed}})
        await self.pods.create(job, spec, status, tuple(range(len(chosen.nodes))))


def _last_generation(job: dict[str, Any]) -> int:
    status = job.get("status") or {}
    try:
        return int(status.get("lastGeneration") or (status.get("placement") or {}).get("generation") or 0)
    except (TypeError, ValueError, AttributeError):
        return 0
