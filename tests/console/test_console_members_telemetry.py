"""Member regions' telemetry on the Devices and Device pages (AppTest, e2e): each region is read from the
Prometheus that watches it, as the operator's monitor does (docs/multicluster.md, "Telemetry"): member
cn-zhongwei (its own API emulator) has its own simulated exporters scraped by its own Debian Prometheus,
named by its Region's prometheusURL; the manager's Prometheus scrapes cn-east only; cn-guiyang names a
Prometheus that does not answer (nothing listens at 127.0.0.1:9). The heat map has a row for the member's
region, a member device's page draws its history, and cn-guiyang says in words why it has none while the
rest renders."""

from __future__ import annotations

import json
import os
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from heterojob.constants import GROUP, VERSION
from heterojob.sim.cluster.harness import Emulator
from heterojob.sim.cluster.nodes import node
from heterojob.sim.telemetry.exporters import ExporterFleet
from heterojob.sim.telemetry.prometheus import PrometheusServer
from tests.conftest import Cluster, eventually
from tests.console.member_fleet import join_member
from tests.console.test_console_devices import rows

DEVICES = str(files("heterojob_console") / "pages" / "1_Devices.py")
DEVICE = str(files("heterojob_console") / "pages" / "4_Device.py")
RAW = ("MaxRetryError", "HTTPConnectionPool", "NewConnectionError", "Caused by")
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(os.environ.get("HETEROJOB_SKIP_E2E") == "1",
                                                  reason="HETEROJOB_SKIP_E2E=1")]


def test_a_member_regions_heat_map_row_and_device_history_come_from_its_own_prometheus(
        cluster: Cluster, emulator: Any, member: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    member.reset()
    here = [node("cn-east-h100-0", "cn-east", "nvidia-h100", devices=4),
            node("cn-guiyang-h100-0", "cn-guiyang", "nvidia-h100", devices=4)]
    cluster.seed(here)
    cluster.custom.patch_cluster_custom_object(GROUP, VERSION, "regions", "cn-guiyang", {
        "spec": {"prometheusURL": "http://127.0.0.1:9"}})  # its site's Prometheus does not answer
    local = ExporterFleet(here[:1], seed=1)  # GPU UUIDs differ between sites (seeds)
    servers: list[Any] = [local]
    try:
        host, port = local.serve()
        manager_prom = PrometheusServer(local.targets(), f"{host}:{port}", scrape_interval_s=1.0,
                                        workdir=tmp_path / "manager").start()
        servers.append(manager_prom)
        far = ExporterFleet([node("cn-zhongwei-h100-0", "cn-zhongwei", "nvidia-h100")], seed=2)  # as join_member
        servers.append(far)
        host, port = far.serve()
        member_prom = PrometheusServer(far.targets(), f"{host}:{port}", scrape_interval_s=1.0,
                                       workdir=tmp_path / "member").start()
        servers.append(member_prom)
        join_member(cluster, member, "cn-zhongwei", 1, prometheus_url=member_prom.url)
        monkeypatch.setenv("HETEROJOB_KUBECONFIG", str(emulator.kubeconfig))
        monkeypatch.setenv("HETEROJOB_PROMETHEUS_URL", manager_prom.url)

        def rendered() -> AppTest | None:
            st.cache_resource.clear()
            at = AppTest.from_file(DEVICES, default_timeout=40).run()
            # both sites' rows (range queries) and both sites' devices reporting (instant queries): under load
            # the rows can come a scrape before the count, as a user reloading the page would see
            reporting = {m.label: m.value for m in at.metric}.get("Reporting")
            return at if len(rows(at)) == 2 and reporting == "12" else None

        at = eventually(rendered, timeout=60, interval=1.0,
                        what="both scraped regions' heat-map rows and devices reporting")
        assert not at.exception
        assert sorted(rows(at)) == ["cn-east · nvidia-h100", "cn-zhongwei · nvidia-h100"]
        metrics = {m.label: m.value for m in at.metric}
        assert metrics["Accelerators"] == "16" and metrics["Reporting"] == "12"  # cn-guiyang's 4: unknown
        warnings = [w.value for w in at.warning]
        assert any(w.startswith("Utilization history of cn-guiyang unavailable: Prometheus at http://127.0.0.1:9: "
                                "connection refused") for w in warnings), warnings
        text = " ".join(warnings)
        assert not any(raw in text for raw in RAW), text

        at.selectbox("region").select("cn-zhongwei").run()  # drill down into the member region
        assert rows(at) == ["cn-zhongwei-h100-0"]
        at.selectbox("node").select("cn-zhongwei-h100-0").run()
        assert len(rows(at)) == 8  # its devices, from its own Prometheus
        table = next(d.value for d in at.dataframe if "memory_used_mib" in d.value.columns)  # its devices
        gpu = table["device"].iloc[0]

        page = AppTest.from_file(DEVICE, default_timeout=40)  # the page "open" links to
        page.query_params["device"] = gpu
        page.run()
        assert not page.exception and "**region** cn-zhongwei" in page.markdown[-1].value
        titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in page.get("plotly_chart")]
        assert {"Utilization", "Temperature", "Power"} <= set(titles), [w.value for w in page.warning]

        # no default Prometheus at all: the Regions that name one are still read (the operator reads them
        # so, `--prometheus-url` being optional); cn-east, which has none, reports nothing
        monkeypatch.delenv("HETEROJOB_PROMETHEUS_URL")

        def members_only() -> AppTest | None:
            st.cache_resource.clear()
            at = AppTest.from_file(DEVICES, default_timeout=40).run()
            reporting = {m.label: m.value for m in at.metric}.get("Reporting")
            return at if rows(at) and reporting == "8" else None

        at = eventually(members_only, timeout=60, interval=1.0, what="the member's devices without a default")
        assert not at.exception and rows(at) == ["cn-zhongwei · nvidia-h100"]
        assert not any("No Prometheus configured" in w.value for w in at.warning)
        page = AppTest.from_file(DEVICE, default_timeout=40)
        page.query_params["device"] = gpu
        page.run()
        assert not page.exception and "**region** cn-zhongwei" in page.markdown[-1].value
        assert page.get("plotly_chart"), [w.value for w in page.warning]
    finally:
        for server in reversed(servers):
            server.stop()
