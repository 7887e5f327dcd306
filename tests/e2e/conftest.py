"""The end-to-end tests' shared fixture: the simulated exporters of test_telemetry_e2e.py's fleet, scraped by a real
Prometheus (one per test module that asks for it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from heterojob.sim.telemetry.exporters import ExporterFleet
from heterojob.sim.telemetry.prometheus import PrometheusServer
from tests.e2e.test_telemetry_e2e import NODES, NPU, TRAIN


@pytest.fixture(scope="module")
def fleet() -> Iterator[tuple[ExporterFleet, PrometheusServer]]:
    exporters = ExporterFleet(NODES, seed=7)
    host, port = exporters.serve()
    exporters.bind({"g0": [("team-a", TRAIN.pod(0), 4)], "g1": [("team-a", TRAIN.pod(1), 4)],
                    "n0": [("team-b", NPU.pod(0), 2)], "n1": [("team-b", NPU.pod(1), 2)]})
    prom = PrometheusServer(exporters.targets(), f"{host}:{port}", scrape_interval_s=1.0).start()
    yield exporters, prom
    prom.stop()
    exporters.stop()
