"""Admission: one scheduling cycle for the whole waiting queue; each verdict applied by its job's own pass.

Step of the pipeline (Kueue's scheduling cycle):
- `place`, from a waiting job's reconcile pass, registers (or updates) its request in the cache and wakes
  the scheduler. The pass does not plan. When the scheduler left a verdict for that request, the pass
  applies it instead: a placement's status and pods; a waiting job's status, written only when its verdict
  (`engine.cycle.verdict`: outcome and message less its live figures) changed; the checkpoints of the
  victims and lenders it disturbs; a move that fits nowhere goes back to the queue (`engine.requeue`).
- `run` is the scheduler: woken by coalesced events (`engine.cycle.Trigger`: a request added, edited or
  removed, room given back, the fleet changed, a timer), it takes one snapshot of the cache under the
  planner's lock, plans the whole queue once (`engine.cycle.plan_cycle`, in a worker thread so probes and
  webhooks are answered meanwhile), records its bookkeeping in the cache at once (a placement held, a
  victim asked: `Cache.plan`, `Cache.yield_to`, so later cycles and other steps see them before the status
  comes back) and pokes only the jobs with something to do. A cycle with nothing new is skipped; cycles
  are spaced so planning takes at most about half the operator's time.

Under `--queue-policy mlfq` the cycle goes through `engine.policy` with what `controller.knowledge` reads
from the jobs' `status.scheduling`; a placement records its start there (a starved job's promotion, in the
cache at once too), and the scheduler wakes when a waiting job reaches the starvation bound.
`upgrade_for` asks `engine.policy.upgrades` for a running job (the disruption step acts on the answer), on
the classes the last cycle's waiting jobs chose to wait for.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from heterojob.api.job import HeteroJobSpec, HeteroJobStatus, Phase, Scheduling
from heterojob.controller.checkpoints import Checkpoints
from heterojob.controller.decisionlog import decided
from heterojob.controller.pods import Pods
from heterojob.controller.status import StatusPatch, StatusWriter
from heterojob.state.job_status import read_status
from heterojob.engine import admission as planner
from heterojob.engine.admission import DisruptionKind, Outcome
from heterojob.engine import transfer
from heterojob.engine.cycle import Cycle, Trigger, plan_cycle, verdict
from heterojob.engine.fleet import DeviceClass, Fleet
from heterojob.engine.placement import Request
from heterojob.state.knowledge import Knower
from heterojob.engine import completion, queueing, ranking, requeue, rooms
from heterojob.engine import policy as heterogeneity
from heterojob.engine.queueing import QueueSettings
from heterojob.kube.api import Kube, now_iso
from heterojob.metrics import OperatorMetrics
from heterojob.state.cache import Cache
from heterojob.constants import ANNOTATION_MIGRATE
from heterojob.state.running import MIGRATE
from heterojob.state.requests import MOVING, move_began, origin_of, request_for, reservation, transfer_move
from heterojob.api.times import timestamp

log = logging.getLogger("heterojob.controller")

PROBE_SHARE = 0.05  # a probe may cost at most this share of the job's expected remaining time (as the replay)
BATCH_S = 0.02  # events within this long of the first are planned in one cycle
RECHECK_S = 30.0  # while jobs wait, a cycle at least this often (what the clock alone changes in a plan)
CLOCK = "\x00clock"  # the Trigger timer of that recheck (no job is named so)
INLINE_WAIT_S = 2.0  # a waiting job's pass waits this long for the cycle that plans its new request
DUTY = 0.5  # after a cycle of c CPU-seconds the next starts no sooner than c * (1 - DUTY) / DUTY later


@dataclass(frozen=True)
class Waiting:
    """What a cycle needs of a waiting job beyond its request, from its last pass."""

    request: Request  # what it asked for at its last pass (a change is planned again)
    status: HeteroJobStatus
    waited_from: float  # when it last started waiting (the starvation bound counts from it)
    move: transfer.Move | None = None  # an involuntary move out of its region: the transfer it weighs
    said: tuple[str, str] = ("", "")  # the verdict its status says now (`engine.cycle.verdict`)


@dataclass
class Verdict:
    """A cycle's plan for one job, kept until the job's pass applies it."""

    request: Request
    admission: planner.Admission
    started: dict[str, Any] = field(default_factory=dict)  # PLACED: its status.scheduling from now on
    requeue: bool = False  # a move that fits nowhere goes back to the queue now


class Scheduler:
    def __init__(self, kube: Kube, writer: StatusWriter, cache: Cache, pods: Pods, checkpoints: Checkpoints,
                 fleet: Callable[[], Fleet], settings: planner.Settings, metrics: OperatorMetrics,
                 poke: Callable[[str], None], forget: Callable[[str], None],
                 queue: QueueSettings | None = None, classes: Callable[[], Mapping[str, DeviceClass]] = dict,
                 transfer_settings: transfer.Settings = transfer.Settings(),
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
        self.queue = queue  # --queue-policy mlfq: engine.policy orders the queue and picks classes
        self.classes = classes  # AcceleratorClasses (device memory, for a checkpoint size estimate)
        self.transfer = transfer_settings  # what a move between regions is assumed to cost (engine.transfer)
        self.knower = Knower(cache)  # engine.policy's Knowledge from the jobs' status.scheduling
        self.requeue_after_s = requeue_after_s  # a move off bad nodes that fits nowhere this long: back to the queue
        self.trigger = Trigger()
        self.waiting: dict[str, Waiting] = {}  # job -> what its last pass said of it
        self.verdicts: dict[str, Verdict] = {}  # job -> the last cycle's plan for it, until its pass applies it
        self.waiting_for: frozenset[str] = frozenset()  # classes the last cycle's waiting jobs wait for
        self.free: dict[str, int] = {}  # free devices per class after the last cycle's placements
        self.memo = ranking.Memo()  # what the policy may reuse between cycles (the plan is the same without it)
        self.memory = rooms.Memory()  # what placement found per class and region while its room is unchanged
        self.cycles = 0  # cycles planned (tests, metrics)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._next = 0.0  # monotonic time before which no cycle starts (the duty bound)
        self._done: asyncio.Future[None] | None = None  # resolved when the next cycle has planned
        self._passes: set[str] = set()  # jobs whose pass waits for the next cycle's verdict (no poke needed)

    # --- events --------------------------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run(), name="scheduler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def wake(self) -> None:
        """Something happened that a cycle should see (coalesced)."""
        self._wake.set()

    def room_freed(self) -> None:
        """Room was given back or the fleet changed: the next cycle plans the queue again."""
        self.trigger.room()
        self.wake()

    def drop(self, key: str) -> None:
        """A deleted job: nothing kept about it."""
        self.waiting.pop(key, None)
        self.verdicts.pop(key, None)
        self.trigger.at(key, None)
        self.trigger.request(key)
        self.wake()

    async def run(self) -> None:
        """The scheduler's loop: one cycle per batch of events, no sooner than the duty bound allows."""
        while True:
            next_timer = self.trigger.next_timer()
            timeout = None if next_timer is None else max(0.0, next_timer - time.time()) + 0.01
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                pass
            self._wake.clear()
            await asyncio.sleep(max(BATCH_S, self._next - time.monotonic()))
            try:
                await self.cycle()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - one bad cycle must not stop admission; the next one plans again
                log.exception("scheduling cycle failed; planning again in 1s")
                self.trigger.room()
                self._next = time.monotonic() + 1.0
                self._wake.set()

    # --- the cycle -----------------------------------------------------------------------------------------

    async def cycle(self) -> bool:
        """Plan the whole queue once, when anything happened since the last cycle; True when it planned."""
        pokes: list[str] = []
        async with self.lock:
            now = time.time()
            if not self.trigger.due(now):
                return False
            self.trigger.planned(now)
            fleet, waiting, holders = self.fleet(), self.cache.waiting(), self.cache.holders()
            policy = ((self.knower.knowledge(fleet, waiting, holders, self.queue), self.queue)
                      if self.queue is not None else None)
            moves = {r.job: w.move for r in waiting if (w := self.waiting.get(r.job)) is not None and w.move}
            started_at = time.monotonic()
            cycle, cpu = await asyncio.to_thread(_timed, _explained, waiting, holders, fleet, now, self.settings,
                                                 policy, moves, self.memo, self.memory)
            self.cycles += 1
            self.metrics.cycle_seconds.observe(cpu)
            self.metrics.cycle_waiting.set(len(waiting))
            self.waiting_for = cycle.waiting_for
            requests = {r.job: r for r in waiting}
            for job, admission in cycle.admissions.items():
                request = requests[job]
                entry = self.cache.entries.get(job)
                if entry is None or entry.request != request:
                    continue  # edited or gone while it was planned: its own event plans it again
                if self._decide(job, request, admission, fleet, now):
                    pokes.append(job)
            if policy is not None and cycle.room_grew(self.free):
                # the running jobs an upgrade move may pay for look now (each asks `upgrade_for` on its pass,
                # with its own checkpoint's cost)
                pokes.extend(u.job for u in heterogeneity.upgrades(
                    [h for h in holders if not h.waiting], fleet, now, policy[0], self.waiting_for,
                    completion.MoveCost(), self.settings.min_runtime_s, None, PROBE_SHARE))
            self.free = dict(cycle.free)
            if cycle.acted:
                self.trigger.room()  # what it placed and disturbed changes the snapshot: plan once more
                self._wake.set()
            # a plan drifts with the clock alone (expected completions, the minimum runtime before preemption,
            # attained-service levels): while jobs wait, the queue is planned again at least this often
            self.trigger.at(CLOCK, now + RECHECK_S if waiting else None)
            self._next = time.monotonic() + (time.monotonic() - started_at) * (1 - DUTY) / DUTY
        if self._done is not None and not self._done.done():
            self._done.set_result(None)
        for job in pokes:
            if job not in self._passes:
                self.poke(job)
        return True

    def _decide(self, job: str, request: Request, admission: planner.Admission, fleet: Fleet, now: float) -> bool:
        """Record a cycle's plan for one job in the cache (under the lock) and keep it for the job's pass;
        True when the pass has something to do."""
        w = self.waiting.get(job)
        if w is None:
            return False  # not seen by a pass of this operator yet (restored from status): its pass registers it
        if admission.outcome == Outcome.PLACED:
            assert admission.candidate is not None
            started = StatusPatch(w.status).start_run(self.queue, w.waited_from, now).scheduling()
            self.cache.plan(job, admission.candidate.allocation(request.namespace), request.priority, now, request)
            # its service from now on (a promotion), seen by the next plan before the status comes back
            self.cache.entry(job).scheduling = Scheduling.model_validate(
                {k: v for k, v in started.items() if v is not None})
            self.verdicts[job] = Verdict(request, admission, started)
            self.trigger.at(job, None)
            return True
        for d in admission.disruptions:
            self.cache.yield_to(d.job, job, asked=True)
        earlier = self.verdicts.get(job)
        if earlier is not None and earlier.admission.disruptions:  # not applied yet: its victims are asked still
            new = {d.job for d in admission.disruptions}
            admission = planner.Admission(admission.job, admission.outcome, admission.message, admission.candidate,
                                          (*admission.disruptions,
                                           *(d for d in earlier.admission.disruptions if d.job not in new)))
        back = None
        status = w.status
        if admission.outcome == Outcome.NO_ROOM and status.phase in MOVING and status.migration is not None:
            m = status.migration
            back = requeue.requeue_at(m.exclude, bool(m.involuntary), move_began(status), fleet, self.requeue_after_s)
        promote = queueing.promotion_time(w.waited_from, self.queue) if self.queue is not None else None
        if back is not None and back <= now:
            self.verdicts[job] = Verdict(request, admission, requeue=True)
            self.trigger.at(job, None)
            return True
        self.trigger.at(job, min((t for t in (promote, back) if t is not None and t > now), default=None))
        phase = status.phase if status.phase in (Phase.PREEMPTED, *MOVING) else Phase.PENDING
        if (admission.disruptions or status.phase != phase
                or verdict(admission.outcome.value, admission.message) != w.said):
            self.verdicts[job] = Verdict(request, admission)
            return True
        self.verdicts.pop(job, None)  # nothing new to say
        return False

    # --- a waiting job's pass ------------------------------------------------------------------------------

    def upgrade_for(self, key: str, classes: Sequence[str], now: float, save_s: float | None = None
                    ) -> completion.Upgrade | None:
        """A move up (or a probe) that pays for running job `key` now, onto free devices of `classes` no
        waiting job chose to wait for (`engine.policy.upgrades`, as the replay asks it; the classes waited
        for are the last cycle's); None under fifo. `save_s`: its last checkpoint's save time (else the
        default move cost's)."""
        if self.queue is None:
            return None
        entry = self.cache.entries.get(key)
        if entry is None or entry.allocation is None or entry.request is not None:
            return None
        mine = [h for h in self.cache.holders_of(key) if not h.waiting]
        if not mine:
            return None
        here = mine[0].allocation
        # asked on every pass of a running job: cheap tests first (the last cycle's free room, then the fleet's
        # now); room freed since wakes a cycle, which pokes the jobs an upgrade may pay for
        if self.cycles and self.trigger.due(now) is False and not any(
                self.free.get(c, 0) >= here.devices for c in classes if c != here.device_class):
            return None
        fleet = self.fleet()
        free, _ = heterogeneity.devices_by_class(fleet)
        if not any(free.get(c, 0) >= here.devices for c in classes if c != here.device_class):
            return None
        known = self.knower.knowledge(fleet, self.cache.waiting(), self.cache.holders(), self.queue)
        waiting_for = self.waiting_for if self.cache.waiting() else frozenset()
        cost = completion.MoveCost(save_s=save_s) if save_s else completion.MoveCost()
        moves = heterogeneity.upgrades(mine, fleet, now, known, waiting_for, cost, self.settings.min_runtime_s,
                                       {key: list(classes)}, PROBE_SHARE)
        return moves[0] if moves else None

    async def place(self, job: dict[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                    seen_generation: int = 0) -> None:
        """A waiting job's pass: apply the scheduler's verdict for its request, or register the request and
        wake the scheduler. `seen_generation` is the newest generation its pods carry (a new placement's
        generation is above it even when the status was lost)."""
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        request = request_for(key, job, spec, status)
        planned = self.verdicts.get(key)
        if planned is not None and planned.request == request:
            del self.verdicts[key]
            admission = planned.admission
            decided(key, "place", admission.message, result=admission.outcome.value)
            if admission.outcome == Outcome.PLACED:
                await self._admit(job, spec, status, admission, seen_generation, planned.started)
            elif planned.requeue:
                await self._requeue(job, status, admission)
            else:
                await self._wait(job, spec, status, admission)
            return
        if planned is not None:  # planned for a request it no longer makes (edited): planned again
            del self.verdicts[key]
        if self.cache.unplan(key):
            self.room_freed()
        before = self.waiting.get(key)
        self.waiting[key] = Waiting(request, status, waited_from(job, status),
                                    self._involuntary(spec, status, request, time.time()),
                                    verdict(status.reason, status.message))
        entry = self.cache.entries.get(key)
        if before is None or before.request != request or planned is not None or entry is None \
                or entry.request != request:
            self.cache.wait(key, request)
            self.trigger.request(key)
            self.wake()
            # the next cycle plans it soon: this pass waits for it (bounded) and applies its verdict, rather than
            # leaving it to another pass (a read of the job and its pods again)
            self._passes.add(key)
            try:
                await asyncio.wait_for(asyncio.shield(self._cycled()), INLINE_WAIT_S)
            except TimeoutError:
                pass
            finally:
                self._passes.discard(key)
            planned = self.verdicts.get(key)
            if planned is not None and planned.request == request:
                await self.place(job, spec, status, seen_generation)
        elif key not in self.trigger.timers and self.queue is not None:
            self.trigger.at(key, queueing.promotion_time(waited_from(job, status), self.queue))

    def _cycled(self) -> asyncio.Future[None]:
        """Done when the next cycle has been planned."""
        if self._done is None or self._done.done():
            self._done = asyncio.get_running_loop().create_future()
        return self._done

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
                    plan: planner.Admission) -> None:
        """A waiting job's verdict: its status when the verdict changed (outcome, what blocks it; not its live
        figures), an Event when its outcome changed or it disturbs others, and their checkpoints."""
        phase = status.phase if status.phase in (Phase.PREEMPTED, *MOVING) else Phase.PENDING
        changed = (status.phase, status.reason) != (phase, plan.outcome.value)
        if changed or plan.disruptions or verdict(status.reason, status.message) != verdict(plan.outcome.value,
                                                                                            plan.message):
            patch = StatusPatch(status).phase(phase, plan.outcome.value, plan.message)
            patch.condition("Admitted", "False", plan.outcome.value, plan.message)
            await self.writer.write(job, patch)
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
        entry = self.cache.entries.get(key)
        if entry is not None and entry.planned is not None:  # its placement is in its status now
            self.cache.hold(key, chosen.allocation(meta["namespace"]), entry.priority, entry.since)
        self.waiting.pop(key, None)  # placed: when it waits again (a refused gang, a restart), that is new
        self.kube.post_event(job, "Normal", "Admitted", plan.message)
        if request and ((meta.get("annotations") or {}).get(ANNOTATION_MIGRATE) or "").strip() == request:
            await self.kube.annotate_job(meta["namespace"], meta["name"], {ANNOTATION_MIGRATE: None})
        status = read_status({**job, "status": {**(job.get("status") or {}), "placement": placed,
                                                "phase": Phase.ADMITTED.value}})
        await self.pods.create(job, spec, status, tuple(range(len(chosen.nodes))))


def _explained(*args: Any) -> Cycle:
    """`plan_cycle`, its messages computed in this worker thread (a cycle computes them when first read)."""
    cycle = plan_cycle(*args)
    cycle.admissions  # noqa: B018 - read for its side effect: the plan and messages computed here, off the loop
    return cycle


def _timed(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """`fn(*args)` and the CPU-seconds this thread spent on it."""
    cpu = time.thread_time()
    result = fn(*args)
    return result, time.thread_time() - cpu


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
