"""The simulated exporters (sim/telemetry/: devices.py, metrics.py, exporters.py) emitting the newer real shapes the readers handle, served to
Debian's real Prometheus and read by the monitor: dcgm-exporter 1.x names, 2.2.9-2.4.1 without
DCGM_FI_DEV_GPU_UTIL, 4.x --kubernetes-virtual-gpus, a federated exporter placed by `exported_instance` only,
npu-exporter on a 310P (DDR memory, a chip split into vNPUs) and a 910B chip whose RoCE link is down. Each shape
is the one of a fixture in tests/fixtures/exporters (versions and sources named there).
"""

from __future__ import annotations

import os

import pytest

from heterojob import defaults
from heterojob.controller import FleetSource
from heterojob.controller.monitor import Monitor, TelemetryConfig
from heterojob.sim.cluster.nodes import node
from heterojob.sim.telemetry.devices import ExporterProfile
from heterojob.sim.telemetry.exporters import ExporterFleet
from heterojob.sim.telemetry.prometheus import PrometheusServer
from heterojob.telemetry.model import Health
from heterojob.telemetry.snapshot import Availability, JobRef, job_telemetry
from tests.conftest import eventually
from tests.e2e.test_telemetry_e2e import collect

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(os.environ.get("HETEROJOB_SKIP_E2E") == "1",
                                                  reason="HETEROJOB_SKIP_E2E=1")]

PROFILES = {
    "s-v1": ExporterProfile("1.x"),
    "s-dcp": ExporterProfile("2.2.9-2.4.1", node_name_set=False),
    "s-vgpu": ExporterProfile("4.5.3-4.8.2", vgpu=True),
    "s-fed": ExporterProfile("head", node_name_set=False, relabel_node=False, federated=True),
    "s-310p": ExporterProfile("2026", ddr=True),
    "s-net": ExporterProfile("2026"),
}
NODES = [node(n, "cn-east" if n in ("s-v1", "s-dcp", "s-vgpu", "s-fed") else "cn-north",
              "nvidia-h100" if n in ("s-v1", "s-dcp", "s-vgpu", "s-fed") else "ascend-910b", devices=2)
         for n in PROFILES]


def test_the_simulated_exporters_emit_the_newer_real_shapes() -> None:
    exporters = ExporterFleet(NODES, seed=5, profiles=PROFILES)
    exporters.bind({n: [("team-s", f"{n}-g1-0", 1)] for n in PROFILES if n != "s-net"}
                   | {"s-net": [("team-s", "dist-g1-0", 2)]})
    exporters.share("s-vgpu", 1, [("team-s", "infer-a"), ("team-s", "infer-b")])
    exporters.share("s-310p", 1, [("team-s", "vnpu-a"), ("team-s", "vnpu-b")])
    exporters.inject("npu-link-down", "s-net", 1)
    host, port = exporters.serve()
    prom = PrometheusServer(exporters.targets(), f"{host}:{port}", scrape_interval_s=1.0).start()
    try:
        m = Monitor(None, FleetSource.from_objects([*NODES, *defaults.all_objects()]), lambda: {},
                    TelemetryConfig(prometheus_url=prom.url, window_s=4, timeout_s=3))
        s = eventually(lambda: (s := collect(m)) and len(s.devices) == 12
                       and all(d.utilization is not None for d in s.devices.values()) and s,
                       timeout=30, interval=0.5, what="12 simulated devices, each with a utilization")
        by = {(d.node, d.index.split("/")[0]): d for d in s.devices.values()}
        for n in PROFILES:  # every node placed, including s-fed (no `node` label, host label the exporter pod)
            busy = by[(n, "0")]
            assert (busy.namespace, busy.pod) == ("team-s", "dist-g1-0" if n == "s-net" else f"{n}-g1-0"), busy
            assert busy.utilization is not None and busy.utilization > 80, busy  # 2.2.9: the engine activity
            assert busy.health == Health.HEALTHY, busy
        assert by[("s-v1", "0")].model == "" and by[("s-dcp", "0")].model == "NVIDIA H100 80GB HBM3"
        assert by[("s-vgpu", "1")].shared and by[("s-vgpu", "1")].pod is None
        p310 = by[("s-310p", "1")]
        assert p310.shared and p310.memory_total_mib == 64 * 1024 and p310.memory_used_mib == round(64 * 1024 * 0.8)
        assert [by[("s-net", i)].network_fault for i in "01"] == ["", "NPU link status 0 (down)"]
        dist = job_telemetry(JobRef("team-s", "dist", "cn-north", 1, replicas=2, per_replica=2), s)
        assert [(r, d.node, d.index, d.health) for r, d in dist.unhealthy] == [(0, "s-net", "1", Health.FAILED)]
        assert "s-net" not in s.failed_nodes  # the chip itself is healthy
        for region in ("cn-east", "cn-north"):
            assert s.region(region).availability == Availability.OK, s.region(region).message
        assert m.stats.queries <= 12
    finally:
        prom.stop()
        exporters.stop()


def test_a_device_that_fell_off_the_bus_reports_only_its_fault_series_and_fails_its_job() -> None:
    """`fell-off-bus`: a GPU leaves nothing but its XID 79 (dcgm-exporter skips fields DCGM cannot read), an
    Ascend chip nothing but its health 0 (npu-exporter drops -1 values), both with the pod's labels; each is a
    FAILED row of its job, on nodes placed by the chart's relabelling or by Hostname (issue 33)."""
    profiles = {"b-gpu": ExporterProfile("3.3.9-3.6.1"), "b-npu": ExporterProfile("2026")}
    nodes = [node("b-gpu", "cn-east", "nvidia-h100", devices=2), node("b-npu", "cn-north", "ascend-910b", devices=2)]
    exporters = ExporterFleet(nodes, seed=7, profiles=profiles)
    exporters.bind({"b-gpu": [("team-b", "bus-g1-0", 2)], "b-npu": [("team-b", "npu-g1-0", 2)]})
    exporters.inject("fell-off-bus", "b-gpu", 1)
    exporters.inject("fell-off-bus", "b-npu", 1)
    body = exporters.render("b-gpu").decode()
    gone = [line for line in body.splitlines() if not line.startswith("#") and 'gpu="1"' in line]
    assert gone and all(line.startswith("DCGM_FI_DEV_XID_ERRORS{") for line in gone), gone
    host, port = exporters.serve()
    prom = PrometheusServer(exporters.targets(), f"{host}:{port}", scrape_interval_s=1.0).start()
    try:
        m = Monitor(None, FleetSource.from_objects([*nodes, *defaults.all_objects()]), lambda: {},
                    TelemetryConfig(prometheus_url=prom.url, window_s=4, timeout_s=3))
        s = eventually(lambda: (s := collect(m)) and len(s.devices) == 4 and s, timeout=30, interval=0.5,
                       what="4 simulated devices, two of them with fault series only")
        by = {(d.node, d.index): d for d in s.devices.values()}
        gpu, chip = by[("b-gpu", "1")], by[("b-npu", "1")]
        assert (gpu.pod, gpu.health, gpu.xid, gpu.utilization) == ("bus-g1-0", Health.FAILED, 79, None)
        assert (chip.pod, chip.health, chip.utilization) == ("npu-g1-0", Health.FAILED, None)
        for job, region, bad in (("bus", "cn-east", gpu), ("npu", "cn-north", chip)):
            t = job_telemetry(JobRef("team-b", job, region, 1, replicas=1, per_replica=2), s)
            assert [(r, d.device_id) for r, d in t.unhealthy] == [(0, bad.device_id)]
        exporters.clear()  # an exporter restart: the GPU reports again, XID 0; the chip healthy
        s = eventually(lambda: (s := collect(m)) and all(d.health == Health.HEALTHY for d in s.devices.values())
                       and s, timeout=30, interval=0.5, what="every device healthy again")
    finally:
        prom.stop()
        exporters.stop()
