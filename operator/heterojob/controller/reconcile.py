"""The reconcile pass, and the `Controller` that wires the steps together.

A pass reads the job (its newest body known: `controller.known`; the API server's when none is) and its pods
(as watched, with the operator's own writes since: `kube.ownpods`; listed from the API server by a resync
round and before a step that deletes pods or ends a gang or a checkpoint), syncs the cache from the status,
asks `engine.execution.lifecycle.decide` what comes next and dispatches to the step that acts (`controller/actions.py`):
admission (place), pods (create, clean up), checkpoints (ask, finish), moves (migrate, resize, periodic
checkpoint).
Every step writes status through `controller.status` before it touches pods, so a pass is level-triggered
and idempotent and a restarted operator re-derives the same next step. A pass that placed its job settles
what it wrote (`_placed`); any other write is followed by one more pass, as its watch event would start.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from heterojob.api.common import SpecError, check_object_name
from heterojob.api.job_spec import job_spec
from heterojob.api.job import JOB_NAME_MAX, HeteroJobSpec, Phase
from heterojob.api.job_status import HeteroJobStatus, MigrationState
from heterojob.controller.alerts import AlertSymptoms
from heterojob.controller.actions import Actions
from heterojob.controller.checkpoints import PERIODIC, Checkpoints
from heterojob.controller.decisionlog import decided
from heterojob.controller.known import Known
from heterojob.controller.planning import Planning
from heterojob.controller.moves import Moves
from heterojob.controller.pass_reads import cordoned, fleet_problems, still_running
from heterojob.controller.pods import Pods
from heterojob.controller.queue import WorkQueue
from heterojob.controller.scheduler import Scheduler
from heterojob.controller.upgrades import Upgrades
from heterojob.controller.quotas import QuotaStatus
from heterojob.controller.status import STATUS_SCHEMA, StatusPatch, StatusWriter
from heterojob.state.job_status import read_status, where
from heterojob.engine.queue import admission as planner
from heterojob.engine.capacity import transfer
from heterojob.engine.execution import lifecycle
from heterojob.engine.placing import spec_changes, validation
from heterojob.engine.capacity.fleet import Fleet, Node
from heterojob.engine.execution.lifecycle import Action, JobView
from heterojob.engine.basics.phases import MOVE_THENS, MOVING
from heterojob.engine.execution.running import Step
from heterojob.engine.basics.queueing import QueuePolicy, QueueSettings
from heterojob.kube import convert
from heterojob.kube.api import Kube
from heterojob.kube.members import Members
from heterojob.metrics import OperatorMetrics
from heterojob.engine.placing.requeue import REQUEUE_AFTER_S
from heterojob.state.cache import Cache, Placed
from heterojob.api.times import timestamp
from heterojob.state.views import FleetSource


_UNSEEN = object()
# what a pass does only on the pods as listed from the API server, not as watched: it deletes pods, ends a gang or
# a checkpoint from what the pods say (a watch event may bring an eviction before the deletion it belongs to)
CONFIRMED = frozenset({Action.RESTART, Action.FAIL, Action.SUCCEED, Action.UNSCHEDULABLE, Action.DRAIN,
                       Action.CLEANUP, Action.CHECKPOINT_DONE, Action.CHECKPOINT_TIMEOUT})
WAITING_RESYNC_EVERY = 10  # a waiting job is looked at by every 10th resync round only


@dataclass(frozen=True)
class ControllerConfig:
    min_runtime_s: float = 300.0  # a job that has run less than this is never preempted (no thrashing)
    disruption_budget: int = 5  # at most this many jobs checkpointing or migrating at once, cluster-wide
    advisory: bool = False  # decide and record migrations, touch nothing
    max_retry_delay: float = 60.0
    queue_lookahead: int = 256  # how many jobs ahead in the queue a placement makes room for
    # "mlfq": engine.queue.policy orders the queue by attained service (status.scheduling), picks classes by
    # expected completion and displaces by level; "fifo": oldest first within a priority, the user's classes
    queue_policy: str = "mlfq"
    queue_thresholds_device_h: tuple[float, ...] = tuple(QueueSettings().thresholds_device_h)  # MLFQ level boundaries
    starvation_s: float = QueueSettings().starvation_s  # MLFQ: a job waiting this long is promoted
    max_turns: int | None = QueueSettings().max_turns  # MLFQ: preemptions after which only priority displaces
    # moves between regions (links)
    transfer: transfer.TransferSettings = field(default_factory=transfer.TransferSettings)
    move_requeue_after_s: float = REQUEUE_AFTER_S  # a move off bad nodes that fits nowhere this long: Pending
    unschedulable_after_s: float = JobView.unschedulable_after_s  # a rank the cluster's scheduler refuses this long


class Controller:
    """Owns the job cache and the work queue, and wires the pipeline's steps (each in its own module)."""

    def __init__(self, kube: Kube, fleet: FleetSource, config: ControllerConfig | None = None,
                 metrics: OperatorMetrics | None = None, members: Members | None = None,
                 watched_pods: Callable[[str, str], Iterable[Mapping[str, Any]]] | None = None) -> None:
        self.kube = kube
        self.members = members  # member clusters (docs/multicluster.md); None: one cluster
        self.fleet_source = fleet
        self.config = config or ControllerConfig()
        self.metrics = metrics or OperatorMetrics()
        self.cache = Cache()
        self.queue = WorkQueue(self.reconcile_key, self.config.max_retry_delay, self.metrics.decision_seconds.time)
        self.known = Known(STATUS_SCHEMA)  # each job's newest body and the versions acted on (`controller.known`)
        self.writer = StatusWriter(kube, self.known)
        self.pods = Pods(kube, self.writer, self.cache, self.layout, self.poke, self.poke_pending, members,
                         watched_pods)
        self.checkpoints = Checkpoints(kube, self.writer, self.cache, self.pods, self.poke, self.poke_pending)
        self.alerts = AlertSymptoms(kube, self.writer, self.poke, lambda key, reason: self.checkpoints.ask(
            key, then=PERIODIC, by=None, reason=reason))
        settings = planner.AdmissionSettings(min_runtime_s=self.config.min_runtime_s,
                                             lookahead=self.config.queue_lookahead)
        policy = QueuePolicy(self.config.queue_policy)
        queue = QueueSettings(policy=policy, thresholds_device_h=tuple(self.config.queue_thresholds_device_h),
                              starvation_s=self.config.starvation_s,
                              max_turns=self.config.max_turns) if policy != QueuePolicy.FIFO else None
        planning = Planning(kube, self.writer, self.cache, self.checkpoints, self.metrics, self.fleet, settings,
                            fleet.classes, self.config.transfer, fleet_later=self.fleet_later)
        self.scheduler = Scheduler(planning, self.pods, self.poke, self.forget, queue,
                                   requeue_after_s=self.config.move_requeue_after_s)
        self.upgrades = Upgrades(self.scheduler)  # what its cycles tell a running job's pass
        self.moves = Moves(planning, fleet.nodes, fleet.telemetry, self.queue.wake_at, self.config.disruption_budget,
                           self.config.advisory, self.upgrades.upgrade_for, by_level=queue is not None,
                           remaining_for=self.upgrades.remaining_for)
        self.actions = Actions(kube, self.writer, self.cache, self.pods, self.checkpoints, self.scheduler,
                               self.metrics, self.poke, self.poke_pending, self.queue.wake_at,
                               self.config.unschedulable_after_s)
        self.quotas = QuotaStatus(kube, self.cache, fleet.quota_objects, fleet.classes, fleet.regions)
        self._nodes: dict[str, Node] = {}  # each Node as the planner last read it (`node_news`)
        self._capacities = validation.Capacities()  # per class, while the fleet's nodes are unchanged
        self.fleet_version = 0  # bumped by every event that may change the fleet's nodes, classes or regions

    # --- the queue and the cache --------------------------------------------------------------------------

    @property
    def placed(self) -> Mapping[str, Placed]:
        """Running jobs' placements, for mapping alerts to jobs."""
        return self.cache.placed()

    def fleet(self, exclude: Iterable[str] = ()) -> Fleet:
        return self.cache.fleet(self.fleet_source, exclude)

    def fleet_later(self, exclude: Iterable[str] = ()) -> Callable[[], Fleet]:
        return self.cache.fleet_later(self.fleet_source, exclude)

    def layout(self) -> Fleet:
        """The fleet's nodes, classes and regions without what is used (what a pod manifest reads: cheap)."""
        src = self.fleet_source
        return Fleet(nodes=src.nodes(), classes=src.classes(), regions=src.regions())

    def poke(self, key: str) -> None:
        self.queue.poke(key)

    def poke_pending(self, delay: float = 0.0) -> None:
        """Capacity may have freed (or the fleet changed): the scheduler plans the queue again, and every held
        move gets another look (coalesced)."""
        self.fleet_version += 1
        self.room_freed(delay)

    def room_freed(self, delay: float = 0.2) -> None:
        """`poke_pending` when no node, class or region changed: a job's pod is gone (`Cache.departed` goes with it)."""
        if self.cache.departed:
            self.cache.departed_gone(self.pods.has_pods)
        self.scheduler.room_freed()
        if self.moves.held():
            self.queue.poke_all(self.moves.held, delay)

    def node_news(self, name: str, view: Node | None) -> bool:
        """A Node event: whether it changed what the planner reads of the node (its view; None: deleted).
        Node heartbeats (kubelet status updates every few seconds on each of thousands of nodes) do not. A
        node seen for the first time gives every waiting job another chance; one that changed also reaches
        the jobs placed on it or holding room there."""
        before = self._nodes.get(name, _UNSEEN)
        if before == view:
            return False
        self.fleet_version += 1
        if view is None:
            self._nodes.pop(name, None)
        else:
            self._nodes[name] = view
        if before is not _UNSEEN:
            self.node_changed(name)  # a NotReady node reaches its jobs now, not at the next resync
        self.poke_pending(delay=0.2)  # new labels (an upgraded driver) may let a waiting job in
        return True

    def nodes_known(self, views: Mapping[str, Node]) -> None:
        """The nodes as the planner reads them when it starts (the caches' listing): a node's next event is news
        (`node_news`) only if it changed them."""
        self._nodes = dict(views)

    def node_changed(self, node: str) -> None:
        """A Node changed (Ready, cordon, taints): every job placed on it, or holding room there for a move,
        gets a pass now."""
        for key, placed in self.cache.placed().items():
            if node in placed.nodes:
                self.poke(key)
        for key, entry in self.cache.entries.items():
            if entry.reserved is not None and node in entry.reserved.per_node:
                self.poke(key)

    def seen(self, key: str, body: Mapping[str, Any]) -> bool:
        """A watch event brought the job's `body`; True when a pass should look (`Known.event`: not the echo of
        a write whose pass settled it)."""
        return self.known.event(key, body)

    def forget(self, key: str, uid: str | None = None) -> None:
        """The job is deleted (or being deleted): its state goes, and no object is made for it from now on (`uid`:
        the deleted job's; None: the one of the body known)."""
        uid = uid or ((self.known.read(key) or {}).get("metadata") or {}).get("uid")
        self.pods.deleted(uid)
        self.queue.forget(key)
        self.known.forget(key)
        for victim in self.cache.yielders(key):  # they were yielding to it: they run on (reconcile)
            self.poke(victim)
        self.scheduler.drop(key)
        self.pods.forget(key)
        self.moves.forget(key)
        if self.cache.forget(key, pods_left=self.pods.has_pods(key)):
            self.poke_pending()

    def start_resync(self, interval: float, rate: float = 0.0) -> None:
        self.scheduler.start()
        self.queue.start_resync(interval, [("HeteroQuota status write", 1.0, self.quotas.sync)], self._resync_keys,
                                rate)

    def _resync_keys(self, round_: int) -> Iterator[str]:
        """What a resync round looks at: every known job; a waiting job only every WAITING_RESYNC_EVERY-th round
        (the scheduler plans it on every event that could change its verdict). That round reads each job and its
        pods from the API server (the safety net), each as the round reaches it; the others read what the watches
        have, as client-go's resync does: not two API calls a job for thousands of running jobs."""
        fresh = round_ % WAITING_RESYNC_EVERY == 0
        if fresh:
            keys = sorted(self.queue.known)
        else:
            waiting = {k for k, e in self.cache.entries.items() if e.request is not None}
            keys = sorted(k for k in self.queue.known if k not in waiting)
        for key in keys:
            if fresh:
                self.known.stale(key)
            yield key

    async def sync_quotas(self) -> None:
        await self.quotas.sync()

    async def stop(self) -> None:
        await self.scheduler.stop()
        await self.queue.stop()

    async def alert(self, key: str, fingerprint: str, firing: bool, action: str, nodes: tuple[str, ...],
                    message: str, starts_at: datetime) -> None:
        await self.alerts.alert(key, fingerprint, firing, action, nodes, message, starts_at)

    async def load(self) -> None:
        """Rebuild the cache from every job's status (at start, before any placement)."""
        now = time.time()
        for job in await self.kube.list_jobs():
            meta = job.get("metadata") or {}
            key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
            try:
                spec: HeteroJobSpec | None = job_spec(job)
            except SpecError:
                spec = None
            self.cache.sync(key, job, read_status(job), spec, self.fleet_source.classes(), now)

    # --- one pass ---------------------------------------------------------------------------------------

    async def reconcile_key(self, key: str) -> None:
        """One pass on the newest body known (`controller.known`; read from the API server when none is); when
        the pass did not settle what it wrote, one more pass, as its write's watch event would start."""
        namespace, name = key.split("/", 1)
        job = self.known.read(key)
        fresh = job is None  # read from the API server: its pods are listed too (a resync round's safety net)
        if job is None:
            job = await self.kube.get_job(namespace, name)
            if job is not None:
                self.known.fetched(key, job)
        token = self.known.begin(key, job or {})
        try:
            settled = await self.reconcile(namespace, name, job, fresh)
        except BaseException:
            self.known.abort(key, token)
            raise
        again = self.known.end(key, token, settled)
        if job is not None and self.pods.gone(job):
            # deleted while the pass ran (its DELETED event forgot the job meanwhile): what the pass recorded of it
            # after that (the cache's holding, a reservation, a request) goes too, or its room would stay taken
            self.forget(key, (job.get("metadata") or {}).get("uid"))
        elif again:
            self.poke(key)

    async def reconcile(self, namespace: str, name: str, job: dict[str, Any] | None | object = _UNSEEN,
                        fresh: bool = True) -> bool:
        """One pass over `job` (read from the API server when not given) and its pods (listed when `fresh`, else as
        watched). True when it settled what it wrote: nothing the written version calls for is left to another
        pass."""
        key = f"{namespace}/{name}"
        if job is _UNSEEN:
            job = await self.kube.get_job(namespace, name)
        if not isinstance(job, dict) or (job.get("metadata") or {}).get("deletionTimestamp") or self.pods.gone(job):
            self.forget(key, (job.get("metadata") or {}).get("uid") if isinstance(job, dict) else None)
            return False
        status = read_status(job)
        spec: HeteroJobSpec | None = None
        problems: list[Any] = check_object_name(name, JOB_NAME_MAX)
        try:
            spec = job_spec(job)
            if status.placement is None:  # never a running job: a node losing a device must not fail it
                problems += fleet_problems(self.fleet_source, self._capacities, spec)
        except SpecError as exc:
            problems += exc.problems
        now = time.time()
        spec_errors = "; ".join(str(p) for p in problems) if problems else None
        generation = (job.get("metadata") or {}).get("generation")
        if status.observed_generation is not None and generation != status.observed_generation:
            await self._spec_edited(job, status, None if problems else spec)
            return False
        cluster = status.placement.cluster if status.placement else None
        if cluster is not None and self.members is not None and not self.members.reachable(cluster):
            await self._member_away(job, status, now)
            return False
        try:
            listed = await self.pods.list(namespace, name, cluster, fresh)
        except Exception:
            if cluster is None or self.members is None:
                raise
            self.queue.wake_at(key, now + self.members.config.poll_seconds * 2)  # it went away meanwhile
            return False
        pods = [v for v in map(convert.pod_view, listed) if v is not None]
        if not fresh and still_running(status, pods):
            return await self.reconcile(namespace, name, job, True)  # a repair acts on the pods as listed
        if await self._repair(job, status, pods):
            return False
        known = self.cache.entries.get(key)
        before = (known.priority, known.request is not None) if known is not None else None
        if self.cache.sync(key, job, status, spec, self.fleet_source.classes(), now):
            self.scheduler.learned()
        after = self.cache.entry(key)
        if before is not None and before != (after.priority, after.request is not None):
            for victim in self.cache.yielders(key):  # a preemptor edited or placed: its victims look again
                self.poke(victim)
        pending = status.checkpoint.pending if status.checkpoint else None
        view = JobView(
            phase=status.phase, reason=status.reason,
            generation=status.placement.generation if status.placement else None,
            replicas=status.placement.replicas if status.placement else None,
            restarts=status.restarts, backoff_limit=spec.backoff_limit if spec else 0,
            pods=tuple(pods), spec_errors=spec_errors,
            checkpoint=lifecycle.AskedCheckpoint(pending.id, timestamp(pending.deadline) or 0.0, pending.then,
                                                 timestamp(pending.requested_at))
            if pending is not None else None,
            now=now, cordoned=cordoned(status, self.fleet_source.nodes()),
            unschedulable_after_s=self.config.unschedulable_after_s,
        )
        decision = lifecycle.decide(view)
        if not fresh and decision.action in CONFIRMED:
            return await self.reconcile(namespace, name, job, True)  # decided again on the pods as listed
        step, gathered = self.moves.decide(key, job, spec, status, decision.action, now)
        if step.step == Step.ESCALATE:  # a fault outranks what the job was checkpointing for
            await self.moves.escalate(job, status, step, now)
            return False
        if step.step in (Step.CANCEL_MOVE, Step.DESTINATION_GONE):
            await self.checkpoints.cancel(job, status, step.reason, saved=decision)
            return False
        if step.step == Step.YIELD_ENDS:  # the job it yields to no longer needs its room: its checkpoint is harmless
            assert step.yield_end is not None
            kind, cause = step.yield_end
            await self.checkpoints.cancel(job, status, self.moves.yield_words(spec, status, cause),
                                          saved=decision, what=kind.value, reason=kind.cancelled, cause=cause.value)
            return False
        if decision.action == Action.NONE and status.phase is not None and status.phase.terminal:
            await self.pods.drop_service(job)
            self.queue.settle(key)
        if decision.action == Action.NONE and await self.pods.scheduling(job, status, lifecycle.scheduling(view)):
            self.poke(key)  # the scheduler's verdict was written: the pass goes on from the status that says it
            return False
        if decision.action != Action.NONE:
            decided(key, decision.action.value, decision.message, reason=decision.reason)
        await self.actions.act(job, spec, status, decision, pods)
        if decision.action == Action.PLACE:
            return spec is not None and self._placed(key, spec)
        if decision.action in (Action.CHECKPOINT_DONE, Action.CHECKPOINT_TIMEOUT):
            return await self._go_on(key, lambda s: s.phase in MOVING)  # a move's checkpoint ended: placed again
        own = pending is not None and pending.then != PERIODIC  # a checkpoint of its own goes on
        if spec is not None and status.phase == Phase.RUNNING and step.step != Step.LIFECYCLE and not own:
            await self.moves.apply(job, spec, status, step, gathered, now)
            if step.step == Step.MIGRATE and step.symptom is not None and step.symptom.urgent:  # it waits for none
                return await self._go_on(key, lambda s: bool(s.checkpoint and s.checkpoint.pending and
                                                              s.checkpoint.pending.then in MOVE_THENS))
        return False

    async def _go_on(self, key: str, then: Callable[[HeteroJobStatus], bool]) -> bool:
        """The pass goes on with the job's next step at once, on the body its own write answered, when that body's
        status says `then` (what its step just wrote): an urgent move's checkpoint, which waits for no rank, ends
        now; a move whose checkpoint ended is placed again. No other pass would see more (the same newest body,
        the pods as watched); the round trips of the steps are the same, each step's status written before it
        acts, as from passes of their own. False (another pass looks) when that is not what its status says."""
        body = self.known.read(key)
        if body is None or not then(read_status(body)):
            return False
        namespace, name = key.split("/", 1)
        return await self.reconcile(namespace, name, body, False)

    def _placed(self, key: str, spec: HeteroJobSpec) -> bool:
        """After a waiting job's pass: True when that pass placed it (the newest body known says Admitted with a
        placement in this cluster). The pass wrote the placement and created the gang, so the pass its write's
        echo would start has nothing to do but sync the cache from the status, done here. Anything else (still
        waiting, refused pods backing off, a member cluster's placement) is looked at again, as before."""
        body = self.known.read(key)
        if body is None:
            return False
        status = read_status(body)
        if status.phase != Phase.ADMITTED or status.placement is None or status.placement.cluster is not None:
            return False
        self.cache.sync(key, body, status, spec, self.fleet_source.classes(), time.time())
        return True

    async def _spec_edited(self, job: dict[str, Any], status: HeteroJobStatus, spec: HeteroJobSpec | None
                           ) -> None:
        """The spec was edited since status.observedGeneration: record that it was read (observedGeneration,
        observedSpec) and, for a job holding a placement, say in an Event which changed fields apply now and
        which at its next placement (`engine.placing.spec_changes`). The pass then runs again on the new spec (an
        invalid edit is refused there, as on creation)."""
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        generation = meta.get("generation")
        after = spec_changes.digests(job.get("spec"))
        patch = StatusPatch(status).observe(generation, after)
        revived = lifecycle.after_edit(status.phase, status.reason, spec is not None)
        if revived is not None:  # its pods were refused for good: the edit may fix them, so it is placed again
            patch.phase(Phase.PENDING, revived.reason, revived.message).set(completionTime=None)
            patch.condition("PodsCreated", "Unknown", revived.reason, revived.message)
        if not await self.writer.write(job, patch):
            return
        if revived is not None:
            self.kube.post_event(job, "Normal", "SpecEdited", revived.message)
            decided(key, "revive", revived.message, reason=revived.reason)
        change = spec_changes.changes(status.observed_spec, after) if status.observed_spec else None
        held = status.placement is not None and not (status.phase is not None and status.phase.terminal)
        if change is not None and spec is not None and held:
            message = change.message(int(generation or 0))
            self.kube.post_event(job, "Normal", change.reason, message)
            decided(key, "spec-edited", message, reason=change.reason)
        self.poke(key)

    async def _repair(self, job: dict[str, Any], status: HeteroJobStatus, pods: list[lifecycle.PodView]) -> bool:
        """Status is untrusted: a finished phase while the placement's pods still run (someone wrote it) is
        repaired from the pods, before the cache would give their devices away. True when it wrote."""
        alive = still_running(status, pods)
        p = status.placement
        if not alive or p is None or status.phase is None:
            return False
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        phase = Phase.RUNNING if len(alive) == p.replicas and all(v.phase == "Running" for v in alive) \
            else Phase.ADMITTED
        message = (f"status said {status.phase.value} while {len(alive)} pod(s) of generation {p.generation} "
                   f"still run: repaired from the pods")
        await self.writer.write(job, StatusPatch(status).repair(phase, message))
        self.kube.post_event(job, "Warning", "StatusRepaired", message)
        decided(key, "repair", message)
        self.poke(key)
        return True

    async def _member_away(self, job: dict[str, Any], status: HeteroJobStatus, now: float) -> None:
        """The job's member cluster does not answer. Before its loss timeout nothing is done (a slow member
        is not a fault); after it, the job is lost there and placed again from its last checkpoint: an
        involuntary move. Its pods there are not waited for: `kube.members` removes them when it returns."""
        assert self.members is not None and status.placement is not None and status.placement.cluster is not None
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        p, cluster = status.placement, status.placement.cluster
        if not self.members.lost(cluster, now):
            self.queue.wake_at(key, self.members.lost_at(cluster))
            return
        if status.phase is not None and status.phase.terminal:
            return  # it finished there: nothing to move
        resume = status.checkpoint.last if status.checkpoint else None
        message = (f"the member cluster of region {cluster} is lost ({self.members.problem(cluster)}); "
                   f"placing the job again from " + (f"checkpoint {resume.id}" if resume else "the start"))
        patch = StatusPatch(status).drop_pending().begin_move(
            Phase.MIGRATING, "MemberLost", message,  # its nodes are not at fault: none excluded
            MigrationState(reason=message, replicas=p.replicas, trigger="memberLost", involuntary=True))
        patch.history("migrate", message, where(status))
        if not await self.writer.write(job, patch):
            return
        self.kube.post_event(job, "Warning", "MemberLost", message)
        decided(key, "member-lost", message, reason="MemberLost")
        if self.cache.release(key):
            self.poke_pending()
        self.poke(key)
