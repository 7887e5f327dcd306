"""The aggregate read (`telemetry.digest`, the national-scale one) against the per-device read, through Debian's real
Prometheus: every recorded exporter shape (tests/fixtures/exporters) and the simulated fleet with its faults must
give the same figures per pod, the same failed, hot and network-down nodes and the same health counts per region,
while the aggregate read lists only the devices of the nodes that need it.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterator
from typing import Any

import pytest

from heterojob import defaults
from heterojob.controller import FleetSource
from heterojob.controller.monitor import Monitor, TelemetryConfig
from heterojob.sim.telemetry.exporters import ExporterFleet
from heterojob.sim.telemetry.prometheus import PrometheusServer
from heterojob.telemetry.snapshot import Snapshot, WatchedJob, job_telemetry
from tests.conftest import eventually
from tests.e2e import test_telemetry_deployment_shapes_e2e as deployment
from tests.e2e import test_telemetry_new_shapes_e2e as new
from tests.e2e.test_telemetry_e2e import NPU, RECORDED, RECORDED_NODES, TRAIN, RecordedExporters

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(os.environ.get("HETEROJOB_SKIP_E2E") == "1",
                                                  reason="HETEROJOB_SKIP_E2E=1")]

SHAPES = {**RECORDED, **new.NEW, **deployment.SHAPES}
SHAPE_NODES = [*RECORDED_NODES, *new.NODES, *deployment.NODES]


def monitor(url: str, nodes: list[dict[str, Any]], aggregate: bool, jobs: dict[str, WatchedJob] | None = None
            ) -> Monitor:
    source = FleetSource.from_objects([*nodes, *defaults.all_objects()])
    watched = jobs or {}
    return Monitor(None, source, lambda: watched, TelemetryConfig(prometheus_url=url, window_s=4, timeout_s=5,
                                                                  device_rows_max=0 if aggregate else 10**6))


def read(m: Monitor, at: float) -> Snapshot:
    s = m.collect(at)
    assert s is not None
    m.snapshot = s
    return s


def per_pod(s: Snapshot) -> dict[tuple[str, str], tuple[int, float | None]]:
    """(namespace, pod) -> (devices reported, mean utilization), from device rows or Prometheus' figures."""
    out: dict[tuple[str, str], tuple[int, float | None]] = {}
    for key, devices in s.by_pod.items():
        utils = [d.utilization for d in devices if d.utilization is not None and d.node not in s.exporters_down]
        out[key] = (len(devices), round(statistics.fmean(utils), 1) if utils else None)
    for key, figures in s.pods.items():
        out[key] = (figures.devices, round(figures.utilization, 1) if figures.utilization is not None else None)
    return out


def health_counts(s: Snapshot) -> dict[str, dict[str, int]]:
    return {name: {h.value: n for h, n in r.devices.items() if n} for name, r in s.regions.items()}


def same(full: Snapshot, agg: Snapshot) -> None:
    assert per_pod(agg) == per_pod(full)
    assert agg.failed_devices == full.failed_devices and agg.failed_nodes.keys() == full.failed_nodes.keys()
    assert agg.hot_nodes.keys() == full.hot_nodes.keys() and agg.network_down.keys() == full.network_down.keys()
    assert agg.exporters_down == full.exporters_down
    assert health_counts(agg) == health_counts(full)
    assert {k: v for k, v in agg.reported.items() if k in agg.failed_nodes} == \
        {k: v for k, v in full.reported.items() if k in full.failed_nodes}
    # every device the aggregate read lists is listed alike by the per-device read
    for device_id, d in agg.devices.items():
        f = full.devices[device_id]
        assert (d.node, d.health, d.reason, d.pod) == (f.node, f.health, f.reason, f.pod)


@pytest.fixture(scope="module")
def shapes() -> Iterator[PrometheusServer]:
    exporters = RecordedExporters(SHAPES)
    prom = PrometheusServer(exporters.targets(), "unused:0", scrape_interval_s=1.0).start()
    yield prom
    prom.stop()
    exporters.stop()


def test_every_recorded_exporter_shape_reads_the_same_in_aggregate(shapes: PrometheusServer) -> None:
    full, agg = monitor(shapes.url, SHAPE_NODES, False), monitor(shapes.url, SHAPE_NODES, True)
    eventually(lambda: len(read(full, time.time()).devices) >= 30, timeout=30, interval=0.5,
               what="the recorded shapes' devices")
    time.sleep(4.5)  # a full window of samples
    at = time.time()
    f, a = read(full, at), read(agg, at)
    same(f, a)
    assert agg.collector.aggregate and not full.collector.aggregate
    # read in aggregate (not per device): the healthy shapes' devices are counted, not listed
    assert a.aggregated > 0 and len(a.devices) + a.aggregated == len(f.devices)
    assert f.failed_nodes  # the recorded shapes hold failed devices (XID 79, an unreadable chip, ...)


def test_faults_are_seen_alike_and_only_their_nodes_are_listed(fleet: tuple[ExporterFleet, PrometheusServer]) -> None:
    from tests.e2e.test_telemetry_e2e import NODES

    exporters, prom = fleet
    jobs = {"team-a/train": WatchedJob(TRAIN, "nvidia-h100", "1"), "team-b/npu": WatchedJob(NPU, "ascend-910b", "1")}
    full, agg = monitor(prom.url, NODES, False, jobs), monitor(prom.url, NODES, True, jobs)
    eventually(lambda: len(read(full, time.time()).devices) == 16, timeout=30, interval=0.5, what="16 devices")
    time.sleep(4.5)
    at = time.time()
    f, a = read(full, at), read(agg, at)
    same(f, a)
    assert a.devices == {} and a.aggregated == 16 and agg.stats.devices == 16  # healthy: nothing listed
    assert agg.stats.bytes * 5 < full.stats.bytes
    exporters.inject("fatal-xid", "g0", 1, 79)
    exporters.inject("overheat", "g1", 2, 96)
    exporters.inject("npu-unhealthy", "n0", 0)
    exporters.inject("straggle", "g1", 1, 0.2)
    time.sleep(5)
    at = time.time()
    f, a = read(full, at), read(agg, at)
    same(f, a)
    assert {d.node for d in a.devices.values()} == {"g0", "g1", "n0"}  # the faulted nodes only
    for job in (TRAIN, NPU):
        tf, ta = job_telemetry(job, f), job_telemetry(job, a)
        assert (ta.availability, ta.seen, ta.per_replica, ta.stragglers) == (tf.availability, tf.seen, tf.per_replica,
                                                                             tf.stragglers)
        assert [(r, d.device_id, d.reason) for r, d in ta.unhealthy] == \
            [(r, d.device_id, d.reason) for r, d in tf.unhealthy]
    exporters.inject("vanish", "g0", 3)
    time.sleep(5.5)  # past the window: the series is gone from it
    at = time.time()
    f, a = read(full, at), read(agg, at)
    same(f, a)
    assert "vanished" in a.devices[next(d for d, s in f.devices.items() if s.node == "g0" and s.index == "3")].reason
    exporters.clear()
