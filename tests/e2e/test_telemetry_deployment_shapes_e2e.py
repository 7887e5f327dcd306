"""Real deployment shapes (issue 33, item 11) served to Debian's real Prometheus and read by the monitor:

- dcgm-exporter without NODE_NAME (Hostname: its pod's name) behind a ServiceMonitor with the Helm chart's
  relabelings example (`nodename`), one GPU fallen off the bus (nothing left but XID 79);
- dcgm-exporter from its own dcgm-exporter.yaml + service-monitor.yaml (no relabelling at all), placed through
  kube-state-metrics' kube_pod_info for its pod;
- npu-exporter scraped by mind-cluster's documented Prometheus job (the node name in `job`), one chip the
  driver cannot read (nothing left but its health 0 and error code).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from heterojob import defaults
from heterojob.controller import FleetSource
from heterojob.controller.monitor import Monitor, TelemetryConfig
from heterojob.sim.cluster.nodes import node
from heterojob.sim.telemetry.prometheus import PrometheusServer
from heterojob.telemetry.model import Health, HealthPolicy
from heterojob.telemetry.snapshot import Availability, JobRef, job_telemetry
from tests.conftest import eventually
from tests.e2e.test_telemetry_e2e import RecordedExporters, collect

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(os.environ.get("HETEROJOB_SKIP_E2E") == "1",
                                                  reason="HETEROJOB_SKIP_E2E=1")]

CHART_SERVICE_MONITOR = {"nodename": "gpu-node-p", "namespace": "gpu-monitoring", "pod": "dcgm-exporter-7xk2p",
                         "container": "exporter", "endpoint": "metrics", "service": "dcgm-exporter"}
OWN_SERVICE_MONITOR = {"namespace": "gpu-monitoring", "pod": "dcgm-exporter-q8v2r", "container": "exporter",
                       "endpoint": "metrics", "service": "dcgm-exporter"}
# path -> (fixture, family, target labels, relabelled `node`?): no target has the shipped `node` relabelling
SHAPES = {
    "gpu-node-p": ("dcgm-3.3.9-3.6.1-chart-nodename-fell-off-bus.prom", "dcgm", CHART_SERVICE_MONITOR, False),
    "gpu-node-q": ("dcgm-3.3.9-3.6.1-own-servicemonitor-no-relabel.prom", "dcgm", OWN_SERVICE_MONITOR, False),
    "npu-node-r": ("npu-exporter-mindcluster-2026-910b-job-node-unreadable-chip.prom", "npu-exporter",
                   {"job": "npu-node-r"}, False),
    "kube-state-metrics": ("kube-state-metrics-kube-pod-info.prom", "kube-state-metrics", {}, False),
}
NODES = [node("gpu-node-p", "cn-east", "nvidia-h100", devices=2),
         node("gpu-node-q", "cn-east", "nvidia-a100", devices=2),
         node("npu-node-r", "cn-north", "ascend-910b", devices=2)]
P0, P1 = "GPU-4f1e2d3c-5b6a-4798-8a9b-00000000p000", "GPU-4f1e2d3c-5b6a-4798-8a9b-00000000p001"
Q0, Q1 = "GPU-8a7b6c5d-4e3f-4a2b-9c1d-00000000q000", "GPU-8a7b6c5d-4e3f-4a2b-9c1d-00000000q001"
BUS = JobRef("team-p", "bus-train", "cn-east", generation=1, replicas=1, per_replica=2)
QJOB = JobRef("team-q", "pod-train", "cn-east", generation=1, replicas=1, per_replica=1)
NPU = JobRef("team-r", "npu-train", "cn-north", generation=1, replicas=1, per_replica=2)


@pytest.fixture(scope="module")
def recorded() -> Iterator[PrometheusServer]:
    exporters = RecordedExporters(SHAPES)
    prom = PrometheusServer(exporters.targets(), "unused:0", scrape_interval_s=1.0).start()
    yield prom
    prom.stop()
    exporters.stop()


def test_chart_relabellings_kube_pod_info_job_and_fault_only_devices(recorded: PrometheusServer) -> None:
    m = Monitor(None, FleetSource.from_objects([*NODES, *defaults.all_objects()]), lambda: {},
                TelemetryConfig(prometheus_url=recorded.url, window_s=4, timeout_s=3, policy=HealthPolicy()))
    eventually(lambda: len(collect(m).devices) == 6, timeout=30, interval=0.5,
               what="6 devices from three deployment shapes")
    time.sleep(1.5)
    s = collect(m)
    d = s.devices
    # the chart's `nodename`, not the exporter pod's Hostname; the GPU that fell off the bus fails its job
    assert {x.node for x in (d[P0], d[P1])} == {"gpu-node-p"}
    assert (d[P0].pod, d[P0].health, d[P0].utilization) == ("bus-train-g1-0", Health.HEALTHY, 96)
    bad = d[P1]
    assert (bad.pod, bad.health, bad.xid, bad.utilization) == ("bus-train-g1-0", Health.FAILED, 79, None)
    assert bad.model == "NVIDIA H100 80GB HBM3" and "fatal XID 79" in bad.reason
    assert [(r, x.device_id) for r, x in job_telemetry(BUS, s).unhealthy] == [(0, P1)]
    assert s.failed_devices["gpu-node-p"] == frozenset({P1})
    # no relabelling: the exporter pod's Node from kube_pod_info; the workload's pod from exported_pod
    assert (d[Q0].node, d[Q0].namespace, d[Q0].pod, d[Q0].utilization) == ("gpu-node-q", "team-q", "pod-train-g1-0",
                                                                            84)
    assert (d[Q1].node, d[Q1].pod) == ("gpu-node-q", None)
    assert job_telemetry(QJOB, s).average == 84
    # mind-cluster's documented job: the node in `job`; the chip nothing can read fails its job
    ok, broken = d["npu-node-r/npu-0"], d["npu-node-r/npu-1"]
    assert (ok.pod, ok.health, ok.utilization) == ("npu-train-g1-0", Health.HEALTHY, 93)
    assert (broken.pod, broken.health, broken.utilization) == ("npu-train-g1-0", Health.FAILED, None)
    assert "0x80E01801" in broken.reason
    assert [(r, x.device_id) for r, x in job_telemetry(NPU, s).unhealthy] == [(0, "npu-node-r/npu-1")]
    for region in ("cn-east", "cn-north"):
        assert s.region(region).availability == Availability.OK, s.region(region).message
    assert m.stats.queries <= 12


def test_the_consoles_heat_map_names_the_relabelled_node_not_the_exporter_pod(recorded: PrometheusServer) -> None:
    """The heat map groups by `with_node_label`: the chart's `nodename` before dcgm-exporter's Hostname."""
    from heterojob_console.devices import heat_series

    fleet = eventually(lambda: [f] if "gpu-node-p" in (f := heat_series(recorded.url, 15)).index else None,
                       timeout=30, interval=0.5, what="a heat map row for gpu-node-p")[0]
    assert "dcgm-exporter-7xk2p" not in fleet.index
    assert set(fleet.loc["gpu-node-p"].drop("node").dropna()) == {96}


def test_the_consoles_device_history_finds_a_chip_whose_node_is_in_job(recorded: PrometheusServer) -> None:
    """mind-cluster's documented job puts the node in `job`: the Device page charts `<node>/npu-<id>` from it."""
    from heterojob_console.devices import history

    charted = eventually(lambda: (h := history(recorded.url, "npu-node-r/npu-0", 15)) and not h["Utilization"].empty
                         and h, timeout=30, interval=0.5, what="a utilization history for npu-node-r/npu-0")
    assert set(charted["Utilization"]["value"]) == {93}
