"""The Devices page (AppTest) on a real Prometheus scraping the simulated exporters."""

from __future__ import annotations

import json
import os
from importlib.resources import files
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from heterojob.sim.telemetry.exporters import ExporterFleet
from heterojob.sim.cluster.nodes import node
from heterojob.sim.telemetry.prometheus import PrometheusServer
from tests.conftest import Cluster, eventually
from tests.console.test_console import SVG, svg_of

PAGE = str(files("heterojob_console") / "pages" / "1_Devices.py")
DEVICE = str(files("heterojob_console") / "pages" / "4_Device.py")
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(os.environ.get("HETEROJOB_SKIP_E2E") == "1",
                                                  reason="HETEROJOB_SKIP_E2E=1")]


def rows(at: AppTest) -> list[str]:
    """The heat map's row labels (none while it is not drawn)."""
    if not any('class="heat-map"' in m.value for m in at.markdown):
        return []
    return [t.text or "" for t in svg_of(at, "heat-map").iter(f"{SVG}text") if t.get("class") == "label"]


def training_pod(cluster: Cluster) -> None:
    """team-a/train's rank 0 on node g0, holding its 4 GPUs."""
    cluster.core.create_namespaced_pod("team-a", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "train-g1-0", "namespace": "team-a", "labels": {"heterojob.io/job": "train"}},
        "spec": {"nodeName": "g0", "containers": [{"name": "m", "image": "i",
                                                   "resources": {"limits": {"nvidia.com/gpu": "4"}}}]},
        "status": {"phase": "Running"}})


def test_devices_page_drills_down_and_names_the_failed_devices_pod_and_job(
        cluster: Cluster, emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [node("g0", "cn-east", "nvidia-h100", devices=4), node("n0", "cn-north", "ascend-910b", devices=4)]
    cluster.seed(nodes)
    training_pod(cluster)
    exporters = ExporterFleet(nodes, seed=5)
    host, port = exporters.serve()
    exporters.bind({"g0": [("team-a", "train-g1-0", 4)]})
    exporters.inject("fatal-xid", "g0", 3, 79)
    prom = PrometheusServer(exporters.targets(), f"{host}:{port}", scrape_interval_s=1.0, workdir=tmp_path).start()
    try:
        monkeypatch.setenv("HETEROJOB_KUBECONFIG", str(emulator.kubeconfig))
        monkeypatch.setenv("HETEROJOB_PROMETHEUS_URL", prom.url)

        def rendered() -> AppTest | None:
            st.cache_resource.clear()
            at = AppTest.from_file(PAGE, default_timeout=30).run()
            metrics = {m.label: m.value for m in at.metric}
            # both regions' rows: the NPU exporter's series may reach the range query a scrape later
            return at if metrics.get("Reporting") == "8" and metrics.get("Failed") == "1" and len(rows(at)) == 2 \
                else None

        at = eventually(rendered, timeout=40, interval=1.0, what="8 devices reporting, 1 failed, a heat map")
        assert not at.exception
        metrics = {m.label: m.value for m in at.metric}
        assert metrics["Accelerators"] == "8" and metrics["Unknown"] == "0"
        assert sorted(rows(at)) == ["cn-east · nvidia-h100", "cn-north · ascend-910b"]
        cells = [r for r in svg_of(at, "heat-map").iter(f"{SVG}rect") if r.findtext(f"{SVG}title")]
        assert cells and all(t.endswith("%") for t in (c.findtext(f"{SVG}title") for c in cells))  # hover: value
        stacks = next(m.value for m in at.markdown if 'class="summary software"' in m.value)  # HTML: no grid
        assert "cn-east" in stacks and "cn-north" in stacks and len(at.dataframe) == 1  # the failed device's grid
        bad = at.dataframe[0].value
        assert list(bad["reason"]) == ["fatal XID 79"] and list(bad["node"]) == ["g0"]
        assert list(bad["pod"]) == ["team-a/train-g1-0"] and list(bad["job"]) == ["team-a/train"]

        at.selectbox("region").select("cn-east").run()
        assert rows(at) == ["g0"]
        at.selectbox("node").select("g0").run()
        assert len(rows(at)) == 4  # its devices
        failed = bad["device"].iloc[0]

        device = AppTest.from_file(DEVICE, default_timeout=30)
        device.query_params["device"] = failed
        device.run()
        assert not device.exception
        line = device.markdown[-1].value
        assert "**health** failed (fatal XID 79)" in line and "**job** team-a/train" in line
        titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in device.get("plotly_chart")]
        assert {"Utilization", "Temperature", "Power", "Last XID / NPU health"} <= set(titles)
    finally:
        prom.stop()
        exporters.stop()


def test_without_prometheus_the_page_says_so(cluster: Cluster, emulator: Any,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """No default Prometheus and no Region naming one: both pages say how to configure one."""
    cluster.seed([node("g0", "cn-east", "nvidia-h100", devices=4)])
    monkeypatch.setenv("HETEROJOB_KUBECONFIG", str(emulator.kubeconfig))
    monkeypatch.delenv("HETEROJOB_PROMETHEUS_URL", raising=False)
    st.cache_resource.clear()
    for page in (PAGE, DEVICE):
        at = AppTest.from_file(page, default_timeout=30).run()
        assert not at.exception, page
        words = at.warning[0].value
        assert "No Prometheus configured" in words and "HETEROJOB_PROMETHEUS_URL" in words
        assert "spec.prometheusURL" in words


def test_a_flat_zero_history_is_not_drawn_on_a_negative_axis() -> None:
    """A failed or idle GPU's utilization and memory are 0 throughout: plotly's autorange put that line in
    the middle of -1..1, with negative percent and MiB ticks (seen in Chromium on the Device page)."""
    from heterojob_console import figures

    frame = pd.DataFrame({"time": pd.date_range("2026-01-01", periods=5, freq="min"), "value": [0.0] * 5})
    fig = figures.series(frame, "Utilization", "%")
    assert fig.layout.yaxis.rangemode in ("nonnegative", "tozero")
