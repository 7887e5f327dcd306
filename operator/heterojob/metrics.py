"""The operator's own metrics (prometheus_client), on its own registry so several operators can share a
process (tests) without clashing; served on `/metrics` next to `/alerts`."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.alerts_received = Counter("heterojob_alerts_received", "Alerts received, by status.", ["status"],
                                       registry=r)
        self.alerts_rejected = Counter("heterojob_alert_requests_rejected",
                                       "Webhook requests refused, by HTTP code.", ["code"], registry=r)
        self.alerts_deduplicated = Counter("heterojob_alerts_deduplicated",
                                           "Alerts already seen (same fingerprint, start and status).", registry=r)
        self.alerts_unmatched = Counter("heterojob_alerts_unmatched",
                                        "Alerts that name no job the operator runs.", registry=r)
        self.alerts_acted = Counter("heterojob_alerts_acted", "Alerts handed to a job, by action.", ["action"],
                                    registry=r)
        self.alerts_restored = Counter("heterojob_alerts_restored",
                                       "Firing alerts read back from Alertmanager's API at start, by verdict "
                                       "(new, duplicate of a webhook's, stale).", ["verdict"], registry=r)
        self.alerts_deferred = Counter("heterojob_alerts_deferred",
                                       "Hand-ins of an alert not taken (its controller not running yet, or an "
                                       "API error): forgotten and handed in again; one per alert per round, "
                                       "so one alert deferred three times counts 3.", registry=r)
        self.alerts_given_up = Counter("heterojob_alerts_given_up",
                                       "Alert states given up after MAX_FAILURES handler errors in a row "
                                       "(remembered: their re-sends are duplicates until a newer state).",
                                       registry=r)
        self.alert_queue = Gauge("heterojob_alert_queue_length", "Alerts waiting to be processed.", registry=r)
        self.migrations = Counter("heterojob_migrations", "Migrations and resizes started, by trigger.",
                                  ["action", "trigger"], registry=r)
        self.preemptions = Counter("heterojob_preemptions", "Jobs asked to yield to a higher priority.",
                                   registry=r)
        self.cycle_seconds = Histogram("heterojob_scheduler_cycle_cpu_seconds",
                                       "CPU-seconds of one scheduling cycle's plan of the whole waiting queue.",
                                       buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
                                       registry=r)
        self.cycle_waiting = Gauge("heterojob_scheduler_waiting_jobs", "Waiting jobs the last cycle planned.",
                                   registry=r)
        self.decision_seconds = Histogram("heterojob_decision_seconds", "Time of one reconcile pass of a job.",
                                          buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
                                          registry=r)
        self.gc_pause_seconds = Histogram("heterojob_gc_pause_seconds",
                                          "Wall time of one pass of Python's cyclic garbage collector, by "
                                          "generation (2: a full pass, which walks every tracked object not "
                                          "frozen): the event loop answers nothing meanwhile.", ["generation"],
                                          buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5), registry=r)

    def watch_gc(self) -> Callable[[], None]:
        """Time every collector pass into `gc_pause_seconds` from now on; returns what stops it (the callback
        list is the process's: tests run several operators in one). The callback only observes children made
        here: `labels()` takes the metric's lock, which a scrape holds while it allocates, and a pass started by
        that allocation would wait for it on its own thread for ever."""
        started: list[float] = []
        children = {g: self.gc_pause_seconds.labels(str(g)) for g in range(3)}

        def timed(phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                started.append(time.perf_counter())
            elif started:
                child = children.get(info.get("generation", -1))
                pause = time.perf_counter() - started.pop()
                if child is not None:
                    child.observe(pause)

        gc.callbacks.append(timed)
        return lambda: gc.callbacks.remove(timed) if timed in gc.callbacks else None
