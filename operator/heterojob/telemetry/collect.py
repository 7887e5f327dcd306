"""One read of the fleet's telemetry: every Prometheus asked at once at one instant, one snapshot built.

The operator's monitoring cycle (`controller.monitor.Monitor`) and the console's device view read through
this, so both see the same devices. The cost of a read is a fixed set of queries per Prometheus (never one
per job or device; plus a second round, `seen`, only for scrape targets whose devices changed pods within
the window) and one snapshot build linear in devices.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from heterojob.telemetry import snapshot as snap
from heterojob.telemetry import sources as telemetry_sources
from heterojob.telemetry import steps
from heterojob.telemetry.model import DeviceSample, HealthPolicy
from heterojob.telemetry.prometheus import PrometheusReader, TelemetryError

log = logging.getLogger("heterojob.telemetry")

SOURCES_AT_ONCE = 16  # Prometheus servers asked in parallel in one read (one per member site)


class Collector:
    """Reads every Prometheus the regions name; keeps one client per URL across reads."""

    def __init__(self, default_url: str | None, window_s: int, timeout_s: float, policy: HealthPolicy,
                 steps_window_s: int = steps.STEPS_WINDOW_S) -> None:
        self.default_url = default_url  # serves every region without a prometheusURL of its own
        self.window_s = window_s
        self.steps_window_s = steps_window_s  # the training pods' step rates (`telemetry.steps`)
        self.timeout_s = timeout_s
        self.policy = policy
        self._readers: dict[str, PrometheusReader] = {}
        self._said_off = False

    def sources(self, region_urls: Mapping[str, str | None]) -> dict[str, frozenset[str]]:
        """Prometheus URL -> the regions it serves (`sources.DEFAULT`: every region without one of its own)."""
        return telemetry_sources.sources(region_urls, self.default_url)

    def _reader(self, url: str) -> PrometheusReader:
        if url not in self._readers:
            self._readers[url] = PrometheusReader(url, timeout_s=self.timeout_s)
        return self._readers[url]

    def collect(self, at: float, region_urls: Mapping[str, str | None], facts: Mapping[str, snap.NodeFacts],
                previous: Mapping[str, DeviceSample]) -> tuple[snap.Snapshot, int] | None:
        """(the snapshot at instant `at`, queries asked), or None when telemetry is off (blocking). `previous`:
        the last snapshot's devices, carried over where a source does not answer."""
        sources = self.sources(region_urls)
        if not sources:
            if not self._said_off:
                log.warning("telemetry is off: no --prometheus-url and no Region with spec.prometheusURL")
                self._said_off = True
            return None

        def ask(url: str, regions: frozenset[str]) -> tuple[snap.SourceResult, int]:
            reader = self._reader(url)
            try:
                answered, n = snap.gather(lambda q: reader.query(q, at=at), self.window_s,
                                          steps_window_s=self.steps_window_s)
                return snap.SourceResult(url, regions, answered), n
            except TelemetryError as exc:
                log.warning("telemetry from %s unavailable: %s", url, exc)
                return snap.SourceResult(url, regions, None, str(exc)), 0

        # every source at once: a member site's Prometheus that hangs costs the read one timeout, not one each
        with ThreadPoolExecutor(max_workers=min(len(sources), SOURCES_AT_ONCE)) as pool:
            answers = list(pool.map(lambda item: ask(*item), sources.items()))
        results = [result for result, _ in answers]
        return snap.build(results, facts, previous, self.policy), sum(n for _, n in answers)

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
