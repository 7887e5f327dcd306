"""One GPU reported twice: during an exporter upgrade the old DaemonSet (dcgm-exporter 2.4.6-2.6.10 with the
1.x-compatibility CSV: `dcgm_*` names with 2.x labels) and the new one (3.3.9-3.6.1, current names) run side by
side on one node, two scrape targets (tests/fixtures/exporters, each naming its version and source), served to
Debian's real Prometheus. Every figure counts the device once: its framebuffer total, the devices a node, a
region, a job and the console report, the console's heat map and the dashboard's device counts."""

from __future__ import annotations

import json
import os
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import pytest

from heterojob import defaults
from heterojob.controller import FleetSource
from heterojob.controller.monitor import Monitor, TelemetryConfig
from heterojob.dashboard import per_gpu
from heterojob.sim.cluster.nodes import node
from heterojob.sim.telemetry.prometheus import PrometheusServer
from heterojob.telemetry.labels import NODE_LABEL, node_of_series, with_node_label
from heterojob.telemetry.model import HealthPolicy
from heterojob.telemetry.snapshot import JobRef, job_telemetry
from tests.conftest import eventually
from tests.e2e.test_telemetry_e2e import RecordedExporters, collect

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(os.environ.get("HETEROJOB_SKIP_E2E") == "1",
                                                  reason="HETEROJOB_SKIP_E2E=1")]

OLD = "dcgm-2.4.6-2.6.10-1x-compatibility-csv.prom"
NEW = "dcgm-3.3.9-3.6.1-beside-1x-compatibility.prom"
U0, U1 = "GPU-3d8f6a10-52c4-4b7e-9a0d-00000000u000", "GPU-3d8f6a10-52c4-4b7e-9a0d-00000000u001"
NODES = [node("gpu-node-u", "cn-east", "nvidia-a100", devices=2)]
JOB = JobRef("team-u", "upgrade-train", "cn-east", generation=1, replicas=1, per_replica=1)
FB_TOTAL = 30112 + 10424  # used + free of GPU 0 (no FB_RESERVED in either exporter's counters)


@pytest.fixture(scope="module")
def prometheus() -> Iterator[PrometheusServer]:
    # two servers: two scrape targets (two `instance`s), as two exporter pods on one node are
    old, new = (RecordedExporters({"gpu-node-u": (fixture, "dcgm", {}, True)}) for fixture in (OLD, NEW))
    prom = PrometheusServer([*old.targets(), *new.targets()], "unused:0", scrape_interval_s=1.0).start()
    yield prom
    prom.stop()
    old.stop()
    new.stop()


def monitor(url: str) -> Monitor:
    return Monitor(None, FleetSource.from_objects([*NODES, *defaults.all_objects()]), lambda: {},
                   TelemetryConfig(prometheus_url=url, window_s=4, timeout_s=3, policy=HealthPolicy()))


def instant(url: str, expr: str) -> list[dict[str, Any]]:
    """The real Prometheus' answer to an instant query."""
    with urllib.request.urlopen(f"{url}/api/v1/query?query={urllib.parse.quote(expr)}", timeout=5) as r:
        return list(json.load(r)["data"]["result"])


def both_scraped(url: str) -> bool:
    result = instant(url, "count(dcgm_fb_free) + count(DCGM_FI_DEV_FB_FREE)")
    return bool(result) and float(result[0]["value"][1]) == 4


def test_a_gpu_under_both_name_generations_counts_once(prometheus: PrometheusServer) -> None:
    eventually(lambda: both_scraped(prometheus.url), timeout=30, interval=0.5, what="both exporters scraped")
    m = monitor(prometheus.url)
    s = eventually(lambda: (s := collect(m)) and len(s.devices) == 2 and s, timeout=30, interval=0.5,
                   what="the node's two GPUs")
    d = s.devices
    assert set(d) == {U0, U1}
    assert (d[U0].memory_used_mib, d[U0].memory_total_mib) == (30112, FB_TOTAL)  # not twice the framebuffer
    assert d[U1].memory_total_mib == 40536
    assert (d[U0].node, d[U0].namespace, d[U0].pod, d[U0].utilization) == ("gpu-node-u", "team-u",
                                                                            "upgrade-train-g1-0", 88)
    assert sum(s.region("cn-east").devices.values()) == 2
    t = job_telemetry(JOB, s)
    assert (t.seen, t.expected, t.average) == (1, 1, 88)


def test_the_console_counts_each_gpu_once(prometheus: PrometheusServer) -> None:
    from heterojob_console import kpis
    from heterojob_console.data import Cluster
    from heterojob_console.devices import Reader, heat_series

    eventually(lambda: both_scraped(prometheus.url), timeout=30, interval=0.5, what="both exporters scraped")
    objects: dict[str, list[dict[str, Any]]] = {"Node": NODES, "Region": [defaults.region(r) for r in defaults.REGIONS],
                                                "AcceleratorClass": [defaults.accelerator_class(c)
                                                                     for c in defaults.ACCELERATOR_CLASSES]}
    empty = pd.DataFrame()
    cluster = Cluster(at=datetime.now(UTC), nodes=empty, jobs=empty, regions=empty, links=empty, objects=objects)
    table, problems = eventually(lambda: (r := Reader(prometheus.url).current(cluster)) and len(r[0]) == 2 and r,
                                 timeout=30, interval=0.5, what="the console's device table")
    assert sorted(table["device"]) == [U0, U1] and "cn-east" not in problems
    health = kpis.health(table, accelerators=2, nodes=["gpu-node-u"])
    assert (health.reporting, health.unknown) == (2, 0) and health.utilization == 44  # (88 + 0) / 2
    fleet = eventually(lambda: [f] if "gpu-node-u" in (f := heat_series(prometheus.url, 15)).index else None,
                       timeout=30, interval=0.5, what="the heat map's row for the node")[0]
    assert list(fleet.index).count("gpu-node-u") == 1
    assert set(fleet.loc["gpu-node-u"].drop("node").dropna()) == {44}  # each GPU once in the node's average
    per_device = heat_series(prometheus.url, 15, ["gpu-node-u"])
    assert sorted(per_device.index) == [U0, U1]
    assert set(per_device.loc[U0].drop("node").dropna()) == {88}


@pytest.mark.parametrize("labels", [
    {"node": "n1", "Hostname": "pod-x", "instance": "10.0.0.5:9400"},
    {"kubernetes_node": "n2", "hostname": "h"},
    {"node_name": "n3", "instance": "10.0.0.5:9400"},
    {"Hostname": "n4", "hostname": "other", "instance": "10.0.0.5:9400"},
    {"hostname": "n5", "exported_instance": "10.0.0.6:9400", "instance": "fed:9090"},
    {"exported_instance": "10.0.0.6:9400", "instance": "fed:9090"},
    {"instance": "10.0.0.7:9400"},
    {"instance": "[fd00::7]:9400"},
    {"instance": "gpu-node-x"},
    {"gpu": "0"},
    {"instance": "http://h:9400/metrics"},  # host_of drops a scheme and a path
    {"instance": "https://[fd00::8]:9400/metrics"},
    {"instance": "fe80::1"},  # a bare IPv6 address is kept whole
    {"exported_instance": "http://fe80::2/metrics", "instance": "fed:9090"},
])
def test_the_heat_maps_node_label_is_the_operators_node(prometheus: PrometheusServer, labels: dict[str, str]) -> None:
    """`with_node_label` (PromQL, evaluated by the real Prometheus) names the node `node_of_series` (Python) does."""
    series = "vector(1)"
    for name, value in labels.items():
        series = f'label_replace({series}, "{name}", "{value}", "", "")'
    [answer] = instant(prometheus.url, with_node_label(series))
    assert answer["metric"].get(NODE_LABEL, "") == node_of_series(labels)


def test_the_dashboards_device_counts_count_a_gpu_once(prometheus: PrometheusServer) -> None:
    """The Grafana dashboard counts devices (fatal XID, NPUs unhealthy) through `per_gpu` / `per_npu`: the node's
    two GPUs, four series between the two exporters, are two."""
    eventually(lambda: both_scraped(prometheus.url), timeout=30, interval=0.5, what="both exporters scraped")
    for expr, want in (("count(DCGM_FI_DEV_XID_ERRORS or dcgm_xid_errors)", 4),
                       (f"count({per_gpu('DCGM_FI_DEV_XID_ERRORS or dcgm_xid_errors')})", 2)):
        assert float(instant(prometheus.url, expr)[0]["value"][1]) == want, expr
