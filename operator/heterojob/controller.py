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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from heterojob.api.common import SpecError, check_object_name, parse_spec
from heterojob.api.job import JOB_NAME_MAX, HeteroJobSpec, HeteroJobStatus, Phase
from heterojob.constants import LABEL_HOSTNAME, LABEL_REGION
from heterojob.engine import lifecycle, placement
from heterojob.engine.fleet import Allocation, DeviceClass, Fleet, Node, RegionInfo, usage
from heterojob.engine.lifecycle import Action, Decision, JobView
from heterojob.kube import convert, manifests
from heterojob.kube.api import Kube, now_iso
from heterojob.kube.conditions import set_condition

log = logging.getLogger("heterojob.controller")
decisions = logging.getLogger("heterojob.decisions")

HISTORY_LIMIT = 50


@dataclass
class FleetSource:
    """Live views of the cluster (Kopf indexes in the operator; plain dicts in tests)."""

    nodes: Callable[[], Mapping[str, Node]]
    classes: Callable[[], Mapping[str, DeviceClass]]
    regions: Callable[[], Mapping[str, RegionInfo]]
    foreign_usage: Callable[[], Mapping[tuple[str, str], int]]

    @classmethod
    def from_objects(cls, objects: Iterable[Mapping[str, Any]]) -> FleetSource:
        """A fixed view from Node, AcceleratorClass and Region objects (tests, benchmarks, tools)."""
        nodes, classes, regions = {}, {}, {}
        for obj in objects:
            name, kind = obj["metadata"]["name"], obj.get("kind")
            if kind == "Node":
                nodes[name] = convert.node_view(obj)
            elif kind == "AcceleratorClass" and (c := convert.device_class(obj)) is not None:
                classes[name] = c
            elif kind == "Region" and (r := convert.region_info(obj)) is not None:
                regions[name] = r
        return cls(nodes=lambda: nodes, classes=lambda: classes, regions=lambda: regions, foreign_usage=dict)


def _job_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def _condition(conditions: list[dict[str, Any]], type_: str, status: str, reason: str, message: str
               ) -> list[dict[str, Any]]:
    return set_condition(conditions, type_, status, reason, message, now_iso())


class Controller:
    def __init__(self, kube: Kube, fleet: FleetSource, max_retry_delay: float = 60.0) -> None:
        self.kube = kube
        self.fleet_source = fleet
        self.allocations: dict[str, Allocation] = {}
        self.pending: set[str] = set()
        self.known: set[str] = set()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._dirty: set[str] = set()
        self._failures: dict[str, int] = {}
        self._placement_lock = asyncio.Lock()
        self._max_retry_delay = max_retry_delay
        self._pending_poke: asyncio.TimerHandle | None = None
        self._resync: asyncio.Task[None] | None = None

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
        if self.allocations.pop(key, None) is not None:
            self.poke_pending()

    async def _work(self, key: str) -> None:
        try:
            while True:
                self._dirty.discard(key)
                try:
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

        self._resync = asyncio.get_running_loop().create_task(loop(), name="resync")

    async def stop(self) -> None:
        if self._resync is not None:
            self._resync.cancel()
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def load(self) -> None:
        """Rebuild the allocation ledger from every job's status (at start, before any placement)."""
        for job in await self.kube.list_jobs():
            meta = job.get("metadata") or {}
            key = _job_key(meta.get("namespace", ""), meta.get("name", ""))
            self._sync_allocation(key, self._status(job))

    # --- one pass ----------------------------------------------------------------------------------

    @staticmethod
    def _status(job: Mapping[str, Any]) -> HeteroJobStatus:
        try:
            return HeteroJobStatus.model_validate(job.get("status") or {})
        except ValidationError as exc:
            log.warning("unreadable status of %s/%s, treating it as new: %s",
                        job["metadata"].get("namespace"), job["metadata"].get("name"), exc)
            return HeteroJobStatus()

    def _sync_allocation(self, key: str, status: HeteroJobStatus) -> None:
        p = status.placement
        if p is not None and not (status.phase and status.phase.terminal):
            classes = self.fleet_source.classes()
            cls = classes.get(p.device_class)
            resource = cls.resource_name if cls else p.device_class
            per_node: dict[str, int] = {}
            for node in p.nodes:
                per_node[node] = per_node.get(node, 0) + p.per_replica
            self.allocations[key] = Allocation(resource, per_node)
        else:
            self.allocations.pop(key, None)

    async def reconcile(self, namespace: str, name: str) -> None:
        key = _job_key(namespace, name)
        job = await self.kube.get_job(namespace, name)
        if job is None or (job.get("metadata") or {}).get("deletionTimestamp"):
            self.forget(key)
            return
        status = self._status(job)
        self._sync_allocation(key, status)

        spec: HeteroJobSpec | None = None
        problems = check_object_name(name, JOB_NAME_MAX)
        try:
            spec = parse_spec(HeteroJobSpec, job.get("spec"))
        except SpecError as exc:
            problems += exc.problems
        spec_errors = "; ".join(str(p) for p in problems) if problems else None

        pods = [v for v in map(convert.pod_view, await self.kube.job_pods(namespace, name)) if v is not None]
        view = JobView(
            phase=status.phase, reason=status.reason,
            generation=status.placement.generation if status.placement else None,
            replicas=status.placement.replicas if status.placement else None,
            restarts=status.restarts,
            backoff_limit=spec.backoff_limit if spec else 0,
            pods=tuple(pods), spec_errors=spec_errors,
        )
        decision = lifecycle.decide(view)
        if decision.action == Action.NONE and status.phase is not None and status.phase.terminal:
            self.known.discard(key)  # finished: no more resyncs (its own events still reach it)
        if decision.action != Action.NONE:
            decisions.info("job=%s action=%s reason=%s %s", key, decision.action.value, decision.reason,
                           decision.message)
        if status.phase is None or status.phase == Phase.PENDING:
            self.pending.add(key)
        else:
            self.pending.discard(key)
        await self._act(job, spec, status, decision, pods)

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

    def _fleet(self, exclude_job: str) -> Fleet:
        allocations = [a for k, a in self.allocations.items() if k != exclude_job]
        return Fleet(
            nodes=self.fleet_source.nodes(),
            classes=self.fleet_source.classes(),
            regions=self.fleet_source.regions(),
            used=usage(allocations, self.fleet_source.foreign_usage()),
        )

    async def _place(self, job: dict[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                     conditions: list[dict[str, Any]]) -> None:
        meta = job["metadata"]
        key = _job_key(meta["namespace"], meta["name"])
        request = placement.Request(
            job=key,
            alternatives=[placement.Alternative(a.device_class, a.per_replica) for a in spec.devices],
            replicas=spec.replicas.start,
            allowed_regions=tuple(spec.regions.allowed),
            preferred_regions=tuple(spec.regions.preferred),
        )
        async with self._placement_lock:
            fleet = self._fleet(exclude_job=key)
            result = placement.place(request, fleet)
            chosen = result.chosen
            if chosen is not None:
                self.allocations[key] = Allocation(chosen.resource, chosen.per_node)
        message = result.explain()
        decisions.info("job=%s action=place result=%s", key, message)
        if chosen is None:
            if status.message != message or status.phase != Phase.PENDING:
                await self._write(job, {
                    "phase": Phase.PENDING.value, "reason": "NoRoom", "message": message,
                    "conditions": _condition(conditions, "Admitted", "False", "NoRoom", message)})
                self.kube.post_event(job, "Normal", "Waiting", message)
            self.pending.add(key)
            return

        self.pending.discard(key)
        generation = max(_last_generation(job), 0) + 1
        placed = {
            "region": chosen.region, "deviceClass": chosen.device_class, "replicas": len(chosen.nodes),
            "perReplica": chosen.per_replica, "nodes": list(chosen.nodes), "generation": generation,
        }
        written = await self._write(job, {
            "phase": Phase.ADMITTED.value, "reason": "Placed", "message": message, "placement": placed,
            "lastGeneration": generation, "startTime": status.start_time or now_iso(),
            "conditions": _condition(conditions, "Admitted", "True", "Placed", message)})
        if not written:
            self.forget(key)
            return
        self.kube.post_event(job, "Normal", "Admitted", message)
        status = self._status({**job, "status": {**(job.get("status") or {}), "placement": placed}})
        await self._create_pods(job, spec, status, tuple(range(len(chosen.nodes))), fleet)

    async def _create_pods(self, job: dict[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                           ranks: tuple[int, ...], fleet: Fleet | None = None) -> None:
        p = status.placement
        assert p is not None
        fleet = fleet or self._fleet(exclude_job="")
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


def _where(status: HeteroJobStatus) -> str | None:
    p = status.placement
    return f"{p.region}/{p.device_class} x{p.replicas} (generation {p.generation})" if p else None


def _last_generation(job: Mapping[str, Any]) -> int:
    status = job.get("status") or {}
    try:
        return int(status.get("lastGeneration") or (status.get("placement") or {}).get("generation") or 0)
    except (TypeError, ValueError):
        return 0
