"""Moves of a running job (the disruption step): the views its next step is decided from, and the moves that
carry it out.

`decide` gathers the job's symptoms (`state.symptoms`), builds the views (`state.running.view` and what the
cache, the fleet and the planner say: a called-off request, a dead reserved destination, the job a yield
gives room to, room to grow, an upgrade that pays) and asks `engine.execution.running.decide`, the one place the order
of competing causes lives. The reconcile pass applies the answer: `escalate`, a cancel through
`Checkpoints.cancel`, or `apply` for a Running job (a checkpoint asked by annotation, a move, a hold, a
resize, an upgrade, the periodic checkpoint). A held move is announced once per verdict (Event MigrationHeld,
condition MoveHeld: a stable message, a countdown only in the decision log, as its status says). A voluntary
move reserves its destination before the checkpoint is asked for (make before break) and goes to another
region only where its checkpoint's transfer pays (`engine.capacity.transfer`, through `plan_move`); an urgent one is
marked involuntary, so its placement prefers the cheapest transfer.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from heterojob.api.job import HeteroJobSpec, Phase, Priority
from heterojob.api.job_status import HeteroJobStatus, MigrationState, Reservation
from heterojob.constants import ANNOTATION_CHECKPOINT_NOW, ANNOTATION_MIGRATE
from heterojob.controller.checkpoints import PERIODIC, resume_from
from heterojob.controller.decisionlog import decided
from heterojob.controller.planning import Planning
from heterojob.controller.status import StatusPatch
from heterojob.engine.queue import admission as planner
from heterojob.engine.queue import relocation
from heterojob.engine.capacity import migration, transfer
from heterojob.engine.queue import completion
from heterojob.engine.capacity.fleet import Allocation, Node
from heterojob.engine.basics.phases import MOVE_THENS, Then
from heterojob.engine.execution.lifecycle import Action
from heterojob.engine.placing.placement import Request
from heterojob.engine.execution.running import RunningDecision, RunningRules, Running, Step, decide
from heterojob.engine.disruption.preemption import Preemptor, YieldEnd
from heterojob.state.requests import move_request, request_for, reservation, transfer_move
from heterojob.state import running
from heterojob.state.symptoms import Gathered, gather
from heterojob.state.symptoms import changed as onsets_changed
from heterojob.api.times import iso
from heterojob.telemetry.snapshot import Snapshot


class Moves:
    """A running job's next step: its views gathered, `engine.execution.running.decide` asked, the answer carried out."""

    def __init__(self, planning: Planning, nodes: Callable[[], Mapping[str, Node]],
                 telemetry: Callable[[], Snapshot | None], wake_at: Callable[[str, float], None], budget: int,
                 advisory: bool, upgrade_for: Callable[[str, Sequence[str], float, float | None],
                                                       completion.Upgrade | None] | None = None,
                 by_level: bool = False, remaining_for: Callable[[str, float], float | None] | None = None) -> None:
        self.kube = planning.kube
        self.writer = planning.writer
        self.cache = planning.cache
        self.checkpoints = planning.checkpoints
        self.nodes = nodes
        self.telemetry = telemetry
        self.fleet = planning.fleet  # the fleet without the named jobs' holdings
        self.wake_at = wake_at
        self.metrics = planning.metrics
        self.budget = budget
        self.advisory = advisory
        self.settings = planning.settings
        self.classes = planning.classes
        self.lock = planning.lock  # admission's: a destination is planned and reserved under the lock placements take
        self.transfer = planning.transfer  # what a move between regions is assumed to cost (engine.capacity.transfer)
        self.upgrade_for = upgrade_for  # admission's: a move up that pays for a running job (mlfq), or None
        self.by_level = by_level  # the queue policy displaces a job of the same priority by level (mlfq)
        # admission's: a running job's expected remaining wall time where it runs (mlfq), or None: growth
        # weighs it against the resize's cost (`completion.growth_pays`)
        self.remaining_for = remaining_for
        self._held: dict[str, str] = {}  # job -> why its move waits (resizes and upgrades: to log it once)
        self._said_at: dict[str, float] = {}  # job -> when its held move's verdict was last written (monotonic)

    def forget(self, key: str) -> None:
        self._held.pop(key, None)
        self._said_at.pop(key, None)

    def held(self) -> list[str]:
        """Jobs whose move waits (for room, the cooldown, the budget): room that frees may let them go."""
        return list(self._held)

    # --- the views `engine.execution.running.decide` reads, and its answer applied -------------------------------

    def decide(self, key: str, job: Mapping[str, Any], spec: HeteroJobSpec | None, status: HeteroJobStatus,
               lifecycle: Action, now: float) -> tuple[RunningDecision, Gathered | None]:
        """The running job's next step (`engine.execution.running.decide`) from its views, with its symptoms gathered
        (and the onsets status.symptoms is to keep)."""
        gathered = None
        if spec is not None and status.placement is not None and status.phase in (Phase.RUNNING,
                                                                                  Phase.CHECKPOINTING):
            gathered = self.symptoms(job, spec, status, now)
        asked = ((job["metadata"].get("annotations") or {}).get(ANNOTATION_CHECKPOINT_NOW) or "").strip()
        view = running.view(spec, status, gathered.symptoms if gathered else (), lifecycle, now, asked)
        e = view.elastic
        if e is not None and e.replicas < e.maximum and self.remaining_for is not None:
            last = status.checkpoint.last if status.checkpoint else None
            cost = completion.MoveCost(save_s=last.save_seconds) if last and last.save_seconds else completion.MoveCost()
            view = replace(view, elastic=replace(e, remaining_s=self.remaining_for(key, now), move_cost_s=cost.seconds))
        pending = status.checkpoint.pending if status.checkpoint else None
        fleetwise = Running(
            disrupted_now=self.cache.disrupted(), cancelled=self.cancelled(job, status),
            destination=self.destination_gone(key, status), preemptor=self.preemptor(pending.by) if pending else None,
            grow_to=lambda: self.room_to_grow(key, job, spec, status) if spec is not None else None,
            upgrade=lambda: self._upgrade_for(key, spec, status, now))
        if spec is None:
            return decide(view, fleetwise, RunningRules(migration.Rules(frozenset()))), gathered
        return decide(view, fleetwise, running.rules(spec, self.budget, self.advisory, self.by_level)), gathered

    async def apply(self, job: Mapping[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus, d: RunningDecision,
                    gathered: Gathered | None, now: float) -> None:
        """Act on a Running job's step (CHECKPOINT to PERIODIC, HOLD, NONE): request annotations already acted
        on are removed, the symptoms' onsets written, then the step is taken."""
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        annotations = meta.get("annotations") or {}
        for kind, name in ((running.CHECKPOINT, ANNOTATION_CHECKPOINT_NOW), (running.MIGRATE, ANNOTATION_MIGRATE)):
            value = (annotations.get(name) or "").strip()
            if value and value == status.handled.get(kind):  # acted on; the annotation outlived a restart
                await self.kube.annotate_job(meta["namespace"], meta["name"], {name: None})
        if d.step == Step.CHECKPOINT:
            asked = (annotations.get(ANNOTATION_CHECKPOINT_NOW) or "").strip()
            # intent first (status says which request it serves), then the annotation goes
            if await self.checkpoints.ask(key, then=PERIODIC, by=None, reason=d.reason,
                                          handled={running.CHECKPOINT: asked}, job=job):
                await self.kube.annotate_job(meta["namespace"], meta["name"], {ANNOTATION_CHECKPOINT_NOW: None})
            return
        if gathered is not None and onsets_changed(status.symptoms, gathered.onsets):  # each held clock
            await self.writer.write(job, StatusPatch(status).onsets(gathered.onsets))
        if d.at is not None:
            self.wake_at(key, d.at)
        if d.step == Step.MIGRATE:
            await self._migrate(job, spec, status, d, now)
            return
        if d.step == Step.HOLD:
            v = d.verdict
            if v is not None and v.hold is not None:
                await self._hold(job, status, v.hold.value, held_message(v), v.reason)
            return
        if not d.symptoms:
            await self._clear_hold(job, status)
        if d.idle is not None:  # its time starts the shrink's clock
            idle, words = d.idle
            await self.writer.write(job, StatusPatch(status).condition(
                "LowUtilization", "True" if idle else "False", "Idle" if idle else "Busy", words))
        for kind, verdict in d.held:
            self._note_held(key, kind.value, verdict.reason, verdict)
        while d.step in (Step.RESIZE, Step.UPGRADE):
            act = self._resize if d.step == Step.RESIZE else self._upgrade
            if await act(key, job, spec, status, d, now) or d.otherwise is None:
                return
            d = d.otherwise()  # no room for it: the next candidate
            for kind, verdict in d.held:
                self._note_held(key, kind.value, verdict.reason, verdict)
            if d.at is not None:
                self.wake_at(key, d.at)
        if d.step == Step.PERIODIC:
            await self.checkpoints.ask(key, then=PERIODIC, by=None, reason=d.reason, job=job)

    async def _migrate(self, job: Mapping[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus, d: RunningDecision,
                       now: float) -> None:
        """A symptom moves the job: reserve where it goes (make before break), then ask for the checkpoint."""
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        symptom, symptoms = d.symptom, d.symptoms
        assert symptom is not None
        p = status.placement
        assert p is not None
        # every node a fault or symptom names is left, not only the one that decides the move (a failed GPU moves
        # the job at once; a second node of its, overheating, must not be kept for it as "the healthy part")
        avoid = tuple(sorted(set(symptom.nodes).union(*(s.nodes for s in symptoms if s.trigger != migration.MANUAL))))
        move = MigrationState(exclude=list(avoid), reason=f"{symptom.trigger}: {symptom.message}",
                              replicas=p.replicas, trigger=symptom.trigger)
        if symptom.trigger == migration.MANUAL:
            move.request = ((meta.get("annotations") or {}).get(ANNOTATION_MIGRATE) or "").strip()
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
        if not await self.checkpoints.ask(key, then=Then.MIGRATE, by=None, reason=move.reason, exclude=avoid,
                                          urgent=symptom.urgent, replicas=p.replicas, migration=move, job=job):
            self._unreserve(key)  # nothing was asked (another checkpoint goes on): the room goes back

    async def escalate(self, job: Mapping[str, Any], status: HeteroJobStatus, d: RunningDecision, now: float) -> bool:
        """A fault (a NotReady node, a failed device, an alert naming a dead one) arriving while the job
        checkpoints for something that was not urgent (a voluntary move, a resize, a preemption): a rank on a
        dead node never answers, so waiting for the deadline would hold the job there for the whole timeout.
        The pending checkpoint becomes urgent (its deadline its request time: it goes on from the last
        completed checkpoint now), the fault's nodes are avoided, and a move becomes involuntary (it may no
        longer be cancelled; its reservation is kept unless it lies on those nodes). True when it wrote."""
        pending = status.checkpoint.pending if status.checkpoint else None
        symptom = d.symptom
        assert pending is not None and symptom is not None
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

    def preemptor(self, by: str | None) -> Preemptor | None:
        """The job a yield gives room to, as the cache knows it now (None: gone)."""
        e = self.cache.entries.get(by or "")
        return Preemptor(e.priority, e.request is not None) if e is not None else None

    def yield_words(self, spec: HeteroJobSpec | None, status: HeteroJobStatus, why: YieldEnd) -> str:
        """Why a job still at the checkpoint it was asked for on another's behalf (a preemption's victim, a
        reclaim's grown job) runs on as it is instead (`engine.disruption.preemption.yield_ends`), in words."""
        by = status.checkpoint.pending.by if status.checkpoint and status.checkpoint.pending else None
        if why == YieldEnd.PREEMPTOR_GONE:
            words = f"{by}, which it was yielding to, is gone"
        elif why == YieldEnd.PREEMPTOR_NOT_WAITING:
            words = f"{by}, which it was yielding to, no longer waits for room"
        else:
            e = self.cache.entries.get(by or "")
            theirs = next((p.value for p in Priority if e is not None and p.rank == e.priority), "?")
            mine = spec.priority.value if spec is not None else "?"
            words = f"its priority ({mine}) is no longer below that of {by} ({theirs}), which it was yielding to"
        return f"{words} ({why.value})"

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
                      manual if manual and manual != status.handled.get(running.MIGRATE) else None, now)

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
        """`state.running.growth_limit`."""
        return running.growth_limit(spec, status)

    def _upgrade_for(self, key: str, spec: HeteroJobSpec | None, status: HeteroJobStatus, now: float
                     ) -> completion.Upgrade | None:
        """A move up to a faster class (or a probe of one) that pays (`Admission.upgrade_for`), within
        spec.policy.allowCrossClass, or None."""
        p = status.placement
        if self.upgrade_for is None or spec is None or p is None or not spec.policy.allow_cross_class \
                or len(spec.devices) < 2:
            return None
        last = status.checkpoint.last if status.checkpoint else None
        return self.upgrade_for(key, [a.device_class for a in spec.devices], now, last.save_seconds if last else None)

    async def _resize(self, key: str, job: Mapping[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                      d: RunningDecision, now: float) -> bool:
        """Shrink or grow the job through a checkpoint, its new size's room reserved first; False when no room."""
        p, change = status.placement, d.resize
        assert p is not None and change is not None
        request = move_request(key, job, spec, p.region, p.device_class, (), change.replicas)
        dest, reserved = await self._plan_and_reserve(key, request, now)
        if reserved is None:  # make before break: no room for the new size, the job runs on as it is
            return self._note_held(key, "hold-resize", dest.message)
        decided(key, "resize", change.reason, trigger=change.trigger)
        self.metrics.migrations.labels("resize", change.trigger).inc()
        reason = f"{change.trigger}: {change.reason}"
        if not await self.checkpoints.ask(key, then=Then.RESIZE, by=None, reason=reason, replicas=change.replicas,
                                          job=job, migration=MigrationState(reason=reason, replicas=change.replicas,
                                                                            trigger=change.trigger, reserved=reserved)):
            self._unreserve(key)
            return False
        return True

    async def _upgrade(self, key: str, job: Mapping[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                       d: RunningDecision, now: float) -> bool:
        """Move the job up to a faster class (or probe one whose speed for it is only the sheet's guess) through
        the rules every voluntary move obeys (judged by `decide`) and make before break (the destination
        reserved before the checkpoint is asked for); False when there is no room where it may go."""
        p, u = status.placement, d.upgrade
        assert p is not None and u is not None
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
        reason = f"{migration.UPGRADE}: {d.reason}"
        decided(key, "migrate", d.reason, trigger=migration.UPGRADE)
        self.metrics.migrations.labels("migrate", migration.UPGRADE).inc()
        if not await self.checkpoints.ask(key, then=Then.MIGRATE, by=None, reason=reason, replicas=p.replicas,
                                          job=job, migration=MigrationState(reason=reason, replicas=p.replicas,
                                                                            trigger=migration.UPGRADE, reserved=reserved)):
            self._unreserve(key)
            return False
        return True

    async def _plan_and_reserve(self, key: str, request: Request, now: float, weigh: transfer.Move | None = None
                                ) -> tuple[planner.Admission, Reservation | None]:
        """Where a move would go (make before break) and that room reserved for it, at once under the lock:
        no placement can take it in between. The reservation is None when there is no room."""
        async with self.lock:
            dest = relocation.plan_move(request, self.cache.waiting(), self.cache.holders(), self.fleet([key]), now,
                                     self.settings, weigh)
            c = dest.candidate
            reserved = reservation(c.region, c.device_class, c.per_replica, c.nodes) if c else None
            self._reserve(key, reserved)
        return dest, reserved

    def _note_held(self, key: str, kind: str, reason: str, verdict: migration.MigrationVerdict | None = None) -> bool:
        """A resize or upgrade that does not act: logged once per verdict (asked again on every pass; a hold of
        `engine.capacity.migration` is the same verdict while its named cause and end are, whatever its countdown). False."""
        same = f"{verdict.hold}: {held_message(verdict)}" if verdict is not None and verdict.hold else reason
        if self._held.get(key) != same:
            self._held[key] = same
            decided(key, kind, reason=reason)
        if verdict is not None and verdict.until is not None:
            self.wake_at(key, verdict.until)
        return False


NO_DESTINATION = "NoDestination"  # MoveHeld's reason: a voluntary move finds no room to reserve
HOLD_REFRESH_S = 5.0  # a held move whose verdict changes is said again at most this often (causes flip)


def held_message(verdict: migration.MigrationVerdict) -> str:
    """A held move's words for its Event and condition: its cause, and when it lifts by itself (RFC 3339),
    the same on every pass while the hold is (its countdown is the decision log's)."""
    return verdict.cause + (f" until {iso(verdict.until)}" if verdict.until is not None else "")
