"""The monitor asks every Prometheus of a cycle at once: a member site's server that hangs costs the cycle
one timeout, not one per source, and the other sites' telemetry is still read."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from heterojob import defaults
from heterojob.controller import FleetSource
from heterojob.controller.monitor import DEFAULT, Monitor, TelemetryConfig
from heterojob.telemetry.prometheus import TelemetryError

EAST, NORTH = "http://prom.cn-east:9090", "http://prom.cn-north:9090"


def regions_with_their_own_prometheus() -> FleetSource:
    objects = [o for o in defaults.all_objects() if o["kind"] != "Region"]
    for name, url in (("cn-east", EAST), ("cn-north", NORTH)):
        region = defaults.region(name)
        objects.append({**region, "spec": {**region["spec"], "prometheusURL": url}})
    return FleetSource.from_objects(objects)


class Reader:
    """Answers with no series; the first source's answer waits until the second source has been asked."""

    def __init__(self, url: str, asked: Mapping[str, threading.Event]) -> None:
        self.url, self.asked = url, asked

    def query(self, queries: Mapping[str, str], at: float | None = None) -> dict[str, Any]:
        self.asked[self.url].set()
        if self.url == EAST and not self.asked[NORTH].wait(timeout=5):
            raise TelemetryError("timed out: asked one source after another")
        return {name: [] for name in queries}


def test_every_source_is_asked_at_once_and_each_serves_its_regions() -> None:
    monitor = Monitor(None, regions_with_their_own_prometheus(), lambda: {},
                      TelemetryConfig(prometheus_url="http://prom.default:9090"))
    sources = monitor.sources()
    assert sources[EAST] == {"cn-east"} and sources[NORTH] == {"cn-north"}
    assert DEFAULT in sources["http://prom.default:9090"] and "cn-east" not in sources["http://prom.default:9090"]
    asked = {url: threading.Event() for url in sources}
    readers = {url: Reader(url, asked) for url in sources}
    monitor.collector._reader = readers.__getitem__  # type: ignore[method-assign]  # a stand-in reader per source
    snapshot = monitor.collect(0.0, facts={})
    assert snapshot is not None
    assert all(e.is_set() for e in asked.values())
    unavailable = {name: r.message for name, r in snapshot.regions.items() if r.message}
    assert not any("one source after another" in m for m in unavailable.values()), unavailable


def test_the_pods_of_jobs_whose_devices_nothing_reports_are_not_named_to_the_read() -> None:
    """A CPU job's pods never appear in the per-pod figures: named, each new one would have the figures asked."""
    from heterojob.telemetry.snapshot import JobRef, WatchedJob

    jobs = {f"team/{c}": WatchedJob(JobRef("team", c, "cn-east", 1, 2, 4), device_class=c, resource_version="1")
            for c in ("cpu", "nvidia-h100", "unknown-class")}
    monitor = Monitor(None, regions_with_their_own_prometheus(), lambda: jobs,
                      TelemetryConfig(prometheus_url="http://prom.default:9090"))
    named: list[Any] = []
    monitor.collector.collect = lambda *a, **k: named.append(a[5]) and None  # type: ignore[method-assign]
    monitor.collect(0.0, facts={})
    assert named == [{"cn-east": {("team", "nvidia-h100-g1-0"): 4, ("team", "nvidia-h100-g1-1"): 4}}]
