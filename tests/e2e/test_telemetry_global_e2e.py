"""A global PromQL endpoint and regional sources, end to end.

- Debian's VictoriaMetrics fed by a regional Prometheus' remote write: the monitor reading the global endpoint (per
  device and in aggregate) sees the same jobs and faults as reading that Prometheus directly.
- Regional sources are asked at once: a region whose Prometheus hangs is reported unavailable ("no answer within")
  after the deadline, and only its region; the others read as usual.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from heterojob import defaults
from heterojob.controller import FleetSource
from heterojob.controller.monitor import Monitor, TelemetryConfig
from heterojob.sim.telemetry.exporters import ExporterFleet
from heterojob.sim.telemetry.prometheus import PrometheusServer, VictoriaMetricsServer
from heterojob.telemetry.model import Health
from heterojob.telemetry.snapshot import Availability, Snapshot, WatchedJob, job_telemetry
from tests.conftest import eventually
from tests.e2e.test_telemetry_e2e import NODES, NPU, TRAIN

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(os.environ.get("HETEROJOB_SKIP_E2E") == "1",
                                                  reason="HETEROJOB_SKIP_E2E=1")]

JOBS = {"team-a/train": WatchedJob(TRAIN, "nvidia-h100", "1"), "team-b/npu": WatchedJob(NPU, "ascend-910b", "1")}


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[ExporterFleet, PrometheusServer, VictoriaMetricsServer]]:
    exporters = ExporterFleet(NODES, seed=7)
    host, port = exporters.serve()
    exporters.bind({"g0": [("team-a", TRAIN.pod(0), 4)], "g1": [("team-a", TRAIN.pod(1), 4)],
                    "n0": [("team-b", NPU.pod(0), 2)], "n1": [("team-b", NPU.pod(1), 2)]})
    vm = VictoriaMetricsServer().start(60)
    prom = PrometheusServer(exporters.targets(), f"{host}:{port}", scrape_interval_s=1.0)
    prom.config["remote_write"] = [vm.remote_write()]
    prom.start()
    yield exporters, prom, vm
    prom.stop()
    vm.stop()
    exporters.stop()


def monitor(url: str, aggregate: bool, regions: list[dict[str, object]] | None = None, timeout_s: float = 1
            ) -> Monitor:
    source = FleetSource.from_objects([*NODES, *defaults.all_objects(), *(regions or [])])
    return Monitor(None, source, lambda: JOBS, TelemetryConfig(prometheus_url=url, window_s=4, timeout_s=timeout_s,
                                                               device_rows_max=0 if aggregate else 10**6))


def read(m: Monitor) -> Snapshot:
    s = m.collect(time.time())
    assert s is not None
    m.snapshot = s
    return s


def faults_seen(s: Snapshot) -> bool:
    train, npu = job_telemetry(TRAIN, s), job_telemetry(NPU, s)
    return [(r, d.node) for r, d in train.unhealthy if d.health == Health.FAILED] == [(0, "g0")] and \
        [(r, d.node) for r, d in npu.unhealthy] == [(0, "n0")]


def test_the_global_endpoint_reads_like_the_regional_prometheus(
        stack: tuple[ExporterFleet, PrometheusServer, VictoriaMetricsServer]) -> None:
    exporters, prom, vm = stack
    direct = monitor(prom.url, False)
    eventually(lambda: job_telemetry(TRAIN, read(direct)).seen == 8, timeout=30, interval=0.5, what="8 devices")
    for aggregate in (False, True):
        via = monitor(vm.url, aggregate)
        s = eventually(lambda m=via: (s := read(m)) and job_telemetry(TRAIN, s).seen == 8 and s, timeout=30,
                       interval=0.5, what="the global endpoint's 8 devices of the training job")
        for job in (TRAIN, NPU):
            t, d = job_telemetry(job, s), job_telemetry(job, read(direct))
            assert (t.availability, t.seen, t.unhealthy) == (Availability.OK, d.seen, ())
            assert all(abs((a or 0) - (b or 0)) <= 10 for a, b in zip(t.per_replica, d.per_replica, strict=True))
        assert via.stats.devices == 16
    exporters.inject("fatal-xid", "g0", 1, 79)
    exporters.inject("npu-unhealthy", "n0", 0)
    try:
        eventually(lambda: faults_seen(read(direct)), timeout=30, interval=0.5, what="the faults, directly")
        for aggregate in (False, True):
            via = monitor(vm.url, aggregate)
            eventually(lambda m=via: faults_seen(read(m)), timeout=30, interval=0.5,
                       what=f"the faults through VictoriaMetrics ({'aggregate' if aggregate else 'per device'})")
    finally:
        exporters.clear()


@pytest.fixture
def hanging() -> Iterator[str]:
    """A Prometheus URL that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    for conn in held:
        conn.close()
    server.close()


def test_a_hanging_regional_prometheus_delays_only_its_region(
        stack: tuple[ExporterFleet, PrometheusServer, VictoriaMetricsServer], hanging: str) -> None:
    _, prom, _ = stack
    # cn-north (the NPU job's region) has a Prometheus of its own that hangs; cn-east reads the default one
    north = defaults.region("cn-north")
    north["spec"] = {**north["spec"], "prometheusURL": hanging}
    m = monitor(prom.url, True, [north], timeout_s=10)  # the source's own timeout is longer than the deadline
    m.collector.deadline_s = 2.0
    eventually(lambda: job_telemetry(TRAIN, read(m)).seen == 8, timeout=30, interval=0.5, what="cn-east's devices")
    started = time.monotonic()
    s = read(m)
    assert time.monotonic() - started < 4.0  # the deadline, not the hanging source's timeouts and retries
    assert s.region("cn-north").availability == Availability.UNAVAILABLE
    assert "no answer within 2s" in s.region("cn-north").message and hanging in s.region("cn-north").message
    assert s.region("cn-east").availability == Availability.OK
    assert job_telemetry(TRAIN, s).availability == Availability.OK
    assert job_telemetry(NPU, s).availability == Availability.UNAVAILABLE  # missing telemetry: no fault
    assert m.stats.queries_per_source[hanging] == 0
