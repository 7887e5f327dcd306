"""Admission: one scheduling cycle for the whole waiting queue; each verdict applied by its job's own pass.

Step of the pipeline (Kueue's scheduling cycle):
- `place`, from a waiting job's reconcile pass, registers (or updates) its request in the cache and wakes the
  scheduler. The pass does not plan. When the scheduler left a verdict for that request, the pass applies it instead:
  a placement's status and pods; a waiting job's status, written only when its verdict (`engine.queue.cycle.verdict`:
  outcome and message less its live figures) changed; the checkpoints of the victims and lenders it disturbs; a move
  that fits nowhere goes back to the queue (`engine.placing.requeue`).
- `run` is the scheduler: woken by coalesced events (`engine.queue.cycle.CycleTrigger`: a request added, edited or
  removed, room given back, the fleet changed, a timer), it takes one snapshot of the cache under the planner's lock,
  plans the whole queue once (`engine.queue.cycle.plan_cycle`, in a worker thread so probes and webhooks are answered
  meanwhile), records its bookkeeping in the cache at once (a placement held, a victim asked: `Cache.plan`,
  `Cache.yield_to`, so later cycles and other steps see them before the status comes back) and pokes only the jobs
  with something to do. A cycle with nothing new is skipped; cycles are spaced so planning takes at most about half
  the operator's time.

Under `--queue-policy mlfq` the cycle goes through `engine.queue.policy` with what `controller.knowledge` reads from
the jobs' `status.scheduling`; a placement records its start there (a starved job's promotion, in the cache at once
too), and the scheduler wakes when a waiting job reaches the starvation bound or a running job's speed is first
measured on a class and size (`learned`). `controller.upgrades` asks `engine.queue.policy.upgrades` for a running job
(the disruption step acts on the answer), on the classes the last cycle's waiting jobs chose to wait for. An
involuntary move's request (a dead node's job) is hurried (`hurry`): the next acting cycle plans it after the last
cycle's batch, not the duty bound nor an owed full cycle; a cycle planning on a snapshot without it stops.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from heterojob.api.job import HeteroJobSpec, HeteroJobStatus, Phase, Scheduling
from heterojob.controller.decisionlog import decided
from heterojob.controller.planning import Planning
from heterojob.controller.pods import Pods
from heterojob.controller.status import StatusPatch
from heterojob.controller.verdicts import Verdicts
from heterojob.engine.basics import queueing
from heterojob.engine.capacity import fleet as fleets, rooms, transfer
from heterojob.engine.disruption.holders import Holder
from heterojob.engine.placing import requeue
from heterojob.engine.placing.placement import Request
from heterojob.engine.queue import admission as planner, completion, ranking
from heterojob.engine.queue.admission import Outcome, Stopped
from heterojob.engine.queue.cycle import Cycle, CycleTrigger, plan_cycle, upgrade_candidates, verdict
from heterojob.state.job_status import waited_from
from heterojob.state.knowledge import Knower, Seen
from heterojob.state.requests import MOVING, move_began, origin_of, request_for, transfer_move

log = logging.getLogger("heterojob.controller")

PROBE_SHARE = 0.05  # a probe may cost at most this share of the job's expected remaining time (as the replay)
BATCH_S = 0.02  # events within this long of the last cycle's end are planned in one cycle (idle: at once)
RECHECK_S = 30.0  # while jobs wait, a cycle at least this often (what the clock alone changes in a plan)
CLOCK = "\x00clock"  # the CycleTrigger timer of that recheck (no job is named so)
INLINE_WAIT_S = 2.0  # a waiting job's pass waits this long for the cycle that plans its new request
DUTY = 0.5  # after a cycle of c CPU-seconds the next of its kind starts no sooner than c * (1 - DUTY) / DUTY later
OWED_S = 2.0  # the waiting jobs' verdicts owed this long: the full cycle goes before the next acting one


@dataclass(frozen=True)
class Waiting:
    """What a cycle needs of a waiting job beyond its request, from its last pass."""

    request: Request  # what it asked for at its last pass (a change is planned again)
    status: HeteroJobStatus
    waited_from: float  # when it last started waiting (the starvation bound counts from it)
    move: transfer.Move | None = None  # an involuntary move out of its region: the transfer it weighs
    said: tuple[str, str] = ("", "")  # the verdict its status says now (`engine.queue.cycle.verdict`)


@dataclass
class CycleVerdict:
    """A cycle's plan for one job, kept until the job's pass applies it."""

    request: Request
    admission: planner.Admission
    started: dict[str, Any] = field(default_factory=dict)  # PLACED: its status.scheduling from now on
    requeue: bool = False  # a move that fits nowhere goes back to the queue now


class Scheduler:
    def __init__(self, planning: Planning, pods: Pods, poke: Callable[[str], None], forget: Callable[[str], None],
                 queue: queueing.QueueSettings | None = None, requeue_after_s: float = requeue.REQUEUE_AFTER_S) -> None:
        kube, writer, cache, checkpoints, metrics = (planning.kube, planning.writer, planning.cache,
                                                     planning.checkpoints, planning.metrics)
        self.kube = kube
        self.writer = writer
        self.cache = cache
        self.pods = pods
        self.checkpoints = checkpoints
        self.fleet = lambda: planning.fleet(())  # every job's holdings counted as used
        self._later = planning.fleet_later  # ... as of now, summed when called (in the cycle's thread)
        self.settings = planning.settings
        self.metrics = metrics
        self.poke = poke
        self.forget = forget  # the job vanished under us
        self.lock = planning.lock  # placements and move reservations are planned under it
        self.queue = queue  # --queue-policy mlfq: engine.queue.policy orders the queue and picks classes
        self.classes = planning.classes  # AcceleratorClasses (device memory, for a checkpoint size estimate)
        self.transfer = planning.transfer  # what a move between regions is assumed to cost (engine.capacity.transfer)
        self.knower = Knower(cache)  # engine.queue.policy's Knowledge from the jobs' status.scheduling
        self.apply = Verdicts(kube, writer, cache, pods, checkpoints, metrics, poke, forget, self._placed)
        self.requeue_after_s = requeue_after_s  # a move off bad nodes that fits nowhere this long: back to the queue
        self.trigger = CycleTrigger()
        self.waiting: dict[str, Waiting] = {}  # job -> what its last pass said of it
        self.verdicts: dict[str, CycleVerdict] = {}  # job -> the last cycle's plan for it, until its pass applies it
        self.waiting_for: frozenset[str] = frozenset()  # classes the last cycle's waiting jobs wait for
        self.chose: Mapping[str, str] = {}  # the class each waiting job chose at the last cycle (`Knowledge.chose`)
        self.free: dict[str, int] = {}  # free devices per class after the last cycle's placements
        self.memo = ranking.Memo()  # what the policy may reuse between cycles (the plan is the same without it)
        self.memory = rooms.Memory()  # what placement found per class and region while its room is unchanged
        self.cycles = 0  # cycles planned (tests, metrics)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._next = 0.0  # monotonic time before which no cycle starts (the batch, the duty bound)
        self._next_full = 0.0  # ... and no full cycle (the duty bound on full cycles' cost)
        self._owed = False  # an acting cycle ran since the last full one: the waiting jobs' verdicts are owed
        self._owed_at = 0.0  # monotonic time since when they are
        self._interrupt = threading.Event()  # an event came while a full cycle plans: it stops for an acting one
        self._done: asyncio.Future[None] | None = None  # resolved when the next cycle has planned
        self._passes: set[str] = set()  # jobs whose pass waits for the next cycle's verdict (no poke needed)
        self._hurries = 0  # involuntary moves registered so far (`hurry`)
        self._planned_hurries = 0  # ... when the cycle planning now (or last) took its snapshot
        self._served = 0  # ... when the last cycle that planned to its end took its snapshot
        self._ended = 0.0  # monotonic time the last cycle ended
        self._spacing: asyncio.Future[Any] | None = None  # the wait between two cycles, while it lasts

    # --- events --------------------------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run(), name="scheduler")

    async def stop(self) -> None:
        if self._task is not None:
            # Python 3.11's wait_for may swallow a cancel that comes as its wait ends (gh-86296): ask again
            while not self._task.done():
                self._task.cancel()
                await asyncio.wait([self._task], timeout=0.1)
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def wake(self) -> None:
        """Something happened that a cycle should see (coalesced). A full cycle planning now stops (unless the
        verdicts have been owed `OWED_S`): an acting cycle sees the event first, then the full cycle plans
        again."""
        self._interrupt.set()
        self._wake.set()

    def fleet_later(self) -> Callable[[], fleets.Fleet]:
        """The fleet as of now, built when called (`Planning.fleet_later`; without it, built now)."""
        if self._later is not None:
            return self._later(())
        built = self.fleet()
        return lambda: built

    def hurry(self) -> None:
        """An involuntary move's request was registered (its gang is dead or evicted): the next acting cycle plans
        it after the last cycle's batch, not the duty bound, before a full cycle however long owed; a cycle planning
        on a snapshot without it stops (its plan dropped whole: planned again at once, the same for every other
        job) unless it plans an earlier such move (a stream of faults never stops every cycle)."""
        self._hurries += 1
        self._next = min(self._next, self._ended + BATCH_S)
        if self._spacing is not None:
            self._spacing.cancel()
        self.wake()

    def _hurried(self) -> bool:
        """An involuntary move was registered since the planning cycle's snapshot."""
        return self._hurries != self._planned_hurries

    def _hurry_stops(self) -> bool:
        """Whether the planning cycle should stop for an involuntary move registered since its snapshot: when it
        plans none that an earlier cycle did not (asked from its thread)."""
        return self._hurried() and self._planned_hurries == self._served

    def _stop(self) -> bool:
        """Whether a full cycle's plan should stop now (asked from its thread)."""
        return self._hurry_stops() or self._interrupt.is_set() and time.monotonic() - self._owed_at <= OWED_S

    async def _space(self) -> None:
        """Wait until `_next` (the batch, the duty bound); `hurry` shortens the wait."""
        while True:
            sleeper = asyncio.ensure_future(asyncio.sleep(max(0.0, self._next - time.monotonic())))
            self._spacing = sleeper
            try:
                await asyncio.wait([sleeper])
            finally:
                self._spacing = None
                sleeper.cancel()
            if not sleeper.cancelled():
                return

    def room_freed(self) -> None:
        """Room was given back or the fleet changed: the next cycle plans the queue again."""
        self.trigger.room()
        self.wake()

    def learned(self) -> None:
        """A running job's first speed on a class and size: what the queue policy reads changed (`Cache.sync`)."""
        if self.queue is not None:  # FIFO reads no speed
            self.room_freed()

    def drop(self, key: str) -> None:
        """A deleted job: nothing kept about it."""
        self.waiting.pop(key, None)
        self.verdicts.pop(key, None)
        self.trigger.at(key, None)
        self.trigger.request(key)
        self.wake()

    async def run(self) -> None:
        """The scheduler's loop. When something happened (`CycleTrigger.due`), an acting cycle first: only the jobs
        that place or disturb someone, exactly as the full plan has them, applied at once (a job that fits free
        room or a faulted job's replacement does not wait for every waiting job's message); cycles follow while
        they act. Then, once the duty bound allows, one full cycle: every waiting job's verdict. Events within
        `BATCH_S` of the last cycle's end are planned together; after a quiet spell a cycle starts at once."""
        while True:
            next_timer = self.trigger.next_timer()
            wake_at = None if next_timer is None else max(0.0, next_timer - time.time()) + 0.01
            if self._owed:
                full_in = max(0.0, self._next_full - time.monotonic())
                wake_at = full_in if wake_at is None else min(wake_at, full_in)
            try:
                await asyncio.wait_for(self._wake.wait(), wake_at)
            except TimeoutError:
                pass
            self._wake.clear()
            await self._space()
            try:
                mono = time.monotonic()
                full = self._owed and mono >= self._next_full
                if self.trigger.due(time.time()) and (self._hurried() or not (full and mono - self._owed_at > OWED_S)):
                    await self.cycle(acting=True)
                elif full:
                    await self.cycle()  # a steady stream of events does not hold the verdicts back for long
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - one bad cycle must not stop admission; the next one plans again
                log.exception("scheduling cycle failed; planning again in 1s")
                self.trigger.room()
                self._next = time.monotonic() + 1.0
                self._wake.set()

    # --- the cycle -----------------------------------------------------------------------------------------

    async def cycle(self, acting: bool = False) -> bool:
        """Plan the whole queue once: when anything happened since the last cycle, or (full) when an acting
        cycle left the waiting jobs' verdicts owed; True when it planned. `acting`: apply only the jobs that
        place or disturb someone (`engine.queue.cycle.plan_cycle`'s `acting`: each exactly as in the full plan); the
        waiting jobs' verdicts are owed to the next full cycle."""
        pokes: list[str] = []
        async with self.lock:
            now = time.time()
            if not self.trigger.due(now) and not (self._owed and not acting):
                return False
            self.trigger.planned(now)
            # the snapshot, on the loop (cheap: the cache keeps its holders and each job's facts while unchanged);
            # the policy's knowledge and the plan in a worker thread, so probes and webhooks are answered meanwhile
            build, waiting, holders = self.fleet_later(), self.cache.waiting(), self.cache.holders()
            seen = self.knower.view() if self.queue is not None else None
            moves = {r.job: w.move for r in waiting if (w := self.waiting.get(r.job)) is not None and w.move}
            started_at = time.monotonic()
            self._planned_hurries = self._hurries  # the snapshot holds every involuntary move registered so far
            if not acting:
                self._interrupt.clear()
            try:
                planned, cpu = await asyncio.to_thread(_timed, self._plan, waiting, holders, build, now, moves, seen,
                                                       acting, dict(self.free))
            except Stopped:  # an event came (an involuntary move): the acting cycle goes first, then this one again
                self.trigger.room()
                self._ended = time.monotonic()
                return False
            cycle, verdicts, upgrades, fleet = planned
            self._served = self._planned_hurries
            self.cycles += 1
            self.metrics.cycle_seconds.observe(cpu)
            self.metrics.cycle_waiting.set(len(waiting))
            self.waiting_for, self.chose = cycle.waiting_for, cycle.chose
            requests = {r.job: r for r in waiting}
            for job, admission in cycle.admissions.items():
                request = requests[job]
                entry = self.cache.entries.get(job)
                if entry is None or entry.request != request:
                    continue  # edited or gone while it was planned: its own event plans it again
                if self._decide(job, request, admission, fleet, now, verdicts.get(job)):
                    pokes.append(job)
            # the running jobs an upgrade move may pay for look now (each asks `upgrade_for` on its pass, with its
            # own checkpoint's cost)
            pokes.extend(upgrades)
            self.free = dict(cycle.free)
            if cycle.acted:
                self.trigger.room()  # what it placed and disturbed changes the snapshot: plan once more
                self._wake.set()
            # a plan drifts with the clock alone (expected completions, the minimum runtime before preemption,
            # attained-service levels): while jobs wait, the queue is planned again at least this often
            self.trigger.at(CLOCK, now + RECHECK_S if waiting else None)
            took = time.monotonic() - started_at
            if acting:  # acting cycles are spaced by their own cost; full ones by theirs (an acting cycle after
                # a full one, or with an involuntary move registered since its snapshot, waits only for the batch)
                self._next = time.monotonic() + (BATCH_S if self._hurried() else max(BATCH_S, took * (1 - DUTY) / DUTY))
                if not self._owed:
                    self._owed, self._owed_at = True, time.monotonic()
            else:
                self._next = time.monotonic() + BATCH_S
                self._owed = False
                self._next_full = time.monotonic() + took * (1 - DUTY) / DUTY
            self._ended = time.monotonic()
        if self._done is not None and not self._done.done():
            self._done.set_result(None)
        for job in pokes:
            if job not in self._passes:
                self.poke(job)
        return True

    def _plan(self, waiting: list[Request], holders: list[Holder], build: Callable[[], fleets.Fleet], now: float,
              moves: Mapping[str, transfer.Move], seen: Mapping[str, Seen] | None, acting: bool,
              before: Mapping[str, int]
              ) -> tuple[Cycle, dict[str, tuple[str, str]], list[str], fleets.Fleet]:
        """A cycle's work in the worker thread, on the snapshot taken: the fleet (`build`, as of the snapshot),
        the policy's knowledge, the plan, each waiting job's verdict (`engine.queue.cycle.verdict`), and the running
        jobs an upgrade move may pay for (`engine.queue.cycle.upgrade_candidates`; `before`: the free devices per class
        after the last cycle)."""
        fleet = build()
        policy = None
        stop = self._hurry_stops if acting else self._stop
        if self.queue is not None:
            knowledge = self.knower.knowledge(fleet, waiting, holders, self.queue, seen, now, self.memo)
            knowledge.chose = self.chose  # kept within a margin: a drift of the estimates changes no verdict
            policy = (knowledge, self.queue)
            if stop():  # asked before the plan too, not only as it goes through the queue
                raise Stopped(0)
        cycle = _explained(waiting, holders, fleet, now, self.settings, policy, moves, self.memo, self.memory, acting,
                           stop, every=not acting)
        verdicts = {job: verdict(a.outcome.value, a.message) for job, a in cycle.admissions.items()
                    if a.outcome != Outcome.PLACED}
        upgrades = [] if policy is None else upgrade_candidates(
            cycle, before, holders, fleet, now, policy[0], completion.MoveCost(), self.settings.min_runtime_s,
            PROBE_SHARE, self.memo)
        return cycle, verdicts, upgrades, fleet

    def _decide(self, job: str, request: Request, admission: planner.Admission, fleet: fleets.Fleet, now: float,
                new_verdict: tuple[str, str] | None = None) -> bool:
        """Record a cycle's plan for one job in the cache (under the lock) and keep it for the job's pass;
        True when the pass has something to do. `new_verdict`: `verdict` of the admission (made in the plan's
        thread), None: made here."""
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
            self.verdicts[job] = CycleVerdict(request, admission, started)
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
            self.verdicts[job] = CycleVerdict(request, admission, requeue=True)
            self.trigger.at(job, None)
            return True
        self.trigger.at(job, min((t for t in (promote, back) if t is not None and t > now), default=None))
        phase = status.phase if status.phase in (Phase.PREEMPTED, *MOVING) else Phase.PENDING
        if new_verdict is None:
            new_verdict = verdict(admission.outcome.value, admission.message)
        if admission.disruptions or status.phase != phase or new_verdict != w.said:
            self.verdicts[job] = CycleVerdict(request, admission)
            return True
        self.verdicts.pop(job, None)  # nothing new to say
        return False

    def _placed(self, key: str) -> None:
        """Its placement is written: when it waits again (a refused gang, a restart), that is new."""
        self.waiting.pop(key, None)

    # --- a waiting job's pass ------------------------------------------------------------------------------

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
                await self.apply.admit(job, spec, status, admission, seen_generation, planned.started)
            elif planned.requeue:
                await self.apply.requeue(job, status, admission)
            else:
                now_says = await self.apply.wait(job, spec, status, admission)
                w = self.waiting.get(key)
                if now_says is not None and w is not None and w.request == request:
                    # what its status says from now on: the next cycle pokes it only when its verdict changes (its
                    # write's echo starts no pass that would tell the scheduler)
                    self.waiting[key] = replace(w, status=now_says, said=verdict(now_says.reason, now_says.message))
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
            if status.phase in MOVING and status.migration is not None and status.migration.involuntary:
                self.hurry()  # its gang is dead or evicted: planned by the next acting cycle, not after the bound
            else:
                self.wake()
            # the next cycles plan it soon: this pass waits for its verdict (bounded; an acting cycle has one only
            # for a job that acts, the full cycle after it for every job) and applies it, rather than leaving it to
            # another pass (a read of the job and its pods again)
            self._passes.add(key)
            deadline = time.monotonic() + INLINE_WAIT_S
            try:
                while key not in self.verdicts and (left := deadline - time.monotonic()) > 0:
                    await asyncio.wait_for(asyncio.shield(self._cycled()), left)
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


def _explained(*args: Any, **kwargs: Any) -> Cycle:
    """`plan_cycle`, what it leaves until read (a quiet cycle's plan, the set-aside messages) computed here, in the
    cycle's worker thread, not where the verdicts are read."""
    cycle = plan_cycle(*args, **kwargs)
    cycle.admissions  # noqa: B018 - read for its side effect: the plan and messages computed in this thread
    return cycle


def _timed(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """`fn(*args)` and the CPU-seconds this thread spent on it. The garbage collector waits meanwhile: a plan
    makes many short-lived objects among the operator's long-lived ones (every job, node and pod), and each
    full collection would walk all of them (plans make no reference cycles that must go at once)."""
    cpu = time.thread_time()
    paused = gc.isenabled()
    gc.disable()
    try:
        result = fn(*args)
    finally:
        if paused:
            gc.enable()
    return result, time.thread_time() - cpu

