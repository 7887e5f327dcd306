"""What a person sees of the member clusters (docs/multicluster.md, "The console"): `heterojob console`
served against a manager with one member cluster (its own API emulator, joined as README's "Join a member
cluster") and one member that does not answer, opened in Debian's headless Chromium through Playwright.
The Overview says which member is unreachable; the Jobs page lists the job's pods read from its member.
The fleet: tests/console/member_fleet.py (shared with the AppTest tests)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from heterojob.sim.cluster.harness import Emulator
from tests.conftest import Cluster
from tests.console.member_fleet import SECRET_TOKEN, member_fleet
from tests.console.test_console_browser import CHROMIUM, SHOTS, serve, tables_fit

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(os.environ.get("HETEROJOB_SKIP_E2E") == "1" or
                                                  not Path(CHROMIUM).exists(), reason="needs chromium")]


def test_the_members_pods_show_in_chromium(cluster: Cluster, emulator: Any, member: Emulator) -> None:
    from playwright.sync_api import sync_playwright

    member_fleet(cluster, member, member_nodes=1)
    server, url = serve(emulator.kubeconfig, "")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run"])
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            SHOTS.mkdir(parents=True, exist_ok=True)

            page.goto(f"{url}/", wait_until="domcontentloaded", timeout=60_000)
            page.wait_for_selector("text=Member cluster cn-guiyang is unreachable", timeout=60_000)
            page.wait_for_selector("text=Member clusters: 1 of 2 reachable", timeout=60_000)
            page.wait_for_function("document.querySelectorAll('[data-testid=stMetricValue]').length >= 10",
                                   timeout=60_000)
            kpis = dict(zip(page.locator('[data-testid="stMetricLabel"]').all_inner_texts(),
                            page.locator('[data-testid="stMetricValue"]').all_inner_texts(), strict=False))
            assert {k.strip(): v for k, v in kpis.items()}.get("Accelerators") == "16", kpis  # 8 here + 8 there
            page.screenshot(path=str(SHOTS / "console-members-overview.png"), full_page=True)
            assert SECRET_TOKEN not in page.content()
            assert "MaxRetryError" not in page.content() and "HTTPConnectionPool" not in page.content()
            page.set_viewport_size({"width": 1280, "height": 800})
            page.wait_for_timeout(1000)
            tables_fit(page, "the Overview with members at 1280x800")

            page.goto(f"{url}/Jobs", wait_until="domcontentloaded", timeout=60_000)
            frame = page.wait_for_selector("[data-testid='stDataFrame']", timeout=60_000)
            box = frame.bounding_box()
            assert box is not None
            for attempt in range(3):  # a click before the grid is drawn selects nothing: click again
                page.wait_for_timeout(1000)
                page.mouse.click(box["x"] + 12, box["y"] + 35 + 17)  # the first row's selection cell
                try:
                    page.wait_for_selector("text=Read from the cluster they run in", timeout=20_000)
                    break
                except Exception:  # noqa: BLE001 - playwright's TimeoutError; the last attempt re-raises
                    if attempt == 2:
                        page.screenshot(path=str(SHOTS / "console-members-jobs.png"), full_page=True)
                        raise
            pods = page.locator("[data-testid='stDataFrame']").nth(2)  # jobs table, history, pods
            pods.scroll_into_view_if_needed()
            cells: list[str] = []
            for _ in range(40):  # the grid fills its cells a moment after it appears
                cells = pods.locator("table [role='gridcell'], table td").all_inner_texts()
                if "far-g1-0" in cells:
                    break
                page.wait_for_timeout(500)
            page.screenshot(path=str(SHOTS / "console-members-jobs.png"), full_page=True)
            tables_fit(page, "the Jobs page with a member column at 1280x800")
            assert "far-g1-0" in cells and "cn-zhongwei" in cells and "cn-zhongwei-h100-0" in cells, cells
            browser.close()
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=10)
