"""Disruption of a running job: gather its symptoms, let `engine.migration` judge, then ask a checkpoint.

Called by the reconcile pass for a Running job with no disruptive checkpoint pending. In order: a
checkpoint asked for by annotation; symptoms (NotReady node, manual request, firing alerts, failed or
overheating devices and stragglers from the monitor's snapshot, gathered by `state.symptoms`) judged against the job's policy and the
disruption budget; with no symptom, an elastic job's shrink or growth (growth as far as the planner
lends room); else the periodic checkpoint. A held move is announced once per verdict (Event MigrationHeld,
condition MoveHeld: a stable message, a countdown only in the decision log, as its status says). A voluntary
move goes to another region only where its checkpoint's transfer pays (`engine.transfer`, through
`plan_move`); an urgent one is marked involuntary, so its placement prefers the cheapest transfer.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from heterojob.api.job import HeteroJobSpec, HeteroJobStatus, MigrationState, Phase, Priority, Reservation
from heterojob.constants import ANNOTATION_CHECKPOINT_NOW, ANNOTATION_MIGRATE
from heterojob.controller.checkpoints import PERIODIC, Checkpoints, resume_from
from heterojob.controller.decisionlog import decided
from heterojob.controller.status import StatusPatch, StatusWriter
from heterojob.engine import admission as planner
from heterojob.state.knowledge import sizes_on
from heterojob.engine import completion, migration, transfer
from heterojob.engine.fleet import Allocation, DeviceClass, Fleet, Node
from heterojob.engine.phases import MOVE_THENS, Then
from heterojob.engine.placement import Request
from heterojob.engine.preemption import Preemptor, Yield, YieldEnd, yield_ends, yield_of
from heterojob.kube.api import Kube
from heterojob.metrics import OperatorMetrics
from heterojob.state.cache import Cache
from heterojob.state.requests import move_request, request_for, reservation, transfer_move
from heterojob.state.symptoms import Gathered, gather, ripens_at
from heterojob.state.symptoms import changed as onsets_changed
from heterojob.api.times import iso, timestamp
from heterojob.telemetry.snapshot import Snapshot


class Disruption:
    def __init__(self, kube: Kube, writer: StatusWriter, cache: Cache, checkpoints: Checkpoints,
                 nodes: Callable[[], Mapping[str, Node]],
                 telemetry: Callable[[], Snapshot | None], fleet: Callable[[Iterable[str]], Fleet],
                 wake_at: Callable[[str, float], None], metrics: OperatorMetrics, budget: int,
                 advisory: bool, settings: planner.Settings, classes: Callable[[], Mapping[str, DeviceClass]],
                 lock: asyncio.Lock, transfer_settings: transfer.Settings = transfer.Settings(),
                 upgrade_for: Callable[[str, Sequence[str], float, float | None], completion.Upgrade | None]
                 | None = None, by_level: bool = False) -> None:
        self.kube = kube
        self.writer = writer
        self.cache = cache
        self.checkpoints = checkpoints
        self.nodes = nodes
        self.telemetry = telemetry
        self.fleet = fleet  # the fleet without the named jobs' holdings
        self.wake_at = wake_at
        self.metrics = metrics
        self.budget = budget
        self.advisory = advisory
        self.settings = settings
        self.classes = classes
        self.lock = lock  # admission's: a destination is planned and reserved under the lock placements take
        self.transfer = transfer_settings  # what a move between regions is assumed to cost (engine.transfer)
        self.upgrade_for = upgrade_for  # admission's: a move up that pays for a running job (mlfq), or None
        self.by_level = by_level  # the queue policy displaces a job of the same priority by level (mlfq)
        self._held: dict[str, str] = {}  # job -> why its move waits (resizes and upgrades: to log it once)
        self._said_at: dict[str, float] = {}  # job -> when its held move's verdict was last written (monotonic)

    def forget(self, key: str) -> None:
        self._held.pop(key, None)
        self._said_at.pop(key, None)

    def held(self) -> list[str]:
        """Jobs whose move waits (for room, the cooldown, the budget): room that frees may let them go."""
        return list(self._held)

    async def consider(self, job: Mapping[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                       now: float) -> None:
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        annotations = meta.get("annotations") or {}
        for kind, name in ((CHECKPOINT, ANNOTATION_CHECKPOINT_NOW), (MIGRATE, ANNOTATION_MIGRATE)):
            value = (annotations.get(name) or "").strip()
            if value and value == status.handled.get(kind):  # acted on; the annotation outlived a restart
                await self.kube.annotate_job(meta["namespace"], meta["name"], {name: None})
        asked = (annotations.get(ANNOTATION_CHECKPOINT_NOW) or "").strip()
        if asked and asked != status.handled.get(CHECKPOINT) and not (status.checkpoint and status.checkpoint.pending):
            # intent first (status says which request it serves), then the annotation goes
            if await self.checkpoints.ask(key, then=PERIODIC, by=None, reason=f"checkpoint requested: {asked}",
                                          handled={CHECKPOINT: asked}):
                await self.kube.annotate_job(meta["namespace"], meta["name"], {ANNOTATION_CHECKPOINT_NOW: None})
            return
        gathered = self.symptoms(job, spec, status, now)
        if onsets_changed(status.symptoms, gathered.onsets):  # each held symptom's clock, kept in status
            await self.writer.write(job, StatusPatch(status).onsets(gathered.onsets))
        symptoms = gathered.symptoms
        periodic_pending = bool(status.checkpoint and status.checkpoint.pending)
        if not symptoms:
            await self._clear_hold(job, status)
            if not periodic_pending and not await self._resize(job, spec, status, now) \
                    and not await self._upgrade(job, spec, status, now):
                await self._periodic(key, spec, status, now)
            return
        rules = self._rules(spec)
        verdict = migration.judge(symptoms, rules, now, _moves(status), self.cache.disrupted())
        if not verdict.act:
            if verdict.symptom is not None and verdict.hold is not None:
                await self._hold(job, status, verdict.hold.value, held_message(verdict), verdict.reason)
                if verdict.until is not None:
                    self.wake_at(key, verdict.until)  # the cooldown or the hourly cap lifts then
            ripe_at = ripens_at(symptoms, rules)
            if ripe_at is not None:  # look again when the first holding symptom has lasted its time
                self.wake_at(key, max(ripe_at, now + 1.0))
            return
        symptom = verdict.symptom
        assert symptom is not None
        p = status.placement
        assert p is not None
        # every node a fault or symptom names is left, not only the one that decides the move (a failed GPU moves
        # the job at once; a second node of its, overheating, must not be kept for it as "the healthy part")
        avoid = tuple(sorted(set(symptom.nodes).union(*(s.nodes for s in symptoms if s.trigger != migration.MANUAL))))
        move = MigrationState(exclude=list(avoid), reason=f"{symptom.trigger}: {symptom.message}",
                              replicas=p.replicas, trigger=symptom.trigger)
        if symptom.trigger == migration.MANUAL:
            move.request = (annotations.get(ANNOTATION_MIGRATE) or "").strip()
        if symptom.urgent:  # the job may be dead: go now, keeping the healthy part of its room while re-placed
            move.involuntary = True
            healthy = [n for n in p.nodes if n not in avoid]
            reserved = reservation(p.region, p.device_class, p.per_replica, healthy) if healthy else None
            self._reserve(key, reserved)
        else:  # make before break: the destination is reserved before the checkpoint is asked for
            request = move_request(key, job, spec, p.region, p.device_class, avoid, p.replicas)
            weigh = transfer_move(spec, status, p.region, p.device_class, p.replicas, self.classes(), now,
                                  self.transfer, symptom.trigger)
            dest, reserved = await self._plan_and_reserve(key, request, now, weigh)
            c = dest.candidate
            if reserved is None:
                named = dest.reason or NO_DESTINATION
                await self._hold(job, status, named, dest.message, dest.message, by_reason=True,
                                 event=dest.message if named == NO_DESTINATION else f"{named}: {dest.message}")
                return
            if c and c.region != p.region:
                move.reason = f"{move.reason}; {dest.message}"
        await self._clear_hold(job, status)
        decided(key, "migrate", symptom.message, trigger=symptom.trigger)
        self.metrics.migrations.labels("migrate", symptom.trigger).inc()
        move.reserved = reserved
        if not await self.checkpoints.ask(key, then=Then.MIGRATE, by=None, reason=move.reason,
                                          exclude=avoid, urgent=symptom.urgent, replicas=p.replicas, migration=move):
            self._unreserve(key)  # nothing was asked (another checkpoint goes on): the room goes back

    async def escalate(self, job: Mapping[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                       now: float) -> bool:
        """A fault (a NotReady node, a failed device, an alert naming a dead one) arriving while the job
        checkpoints for something that was not urgent (a voluntary move, a resize, a preemption): a rank on a
        dead node never answers, so waiting for the deadline would hold the job there for the whole timeout.
        The pending checkpoint becomes urgent (its deadline its request time: it goes on from the last
        completed checkpoint now), the fault's nodes are avoided, and a move becomes involuntary (it may no
        longer be cancelled; its reservation is kept unless it lies on those nodes). True when it wrote."""
        pending = status.checkpoint.pending if status.checkpoint else None
        p = status.placement
        if pending is None or p is None or pending.then == PERIODIC or status.phase != Phase.CHECKPOINTING:
            return False
        requested, deadline = timestamp(pending.requested_at), timestamp(pending.deadline)
        if requested is not None and deadline is not None and deadline <= requested:
            return False  # urgent already
        urgent = [s for s in self.symptoms(job, spec, status, now).symptoms if s.urgent]
        verdict = migration.judge(urgent, self._rules(spec), now, _moves(status), self.cache.disrupted())
        if not verdict.act or verdict.symptom is None:
            return False
        symptom = verdict.symptom
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        reason = f"{symptom.trigger}: {symptom.message} (while checkpointing for {pending.reason})"
        exclude = sorted(set(pending.exclude) | set(symptom.nodes))
        last = status.checkpoint.last if status.checkpoint else None
        message = f"{reason}: checkpoint {pending.id} abandoned, the job {resume_from(last)}"
        urgent_now = pending.model_copy(update={"reason": reason, "deadline": pending.requested_at,
                                                "exclude": exclude})
        reserved = status.migration.reserved if status.migration is not None else None
        if reserved is not None and set(reserved.nodes) & set(symptom.nodes):
            reserved = None  # the fault is on its destination: placed again wherever it fits
        move = None
        if status.migration is not None and pending.then != Then.PREEMPT:
            move = status.migration.model_copy(update={"exclude": exclude, "reason": reason,
                                                       "trigger": symptom.trigger, "involuntary": True,
                                                       "reserved": reserved})
        patch = StatusPatch(status).escalate(urgent_now, move, message)
        if not await self.writer.write(job, patch):
            return False
        if reserved is None and status.migration is not None and status.migration.reserved is not None:
            self.cache.unreserve(key)
        self.kube.post_event(job, "Warning", "FaultWhileCheckpointing", message)
        decided(key, "escalate", symptom.message, trigger=symptom.trigger, then=pending.then)
        self.wake_at(key, now)
        return True

    def destination_gone(self, key: str, status: HeteroJobStatus) -> str | None:
        """Why a voluntary move still at its checkpoint can no longer land where it reserved (a reserved node
        gone, not Ready, cordoned, tainted or named failed), or None. Make before break: such a move is called
        off before the job gives up its devices; its next pass plans it again (and holds it without room)."""
        pending = status.checkpoint.pending if status.checkpoint else None
        move = status.migration
        if (status.phase != Phase.CHECKPOINTING or pending is None or pending.then not in MOVE_THENS
                or move is None or move.involuntary or move.reserved is None):
            return None
        fleet = self.fleet([key])
        gone = []
        held = set(status.placement.nodes) if status.placement else set()
        for name in sorted(set(move.reserved.nodes) - held):  # a node it runs on now is `escalate`'s business
            n = fleet.nodes.get(name)
            if n is None:
                why: str | None = "gone"
            elif not n.ready or not n.schedulable or n.taints:
                why = n.reason or ("not Ready" if not n.ready else "cordoned or tainted")
            else:
                cls = fleet.classes.get(move.reserved.device_class)
                why = fleet.keep_off(n, cls.resource_name if cls else move.reserved.device_class)
            if why:
                gone.append(f"{name} ({why})")
        if not gone:
            return None
        return f"its reserved destination is no longer usable: {', '.join(gone)}"

    def cancelled(self, job: Mapping[str, Any], status: HeteroJobStatus) -> str | None:
        """Why a manual move still at its checkpoint is called off (its annotation was removed), or None."""
        pending = status.checkpoint.pending if status.checkpoint else None
        move = status.migration
        if (status.phase != Phase.CHECKPOINTING or pending is None or pending.then != Then.MIGRATE or move is None
                or move.trigger != migration.MANUAL or not move.request):
            return None
        now = ((job["metadata"].get("annotations") or {}).get(ANNOTATION_MIGRATE) or "").strip()
        return None if now == move.request else f"the {ANNOTATION_MIGRATE} annotation was removed"

    def yield_ends(self, spec: HeteroJobSpec | None, status: HeteroJobStatus
                   ) -> tuple[Yield, YieldEnd, str] | None:
        """Why a job still at the checkpoint it was asked for on another's behalf (a preemption's victim, a
        reclaim's grown job) runs on as it is instead (`engine.preemption.yield_ends`: the job it yields to
        deleted, placed or finished, or a priority edited), which yield it was, and that in words; or None. An
        urgent one (a fault's: it leaves anyway) is left alone; once its devices are given back it is too late."""
        pending = status.checkpoint.pending if status.checkpoint else None
        kind = yield_of(pending.then, pending.by) if pending is not None else None
        if status.phase != Phase.CHECKPOINTING or pending is None or kind is None or spec is None \
                or status.placement is None:
            return None
        requested, deadline = timestamp(pending.requested_at), timestamp(pending.deadline)
        if requested is not None and deadline is not None and deadline <= requested:
            return None
        e = self.cache.entries.get(pending.by or "")
        why = yield_ends(spec.priority.rank, Preemptor(e.priority, e.request is not None) if e else None,
                         self.by_level, kind)
        if why is None:
            return None
        if why == YieldEnd.PREEMPTOR_GONE:
            words = f"{pending.by}, which it was yielding to, is gone"
        elif why == YieldEnd.PREEMPTOR_NOT_WAITING:
            words = f"{pending.by}, which it was yielding to, no longer waits for room"
        else:
            theirs = next((p.value for p in Priority if e is not None and p.rank == e.priority), "?")
            words = (f"its priority ({spec.priority.value}) is no longer below that of {pending.by} ({theirs}), "
                     f"which it was yielding to")
        return kind, why, f"{words} ({why.value})"

    def _reserve(self, key: str, reserved: Reservation | None) -> None:
        """The cache holds the reservation at once, so the next plan sees it before the status comes back."""
        if reserved is None:
            return
        cls = self.classes().get(reserved.device_class)
        per_node: dict[str, int] = {}
        for node in reserved.nodes:
            per_node[node] = per_node.get(node, 0) + reserved.per_replica
        self.cache.reserve(key, Allocation(cls.resource_name if cls else reserved.device_class, per_node,
                                           key.split("/", 1)[0], reserved.device_class, reserved.region))
        self.cache.disrupt(key)

    def _unreserve(self, key: str) -> None:
        self.cache.unreserve(key)
        self.cache.disrupt(key, False)

    async def _hold(self, job: Mapping[str, Any], status: HeteroJobStatus, named: str, message: str, detail: str,
                    by_reason: bool = False, event: str | None = None) -> None:
        """The move waits: the job runs on. Said once per verdict: the Event MigrationHeld (`event`, else the
        message) and the condition MoveHeld (reason `named`, e.g. Cooldown, TransferExceedsSaving) are posted and
        written only when the verdict changes, as the job's status tells (so a restarted operator says nothing
        again); `detail` (live figures, a countdown) goes to the decision log then. The verdict is the reason
        and the message, or the reason alone (`by_reason`: a destination's explanation, whose figures follow
        the fleet)."""
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        self._held[key] = named  # room that frees may let it go (`held`)
        said = next((c for c in status.conditions if c.type == "MoveHeld"), None)
        held = said is not None and said.status == "True"
        if held and said is not None and said.reason == named and (by_reason or said.message == message):
            return
        now = time.monotonic()
        if held and now - self._said_at.get(key, -math.inf) < HOLD_REFRESH_S:
            return  # held still, for a cause that flips with the fleet (budget, no destination): said now and then
        self._said_at[key] = now
        decided(key, "hold-migration", reason=detail, held=named)
        if not await self.writer.write(job, StatusPatch(status).condition("MoveHeld", "True", named, message)):
            return
        self.kube.post_event(job, "Normal", "MigrationHeld", event or message)

    async def _clear_hold(self, job: Mapping[str, Any], status: HeteroJobStatus) -> None:
        meta = job["metadata"]
        self._held.pop(f"{meta['namespace']}/{meta['name']}", None)
        if any(c.type == "MoveHeld" and c.status == "True" for c in status.conditions):
            await self.writer.write(job, StatusPatch(status).condition("MoveHeld", "False", "Released",
                                                                       "no move is waiting"))

    def symptoms(self, job: Mapping[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                 now: float) -> Gathered:
        """The job's symptoms (`state.symptoms.gather`) and the onsets status.symptoms keeps."""
        meta = job["metadata"]
        manual = ((meta.get("annotations") or {}).get(ANNOTATION_MIGRATE) or "").strip()
        return gather(meta, spec, status, self.nodes(), self.telemetry(),
                      manual if manual and manual != status.handled.get(MIGRATE) else None, now)

    def _rules(self, spec: HeteroJobSpec, extra: Iterable[str] = ()) -> migration.Rules:
        return migration.Rules(
            triggers=frozenset(t.value for t in spec.policy.triggers) | frozenset(extra),
            overheat_for_s=spec.policy.overheat_for_seconds, straggler_for_s=spec.policy.straggler_for_seconds,
            cooldown_s=spec.policy.cooldown_seconds, max_per_hour=spec.policy.max_migrations_per_hour,
            budget=self.budget, advisory=self.advisory)

    def room_to_grow(self, key: str, job: Mapping[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus
                     ) -> int | None:
        """The most replicas (up to max) the job could restart with now, in its region and class."""
        p = status.placement
        if p is None:
            return None
        top = planner.top_priority(self.cache.waiting(), besides=key)
        return planner.growth(request_for(key, job, spec), top, self.fleet([key]), p.replicas,
                              self.growth_limit(spec, status), p.device_class, p.region)

    @staticmethod
    def growth_limit(spec: HeteroJobSpec, status: HeteroJobStatus) -> int:
        """The most replicas growth may reach on the job's class: as far as spec.replicas.max until its
        measured scaling there says otherwise (`completion.growth_limit`, from status.scheduling.speeds;
        with no speed measured at its admitted size, growing is the trial that measures it)."""
        p = status.placement
        base, upper = spec.replicas.start, spec.replicas.upper
        if p is None:
            return upper
        measured = sizes_on(status.scheduling, p.device_class)
        if base not in measured:
            return upper
        return completion.growth_limit(base, upper, measured)

    async def _resize(self, job: Mapping[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                      now: float) -> bool:
        """Shrink an idle elastic job or grow one into free room, through a checkpoint; True if it acts."""
        p = status.placement
        if p is None or spec.replicas.upper <= spec.replicas.min:
            return False
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        average = status.utilization.average if status.utilization else None
        low = average is not None and average < spec.policy.low_utilization_percent
        old = next((c for c in status.conditions if c.type == "LowUtilization"), None)
        if low != (old is not None and old.status == "True"):
            text = f"average utilization {average:.0f}%" if average is not None else "no utilization data"
            await self.writer.write(job, StatusPatch(status).condition(
                "LowUtilization", "True" if low else "False", "Idle" if low else "Busy", text))
            return False  # the next pass reads the condition's time
        low_since = timestamp(old.last_transition_time) if low and old else None
        change = migration.resize(p.replicas, spec.replicas.min, spec.replicas.upper, average, low_since, now,
                                  spec.policy.low_utilization_percent, spec.policy.low_utilization_for_seconds,
                                  self.room_to_grow(key, job, spec, status))
        limit = self.growth_limit(spec, status)
        if change is None and p.replicas > max(limit, spec.replicas.start):  # grown past where it scales well
            change = migration.Resize(migration.GROW, max(limit, spec.replicas.start),
                                      f"measured scaling too low at {p.replicas} replicas: {p.replicas} -> "
                                      f"{max(limit, spec.replicas.start)}")
        if change is None:
            if low and low_since is not None:
                self.wake_at(key, low_since + spec.policy.low_utilization_for_seconds)
            return False
        symptom = migration.Symptom(change.trigger, low_since or now, (), change.reason)
        assert p is not None
        verdict = migration.judge([symptom], self._rules(spec, extra=[migration.GROW]), now, _moves(status),
                                  self.cache.disrupted())
        if not verdict.act:
            return self._note_held(key, "hold-resize", verdict.reason, verdict)
        request = move_request(key, job, spec, p.region, p.device_class, (), change.replicas)
        dest, reserved = await self._plan_and_reserve(key, request, now)
        if reserved is None:  # make before break: no room for the new size, the job runs on as it is
            return self._note_held(key, "hold-resize", dest.message)
        decided(key, "resize", change.reason, trigger=change.trigger)
        self.metrics.migrations.labels("resize", change.trigger).inc()
        reason = f"{change.trigger}: {change.reason}"
        if not await self.checkpoints.ask(key, then=Then.RESIZE, by=None, reason=reason, replicas=change.replicas,
                                          migration=MigrationState(reason=reason, replicas=change.replicas,
                                                                   trigger=change.trigger, reserved=reserved)):
            self._unreserve(key)
            return False
        return True

    async def _upgrade(self, job: Mapping[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                       now: float) -> bool:
        """Move the job up to a faster class (or probe one whose speed for it is only the sheet's guess) when
        the policy says it pays (`Admission.upgrade_for`), through the rules every voluntary move obeys:
        spec.policy.allowCrossClass, cooldown, moves per hour, the disruption budget, make before break (the
        destination reserved before the checkpoint is asked for). True if it acts."""
        p = status.placement
        if self.upgrade_for is None or p is None or not spec.policy.allow_cross_class or len(spec.devices) < 2:
            return False
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        last = status.checkpoint.last if status.checkpoint else None
        u = self.upgrade_for(key, [a.device_class for a in spec.devices], now, last.save_seconds if last else None)
        if u is None:
            return False
        what = (f"probe {u.to_class} (its speed there is only the class's declared throughput; the probe may "
                f"cost {-u.saving_s:.0f}s)" if u.probe else
                f"move up to {u.to_class}: expected to finish {u.saving_s:.0f}s sooner, the move's cost counted")
        verdict = migration.judge([migration.Symptom(migration.UPGRADE, now, (), what)],
                                  self._rules(spec, extra=[migration.UPGRADE]), now, _moves(status),
                                  self.cache.disrupted())
        if not verdict.act:
            return self._note_held(key, "hold-upgrade", verdict.reason, verdict)
        request = move_request(key, job, spec, p.region, p.device_class, (), p.replicas)
        request = replace(request, alternatives=[a for a in request.alternatives if a.device_class == u.to_class])
        if not request.alternatives:
            return False
        weigh = replace(transfer_move(spec, status, p.region, p.device_class, p.replicas, self.classes(), now,
                                      self.transfer, migration.UPGRADE),
                        saves_s=max(0.0, u.saving_s))  # another region only where its transfer costs less
        dest, reserved = await self._plan_and_reserve(key, request, now, weigh)
        if reserved is None:  # the devices are free, but not where it may go: it runs on, nothing said
            return self._note_held(key, "hold-upgrade", dest.message)
        reason = f"{migration.UPGRADE}: {what}"
        decided(key, "migrate", what, trigger=migration.UPGRADE)
        self.metrics.migrations.labels("migrate", migration.UPGRADE).inc()
        if not await self.checkpoints.ask(key, then=Then.MIGRATE, by=None, reason=reason, replicas=p.replicas,
                                          migration=MigrationState(reason=reason, replicas=p.replicas,
                                                                   trigger=migration.UPGRADE, reserved=reserved)):
            self._unreserve(key)
            return False
        return True

    async def _plan_and_reserve(self, key: str, request: Request, now: float, weigh: transfer.Move | None = None
                                ) -> tuple[planner.Admission, Reservation | None]:
        """Where a move would go (make before break) and that room reserved for it, at once under the lock:
        no placement can take it in between. The reservation is None when there is no room."""
        async with self.lock:
            dest = planner.plan_move(request, self.cache.waiting(), self.cache.holders(), self.fleet([key]), now,
                                     self.settings, weigh)
            c = dest.candidate
            reserved = reservation(c.region, c.device_class, c.per_replica, c.nodes) if c else None
            self._reserve(key, reserved)
        return dest, reserved

    def _note_held(self, key: str, kind: str, reason: str, verdict: migration.Verdict | None = None) -> bool:
        """A resize or upgrade that does not act: logged once per verdict (asked again on every pass; a hold of
        `engine.migration` is the same verdict while its named cause and end are, whatever its countdown). False."""
        same = f"{verdict.hold}: {held_message(verdict)}" if verdict is not None and verdict.hold else reason
        if self._held.get(key) != same:
            self._held[key] = same
            decided(key, kind, reason=reason)
        if verdict is not None and verdict.until is not None:
            self.wake_at(key, verdict.until)
        return False

    async def _periodic(self, key: str, spec: HeteroJobSpec, status: HeteroJobStatus, now: float) -> None:
        """Every spec.checkpoint.intervalSeconds, counted from the last checkpoint (or the placement)."""
        interval = spec.checkpoint.interval_seconds
        if not interval or status.placement is None:
            return
        last = status.checkpoint.last if status.checkpoint else None
        since = (timestamp(last.time) if last else None) or timestamp(status.placement.since) or now
        if now - since >= interval:
            await self.checkpoints.ask(key, then=PERIODIC, by=None, reason=f"periodic checkpoint (every {interval}s)")
        else:
            self.wake_at(key, since + interval)


NO_DESTINATION = "NoDestination"  # MoveHeld's reason: a voluntary move finds no room to reserve
HOLD_REFRESH_S = 5.0  # a held move whose verdict changes is said again at most this often (causes flip)
MIGRATE, CHECKPOINT = "migrate", "checkpoint"  # kinds of request annotations (status.handled keys)


def held_message(verdict: migration.Verdict) -> str:
    """A held move's words for its Event and condition: its cause, and when it lifts by itself (RFC 3339),
    the same on every pass while the hold is (its countdown is the decision log's)."""
    return verdict.cause + (f" until {iso(verdict.until)}" if verdict.until is not None else "")


def _moves(status: HeteroJobStatus) -> list[float]:
    """When the job was migrated or resized before (from its history)."""
    return [t for h in status.history if h.action in ("migrate", "resize") and (t := timestamp(h.time))]
