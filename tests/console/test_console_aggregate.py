"""A national fleet's telemetry in the console (e2e, a real Prometheus): past the operator's DEVICE_ROWS_MAX the
console reads as the operator does, in aggregate, and its tiles say what a per-device read of the same fleet says:
the anomalous devices listed with their pod and job, the healthy ones counted per node with their utilization, a
node's devices read one by one when a page shows that node."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from heterojob.sim.cluster.nodes import node
from heterojob.sim.telemetry.exporters import ExporterFleet
from heterojob.sim.telemetry.prometheus import PrometheusServer
from heterojob.telemetry.prometheus import PrometheusReader
from heterojob_console import devices, kpis
from heterojob_console.data import read_cluster
from tests.conftest import Cluster, eventually
from tests.console.test_console_devices import training_pod

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(os.environ.get("HETEROJOB_SKIP_E2E") == "1",
                                                  reason="HETEROJOB_SKIP_E2E=1")]


def test_an_aggregate_read_gives_the_per_device_reads_tiles_and_lists_only_what_needs_a_row(
        cluster: Cluster, tmp_path: Path) -> None:
    nodes = [node("g0", "cn-east", "nvidia-h100", devices=4), node("g1", "cn-east", "nvidia-h100", devices=4),
             node("n0", "cn-north", "ascend-910b", devices=4)]
    cluster.seed(nodes)
    training_pod(cluster)
    exporters = ExporterFleet(nodes, seed=5)
    host, port = exporters.serve()
    exporters.bind({"g0": [("team-a", "train-g1-0", 4)], "g1": [("team-b", "infer-g1-0", 2)]})
    exporters.inject("fatal-xid", "g0", 3, 79)
    prom = PrometheusServer(exporters.targets(), f"{host}:{port}", scrape_interval_s=1.0, workdir=tmp_path).start()
    try:
        snapshot = read_cluster(cluster.api)
        names = list(snapshot.nodes["node"])

        def both() -> tuple[Any, ...] | None:
            whole = devices.Reader(prom.url)  # 12 devices: read per device, every one a row
            table, _ = whole.current(snapshot)
            national = devices.Reader(prom.url, device_rows_max=4)  # read as past DEVICE_ROWS_MAX
            listed, _ = national.current(snapshot)
            ready = len(table) == 12 and table["reporting"].all() and table["utilization"].notna().all() \
                and (table["health"] == "failed").sum() == 1
            return (table, listed, national.counted) if ready and national.collector.aggregate else None

        table, listed, counted = eventually(both, timeout=40, interval=1.0, what="12 devices reporting, 1 failed")
        assert set(listed["node"]) == {"g0"}  # the failed device's node, read per device; nothing else listed
        failed = listed[listed["health"] == "failed"]
        assert list(failed["reason"]) == ["fatal XID 79"]
        assert list(failed["pod"]) == ["team-a/train-g1-0"] and list(failed["job"]) == ["team-a/train"]
        assert dict(zip(counted["node"], counted["devices"], strict=True)) == {"g1": 4, "n0": 4}
        assert (counted["util_n"] == counted["devices"]).all()
        whole = kpis.health(table, 12, names)
        national = kpis.health(listed, 12, names, counted)
        assert (national.reporting, national.failed, national.degraded, national.unknown) == \
            (whole.reporting, whole.failed, whole.degraded, whole.unknown) == (12, 1, 0, 0)
        assert national.utilization is not None and whole.utilization is not None
        assert abs(national.utilization - whole.utilization) < 1.0  # read a moment apart (averages over 60 s)
        # the page showing n0 reads its devices one by one: the per-device read's rows for n0
        rows, why = devices.node_devices(snapshot, "n0", prom.url)
        assert why == ""
        mine = table[table["node"] == "n0"]
        assert sorted(rows["device"]) == sorted(mine["device"])
        assert rows.set_index("device")["utilization"].to_dict() == mine.set_index("device")["utilization"].to_dict()
        assert devices.node_devices(snapshot, "nowhere", prom.url)[1] == "no Node nowhere"
    finally:
        prom.stop()
        exporters.stop()


def test_the_recording_rule_gives_the_figures_computed_without_it(tmp_path: Path) -> None:
    """With the console's recording rule a Prometheus answers the per-node utilization and the fleet's heat map from
    the recorded series; without it the console computes the same figures from the raw ones."""
    nodes = [node("g0", "cn-east", "nvidia-h100", devices=4), node("n0", "cn-north", "ascend-910b", devices=4)]
    exporters = ExporterFleet(nodes, seed=5)
    host, port = exporters.serve()
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump(devices.recording_rules(interval="1s")))
    plain = PrometheusServer(exporters.targets(), f"{host}:{port}", scrape_interval_s=1.0,
                             workdir=tmp_path / "plain").start()
    ruled = PrometheusServer(exporters.targets(), f"{host}:{port}", scrape_interval_s=1.0,
                             workdir=tmp_path / "ruled", rule_files=[str(rules)]).start()
    try:
        def recorded() -> bool:
            return len(PrometheusReader(ruled.url).query({"r": devices.RECORDED})["r"]) == 2

        eventually(recorded, timeout=40, interval=1.0, what="the rule's series of both nodes")
        computed = devices.node_utilization(plain.url)
        read = devices.node_utilization(ruled.url)
        assert computed.keys() == read.keys() == {"g0", "n0"}
        for name in computed:
            assert computed[name][0] == read[name][0] == 4
            assert abs(computed[name][1] - read[name][1]) / 4 < 5  # the mean within 5 points (read a second apart)
        heat = devices.heat_series(ruled.url, 15, None)
        assert sorted(heat["node"]) == ["g0", "n0"] and heat.drop(columns="node").notna().any(axis=None)
        # the recorded series unpacked give each node's mean utilization, as the raw series' average does
        raw = devices.heat_series(plain.url, 15, None)
        for name in ("g0", "n0"):
            recorded_now = heat.drop(columns="node").loc[name].dropna().iloc[-1]
            raw_now = raw.drop(columns="node").loc[name].dropna().iloc[-1]
            assert 0 <= recorded_now <= 100 and abs(recorded_now - raw_now) < 10, (name, recorded_now, raw_now)
    finally:
        plain.stop()
        ruled.stop()
        exporters.stop()
