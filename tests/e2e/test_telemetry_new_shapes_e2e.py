"""Three more recorded exporter shapes (tests/fixtures/exporters, each naming its version and source) served to
Debian's real Prometheus and read by the monitor, as test_telemetry_e2e.py does for the first eight:

- dcgm-exporter 2.2.9-2.4.1 with its chart's dcp-metrics-included.csv: no DCGM_FI_DEV_GPU_UTIL at all;
- dcgm-exporter 4.x with --kubernetes-virtual-gpus: a time-sliced GPU's series repeated per pod (`vgpu`);
- npu-exporter (mind-cluster, 2025+) on Ascend 310P3: DDR memory instead of HBM, a chip split into vNPUs;
- dcgm-exporter 1.x (gpu-monitoring-tools 1.0.0): `dcgm_*` names, `gpu`/`uuid` and pod_name/pod_namespace;
- npu-exporter (mind-cluster 2026-08) on a 910B: a chip's network health 0 and a RoCE link DOWN.
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
from heterojob.telemetry.snapshot import Availability, JobRef, WatchedJob, job_telemetry
from tests.conftest import eventually
from tests.e2e.test_telemetry_e2e import RecordedExporters, collect

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(os.environ.get("HETEROJOB_SKIP_E2E") == "1",
                                                  reason="HETEROJOB_SKIP_E2E=1")]

NEW = {
    "gpu-node-i": ("dcgm-2.2.9-2.4.1-dcp-no-gpu-util.prom", "dcgm", {}, True),
    "gpu-node-j": ("dcgm-4.1.1-4.0.3-kubernetes-virtual-gpus.prom", "dcgm", {}, True),
    "npu-node-k": ("npu-exporter-mindcluster-2025-310p-vnpu.prom", "npu-exporter", {}, True),
    "gpu-node-m": ("dcgm-1.0.0-gpu-monitoring-tools.prom", "dcgm", {}, True),
    "npu-node-n": ("npu-exporter-mindcluster-2026-910b-network.prom", "npu-exporter", {}, True),
}
NODES = [node("gpu-node-i", "cn-east", "nvidia-a100", devices=2),
         node("gpu-node-j", "cn-east", "nvidia-h100", devices=2),
         node("npu-node-k", "cn-north", "ascend-910b", devices=3),
         node("gpu-node-m", "cn-east", "nvidia-a100", devices=2),
         node("npu-node-n", "cn-north", "ascend-910b", devices=4)]
DCP = JobRef("team-i", "dcp-train", "cn-east", generation=1, replicas=1, per_replica=1)
P310 = JobRef("team-k", "p310", "cn-north", generation=1, replicas=1, per_replica=1)
I0, I1 = "GPU-5b0e7c31-4a2d-4e8f-9c61-00000000i000", "GPU-5b0e7c31-4a2d-4e8f-9c61-00000000i001"
LEGACY = JobRef("team-m", "legacy-train", "cn-east", generation=1, replicas=1, per_replica=1)
DIST = JobRef("team-n", "dist", "cn-north", generation=1, replicas=2, per_replica=2)
SOLO = JobRef("team-n", "solo", "cn-north", generation=1, replicas=1, per_replica=2)
M0, M1 = "GPU-2b399198-c670-a848-173b-d3400051a2f0", "GPU-9567a9e7-341e-bb7e-fcf5-788d8caa5f01"
J0, J1 = "GPU-0e6a9d42-7f13-4b5c-8d20-00000000j000", "GPU-0e6a9d42-7f13-4b5c-8d20-00000000j001"


@pytest.fixture(scope="module")
def recorded() -> Iterator[PrometheusServer]:
    exporters = RecordedExporters(NEW)
    prom = PrometheusServer(exporters.targets(), "unused:0", scrape_interval_s=1.0).start()
    yield prom
    prom.stop()
    exporters.stop()


def test_three_more_exporter_shapes_through_a_real_prometheus(recorded: PrometheusServer) -> None:
    source = FleetSource.from_objects([*NODES, *defaults.all_objects()])
    jobs = {"team-i/dcp-train": WatchedJob(DCP, "nvidia-a100", "1"),
            "team-k/p310": WatchedJob(P310, "ascend-910b", "1")}
    m = Monitor(None, source, lambda: jobs, TelemetryConfig(prometheus_url=recorded.url, window_s=4, timeout_s=3,
                                                            policy=HealthPolicy()))
    s = eventually(lambda: (s := collect(m)) and len(s.devices) == 13 and s, timeout=30, interval=0.5,
                   what="13 devices from five recorded exporters")
    time.sleep(1.5)
    s = collect(m)
    d = s.devices
    # 2.2.9-2.4.1: placed by the temperature's labels, utilization from the engine activity (a ratio, x100)
    assert (d[I0].node, d[I0].namespace, d[I0].pod) == ("gpu-node-i", "team-i", "dcp-train-g1-0")
    assert d[I0].utilization == pytest.approx(87.3412) and d[I0].memory_total_mib == 35198 + 5338
    assert d[I1].utilization == 0 and d[I1].pod is None and d[I1].health == Health.HEALTHY
    t = job_telemetry(DCP, s)
    assert t.average == pytest.approx(87.3, abs=0.1) and t.unhealthy == ()
    # --kubernetes-virtual-gpus: a GPU serving two pods belongs to neither, and is no duplicate
    assert d[J0].shared and d[J0].pod is None and d[J0].health == Health.HEALTHY and d[J0].utilization == 64
    assert (d[J1].pod, d[J1].utilization, d[J1].shared) == ("vgpu-train-g1-0", 97, False)
    # 310P: DDR memory; chip 0 split into vNPUs for two pods is shared
    k0, k1 = d["npu-node-k/npu-0"], d["npu-node-k/npu-1"]
    assert k0.shared and k0.pod is None and (k0.memory_used_mib, k0.memory_total_mib) == (12890, 44280)
    assert (k1.pod, k1.utilization, k1.memory_used_mib, k1.memory_total_mib) == ("p310-g1-0", 88, 30240, 44280)
    assert k1.model == "310P3-Ascend-V1" and k1.health == Health.HEALTHY
    assert job_telemetry(P310, s).average == 88
    for region in ("cn-east", "cn-north"):
        assert s.region(region).availability == Availability.OK, s.region(region).message
    assert m.stats.queries <= 12


def test_1x_names_and_npu_network_faults_through_a_real_prometheus(recorded: PrometheusServer) -> None:
    m = Monitor(None, FleetSource.from_objects([*NODES, *defaults.all_objects()]), lambda: {},
                TelemetryConfig(prometheus_url=recorded.url, window_s=4, timeout_s=3, policy=HealthPolicy()))
    s = eventually(lambda: (s := collect(m)) and len(s.devices) == 13 and s, timeout=30, interval=0.5,
                   what="13 devices from five recorded exporters")
    d = s.devices
    m0, m1 = d[M0], d[M1]
    assert (m0.node, m0.namespace, m0.pod, m0.utilization, m0.temperature_c) == ("gpu-node-m", "team-m",
                                                                                  "legacy-train-g1-0", 93, 66)
    assert (m0.memory_used_mib, m0.memory_total_mib, m0.power_w, m0.health) == (12740, 16160, 231.5, Health.HEALTHY)
    assert m1.health == Health.FAILED and m1.xid == 79 and m1.pod is None
    assert job_telemetry(LEGACY, s).average == 93
    n = {i: d[f"npu-node-n/npu-{i}"] for i in range(4)}
    assert [n[i].network_fault for i in range(4)] == ["", "NPU link status 0 (down)",
                                                      "NPU network health status 0 (unhealthy)", ""]
    assert all(x.health == Health.HEALTHY for x in n.values()) and "npu-node-n" not in s.failed_nodes
    dist = job_telemetry(DIST, s)
    assert [(r, x.device_id, x.health) for r, x in dist.unhealthy] == [(0, "npu-node-n/npu-1", Health.FAILED)]
    assert job_telemetry(SOLO, s).unhealthy == ()


def test_the_consoles_device_history_charts_a_gpu_without_gpu_util(recorded: PrometheusServer) -> None:
    """dcgm-exporter 2.2.9-2.4.1 (no DCGM_FI_DEV_GPU_UTIL): the Device page's utilization chart falls back to
    the engine activity, as the operator's adapter does, and a GPU that has GPU_UTIL keeps it."""
    from heterojob_console.devices import history

    charted = eventually(lambda: (h := history(recorded.url, I0, 15)) and not h["Utilization"].empty and h,
                         timeout=30, interval=0.5, what="a utilization history for the GPU without GPU_UTIL")
    assert charted["Utilization"]["value"].between(0, 100).all()
    assert not charted["Temperature"].empty


def test_the_consoles_device_history_charts_a_dcgm_1x_gpu(recorded: PrometheusServer) -> None:
    """dcgm-exporter 1.x (`dcgm_*` names, `uuid`): the Device page's charts read the old names too."""
    from heterojob_console.devices import history

    charted = eventually(lambda: (h := history(recorded.url, M0, 15)) and not h["Utilization"].empty and h,
                         timeout=30, interval=0.5, what="a utilization history for the dcgm-exporter 1.x GPU")
    assert set(charted["Utilization"]["value"]) == {93}
    assert set(charted["Temperature"]["value"]) == {66} and set(charted["Memory used"]["value"]) == {12740}


def test_the_consoles_heat_map_shows_gpus_without_gpu_util_and_dcgm_1x_gpus(recorded: PrometheusServer) -> None:
    """The heat map reads utilization as the device history does: dcgm-exporter 2.2.9-2.4.1 (engine activity)
    and 1.x (`dcgm_gpu_utilization`, `uuid`) GPUs appear, per node and per device, beside a current one."""
    from heterojob_console.devices import heat_series

    wanted = {"gpu-node-i", "gpu-node-j", "gpu-node-m"}
    fleet = eventually(lambda: [f] if wanted <= set((f := heat_series(recorded.url, 15)).index) else None,
                       timeout=30, interval=0.5, what="heat map rows for every GPU node")[0]
    assert set(fleet.loc["gpu-node-m"].drop("node").dropna()) == {46.5}  # (93 + 0) / 2 in the recorded 1.x shape
    per_device = heat_series(recorded.url, 15, ["gpu-node-i", "gpu-node-m"])
    assert {I0, I1, M0, M1} <= set(per_device.index)
    assert per_device.loc[[I0, I1, M0, M1], "node"].tolist() == ["gpu-node-i"] * 2 + ["gpu-node-m"] * 2
    assert per_device.drop(columns="node").stack().between(0, 100).all()
    assert set(per_device.loc[M0].drop("node").dropna()) == {93}
