"""The Devices page (AppTest) on a real Prometheus scraping the simulated exporters."""

from __future__ import annotations

import json
import os
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from heterojob.sim.telemetry.exporters import ExporterFleet
from heterojob.sim.cluster.nodes import node
from heterojob.sim.telemetry.prometheus import PrometheusServer
from tests.conftest import Cluster, eventually

PAGE = str(files("heterojob_console") / "pages" / "1_Devices.py")
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(os.environ.get("HETEROJOB_SKIP_E2E") == "1",
                                                  reason="HETEROJOB_SKIP_E2E=1")]


def test_devices_page_shows_heat_and_the_failed_device(cluster: Cluster, emulator: Any, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [node("g0", "cn-east", "nvidia-h100", devices=4), node("n0", "cn-north", "ascend-910b", devices=4)]
    cluster.seed(nodes)
    exporters = ExporterFleet(nodes, seed=5)
    host, port = exporters.serve()
    exporters.bind({"g0": [("team-a", "train-g1-0", 2)]})
    exporters.inject("fatal-xid", "g0", 3, 79)
    prom = PrometheusServer(exporters.targets(), f"{host}:{port}", scrape_interval_s=1.0, workdir=tmp_path).start()
    try:
        monkeypatch.setenv("HETEROJOB_KUBECONFIG", str(emulator.kubeconfig))
        monkeypatch.setenv("HETEROJOB_PROMETHEUS_URL", prom.url)

        def rendered() -> AppTest | None:
            at = AppTest.from_file(PAGE, default_timeout=30).run()
            metrics = {m.label: m.value for m in at.metric}
            return at if metrics.get("Devices") == "8" and metrics.get("Failed") == "1" and at.get("plotly_chart") \
                else None

        at = eventually(rendered, timeout=40, interval=1.0, what="8 devices, 1 failed, a heat map")
        assert not at.exception
        heat = json.loads(at.get("plotly_chart")[0].proto.spec)["data"][0]
        assert heat["type"] == "heatmap" and len(heat["y"]) == 8
        bad = at.dataframe[0].value
        assert list(bad["reason"]) == ["fatal XID 79"] and list(bad["node"]) == ["g0"]
    finally:
        prom.stop()
        exporters.stop()


def test_without_prometheus_the_page_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HETEROJOB_PROMETHEUS_URL", raising=False)
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    assert not at.exception and "No Prometheus configured" in at.warning[0].value
