"""The job controller: a deduplicated work queue of jobs, each pass level-triggered and idempotent.

A pass reads the job and its pods fresh from the API, asks the engine what comes next, records that
in the job's status and then acts on pods. It never runs twice at once for one job. Placement runs
under one lock against an in-memory ledger of what every placed job holds; the ledger is rebuilt from
the jobs' statuses when the operator starts, so it never outlives the truth in the API.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from datetime import datetime, timezone
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from heterojob.api.common import SpecError, check_object_name, parse_spec
from heterojob.api.job import JOB_NAME_MAX, HeteroJobSpec, HeteroJobStatus, Phase, Priority
from heterojob.constants import (
    ANNOTATION_CHECKPOINT_NOW, ANNOTATION_CHECKPOINT_REQUEST, ANNOTATION_MIGRATE, LABEL_HOSTNAME,
    LABEL_REGION)
from heterojob.engine import lifecycle, migration, placement, quota_usage, validation
from heterojob.engine.fleet import Allocation, DeviceClass, Fleet, Limit, Node, RegionInfo, holdings, usage
from heterojob.engine.lifecycle import Action, Decision, JobView
from heterojob.kube import convert, manifests
from heterojob.kube.api import Kube, now_iso
from heterojob.alerts import mapping as alerts_mapping
from heterojob.alerts.mapping import Placed
from heterojob.kube.conditions import set_condition
from heterojob.metrics import OperatorMetrics
from heterojob.telemetry.model import Health
from heterojob.telemetry.snapshot import JobRef, Snapshot, StragglerPolicy, job_telemetry

log = logging.getLogger("heterojob.controller")
decisions = logging.getLogger("heterojob.decisions")

HISTORY_LIMIT = 50
PERIODIC = "continue"
MOVING = (Phase.MIGRATING, Phase.RESIZING)  # what follows a periodic checkpoint: the job goes on where it is


@dataclass
class FleetSource:
    """Live views of the cluster (Kopf indexes in the operator; plain dicts in tests)."""

    nodes: Callable[[], Mapping[str, Node]]
    classes: Callable[[], Mapping[str, DeviceClass]]
    regions: Callable[[], Mapping[str, RegionInfo]]
    foreign_usage: Callable[[], Mapping[tuple[str, str], int]]
    # (namespace, name) -> a HeteroQuota's (limits, spec error); node -> why telemetry keeps new work off it
    quota_objects: Callable[[], Mapping[tuple[str, str], tuple[Sequence[Limit], str | None]]] = dict
    unhealthy: Callable[[], Mapping[str, str]] = dict
    telemetry: Callable[[], Snapshot | None] = lambda: None  # the monitor's last fleet snapshot

    def quotas(self) -> dict[str, list[Limit]]:
        """namespace -> every limit of its HeteroQuotas (all of them apply)."""
        out: dict[str, list[Limit]] = {}
        for (namespace, _), (limits, _) in self.quota_objects().items():
            out.setdefault(namespace, []).extend(limits)
        return out

    @classmethod
    def from_objects(cls, objects: Iterable[Mapping[str, Any]]) -> FleetSource:
        """A fixed view from Node, AcceleratorClass and Region objects (tests, benchmarks, tools)."""
        nodes, classes, regions, quotas = {}, {}, {}, {}
        for obj in objects:
            name, kind = obj["metadata"]["name"], obj.get("kind")
            if kind == "Node":
                nodes[name] = convert.node_view(obj)
            elif kind == "AcceleratorClass" and (c := convert.device_class(obj)) is not None:
                classes[name] = c
            elif kind == "Region" and (r := convert.region_info(obj)) is not None:
                regions[name] = r
            elif kind == "HeteroQuota":
                quotas[(obj["metadata"].get("namespace", ""), name)] = convert.quota_limits(obj)
        return cls(nodes=lambda: nodes, classes=lambda: classes, regions=lambda: regions, foreign_usage=dict,
                   quota_objects=lambda: quotas)


@dataclass(frozen=True)
class ControllerConfig:
    min_runtime_s: float = 300.0  # a job that has run less than this is never preempted (no thrashing)
    disruption_budget: int = 5  # at most this many jobs checkpointing or migrating at once, cluster-wide
    advisory: bool = False  # decide and record migrations, touch nothing
    max_retry_delay: float = 60.0
    queue_lookahead: int = 256  # how many jobs ahead in the queue a placement makes room for


def _job_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def _condition(conditions: list[dict[str, Any]], type_: str, status: str, reason: str, message: str
               ) -> list[dict[str, Any]]:
    return set_condition(conditions, type_, status, reason, message, now_iso())


class Controller:
    def __init__(self, kube: Kube, fleet: FleetSource, config: ControllerConfig | None = None,
                 metrics: OperatorMetrics | None = None) -> None:
        self.kube = kube
        self.metrics = metrics or OperatorMetrics()
        self.placed: dict[str, Placed] = {}  # running jobs' placements, for mapping alerts to jobs
        self.alert_symptoms: dict[str, dict[str, migration.Symptom]] = {}  # job -> alert fingerprint -> symptom
        self.fleet_source = fleet
        self.config = config or ControllerConfig()
        max_retry_delay = self.config.max_retry_delay
        self.allocations: dict[str, Allocation] = {}
        self.requests: dict[str, placement.Request] = {}  # the queue: what each waiting job asks for
        self.running: dict[str, tuple[int, float]] = {}  # placed job -> (priority, placed since)
        self.yielding: dict[str, str] = {}  # preempted or reclaimed job -> the job it makes room for
        self.grown: dict[str, placement.GrownJob] = {}  # elastic jobs above their admitted size (lent room)
        self.pending: set[str] = set()
        self.known: set[str] = set()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._dirty: set[str] = set()
        self._failures: dict[str, int] = {}
        self._placement_lock = asyncio.Lock()
        self._max_retry_delay = max_retry_delay
        self._pending_poke: asyncio.TimerHandle | None = None
        self._resync: asyncio.Task[None] | None = None
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._quota_written: dict[tuple[str, str], dict[str, Any]] = {}
        self._disrupted: set[str] = set()  # jobs checkpointing or migrating now (the disruption budget)
        self._held: dict[str, str] = {}  # job -> why its migration waits (to post the Event once)

    # --- the queue ---------------------------------------------------------------------------------

    def poke(self, key: str) -> None:
        """Reconcile `key` soon; a pass already running for it runs once more afterwards."""
        self.known.add(key)
        if key in self._tasks:
            self._dirty.add(key)
            return
        self._tasks[key] = asyncio.get_running_loop().create_task(self._work(key), name=f"reconcile {key}")

    def poke_pending(self, delay: float = 0.0) -> None:
        """Capacity may have freed: give every waiting job another look (coalesced)."""
        if self._pending_poke is not None:
            return

        def fire() -> None:
            self._pending_poke = None
            for key in sorted(self.pending):
                self.poke(key)

        self._pending_poke = asyncio.get_running_loop().call_later(delay, fire)

    def forget(self, key: str) -> None:
        self.known.discard(key)
        self.pending.discard(key)
        self.requests.pop(key, None)
        self.running.pop(key, None)
        self.yielding.pop(key, None)
        self.grown.pop(key, None)
        self._disrupted.discard(key)
        self.placed.pop(key, None)
        self.alert_symptoms.pop(key, None)
        if self.allocations.pop(key, None) is not None:
            self.poke_pending()

    async def _work(self, key: str) -> None:
        try:
            while True:
                self._dirty.discard(key)
                try:
                    with self.metrics.decision_seconds.time():
                        await self.reconcile(*key.split("/", 1))
                    self._failures.pop(key, None)
                except asyncio.CancelledError:
                    raise
                except Exception:  # noqa: BLE001 - one job's trouble must not stop the others
                    failures = self._failures[key] = self._failures.get(key, 0) + 1
                    delay = min(self._max_retry_delay, 0.2 * 2 ** failures) * (0.5 + random.random() / 2)
                    log.exception("reconcile of %s failed (attempt %d); retrying in %.1fs", key, failures, delay)
                    asyncio.get_running_loop().call_later(delay, self.poke, key)
                    break
                if key not in self._dirty:
                    break
        finally:
            self._tasks.pop(key, None)

    def start_resync(self, interval: float) -> None:
        """A safety net: every known job is looked at again each `interval`, whatever events said."""
        async def loop() -> None:
            while True:
                await asyncio.sleep(interval)
                for key in sorted(self.known):
                    self.poke(key)

        async def quotas() -> None:
            while True:
                await asyncio.sleep(1.0)
                try:
                    await self.sync_quotas()
                except Exception as exc:  # noqa: BLE001 - status of a quota is retried next second
                    log.warning("could not write HeteroQuota status: %s", exc)

        self._resync = asyncio.get_running_loop().create_task(loop(), name="resync")
        self._quota_task = asyncio.get_running_loop().create_task(quotas(), name="quota-status")

    async def stop(self) -> None:
        if self._resync is not None:
            self._resync.cancel()
            self._quota_task.cancel()
        for timer in self._timers.values():
            timer.cancel()
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def load(self) -> None:
        """Rebuild the allocation ledger from every job's status (at start, before any placement)."""
        for job in await self.kube.list_jobs():
            meta = job.get("metadata") or {}
            key = _job_key(meta.get("namespace", ""), meta.get("name", ""))
            try:
                spec: HeteroJobSpec | None = parse_spec(HeteroJobSpec, job.get("spec"))
            except SpecError:
                spec = None
            self._sync_allocation(key, self._status(job), job, spec)

    # --- one pass ----------------------------------------------------------------------------------

    @staticmethod
    def _status(job: Mapping[str, Any]) -> HeteroJobStatus:
        try:
            return HeteroJobStatus.model_validate(job.get("status") or {})
        except ValidationError as exc:
            log.warning("unreadable status of %s/%s, treating it as new: %s",
                        job["metadata"].get("namespace"), job["metadata"].get("name"), exc)
            return HeteroJobStatus()

    def _sync_allocation(self, key: str, status: HeteroJobStatus, job: Mapping[str, Any],
                         spec: HeteroJobSpec | None) -> None:
        """The in-memory ledger follows the job's status: what it holds, since when, whom it yields to,
        and the devices it holds beyond its admitted size (lent to it while nobody waited)."""
        p = status.placement
        if p is not None and not (status.phase and status.phase.terminal):
            classes = self.fleet_source.classes()
            cls = classes.get(p.device_class)
            resource = cls.resource_name if cls else p.device_class
            per_node: dict[str, int] = {}
            for node in p.nodes:
                per_node[node] = per_node.get(node, 0) + p.per_replica
            self.allocations[key] = Allocation(resource, per_node, key.split("/", 1)[0], p.device_class, p.region)
            since = _timestamp(p.since) or _timestamp(status.start_time) or time.time()
            self.running[key] = (_priority(job), since)
            ns, name = key.split("/", 1)
            self.placed[key] = Placed(ns, name, p.generation, tuple(p.nodes))
            if spec is not None and p.replicas > spec.replicas.start:
                mine = _request(key, job, spec)
                base = placement.Request(key, [a for a in mine.alternatives if a.device_class == p.device_class],
                                         spec.replicas.start, allowed_regions=(p.region,), priority=mine.priority,
                                         created=mine.created)
                self.grown[key] = placement.GrownJob(key, mine.priority, since, self.allocations[key], base)
            else:
                self.grown.pop(key, None)
        else:
            self.grown.pop(key, None)
            self.allocations.pop(key, None)
            self.running.pop(key, None)
            self.placed.pop(key, None)
        if status.phase in (Phase.CHECKPOINTING, Phase.MIGRATING, Phase.RESIZING):
            self._disrupted.add(key)
        else:
            self._disrupted.discard(key)
        pending = status.checkpoint.pending if status.checkpoint else None
        if pending is not None and pending.then in ("preempt", "resize") and pending.by:
            self.yielding[key] = pending.by
        else:
            self.yielding.pop(key, None)

    async def reconcile(self, namespace: str, name: str) -> None:
        key = _job_key(namespace, name)
        job = await self.kube.get_job(namespace, name)
        if job is None or (job.get("metadata") or {}).get("deletionTimestamp"):
            self.forget(key)
            return
        status = self._status(job)
        spec: HeteroJobSpec | None = None
        problems: list[Any] = check_object_name(name, JOB_NAME_MAX)
        try:
            spec = parse_spec(HeteroJobSpec, job.get("spec"))
            if status.placement is None:  # never a running job: a node losing a device must not fail it
                problems += self._fleet_problems(spec)
        except SpecError as exc:
            problems += exc.problems
        self._sync_allocation(key, status, job, spec)
        spec_errors = "; ".join(str(p) for p in problems) if problems else None

        pods = [v for v in map(convert.pod_view, await self.kube.job_pods(namespace, name)) if v is not None]
        view = JobView(
            phase=status.phase, reason=status.reason,
            generation=status.placement.generation if status.placement else None,
            replicas=status.placement.replicas if status.placement else None,
            restarts=status.restarts,
            backoff_limit=spec.backoff_limit if spec else 0,
            pods=tuple(pods), spec_errors=spec_errors,
            checkpoint=_pending_checkpoint(status), now=time.time(),
        )
        decision = lifecycle.decide(view)
        if decision.action == Action.NONE and status.phase is not None and status.phase.terminal:
            self.known.discard(key)  # finished: no more resyncs (its own events still reach it)
        if decision.action != Action.NONE:
            decisions.info("job=%s action=%s reason=%s %s", key, decision.action.value, decision.reason,
                           decision.message)
        if status.phase in (None, Phase.PENDING, Phase.PREEMPTED, *MOVING) and status.placement is None:
            self.pending.add(key)
            if spec is not None:
                self.requests[key] = _request(key, job, spec, status)
        else:
            self.pending.discard(key)
            self.requests.pop(key, None)
        await self._act(job, spec, status, decision, pods)

    def _fleet_problems(self, spec: HeteroJobSpec) -> list[validation.Problem]:
        """What this spec asks that the fleet can never give (engine.validation)."""
        return validation.job_problems(
            [(a.device_class, a.per_replica) for a in spec.devices], spec.regions.allowed, spec.regions.preferred,
            self.fleet_source.classes(), set(self.fleet_source.regions()), self.fleet_source.nodes().values())

    # --- actuation ---------------------------------------------------------------------------------

    async def _write(self, job: Mapping[str, Any], patch: dict[str, Any]) -> bool:
        meta = job["metadata"]
        patch.setdefault("observedGeneration", meta.get("generation"))
        return await self.kube.patch_job_status(meta["namespace"], meta["name"], patch) is not None

    async def _act(self, job: dict[str, Any], spec: HeteroJobSpec | None, status: HeteroJobStatus,
                   d: Decision, pods: list[lifecycle.PodView]) -> None:
        meta = job["metadata"]
        ns, name = meta["namespace"], meta["name"]
        key = _job_key(ns, name)
        conditions = [c.model_dump(by_alias=True, exclude_none=True) for c in status.conditions]

        if d.action == Action.NONE:
            pending = status.checkpoint.pending if status.checkpoint else None
            if pending is not None:
                self._wake_at(key, _timestamp(pending.deadline) or time.time())
            if status.phase == Phase.RUNNING and spec is not None and (pending is None or pending.then == PERIODIC):
                await self._consider_migration(job, spec, status)  # a fault outranks a periodic checkpoint
            return
        if d.action == Action.REQUEST_CHECKPOINT:
            pending = status.checkpoint.pending if status.checkpoint else None
            assert pending is not None
            await asyncio.gather(*(self.kube.annotate_pod(ns, p, {ANNOTATION_CHECKPOINT_REQUEST: pending.id})
                                   for p in d.pods))
            self._wake_at(key, _timestamp(pending.deadline) or time.time())
            return
        if d.action in (Action.CHECKPOINT_DONE, Action.CHECKPOINT_TIMEOUT):
            await self._finish_checkpoint(job, status, d, pods)
            return
        if d.action == Action.REJECT:
            await self._write(job, {
                "phase": Phase.FAILED.value, "reason": d.reason, "message": d.message, "placement": None,
                "conditions": _condition(conditions, "SpecValid", "False", d.reason, d.message)})
            self.kube.post_event(job, "Warning", d.reason, d.message)
            await self._release(key, [p.name for p in pods if not p.deleting], ns)
            return
        if d.action == Action.REVALIDATED:
            await self._write(job, {
                "phase": Phase.PENDING.value, "reason": None, "message": d.message,
                "conditions": _condition(conditions, "SpecValid", "True", d.reason, d.message)})
            self.poke(key)
            return
        assert spec is not None
        if d.action == Action.PLACE:
            await self._place(job, spec, status, conditions)
        elif d.action == Action.CREATE_PODS:
            await self._create_pods(job, spec, status, d.ranks)
        elif d.action == Action.CLEANUP:
            await asyncio.gather(*(self.kube.delete_pod(ns, p) for p in d.pods))
        elif d.action == Action.RUNNING:
            patch: dict[str, Any] = {
                "phase": Phase.RUNNING.value, "reason": d.reason, "message": d.message,
                "conditions": _condition(conditions, "Ready", "True", d.reason, d.message)}
            await self._write(job, patch)
            self.kube.post_event(job, "Normal", "Running", d.message)
        elif d.action == Action.RESTART:
            history = self._history(status, "restart", d.message, _where(status), None)
            await self._write(job, {
                "phase": Phase.PENDING.value, "reason": d.reason, "message": d.message, "placement": None,
                "restarts": status.restarts + 1, "history": history,
                "conditions": _condition(conditions, "Ready", "False", d.reason, d.message)})
            self.kube.post_event(job, "Warning", "Restarting", d.message)
            await self._release(key, list(d.pods), ns)
            self.poke(key)
        elif d.action in (Action.FAIL, Action.SUCCEED):
            failed = d.action == Action.FAIL
            phase = Phase.FAILED if failed else Phase.SUCCEEDED
            await self._write(job, {
                "phase": phase.value, "reason": d.reason, "message": d.message, "completionTime": now_iso(),
                "conditions": _condition(conditions, "Ready", "False", d.reason, d.message)})
            self.kube.post_event(job, "Warning" if failed else "Normal", d.reason, d.message)
            await self._release(key, list(d.pods) if failed else [], ns)

    async def _release(self, key: str, pods: list[str], namespace: str) -> None:
        await asyncio.gather(*(self.kube.delete_pod(namespace, p) for p in pods))
        if self.allocations.pop(key, None) is not None:
            self.poke_pending()

    @staticmethod
    def _history(status: HeteroJobStatus, action: str, reason: str, from_: str | None, to: str | None
                 ) -> list[dict[str, Any]]:
        entries = [h.model_dump(by_alias=True, exclude_none=True) for h in status.history]
        entries.append({k: v for k, v in {"time": now_iso(), "action": action, "reason": reason[:512],
                                          "from": from_, "to": to}.items() if v is not None})
        return entries[-HISTORY_LIMIT:]

    def _fleet(self, exclude_jobs: Iterable[str] = ()) -> Fleet:
        excluded = set(exclude_jobs)
        allocations = [a for k, a in self.allocations.items() if k not in excluded]
        return Fleet(
            nodes=self.fleet_source.nodes(),
            classes=self.fleet_source.classes(),
            regions=self.fleet_source.regions(),
            used=usage(allocations, self.fleet_source.foreign_usage()),
            quotas=self.fleet_source.quotas(),
            held=holdings(allocations),
            unhealthy=self.fleet_source.unhealthy(),
        )

    def _plan(self, key: str, request: placement.Request
              ) -> tuple[placement.Result, str, str, placement.Preemption | placement.Reclaim | None]:
        """Under the placement lock: (result, reason, message, preemption or reclaim to start) for one
        waiting job.

        The queue is honoured: the jobs ahead (priority, then age) are placed first on a scratch ledger,
        so this job only gets room none of them can use now. A job that does not fit first takes back
        room lent to grown elastic jobs of its priority or below, then preempts lower-priority jobs.
        """
        fleet = self._fleet(exclude_jobs=[key])
        ahead = sorted((r for k, r in self.requests.items()
                        if k != key and k in self.pending and r.order < request.order),
                       key=lambda r: r.order)[:self.config.queue_lookahead]
        results = placement.schedule([*ahead, request], fleet)
        result = results[request.job]
        if result.chosen is not None:
            return result, "Placed", result.explain(), None
        alone = placement.place(request, fleet)
        if alone.chosen is not None:
            first = [r.job for r in ahead if results[r.job].chosen is not None]
            for k in first:
                self.poke(k)
            return alone, "Queued", (f"queued behind {len(first)} higher-priority or older job(s) that fit first: "
                                     f"{', '.join(first[:5])}{' ...' if len(first) > 5 else ''}"), None
        in_flight = sorted(v for v, by in self.yielding.items() if by == key)
        freed = self._fleet(exclude_jobs=[key, *in_flight]) if in_flight else fleet
        if in_flight and placement.place(request, freed).chosen is not None:
            why = "Reclaiming" if all(v in self.grown for v in in_flight) else "Preempting"
            return alone, why, (f"waiting for {len(in_flight)} preempted or reclaimed job(s) to checkpoint and "
                                f"release their devices: {', '.join(in_flight)}"), None
        lenders = [g for k, g in self.grown.items() if k not in self.yielding and k not in self._disrupted]
        reclaim = placement.plan_reclaim(request, freed, lenders) if lenders else None
        if reclaim is not None:
            for lender, _ in reclaim.shrink:
                self.yielding[lender] = key
            return alone, "Reclaiming", f"{reclaim.explain()}; waiting for their checkpoints", reclaim
        running = [placement.RunningJob(k, prio, since, self.allocations[k])
                   for k, (prio, since) in self.running.items() if k in self.allocations and k not in self.yielding]
        plan = placement.plan_preemption(request, freed, running, time.time(), self.config.min_runtime_s)
        if plan is None:
            return alone, "NoRoom", alone.explain(), None
        for victim in plan.victims:
            self.yielding[victim] = key
        return alone, "Preempting", f"{plan.explain()}; waiting for their checkpoints", plan

    async def _place(self, job: dict[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                     conditions: list[dict[str, Any]]) -> None:
        meta = job["metadata"]
        key = _job_key(meta["namespace"], meta["name"])
        request = _request(key, job, spec, status)
        self.requests[key] = request
        async with self._placement_lock:
            result, reason, message, disruption = self._plan(key, request)
            chosen = result.chosen if reason == "Placed" else None
            if chosen is not None:
                self.allocations[key] = chosen.allocation(meta["namespace"])
                self.running[key] = (request.priority, time.time())
        decisions.info("job=%s action=place result=%s %s", key, reason, message)
        if chosen is None:
            if status.message != message or status.phase not in (Phase.PENDING, Phase.PREEMPTED):
                phase = status.phase if status.phase in (Phase.PREEMPTED, *MOVING) else Phase.PENDING
                await self._write(job, {
                    "phase": phase.value, "reason": reason, "message": message,
                    "conditions": _condition(conditions, "Admitted", "False", reason, message)})
                self.kube.post_event(job, "Normal", reason if disruption else "Waiting", message)
            self.pending.add(key)
            if isinstance(disruption, placement.Preemption):
                self.metrics.preemptions.inc(len(disruption.victims))
                for victim in disruption.victims:
                    await self._ask_checkpoint(victim, then="preempt", by=key,
                                               reason=f"preempted by {key} ({spec.priority.value})")
            elif isinstance(disruption, placement.Reclaim):
                for lender, replicas in disruption.shrink:
                    decisions.info("job=%s action=resize trigger=reclaim by=%s replicas=%d", lender, key, replicas)
                    self.metrics.migrations.labels("resize", "reclaim").inc()
                    await self._ask_checkpoint(lender, then="resize", by=key, replicas=replicas,
                                               reason=f"reclaim: {key} ({spec.priority.value}) needs the room "
                                                      f"lent to this job; back to {replicas} replica(s)")
            return

        self.pending.discard(key)
        self.requests.pop(key, None)
        generation = max(_last_generation(job), 0) + 1
        placed = {
            "region": chosen.region, "deviceClass": chosen.device_class, "replicas": len(chosen.nodes),
            "perReplica": chosen.per_replica, "nodes": list(chosen.nodes), "generation": generation,
            "since": now_iso(),
        }
        patch: dict[str, Any] = {
            "phase": Phase.ADMITTED.value, "reason": "Placed", "message": message, "placement": placed,
            "lastGeneration": generation, "startTime": status.start_time or now_iso(),
            "conditions": _condition(conditions, "Admitted", "True", "Placed", message)}
        if status.phase in MOVING:
            history = [h.model_dump(by_alias=True, exclude_none=True) for h in status.history]
            if history and history[-1].get("action") in ("migrate", "resize") and not history[-1].get("to"):
                history[-1]["to"] = f"{chosen.region}/{chosen.device_class} x{len(chosen.nodes)} (generation {generation})"
                patch["history"] = history
            patch["migration"] = None
        written = await self._write(job, patch)
        if not written:
            self.forget(key)
            return
        self.kube.post_event(job, "Normal", "Admitted", message)
        status = self._status({**job, "status": {**(job.get("status") or {}), "placement": placed}})
        await self._create_pods(job, spec, status, tuple(range(len(chosen.nodes))))

    # --- the checkpoint protocol --------------------------------------------------------------------

    async def _ask_checkpoint(self, key: str, then: str, by: str | None, reason: str,
                              exclude: Sequence[str] = (), urgent: bool = False, replicas: int | None = None) -> None:
        """Record a pending checkpoint in the job's status (step 1); its own passes annotate the pods."""
        namespace, name = key.split("/", 1)
        job = await self.kube.get_job(namespace, name)
        if job is None:
            self.yielding.pop(key, None)
            return
        status = self._status(job)
        if status.checkpoint and status.checkpoint.pending and status.checkpoint.pending.then != PERIODIC:
            return  # one at a time: the first one asked goes on (a periodic one gives way)
        try:
            timeout = parse_spec(HeteroJobSpec, job.get("spec")).checkpoint.timeout_seconds
        except SpecError:
            timeout = 120
        now = time.time()
        generation = status.placement.generation if status.placement else 0
        # urgent: a failed device may have killed the job already; go on from the last checkpoint at once
        pending = {"id": f"g{generation}-{int(now)}", "reason": reason, "requestedAt": now_iso(),
                   "deadline": _iso(now if urgent else now + timeout), "then": then, "by": by,
                   "exclude": sorted(exclude), "replicas": replicas}
        last = status.checkpoint.last.model_dump(by_alias=True, exclude_none=True) \
            if status.checkpoint and status.checkpoint.last else None
        conditions = [c.model_dump(by_alias=True, exclude_none=True) for c in status.conditions]
        message = (f"{reason}: restoring from the last checkpoint" if urgent else
                   f"{reason}: checkpoint {pending['id']} requested, deadline in {timeout}s")
        patch: dict[str, Any] = {
            "checkpoint": {"pending": pending, "last": last},
            "conditions": _condition(conditions, "Checkpointing", "True", then.capitalize(), message)}
        if then != PERIODIC:  # a periodic checkpoint leaves the job Running: it is not a disruption
            patch.update({"phase": Phase.CHECKPOINTING.value, "reason": then.capitalize() + "Requested",
                          "message": message})
        await self._write(job, patch)
        if then != PERIODIC:
            self.kube.post_event(job, "Normal", "CheckpointRequested", message)
        decisions.info("job=%s action=request-checkpoint then=%s reason=%s", key, then, reason)
        self.poke(key)

    def _wake_at(self, key: str, when: float) -> None:
        """Look at `key` again at `when` (a checkpoint deadline): one timer per job."""
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()
        self._timers[key] = asyncio.get_running_loop().call_later(max(0.0, when - time.time()) + 0.05,
                                                                   self.poke, key)

    async def _finish_checkpoint(self, job: dict[str, Any], status: HeteroJobStatus, d: Decision,
                                 pods: list[lifecycle.PodView]) -> None:
        """Step 3: record the checkpoint (or what was lost) and go on with what it was asked for."""
        meta = job["metadata"]
        key = _job_key(meta["namespace"], meta["name"])
        assert status.checkpoint is not None and status.checkpoint.pending is not None
        pending = status.checkpoint.pending
        last = status.checkpoint.last.model_dump(by_alias=True, exclude_none=True) \
            if status.checkpoint.last else None
        now = time.time()
        lost_s: float | None = 0.0
        if d.action == Action.CHECKPOINT_DONE:
            last = {"id": pending.id, "step": d.step, "uri": d.uri, "time": now_iso()}
        else:
            since = _timestamp(last.get("time")) if last else None
            since = since or (_timestamp(status.placement.since) if status.placement else None)
            lost_s = round(now - since, 1) if since else None
        then = pending.then
        if then == PERIODIC:
            conditions = [c.model_dump(by_alias=True, exclude_none=True) for c in status.conditions]
            await self._write(job, {
                "checkpoint": {"pending": None, "last": last},
                "conditions": _condition(conditions, "Checkpointing", "False", d.reason, d.message)})
            if d.action != Action.CHECKPOINT_DONE:
                self.kube.post_event(job, "Warning", "CheckpointMissed", d.message)
            self.poke(key)
            return
        requested = _timestamp(pending.requested_at) or now
        entry = {"time": now_iso(), "action": then, "reason": f"{pending.reason}; {d.message}"[:512],
                 "from": _where(status), "durationSeconds": round(now - requested, 1),
                 "progressLostSteps": 0 if d.action == Action.CHECKPOINT_DONE else None,
                 "progressLostSeconds": lost_s}
        history = [h.model_dump(by_alias=True, exclude_none=True) for h in status.history]
        history = (history + [{k: v for k, v in entry.items() if v is not None}])[-HISTORY_LIMIT:]
        conditions = [c.model_dump(by_alias=True, exclude_none=True) for c in status.conditions]
        conditions = _condition(conditions, "Checkpointing", "False", d.reason, d.message)
        resume = f"resumes from {last['uri']}" if last and last.get("uri") else "restarts from scratch"
        patch: dict[str, Any] = {"placement": None, "checkpoint": {"pending": None, "last": last}, "history": history}
        if then in ("migrate", "resize"):
            phase = Phase.MIGRATING if then == "migrate" else Phase.RESIZING
            message = f"{pending.reason}; {d.message}; placing again, {resume}"
            patch.update({"phase": phase.value, "reason": phase.value, "message": message,
                          "migration": {"exclude": list(pending.exclude), "reason": pending.reason,
                                        "replicas": pending.replicas},
                          "conditions": _condition(conditions, "Ready", "False", phase.value, message)})
        else:
            message = f"{pending.reason}; {d.message}; requeued, {resume} when room frees"
            patch.update({"phase": Phase.PREEMPTED.value, "reason": "Preempted", "message": message,
                          "conditions": _condition(conditions, "Ready", "False", "Preempted", message)})
        # the new state is written before the old gang is deleted: a restart goes on from here, once
        written = await self._write(job, patch)
        if not written:
            return
        self.kube.post_event(job, "Warning", {"migrate": "Migrating", "resize": "Resizing"}.get(then, "Preempted"),
                             message)
        decisions.info("job=%s action=%s reason=%s %s", key, then, d.reason, d.message)
        self.yielding.pop(key, None)
        self.running.pop(key, None)
        await self._release(key, [p.name for p in pods if not p.deleting], meta["namespace"])
        if pending.by:
            self.poke(pending.by)
        self.poke(key)

    # --- migration ----------------------------------------------------------------------------------

    def _symptoms(self, job: Mapping[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                  now: float) -> list[migration.Symptom]:
        p = status.placement
        assert p is not None
        meta = job["metadata"]
        since = {c.type: _timestamp(c.last_transition_time) or now for c in status.conditions}
        out: list[migration.Symptom] = []
        nodes = self.fleet_source.nodes()
        down = sorted(n for n in set(p.nodes) if n in nodes and not nodes[n].ready)
        if down:
            out.append(migration.Symptom(migration.NODE_NOT_READY, now, tuple(down),
                                         f"node(s) {', '.join(down)} not Ready", urgent=True))
        manual = ((meta.get("annotations") or {}).get(ANNOTATION_MIGRATE) or "").strip()
        if manual:
            out.append(migration.Symptom(migration.MANUAL, now, tuple(sorted(set(p.nodes))),
                                         f"migration requested: {manual}"))
        for alert in self.alert_symptoms.get(_job_key(meta["namespace"], meta["name"]), {}).values():
            if set(alert.nodes) & set(p.nodes):  # still about where the job runs
                out.append(alert)
        snapshot = self.fleet_source.telemetry()
        if snapshot is not None:
            ref = JobRef(meta["namespace"], meta["name"], p.region, p.generation, p.replicas, p.per_replica)
            t = job_telemetry(ref, snapshot, StragglerPolicy(ratio=spec.policy.straggler_ratio))
            failed = [(r, d) for r, d in t.unhealthy if d.health == Health.FAILED]
            hot = [(r, d) for r, d in t.unhealthy if d.health == Health.DEGRADED]
            if failed:
                out.append(migration.Symptom(
                    migration.DEVICE_FAILED, now, tuple(sorted({d.node for _, d in failed})),
                    "; ".join(f"rank {r}: {d.device_id} on {d.node}: {d.reason}" for r, d in failed), urgent=True))
            if hot:
                out.append(migration.Symptom(
                    migration.OVERHEAT, since.get("DevicesHealthy", now), tuple(sorted({d.node for _, d in hot})),
                    "; ".join(f"rank {r}: {d.device_id} on {d.node}: {d.reason}" for r, d in hot)))
            if t.stragglers:
                out.append(migration.Symptom(
                    migration.STRAGGLER, since.get("Straggler", now),
                    tuple(sorted({p.nodes[r] for r in t.stragglers if r < len(p.nodes)})), t.straggler_message))
        return out

    async def _consider_migration(self, job: Mapping[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus
                                  ) -> None:
        meta = job["metadata"]
        key = _job_key(meta["namespace"], meta["name"])
        now = time.time()
        asked = ((meta.get("annotations") or {}).get(ANNOTATION_CHECKPOINT_NOW) or "").strip()
        if asked and not (status.checkpoint and status.checkpoint.pending):
            await self.kube.annotate_job(meta["namespace"], meta["name"], {ANNOTATION_CHECKPOINT_NOW: None})
            await self._ask_checkpoint(key, then=PERIODIC, by=None, reason=f"checkpoint requested: {asked}")
            return
        symptoms = self._symptoms(job, spec, status, now)
        periodic_pending = bool(status.checkpoint and status.checkpoint.pending)
        if not symptoms:
            if not periodic_pending and not await self._consider_resize(job, spec, status, now):
                await self._periodic_checkpoint(key, spec, status, now)
            return
        rules = self._rules(spec)
        moves = [t for h in status.history if h.action in ("migrate", "resize") and (t := _timestamp(h.time))]
        verdict = migration.judge(symptoms, rules, now, moves, len(self._disrupted))
        if not verdict.act:
            if verdict.symptom is not None and self._held.get(key) != verdict.reason:
                self._held[key] = verdict.reason
                decisions.info("job=%s action=hold-migration reason=%s", key, verdict.reason)
                self.kube.post_event(job, "Normal", "MigrationHeld", verdict.reason)
            hold = [s for s in symptoms if s.trigger in migration.HOLD]
            if hold:  # look again when the oldest holding symptom ripens
                self._wake_at(key, min(s.since for s in hold) + max(rules.overheat_for_s, 1.0))
            return
        symptom = verdict.symptom
        assert symptom is not None
        self._held.pop(key, None)
        self._disrupted.add(key)
        decisions.info("job=%s action=migrate trigger=%s reason=%s", key, symptom.trigger, symptom.message)
        self.metrics.migrations.labels("migrate", symptom.trigger).inc()
        if symptom.trigger == migration.MANUAL:
            await self.kube.annotate_job(meta["namespace"], meta["name"], {ANNOTATION_MIGRATE: None})
        await self._ask_checkpoint(key, then="migrate", by=None, reason=f"{symptom.trigger}: {symptom.message}",
                                   exclude=symptom.nodes, urgent=symptom.urgent,
                                   replicas=status.placement.replicas if status.placement else None)

    def _rules(self, spec: HeteroJobSpec, extra: Iterable[str] = ()) -> migration.Rules:
        return migration.Rules(
            triggers=frozenset(t.value for t in spec.policy.triggers) | frozenset(extra),
            overheat_for_s=spec.policy.overheat_for_seconds, straggler_for_s=spec.policy.straggler_for_seconds,
            cooldown_s=spec.policy.cooldown_seconds, max_per_hour=spec.policy.max_migrations_per_hour,
            budget=self.config.disruption_budget, advisory=self.config.advisory)

    def _room_to_grow(self, key: str, spec: HeteroJobSpec, status: HeteroJobStatus, job: Mapping[str, Any]
                      ) -> int | None:
        """The most replicas (up to max) the job could restart with now, in its region and class."""
        p = status.placement
        if p is None or p.replicas >= spec.replicas.upper:
            return None
        mine = _request(key, job, spec)
        if any(k != key and r.priority >= mine.priority for k, r in self.requests.items() if k in self.pending):
            return None  # waiting jobs of the same priority or above get the room first
        return placement.room_to_grow(mine, self._fleet(exclude_jobs=[key]), p.replicas, spec.replicas.upper,
                                      p.device_class, p.region)

    async def _consider_resize(self, job: Mapping[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                               now: float) -> bool:
        """Shrink an idle elastic job or grow one into free room, through a checkpoint; True if it acts."""
        p = status.placement
        if p is None or spec.replicas.upper <= spec.replicas.min:
            return False
        meta = job["metadata"]
        key = _job_key(meta["namespace"], meta["name"])
        average = status.utilization.average if status.utilization else None
        low = average is not None and average < spec.policy.low_utilization_percent
        old = next((c for c in status.conditions if c.type == "LowUtilization"), None)
        if low != (old is not None and old.status == "True"):
            conditions = [c.model_dump(by_alias=True, exclude_none=True) for c in status.conditions]
            text = f"average utilization {average:.0f}%" if average is not None else "no utilization data"
            await self._write(job, {"conditions": _condition(conditions, "LowUtilization", "True" if low else "False",
                                                             "Idle" if low else "Busy", text)})
            return False  # the next pass reads the condition's time
        low_since = _timestamp(old.last_transition_time) if low and old else None
        change = migration.resize(p.replicas, spec.replicas.min, spec.replicas.upper, average, low_since, now,
                                  spec.policy.low_utilization_percent, spec.policy.low_utilization_for_seconds,
                                  self._room_to_grow(key, spec, status, job))
        if change is None:
            if low and low_since is not None:
                self._wake_at(key, low_since + spec.policy.low_utilization_for_seconds)
            return False
        symptom = migration.Symptom(change.trigger, low_since or now, (), change.reason)
        verdict = migration.judge([symptom], self._rules(spec, extra=[migration.GROW]), now,
                                  [t for h in status.history if h.action in ("migrate", "resize")
                                   and (t := _timestamp(h.time))], len(self._disrupted))
        if not verdict.act:
            if self._held.get(key) != verdict.reason:
                self._held[key] = verdict.reason
                decisions.info("job=%s action=hold-resize reason=%s", key, verdict.reason)
            return False
        self._disrupted.add(key)
        decisions.info("job=%s action=resize trigger=%s reason=%s", key, change.trigger, change.reason)
        self.metrics.migrations.labels("resize", change.trigger).inc()
        await self._ask_checkpoint(key, then="resize", by=None, reason=f"{change.trigger}: {change.reason}",
                                   replicas=change.replicas)
        return True

    async def _periodic_checkpoint(self, key: str, spec: HeteroJobSpec, status: HeteroJobStatus, now: float
                                   ) -> None:
        """Every spec.checkpoint.intervalSeconds, counted from the last checkpoint (or the placement)."""
        interval = spec.checkpoint.interval_seconds
        if not interval or status.placement is None:
            return
        last = status.checkpoint.last if status.checkpoint else None
        since = (_timestamp(last.time) if last else None) or _timestamp(status.placement.since) or now
        if now - since >= interval:
            await self._ask_checkpoint(key, then=PERIODIC, by=None, reason=f"periodic checkpoint (every {interval}s)")
        else:
            self._wake_at(key, since + interval)

    # --- alerts -------------------------------------------------------------------------------------

    async def alert(self, key: str, fingerprint: str, firing: bool, action: str, nodes: tuple[str, ...],
                    message: str) -> None:
        """An alert about `key` (already mapped): firing ones become symptoms, resolved ones clear them."""
        mine = self.alert_symptoms.setdefault(key, {})
        if not firing:
            mine.pop(fingerprint, None)
            return
        if action == alerts_mapping.CHECKPOINT:
            await self._ask_checkpoint(key, then=PERIODIC, by=None, reason=f"alert: {message}")
            return
        mine[fingerprint] = migration.Symptom(migration.ALERT, time.time(), nodes, message,
                                              urgent=action == alerts_mapping.MIGRATE_NOW)
        self.poke(key)

    # --- quota status ---------------------------------------------------------------------------------

    async def sync_quotas(self) -> None:
        """Write each HeteroQuota's status.used (what its namespace holds under its limits) when it changed."""
        held = holdings(self.allocations.values())
        for (namespace, name), (limits, error) in sorted(self.fleet_source.quota_objects().items()):
            mine = held.get(namespace, {})
            used = [{"deviceClass": c, "region": r, "devices": n} for (c, r), n in sorted(mine.items())
                    if n and any(lim.covers(c, r) for lim in limits)]
            problems = [] if error else validation.quota_problems(
                [(lim.device_class, lim.region) for lim in limits], set(self.fleet_source.classes()),
                set(self.fleet_source.regions()))
            if problems:
                error = "; ".join(map(str, problems))
            status = {"used": used, "summary": "invalid spec" if error else quota_usage.summary(limits, mine),
                      "message": f"invalid spec: {error}" if error else None}
            if self._quota_written.get((namespace, name)) != status:
                await self.kube.patch_quota_status(namespace, name, status)
                self._quota_written[(namespace, name)] = status

    async def _create_pods(self, job: dict[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                           ranks: tuple[int, ...], fleet: Fleet | None = None) -> None:
        p = status.placement
        assert p is not None
        fleet = fleet or self._fleet()
        cls = fleet.classes.get(p.device_class)
        alt_index = next((i for i, a in enumerate(spec.devices) if a.device_class == p.device_class), None)
        if cls is None or alt_index is None:
            log.warning("job %s/%s: class %s is no longer known or listed; re-placing",
                        job["metadata"]["namespace"], job["metadata"]["name"], p.device_class)
            await self._write(job, {"phase": Phase.PENDING.value, "placement": None,
                                    "message": f"device class {p.device_class} vanished; placing again"})
            self.poke(_job_key(job["metadata"]["namespace"], job["metadata"]["name"]))
            return
        region = fleet.regions.get(p.region) or RegionInfo(p.region, {LABEL_REGION: p.region})
        objs: list[dict[str, Any]] = [manifests.service(job)] if len(ranks) == p.replicas else []
        resume = status.checkpoint.last.uri if status.checkpoint and status.checkpoint.last else None
        for rank in ranks:
            node = p.nodes[rank]
            node_obj = fleet.nodes.get(node)
            hostname = node_obj.labels.get(LABEL_HOSTNAME, node) if node_obj else node
            objs.append(manifests.pod(
                job, spec, cls=cls, region=region, alternative_index=alt_index, node=node,
                node_hostname=hostname, rank=rank, world_size=p.replicas, generation=p.generation,
                per_replica=p.per_replica, resume_from=resume))
        await asyncio.gather(*(self.kube.create(o) for o in objs))


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _timestamp(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _priority(job: Mapping[str, Any]) -> int:
    try:
        return Priority((job.get("spec") or {}).get("priority", "medium")).rank
    except ValueError:
        return Priority.MEDIUM.rank


def _request(key: str, job: Mapping[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus | None = None
             ) -> placement.Request:
    """What a waiting job asks of placement; a migrating one also avoids the nodes it left and stays in
    its region or class unless spec.policy allows crossing."""
    alternatives = spec.devices
    allowed = tuple(spec.regions.allowed)
    exclude: frozenset[str] = frozenset()
    moving = status.migration if status is not None and status.phase in MOVING else None
    replicas = spec.replicas.start
    if moving is not None:
        exclude = frozenset(moving.exclude)
        replicas = moving.replicas or replicas
        last = status.history[-1] if status and status.history else None
        origin = (last.from_ or "").split(" ")[0] if last and last.action in ("migrate", "resize") else ""
        if "/" in origin:
            region, cls = origin.split("/", 1)
            if not spec.policy.allow_cross_region:
                allowed = (region,)
            if not spec.policy.allow_cross_class:
                alternatives = [a for a in spec.devices if a.device_class == cls] or spec.devices
    return placement.Request(
        job=key,
        alternatives=[placement.Alternative(
            a.device_class, a.per_replica,
            {k: v for k, v in (a.requires.model_dump() if a.requires else {}).items() if v})
            for a in alternatives],
        replicas=replicas,
        allowed_regions=allowed,
        preferred_regions=tuple(r for r in spec.regions.preferred if not allowed or r in allowed),
        exclude_nodes=exclude,
        priority=spec.priority.rank,
        created=_timestamp((job.get("metadata") or {}).get("creationTimestamp")) or 0.0,
    )


def _pending_checkpoint(status: HeteroJobStatus) -> lifecycle.PendingCheckpoint | None:
    pending = status.checkpoint.pending if status.checkpoint else None
    if pending is None:
        return None
    return lifecycle.PendingCheckpoint(pending.id, _timestamp(pending.deadline) or 0.0, pending.then)


def _where(status: HeteroJobStatus) -> str | None:
    p = status.placement
    return f"{p.region}/{p.device_class} x{p.replicas} (generation {p.generation})" if p else None


def _last_generation(job: Mapping[str, Any]) -> int:
    status = job.get("status") or {}
    try:
        return int(status.get("lastGeneration") or (status.get("placement") or {}).get("generation") or 0)
    except (TypeError, ValueError):
        return 0
