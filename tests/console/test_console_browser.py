"""What a person sees: the console served by `streamlit run` (heterojob console) against the harness with
the demo's eleven-region fleet and a real Prometheus, opened in Debian's headless Chromium through
Playwright. Every page is screenshotted to build/screenshots/console-<page>.png; the Overview must draw
the Natural Earth basemap (with no request leaving 127.0.0.1), the eleven regions and the KPIs. The map
and the heat map are SVG drawings (no plotly.js on those pages); the Jobs timeline is a plotly chart."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from heterojob.constants import GROUP, VERSION
from heterojob.defaults import REGIONS
from heterojob.sim.demo.fleet import fleet_nodes
from heterojob.sim.telemetry.exporters import ExporterFleet
from heterojob.sim.telemetry.prometheus import PrometheusServer, free_port
from tests.conftest import Cluster, eventually

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "build" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(os.environ.get("HETEROJOB_SKIP_E2E") == "1" or
                                                  not Path(CHROMIUM).exists(), reason="needs chromium, Prometheus")]


def serve(kubeconfig: Path, prometheus: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "heterojob", "console", "--port", str(port),
                               "--kubeconfig", str(kubeconfig)],
                              env={**os.environ, "HETEROJOB_PROMETHEUS_URL": prometheus,
                                   "HETEROJOB_CONSOLE_ADMINS": "local-admin"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    eventually(healthy, timeout=60, interval=0.3, what="the console answering")
    return server, url


SIZES = ((1500, 900), (1280, 800))  # common laptop screens: every table's columns must show at both
GRIDS = """() => [...document.querySelectorAll('[data-testid=stDataFrame]')].map(f => {
    const s = f.querySelector('.dvn-scroller'), r = f.getBoundingClientRect();
    return {scroll: s ? s.scrollWidth : 0, visible: s ? s.clientWidth : 0, right: r.right};}).concat(
    [...document.querySelectorAll('table.summary')].map(t => {  // the Overview's HTML tables
    const r = t.getBoundingClientRect();
    return {scroll: t.scrollWidth, visible: t.parentElement.clientWidth, right: r.right};}))"""


def tables_fit(page: Any, what: str) -> None:
    """No table hides columns to the right (a grid wider than its box scrolls with no visible scrollbar in
    Chromium), and none sticks out of the window."""
    grids = page.evaluate(GRIDS)
    width = page.viewport_size["width"]
    assert grids, f"{what}: no table"
    for i, g in enumerate(grids):
        assert g["scroll"] <= g["visible"] + 1 and g["right"] <= width, f"{what}: table {i} is cut off: {g}"


def test_every_page_renders_in_chromium(cluster: Cluster, emulator: Any, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    nodes = fleet_nodes()
    cluster.seed(nodes)
    cluster.create_job("train", {"devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
                                 "template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}})
    cluster.custom.patch_namespaced_custom_object_status(GROUP, VERSION, "team-a", "heterojobs", "train", {
        "status": {"phase": "Running", "placement": {"region": "cn-east", "deviceClass": "nvidia-h100", "replicas": 1,
                                                     "perReplica": 8, "nodes": ["cn-east-nvidia-h100-00"]},
                   "history": [{"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 600)),
                                "action": "migrate", "reason": "fatal XID 79",
                                "from": "cn-north/nvidia-h100 x1 (generation 1)",
                                "to": "cn-east/nvidia-h100 x1 (generation 2)"}]}})
    exporters = ExporterFleet(nodes, seed=11)
    host, port = exporters.serve()
    exporters.inject("fatal-xid", "cn-east-nvidia-h100-01", 0, 79)
    prom = PrometheusServer(exporters.targets(), f"{host}:{port}", scrape_interval_s=1.0, workdir=tmp_path).start()
    server, url = serve(emulator.kubeconfig, prom.url)
    outside: list[str] = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run"])
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            page.on("request", lambda r: None if r.url.startswith(("http://127.0.0.1", "data:", "blob:"))
                    else outside.append(r.url))
            SHOTS.mkdir(parents=True, exist_ok=True)

            page.goto(f"{url}/", wait_until="domcontentloaded", timeout=60_000)
            page.wait_for_selector("svg.fleet-map text.city", timeout=60_000)
            page.wait_for_function("document.querySelectorAll('[data-testid=stMetricValue]').length >= 10",
                                   timeout=60_000)
            page.wait_for_timeout(1500)  # telemetry tiles fill on the next refresh if Prometheus was late
            assert page.locator("table.regions tbody tr").count() == 11  # the regions table, HTML (no grid)
            page.screenshot(path=str(SHOTS / "console-overview.png"), full_page=True)
            cities = page.locator("svg.fleet-map text.city").all_text_contents()
            assert set(cities) == {r["location"]["city"] for r in REGIONS.values()} and len(set(cities)) == 11
            land = page.locator("svg.fleet-map path.land")
            assert len(land.get_attribute("d") or "") > 2000  # the Natural Earth outlines were drawn
            box = land.bounding_box()
            assert box is not None and box["width"] > 300 and box["height"] > 300  # ... and shown, at a size
            kpis = dict(zip(page.locator('[data-testid="stMetricLabel"]').all_inner_texts(),
                            page.locator('[data-testid="stMetricValue"]').all_inner_texts(), strict=False))
            kpis = {k.strip(): v for k, v in kpis.items()}
            assert kpis["Accelerators"] == "304" and kpis["Nodes ready"] == "42/42" and kpis["Jobs running"] == "1"
            assert page.locator("[data-testid='stAppDeployButton']").count() == 0  # no developer chrome

            page.goto(f"{url}/Devices", wait_until="domcontentloaded", timeout=60_000)
            page.wait_for_selector("svg.heat-map rect", timeout=60_000)
            page.wait_for_selector("[data-testid='stDataFrame']", timeout=60_000)
            page.screenshot(path=str(SHOTS / "console-devices.png"), full_page=True)

            page.goto(f"{url}/Jobs", wait_until="domcontentloaded", timeout=60_000)
            frame = page.wait_for_selector("[data-testid='stDataFrame']", timeout=60_000)
            box = frame.bounding_box()
            assert box is not None
            page.mouse.click(box["x"] + 12, box["y"] + 35 + 17)  # the first row's selection cell
            page.wait_for_selector(".js-plotly-plot .barlayer", state="attached", timeout=30_000)  # its timeline
            page.screenshot(path=str(SHOTS / "console-jobs.png"), full_page=True)
            cluster.custom.patch_namespaced_custom_object_status(GROUP, VERSION, "team-a", "heterojobs", "train", {
                "status": {"phase": "Checkpointing"}})  # the job moves on: its details follow (they froze)
            page.wait_for_function("[...document.querySelectorAll('[data-testid=stMetricValue]')]"
                                   ".some(m => m.innerText.trim() === 'Checkpointing')", timeout=20_000)

            page.goto(f"{url}/Quotas", wait_until="domcontentloaded", timeout=60_000)
            page.wait_for_selector("text=Audit", timeout=60_000)
            page.screenshot(path=str(SHOTS / "console-quotas.png"), full_page=True)

            for w, h in SIZES:  # the tables' columns all show (issue: cut off at 1500 px)
                sized = browser.new_page(viewport={"width": w, "height": h})
                for path, ready in (("/", "svg.fleet-map text.city"), ("/Devices", "svg.heat-map rect"),
                                    ("/Jobs", "[data-testid='stDataFrame']"), ("/Quotas", "text=Audit")):
                    sized.goto(f"{url}{path}", wait_until="domcontentloaded", timeout=60_000)
                    sized.wait_for_selector(ready, timeout=60_000)
                    sized.wait_for_function("document.querySelectorAll('[data-testid=stDataFrame] canvas, "
                                            "table.summary').length >= 1", timeout=60_000)
                    sized.wait_for_timeout(1000)  # the grids size their columns once drawn
                    sized.screenshot(path=str(SHOTS / f"console-{path.strip('/').lower() or 'overview'}-{w}.png"),
                                     full_page=True)
                    tables_fit(sized, f"{path} at {w}x{h}")
                sized.close()
            narrow = browser.new_page(viewport={"width": 800, "height": 900})  # a small window, a half screen
            narrow.goto(f"{url}/Jobs", wait_until="domcontentloaded", timeout=60_000)
            narrow.wait_for_selector("[data-testid='stDataFrame']", timeout=60_000)
            # the sidebar's width is animated (a CSS transition): wait for it to settle, then check it
            narrow.wait_for_function("(() => { const s = document.querySelector('[data-testid=stSidebar]');"
                                     " return s && s.getBoundingClientRect().width <= 150; })()", timeout=10_000)
            assert narrow.locator("[data-testid=stSidebar]").bounding_box()["width"] <= 150  # not a quarter
            narrow.hover("[data-testid=stSidebar]")
            narrow.locator("[data-testid=stSidebarCollapseButton] button").click()
            narrow.wait_for_timeout(600)  # the slide
            main = narrow.locator("[data-testid=stMain]").bounding_box()
            assert main is not None and main["x"] < 1 and main["width"] > 780, main  # collapsed: no blank column
            narrow.close()

            page.goto(f"{url}/Device", wait_until="domcontentloaded", timeout=60_000)  # the failed GPU first
            try:
                page.wait_for_selector("text=fatal XID 79", timeout=60_000)
            finally:
                page.screenshot(path=str(SHOTS / "console-device.png"), full_page=True)
            page.wait_for_selector(".js-plotly-plot", timeout=60_000)
            page.wait_for_timeout(1000)
            page.screenshot(path=str(SHOTS / "console-device.png"), full_page=True)
            browser.close()
        assert not outside, f"requests left 127.0.0.1: {outside[:5]}"
        for name in ("overview", "devices", "jobs", "quotas", "device"):
            assert (SHOTS / f"console-{name}.png").stat().st_size > 30_000, name  # a rendered page, not blank
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=10)
        prom.stop()
        exporters.stop()
