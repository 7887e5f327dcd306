"""One read of the fleet's telemetry: every Prometheus asked at once at one instant, one snapshot built.

The operator's monitoring cycle (`controller.monitor.Monitor`) and the console's device view read through
this, so both see the same devices. The cost of a read is a fixed set of queries per Prometheus (never one
per job or device; plus a second round, `seen`, only for scrape targets whose devices changed pods within
the window). A fleet of more than `DEVICE_ROWS_MAX` devices is read in aggregate (`telemetry.digest`): its
answers grow with pods, nodes and anomalies, not devices x metrics. There the per-pod figures (a window's mean
utilization, devices reporting), the costliest question, are asked of a source once per window (`window_s`:
consecutive asks cover every sample) and reused in between, sooner when a running job's pod is missing from them
(every read while the pod is younger than `SETTLE_S`: its exporter may not have scraped it yet). A node's device
count then drops only at the next ask, so `vanished` looks back as far as the counts it compares are old. The
sources' asks are staggered over the window so each cycle asks about 1/(window/interval) of them. The fault
flags (a fatal XID, hot, unhealthy, network) are asked every read. Every source is asked at once; one that
has not answered after `deadline_s` is reported unavailable for its regions and the read goes on without it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait

from heterojob.telemetry import digest as aggregate
from heterojob.telemetry import snapshot as snap
from heterojob.telemetry import sources as telemetry_sources
from heterojob.telemetry import steps
from heterojob.telemetry.model import DeviceSample, HealthPolicy
from heterojob.telemetry.prometheus import PrometheusReader, TelemetryError
from heterojob.telemetry.status import SETTLE_S

log = logging.getLogger("heterojob.telemetry")

SOURCES_AT_ONCE = 16  # Prometheus servers asked in parallel in one read (one per member site)
# Up to this many devices in the fleet (the Nodes' allocatable), every device is read as a row of its own (today's
# queries); beyond, the read is aggregate (`telemetry.digest`), with rows only for the devices that need them.
DEVICE_ROWS_MAX = 2048


class Collector:
    """Reads every Prometheus the regions name; keeps one client per URL across reads."""

    def __init__(self, default_url: str | None, window_s: int, timeout_s: float, policy: HealthPolicy,
                 steps_window_s: int = steps.STEPS_WINDOW_S, device_rows_max: int = DEVICE_ROWS_MAX,
                 deadline_s: float | None = None) -> None:
        self.default_url = default_url  # serves every region without a prometheusURL of its own
        self.window_s = window_s
        self.steps_window_s = steps_window_s  # the training pods' step rates (`telemetry.steps`)
        self.timeout_s = timeout_s
        self.policy = policy
        self.device_rows_max = device_rows_max
        # a source's read is at most three rounds of queries, each bounded by the timeout
        self.deadline_s = deadline_s if deadline_s is not None else 2 * timeout_s + 1
        self._readers: dict[str, PrometheusReader] = {}
        self._where: dict[str, dict[str, tuple[str, str]]] = {}  # URL -> node -> (label, value) selecting it
        self._shaped: dict[str, frozenset[str]] = {}  # URL -> nodes the last shape flags named
        self._counts: dict[str, dict[str, int]] = {}  # URL -> node -> devices the last aggregate read counted
        self._counts_at: dict[str, float] = {}  # URL -> the instant those counts were asked (reused figures: older)
        self._last_at: float | None = None  # the last read's instant
        self._rules: dict[str, aggregate.Recorded | None] = {}  # URL -> the recording rules it evaluates
        self._reads = 0
        self._pool = ThreadPoolExecutor(max_workers=SOURCES_AT_ONCE, thread_name_prefix="heterojob-source")
        self._said_off = False
        self.queries: dict[str, int] = {}  # the last read's queries per source URL
        self.bytes_read = 0  # the last read's answer bytes (JSON, all sources)
        self.aggregate = False  # whether the last read was aggregate
        self.recorded: dict[str, bool] = {}  # source URL -> whether its last read used its recording rules
        # URL -> (instant the figures count as read at, the `pods` figures), reused for a window (`_reuse`)
        self._figures: dict[str, tuple[float, aggregate.Figures]] = {}
        # URL -> running pods short in its last `pods` answer -> the first ask they were short at
        self._sought: dict[str, dict[tuple[str, str], float]] = {}
        self.figures_asked: dict[str, bool] = {}  # source URL -> whether its last read asked the `pods` figures

    def sources(self, region_urls: Mapping[str, str | None]) -> dict[str, frozenset[str]]:
        """Prometheus URL -> the regions it serves (`sources.DEFAULT`: every region without one of its own)."""
        return telemetry_sources.sources(region_urls, self.default_url)

    def _reader(self, url: str) -> PrometheusReader:
        if url not in self._readers:
            self._readers[url] = PrometheusReader(url, timeout_s=self.timeout_s)
        return self._readers[url]

    def collect(self, at: float, region_urls: Mapping[str, str | None], facts: Mapping[str, snap.NodeFacts],
                previous: Mapping[str, DeviceSample], hot_celsius: float | None = None,
                pods: Mapping[str, Mapping[tuple[str, str], int]] | None = None) -> tuple[snap.Snapshot, int] | None:
        """(the snapshot at instant `at`, queries asked), or None when telemetry is off (blocking). `previous`:
        the last snapshot's devices, carried over where a source does not answer. `hot_celsius`: the lowest
        temperature some job calls overheating (an aggregate read lists devices from there up). `pods`: region ->
        the running jobs' pods (namespace, name) -> their devices; None: every read asks every source the `pods`
        figures."""
        sources = self.sources(region_urls)
        if not sources:
            if not self._said_off:
                log.warning("telemetry is off: no --prometheus-url and no Region with spec.prometheusURL")
                self._said_off = True
            return None
        self.aggregate = sum(f.devices for f in facts.values()) > self.device_rows_max
        reads = self._reads
        self._reads += 1
        period = max(0.0, at - self._last_at) if self._last_at is not None else 0.0
        self._last_at = at
        for url in sources:
            self._reader(url).bytes_read = 0

        order = sorted(sources)

        def ask(url: str, regions: frozenset[str]) -> tuple[snap.SourceResult, int, aggregate.Digest | None]:
            reader = self._reader(url)
            running = {p: n for r in regions for p, n in pods.get(r, {}).items()} if pods is not None else None
            reuse = self._reuse(url, at, running)
            turn = order.index(url)  # the shape flags and the figures: each source its own turn, not all at once
            # half a turn after the figures' (at the default interval and window): one source (a global store) does
            # not ask both at one read
            shapes_now = (reads + turn + aggregate.SHAPE_EVERY // 2) % aggregate.SHAPE_EVERY == 0 or \
                url not in self._shaped
            try:
                if not self.aggregate:
                    answered, n = snap.gather(lambda q: reader.query(q, at=at), self.window_s,
                                              steps_window_s=self.steps_window_s)
                    return snap.SourceResult(url, regions, answered), n, None
                answered, digest, n = aggregate.read(lambda q: reader.query(q, at=at), self.window_s, self.policy,
                                                     facts, previous, self._where.get(url, {}), hot_celsius,
                                                     self.steps_window_s,
                                                     shaped=None if shapes_now else self._shaped[url],
                                                     counts=self._counts.get(url), rules=self._rules.get(url),
                                                     figures=reuse, vanish_s=self._vanish_s(url, at, period))
                self._keep(url, at, digest, reuse, running, turn / len(order))
                self.recorded[url] = digest is not None and self._rules.get(url) is not None and \
                    digest.rules == self._rules.get(url)
                if digest is not None:
                    self._where[url], self._shaped[url] = digest.where, digest.shaped
                    self._counts[url], self._rules[url] = digest.counts, digest.rules
                    if reuse is None:
                        self._counts_at[url] = at
                else:  # read per device: the next aggregate read asks what vanished from scratch
                    self._counts.pop(url, None)
                    self._counts_at.pop(url, None)
                return snap.SourceResult(url, regions, answered), n, digest
            except TelemetryError as exc:
                log.warning("telemetry from %s unavailable: %s", url, exc)
                return snap.SourceResult(url, regions, None, str(exc)), 0, None

        # every source at once: one that hangs costs its own regions their telemetry this cycle, nothing more
        futures: dict[Future[tuple[snap.SourceResult, int, aggregate.Digest | None]], tuple[str, frozenset[str]]] = {
            self._pool.submit(ask, url, regions): (url, regions) for url, regions in sources.items()}
        done, _ = wait(futures, timeout=self.deadline_s)
        answers = []
        for future, (url, regions) in futures.items():
            if future in done:
                answers.append(future.result())
            else:
                why = f"no answer within {self.deadline_s:g}s (slow or hanging); its regions wait for the next cycle"
                log.warning("telemetry from %s unavailable: %s", url, why)
                answers.append((snap.SourceResult(url, regions, None, why), 0, None))
        self.queries = {result.name: n for result, n, _ in answers}
        self.bytes_read = sum(self._reader(url).bytes_read for url in sources)
        digests = {result.name: d for result, _, d in answers if d is not None}
        snapshot = snap.build([result for result, _, _ in answers], facts, previous, self.policy, digests=digests)
        return snapshot, sum(n for _, n, _ in answers)

    def _reuse(self, url: str, at: float, running: Mapping[tuple[str, str], int] | None) -> aggregate.Figures | None:
        """The `pods` figures a read of `url` at `at` reuses, or None to ask them: reused while younger than a
        window, computed (not recorded: those are cheap), and holding all devices of every running pod of the
        source's regions but those its last asks were short of for `SETTLE_S` already (a pod whose devices do not
        all report is asked about every read while it is that young, its exporter may not have scraped it yet, then
        once per window)."""
        held = self._figures.get(url)
        if running is None or held is None or self._rules.get(url) is not None:
            return None
        since, figures = held
        if not 0 <= at - since < self.window_s:
            return None
        sought = self._sought.get(url, {})
        young = any(p not in sought or at - sought[p] < SETTLE_S for p in _short(figures, running))
        return None if young else figures

    def _vanish_s(self, url: str, at: float, period: float) -> int:
        """How far back `vanished` looks: a device counted by the compared counts (asked at `counts_at`) has a sample
        after counts_at - window, so it is in a lookback of at - counts_at (one period more for margin) before the
        window; never less than `VANISH_S`, never more than two windows beyond it (a source long unavailable)."""
        counted = self._counts_at.get(url)
        if counted is None:
            return aggregate.VANISH_S
        wanted = math.ceil(at - counted + period)
        return max(aggregate.VANISH_S, min(wanted, aggregate.VANISH_S + 2 * self.window_s))

    def _keep(self, url: str, at: float, digest: aggregate.Digest | None, reused: aggregate.Figures | None,
              running: Mapping[tuple[str, str], int] | None, phase: float) -> None:
        """Remembers the figures a read asked. The first ask of a source counts `phase` (its place among the
        sources, 0..1) of a window older than it is: the sources' next asks spread over the window."""
        self.figures_asked[url] = digest is not None and reused is None
        if digest is None or digest.figures is None:
            self._figures.pop(url, None)
            return
        if reused is None:
            since = at - (phase * self.window_s if url not in self._figures else 0.0)
            self._figures[url] = (since, digest.figures)
            before = self._sought.get(url, {})
            self._sought[url] = {p: before.get(p, at) for p in _short(digest.figures, running or {})}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        for reader in self._readers.values():
            reader.close()


def _short(figures: aggregate.Figures, running: Mapping[tuple[str, str], int]) -> set[tuple[str, str]]:
    """The running pods the figures lack or count fewer devices of than the pod has."""
    return {p for p, n in running.items() if (f := figures.pods.get(p)) is None or f.devices < n}
