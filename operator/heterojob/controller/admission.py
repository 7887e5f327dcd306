"""Admission: ask the planner about one waiting job and apply its answer.

Under one lock, the plan (`engine.admission.plan_one`) is computed on the cache and its bookkeeping
applied at once (the placement held, the victims marked as yielding), so the next job's plan sees it.
Then, outside the lock: a placed job gets its status (Admitted, placement, generation) and its pods; a
job that waits gets its reason and message (written only when they changed) and, when the plan says so,
the jobs ahead that fit first are woken and victims or lenders are asked to checkpoint.

Under `--queue-policy mlfq` the plan goes through `engine.policy` with what `controller.knowledge` reads
from the jobs' `status.scheduling`; a placement records its start there (a starved job's promotion, in the
cache under the lock too), and a waiting job is woken when it reaches the starvation bound. `upgrade_for`
asks `engine.policy.upgrades` for a running job (the disruption step acts on the answer).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from heterojob.api.job import HeteroJobSpec, HeteroJobStatus, Phase, Scheduling
from heterojob.controller.checkpoints import Checkpoints
from heterojob.controller.decisionlog import decided
from heterojob.controller.pods import Pods
from heterojob.controller.status import StatusPatch, StatusWriter, read_status
from heterojob.engine import admission as planner
from heterojob.engine.admission import DisruptionKind, Outcome
from heterojob.engine import transfer
from heterojob.engine.fleet import DeviceClass, Fleet
from heterojob.engine.placement import Request
from heterojob.controller.knowledge import Knower
from heterojob.engine import completion, queueing, requeue
from heterojob.engine import policy as heterogeneity
from heterojob.engine.queueing import QueueSettings
from heterojob.kube.api import Kube, now_iso
from heterojob.metrics import OperatorMetrics
from heterojob.state.cache import Cache
from heterojob.constants import ANNOTATION_MIGRATE
from heterojob.controller.disruption import MIGRATE
from heterojob.state.requests import MOVING, move_began, origin_of, request_for, reservation, transfer_move
from heterojob.state.times import timestamp

PROBE_SHARE = 0.05  # a probe may cost at most this share of the job's expected remaining time (as the replay)
MESSAGE_REFRESH_S = 5.0  # a waiting job's message (same outcome, new figures) is rewritten at most this often


class Admission:
    def __init__(self, kube: Kube, writer: StatusWriter, cache: Cache, pods: Pods, checkpoints: Checkpoints,
                 fleet: Callable[[], Fleet], settings: planner.Settings, metrics: OperatorMetrics,
                 poke: Callable[[str], None], forget: Callable[[str], None],
                 queue: QueueSettings | None = None, classes: Callable[[], Mapping[str, DeviceClass]] = dict,
                 transfer_settings: transfer.Settings = transfer.Settings(),
                 wake_at: Callable[[str, float], None] | None = None,
                 requeue_after_s: float = requeue.REQUEUE_AFTER_S) -> None:
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
        self.lock = asyncio.Lock()  # placements and move reservations are planned under it
        self._noted: dict[str, float] = {}  # job -> when its waiting message was last written
        self.queue = queue  # --queue-policy mlfq: engine.policy orders the queue and picks classes
        self.classes = classes  # AcceleratorClasses (device memory, for a checkpoint size estimate)
        self.transfer = transfer_settings  # what a move between regions is assumed to cost (engine.transfer)
        self.knower = Knower(cache)  # engine.policy's Knowledge from the jobs' status.scheduling
        self.wake_at = wake_at  # a waiting job's next look at its starvation promotion
        self.requeue_after_s = requeue_after_s  # a move off bad nodes that fits nowhere this long: back to the queue

    def upgrade_for(self, key: str, classes: Sequence[str], now: float, save_s: float | None = None
                    ) -> completion.Upgrade | None:
        """A move up (or a probe) that pays for running job `key` now, onto free devices of `classes` no
        waiting job chose to wait for (`engine.policy.upgrades`, as the replay asks it); None under fifo.
        `save_s`: its last checkpoint's save time (else the default move cost's)."""
        if self.queue is None:
            return None
        fleet, waiting, holders = self.fleet(), self.cache.waiting(), self.cache.holders()
        mine = [h for h in holders if h.job == key and not h.waiting]
        if not mine:
            return None
        free, _ = heterogeneity.devices_by_class(fleet)  # asked on every pass of a running job: cheap test first
        here = mine[0].allocation
        if not any(free.get(c, 0) >= here.devices for c in classes if c != here.device_class):
            return None
        known = self.knower.knowledge(fleet, waiting, holders, self.queue)
        waiting_for: frozenset[str] = frozenset()
        if waiting:
            waiting_for = heterogeneity.prepare(waiting, holders, fleet, now, known, self.queue,
                                                self.settings.min_runtime_s).waiting_for
        cost = completion.MoveCost(save_s=save_s) if save_s else completion.MoveCost()
        moves = heterogeneity.upgrades(mine, fleet, now, known, waiting_for, cost, self.settings.min_runtime_s,
                                       {key: list(classes)}, PROBE_SHARE)
        return moves[0] if moves else None

    def drop(self, key: str) -> None:
        """A deleted job: nothing kept about it."""
        self._noted.pop(key, None)

    async def place(self, job: dict[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                    seen_generation: int = 0) -> None:
        """Plan and apply one waiting job; `seen_generation` is the newest generation its pods carry (a
        new placement's generation is above it even when the status was lost)."""
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        request = request_for(key, job, spec, status)
        self.cache.wait(key, request)
        async with self.lock:
            now = time.time()
            fleet, waiting, holders = self.fleet(), self.cache.waiting(), self.cache.holders()
            policy = ((self.knower.knowledge(fleet, waiting, holders, self.queue), self.queue)
                      if self.queue is not None else None)
            move = self._involuntary(spec, status, request, now)
            if move is not None:  # it had to leave: the cheapest transfer among the regions that fit
                plan = planner.plan_relocation(request, waiting, holders, fleet, now, self.settings, move)
            else:
                plan = planner.plan_one(request, waiting, holders, fleet, now, self.settings, policy)
            started: dict[str, Any] = {}
            if plan.outcome == Outcome.PLACED:
                assert plan.candidate is not None
                self.cache.hold(key, plan.candidate.allocation(meta["namespace"]), request.priority, now)
                # its service from now on (a promotion), seen by the next plan before the status comes back
                started = StatusPatch(status).start_run(self.queue, waited_from(job, status), now).scheduling()
                self.cache.entry(key).scheduling = Scheduling.model_validate(
                    {k: v for k, v in started.items() if v is not None})
            for d in plan.disruptions:
                self.cache.yield_to(d.job, key)
            back: float | None = None  # a move that fits nowhere: when it goes back to the queue
            if plan.outcome == Outcome.NO_ROOM and status.phase in MOVING and status.migration is not None:
                m = status.migration
                back = requeue.requeue_at(m.exclude, bool(m.involuntary), move_began(status), fleet,
                                          self.requeue_after_s)
        decided(key, "place", plan.message, result=plan.outcome.value)
        if plan.outcome != Outcome.PLACED:
            await self._wait(job, spec, status, plan, back)
            return
        await self._admit(job, spec, status, plan, seen_generation, started)

    def _involuntary(self, spec: HeteroJobSpec, status: HeteroJobStatus, request: Request, now: float
                     ) -> transfer.Move | None:
        """What an involuntary move out of its region weighs (None: not such a move, or it stays in its region)."""
        moving = status.migration
        if status.phase not in MOVING or moving is None or not moving.involuntary:
            return None
        region, cls = origin_of(status)
        if not region or request.allowed_regions == (region,):
            return None
        return transfer_move(spec, status, region, cls, request.replicas, self.classes(), now, self.transfer,
                             voluntary=False)

    async def _wait(self, job: dict[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                    plan: planner.Admission, back: float | None = None) -> None:
        """`back`: when this move, which found no room, goes back to the queue (`engine.requeue`; None: it
        keeps waiting in its phase with its exclusions and reservation)."""
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if back is not None and back <= time.time():
            await self._requeue(job, status, plan)
            return
        phase = status.phase if status.phase in (Phase.PREEMPTED, *MOVING) else Phase.PENDING
        changed = (status.phase, status.reason) != (phase, plan.outcome.value)
        now = time.monotonic()
        # the message carries live figures (free devices): while the outcome holds, refresh it now and then,
        # not on every pass (each write wakes every watcher of the job)
        if changed or plan.disruptions or (status.message != plan.message
                                           and now - self._noted.get(key, 0.0) >= MESSAGE_REFRESH_S):
            self._noted[key] = now
            patch = StatusPatch(status).phase(phase, plan.outcome.value, plan.message)
            patch.condition("Admitted", "False", plan.outcome.value, plan.message)
            await self.writer.write(job, patch)
            if changed or plan.disruptions:
                self.kube.post_event(job, "Normal", plan.outcome.value if plan.disruptions else "Waiting",
                                     plan.message)
        promote = queueing.promotion_time(waited_from(job, status), self.queue) if self.queue is not None else None
        wake = [t for t in (promote, back) if t is not None and t > time.time()]
        if wake and self.wake_at is not None:
            self.wake_at(key, min(wake))  # promoted to the first level, or back to the queue, then: planned again
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

    async def _requeue(self, job: dict[str, Any], status: HeteroJobStatus, plan: planner.Admission) -> None:
        """A move that has fitted nowhere it may go (not even by preempting) for `engine.requeue.REQUEUE_AFTER_S`
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
        self._noted[key] = time.monotonic()
        message = f"the {what} found no room anywhere it may go; back in the queue: {plan.message}"
        self.kube.post_event(job, "Warning", "MoveRequeued", message)
        decided(key, "requeue", message, result=plan.outcome.value)
        if self.cache.unreserve(key):
            self.checkpoints.room_freed()  # the healthy part of its old room is free for anyone
        self.poke(key)

    async def _admit(self, job: dict[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
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




def waited_from(job: Mapping[str, Any], status: HeteroJobStatus) -> float:
    """When the job last started waiting: status.scheduling.waitingSince, else its creation."""
    since = timestamp(status.scheduling.waiting_since) if status.scheduling is not None else None
    return since or timestamp((job.get("metadata") or {}).get("creationTimestamp")) or time.time()
