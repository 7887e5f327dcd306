"""The monitoring cycle: read the fleet's telemetry (`telemetry.collect`), write jobs' telemetry.

The cost of a cycle is one read (a fixed set of queries per Prometheus) and a status write only for jobs
whose figures or conditions changed. The snapshot is kept for the rest of the operator (health-driven
decisions read `Monitor.snapshot`). A job whose ranks serve the SDK's step metric gets its measured speed
into status.scheduling.speeds (`telemetry.steps`: when none is recorded for its class and size, or the
recorded one is off by more than 10% and 5 minutes old), which the scheduler reads as a checkpoint's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from heterojob.engine.capacity.fleet import Fleet
from heterojob.api.times import timestamp
from heterojob.kube.api import Conflict, Kube, now_iso
from heterojob.state.views import FleetSource
from heterojob.telemetry import snapshot as snap
from heterojob.telemetry import sources as telemetry_sources
from heterojob.telemetry import status as job_status
from heterojob.telemetry import steps
from heterojob.controller.status import speeds_patch
from heterojob.telemetry.collect import DEVICE_ROWS_MAX, Collector
from heterojob.telemetry.facts import node_facts
from heterojob.telemetry.model import DeviceSample, HealthPolicy

log = logging.getLogger("heterojob.telemetry")

DEFAULT = telemetry_sources.DEFAULT


@dataclass(frozen=True)
class TelemetryConfig:
    prometheus_url: str | None = None  # serves every region without a prometheusURL of its own
    interval_s: float = 15.0
    window_s: int = 60  # avg_over_time / min_over_time window: hysteresis against one bad scrape
    steps_window_s: int = steps.STEPS_WINDOW_S  # the step rate's window: a job's speed is known after this long
    timeout_s: float = 5.0
    policy: HealthPolicy = field(default_factory=HealthPolicy)
    write_concurrency: int = 16
    # past this many devices in the fleet the read is aggregate (`telemetry.digest`, docs/telemetry.md)
    device_rows_max: int = DEVICE_ROWS_MAX
    # an aggregate read reuses a source's per-pod figures for a window (`Collector`); False: asks them every read
    reuse_figures: bool = True


@dataclass
class CycleStats:
    seconds: float = 0.0
    queries: int = 0
    devices: int = 0
    jobs: int = 0
    writes: int = 0
    conflicts: int = 0
    speeds: int = 0  # jobs whose measured speed (from the step metric) this cycle's patches record
    bytes: int = 0  # answer bytes (JSON) of the last read, all sources
    queries_per_source: dict[str, int] = field(default_factory=dict)


class Monitor:
    def __init__(self, kube: Kube | None, fleet: FleetSource, jobs: Callable[[], Mapping[str, snap.WatchedJob]],
                 config: TelemetryConfig, on_symptoms: Callable[[list[str]], None] | None = None) -> None:
        """`on_symptoms` hears, after each cycle, which running jobs have an unhealthy device or a straggler."""
        self.on_symptoms = on_symptoms
        self.kube = kube
        self.fleet = fleet
        self.jobs = jobs
        self.config = config
        self.snapshot: snap.Snapshot | None = None
        self.stats = CycleStats()
        self.collector = Collector(config.prometheus_url, config.window_s, config.timeout_s, config.policy,
                                   config.steps_window_s, config.device_rows_max)
        self._task: asyncio.Task[None] | None = None
        self.symptomatic: list[str] = []

    # --- sources -------------------------------------------------------------------------------------

    def sources(self) -> dict[str, frozenset[str]]:
        """Prometheus URL -> the regions it serves (DEFAULT: every region without one of its own)."""
        return self.collector.sources(self._region_urls())

    def _region_urls(self) -> dict[str, str | None]:
        return {r.name: r.prometheus_url for r in self.fleet.regions().values()}

    def node_facts(self) -> dict[str, snap.NodeFacts]:
        """Region, class and device count of every Node, as the snapshot joins them."""
        return node_facts(Fleet(nodes=self.fleet.nodes(), classes=self.fleet.classes(),
                                regions=self.fleet.regions()))

    # --- one cycle -----------------------------------------------------------------------------------

    def collect(self, at: float, facts: Mapping[str, snap.NodeFacts] | None = None) -> snap.Snapshot | None:
        """Query every source at instant `at` and build the snapshot (blocking; None when telemetry is off)."""
        previous: Mapping[str, DeviceSample] = self.snapshot.devices if self.snapshot else {}
        # the lowest temperature a running job calls overheating (its spec.policy): an aggregate read lists those
        jobs = self.jobs().values()
        hot = min((j.overheat_celsius for j in jobs if j.overheat_celsius is not None), default=None)
        # the running pods per region: an aggregate read reuses a source's per-pod figures while they hold them;
        # not those of a class nothing reports (they would always be short, each new one asking the figures again)
        pods: dict[str, dict[tuple[str, str], int]] = {}
        classes = self.fleet.classes()
        for j in jobs:
            if (cls := classes.get(j.device_class)) is None or cls.exporter == "none":
                continue
            pods.setdefault(j.ref.region, {}).update(
                ((j.ref.namespace, j.ref.pod(r)), j.ref.per_replica) for r in range(j.ref.replicas))
        read = self.collector.collect(at, self._region_urls(), facts if facts is not None else self.node_facts(),
                                      previous, hot, pods if self.config.reuse_figures else None)
        if read is None:
            return None
        snapshot, asked = read
        self.stats.queries = asked
        self.stats.devices = len(snapshot.devices) + snapshot.aggregated
        self.stats.bytes = self.collector.bytes_read
        self.stats.queries_per_source = dict(self.collector.queries)
        return snapshot

    def job_patches(self, snapshot: snap.Snapshot, now: str) -> list[tuple[snap.WatchedJob, dict[str, Any]]]:
        """(job, status patch) for every running job whose telemetry changed."""
        classes = self.fleet.classes()
        out = []
        self.symptomatic = []
        self.stats.speeds = 0
        at = timestamp(now) or time.time()
        for key, job in self.jobs().items():
            speed = self._speed(job, snapshot, at)  # any class, CPU too: the step metric is the job's own
            cls = classes.get(job.device_class)
            if cls is None or cls.exporter == "none":
                if speed is not None:
                    out.append((job, speed))
                continue  # nothing reports these devices (e.g. CPU): no claim either way
            t = snap.job_telemetry(job.ref, snapshot, job.stragglers)
            if t.unhealthy or t.stragglers:
                self.symptomatic.append(key)
            patch = job_status.patch(job.utilization, job.conditions, t, now)
            if patch is not None or speed is not None:
                out.append((job, {**(patch or {}), **(speed or {})}))
        return out

    def _speed(self, job: snap.WatchedJob, snapshot: snap.Snapshot, at: float) -> dict[str, Any] | None:
        """The status patch recording the job's steps/s from the step metric, when that is news
        (`steps.worth_writing`); None without a figure (no SDK metric, not scraped, too young: never a fault)."""
        ref = job.ref
        rate = steps.job_rate(ref.namespace, [ref.pod(r) for r in range(ref.replicas)], snapshot.step_rates)
        if rate is None or not job.device_class or not steps.worth_writing(
                job.speeds, job.device_class, ref.replicas, rate, at):
            return None
        self.stats.speeds += 1
        return speeds_patch(job.speeds, job.device_class, ref.replicas, rate, at)

    async def cycle(self) -> snap.Snapshot | None:
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        snapshot = await loop.run_in_executor(None, self.collect, time.time())
        if snapshot is None:
            return None
        self.snapshot = snapshot
        patches = self.job_patches(snapshot, now_iso())
        self.stats.jobs = len(self.jobs())
        self.stats.writes = self.stats.conflicts = 0
        if self.kube is not None and patches:
            limit = asyncio.Semaphore(self.config.write_concurrency)
            await asyncio.gather(*(self._write(job, patch, limit) for job, patch in patches))
        if self.on_symptoms is not None and self.symptomatic:
            self.on_symptoms(self.symptomatic)
        self.stats.seconds = time.monotonic() - started
        log.debug("telemetry cycle: %d devices, %d queries, %d writes, %.2fs", self.stats.devices,
                  self.stats.queries, self.stats.writes, self.stats.seconds)
        return snapshot

    async def _write(self, job: snap.WatchedJob, patch: dict[str, Any], limit: asyncio.Semaphore) -> None:
        assert self.kube is not None
        async with limit:
            try:
                await self.kube.patch_job_status(job.ref.namespace, job.ref.name, patch,
                                                 resource_version=job.resource_version)
                self.stats.writes += 1
            except Conflict:
                self.stats.conflicts += 1  # it changed meanwhile: the next cycle writes on the new version
            except Exception as exc:  # noqa: BLE001 - one job's write must not stop the cycle
                log.warning("could not write telemetry of %s/%s: %s", job.ref.namespace, job.ref.name, exc)

    # --- the loop ------------------------------------------------------------------------------------

    def start(self) -> None:
        async def loop() -> None:
            while True:
                try:
                    await self.cycle()
                except asyncio.CancelledError:
                    raise
                except Exception:  # noqa: BLE001 - a bad cycle is logged; the next one starts afresh
                    log.exception("telemetry cycle failed")
                await asyncio.sleep(self.config.interval_s)

        self._task = asyncio.get_running_loop().create_task(loop(), name="telemetry")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self.collector.close()
