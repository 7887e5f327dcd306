"""What a person sees: the console served by `streamlit run` (heterojob console) against the harness,
opened in Debian's headless Chromium through Playwright; the overview must show the map and the KPIs.
The screenshot goes to build/screenshots/console-overview.png (README's picture is a copy in docs/)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from heterojob.sim.cluster.nodes import node
from heterojob.sim.telemetry.prometheus import free_port
from tests.conftest import Cluster

ROOT = Path(__file__).resolve().parents[2]
SHOT = ROOT / "build" / "screenshots" / "console-overview.png"
pytestmark = pytest.mark.skipif(os.environ.get("HETEROJOB_SKIP_E2E") == "1", reason="HETEROJOB_SKIP_E2E=1")


def test_overview_renders_the_map_and_kpis_in_chromium(cluster: Cluster, emulator: Any) -> None:
    from playwright.sync_api import sync_playwright

    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("npu-a", "cn-north", "ascend-910b"),
                  node("h100-b", "eu-west", "nvidia-h100")])
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "heterojob", "console", "--port", str(port),
                               "--kubeconfig", str(emulator.kubeconfig)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.3)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}/", wait_until="domcontentloaded", timeout=60_000)
            page.wait_for_selector('[data-testid="stMetric"]', timeout=60_000)
            page.wait_for_selector(".js-plotly-plot .scattergeo", state="attached", timeout=60_000)
            labels = page.locator('[data-testid="stMetricLabel"]').all_inner_texts()
            values = page.locator('[data-testid="stMetricValue"]').all_inner_texts()
            page.wait_for_timeout(1000)  # let plotly finish drawing the map
            SHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOT), full_page=True)
            browser.close()
        kpis = dict(zip([label.strip() for label in labels], values, strict=False))
        assert kpis["Devices"] == "24" and kpis["Nodes ready"] == "3/3"
        assert SHOT.stat().st_size > 30_000  # a rendered page, not a blank one (6-8 KB)
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=10)
