"""Disruption of a running job: gather its symptoms, let `engine.migration` judge, then ask a checkpoint.

Called by the reconcile pass for a Running job with no disruptive checkpoint pending. In order: a
checkpoint asked for by annotation; symptoms (NotReady node, manual request, firing alerts, failed or
overheating devices and stragglers from the monitor's snapshot) judged against the job's policy and the
disruption budget; with no symptom, an elastic job's shrink or growth (growth as far as the planner
lends room); else the periodic checkpoint. A held move is announced once (Event MigrationHeld).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from heterojob.api.job import HeteroJobSpec, HeteroJobStatus
from heterojob.constants import ANNOTATION_CHECKPOINT_NOW, ANNOTATION_MIGRATE
from heterojob.controller.alerts import AlertSymptoms
from heterojob.controller.checkpoints import PERIODIC, Checkpoints
from heterojob.controller.decisionlog import decided
from heterojob.controller.status import StatusPatch, StatusWriter
from heterojob.engine import admission as planner
from heterojob.engine import migration
from heterojob.engine.fleet import Fleet, Node
from heterojob.kube.api import Kube
from heterojob.metrics import OperatorMetrics
from heterojob.state.cache import Cache
from heterojob.state.requests import request_for
from heterojob.state.times import timestamp
from heterojob.telemetry.model import Health
from heterojob.telemetry.snapshot import JobRef, Snapshot, StragglerPolicy, job_telemetry


class Disruption:
    def __init__(self, kube: Kube, writer: StatusWriter, cache: Cache, checkpoints: Checkpoints,
                 alerts: AlertSymptoms, nodes: Callable[[], Mapping[str, Node]],
                 telemetry: Callable[[], Snapshot | None], fleet: Callable[[Iterable[str]], Fleet],
                 wake_at: Callable[[str, float], None], metrics: OperatorMetrics, budget: int,
                 advisory: bool) -> None:
        self.kube = kube
        self.writer = writer
        self.cache = cache
        self.checkpoints = checkpoints
        self.alerts = alerts
        self.nodes = nodes
        self.telemetry = telemetry
        self.fleet = fleet  # the fleet without the named jobs' holdings
        self.wake_at = wake_at
        self.metrics = metrics
        self.budget = budget
        self.advisory = advisory
        self._held: dict[str, str] = {}  # job -> why its move waits (to post the Event once)

    def forget(self, key: str) -> None:
        self._held.pop(key, None)

    async def consider(self, job: Mapping[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                       now: float) -> None:
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        asked = ((meta.get("annotations") or {}).get(ANNOTATION_CHECKPOINT_NOW) or "").strip()
        if asked and not (status.checkpoint and status.checkpoint.pending):
            await self.kube.annotate_job(meta["namespace"], meta["name"], {ANNOTATION_CHECKPOINT_NOW: None})
            await self.checkpoints.ask(key, then=PERIODIC, by=None, reason=f"checkpoint requested: {asked}")
            return
        symptoms = self.symptoms(job, spec, status, now)
        periodic_pending = bool(status.checkpoint and status.checkpoint.pending)
        if not symptoms:
            if not periodic_pending and not await self._resize(job, spec, status, now):
                await self._periodic(key, spec, status, now)
            return
        rules = self._rules(spec)
        verdict = migration.judge(symptoms, rules, now, _moves(status), self.cache.disrupted())
        if not verdict.act:
            if verdict.symptom is not None and self._held.get(key) != verdict.reason:
                self._held[key] = verdict.reason
                decided(key, "hold-migration", reason=verdict.reason)
                self.kube.post_event(job, "Normal", "MigrationHeld", verdict.reason)
            hold = [s for s in symptoms if s.trigger in migration.HOLD]
            if hold:  # look again when the oldest holding symptom ripens
                self.wake_at(key, min(s.since for s in hold) + max(rules.overheat_for_s, 1.0))
            return
        symptom = verdict.symptom
        assert symptom is not None
        self._held.pop(key, None)
        self.cache.disrupt(key)
        decided(key, "migrate", symptom.message, trigger=symptom.trigger)
        self.metrics.migrations.labels("migrate", symptom.trigger).inc()
        if symptom.trigger == migration.MANUAL:
            await self.kube.annotate_job(meta["namespace"], meta["name"], {ANNOTATION_MIGRATE: None})
        await self.checkpoints.ask(key, then="migrate", by=None, reason=f"{symptom.trigger}: {symptom.message}",
                                   exclude=symptom.nodes, urgent=symptom.urgent,
                                   replicas=status.placement.replicas if status.placement else None)

    def symptoms(self, job: Mapping[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                 now: float) -> list[migration.Symptom]:
        p = status.placement
        assert p is not None
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        since = {c.type: timestamp(c.last_transition_time) or now for c in status.conditions}
        out: list[migration.Symptom] = []
        nodes = self.nodes()
        down = sorted(n for n in set(p.nodes) if n in nodes and not nodes[n].ready)
        if down:
            out.append(migration.Symptom(migration.NODE_NOT_READY, now, tuple(down),
                                         f"node(s) {', '.join(down)} not Ready", urgent=True))
        manual = ((meta.get("annotations") or {}).get(ANNOTATION_MIGRATE) or "").strip()
        if manual:
            out.append(migration.Symptom(migration.MANUAL, now, tuple(sorted(set(p.nodes))),
                                         f"migration requested: {manual}"))
        out.extend(self.alerts.about(key, tuple(p.nodes)))  # still about where the job runs
        snapshot = self.telemetry()
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
        return planner.growth(request_for(key, job, spec), top, self.fleet([key]), p.replicas, spec.replicas.upper,
                              p.device_class, p.region)

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
        if change is None:
            if low and low_since is not None:
                self.wake_at(key, low_since + spec.policy.low_utilization_for_seconds)
            return False
        symptom = migration.Symptom(change.trigger, low_since or now, (), change.reason)
        verdict = migration.judge([symptom], self._rules(spec, extra=[migration.GROW]), now, _moves(status),
                                  self.cache.disrupted())
        if not verdict.act:
            if self._held.get(key) != verdict.reason:
                self._held[key] = verdict.reason
                decided(key, "hold-resize", reason=verdict.reason)
            return False
        self.cache.disrupt(key)
        decided(key, "resize", change.reason, trigger=change.trigger)
        self.metrics.migrations.labels("resize", change.trigger).inc()
        await self.checkpoints.ask(key, then="resize", by=None, reason=f"{change.trigger}: {change.reason}",
                                   replicas=change.replicas)
        return True

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


def _moves(status: HeteroJobStatus) -> list[float]:
    """When the job was migrated or resized before (from its history)."""
    return [t for h in status.history if h.action in ("migrate", "resize") and (t := timestamp(h.time))]
