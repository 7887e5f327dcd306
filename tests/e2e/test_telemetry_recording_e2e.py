"""The optional recording rules (`telemetry.recording`) through Debian's real Prometheus: an aggregate read of a
Prometheus that evaluates them reads the recorded series, and every recorded exporter shape gives the same figures
per pod, failed, hot and network-down nodes and health counts as an aggregate read that computes them (a Prometheus
without the rules, same exporters) and as the per-device read.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from heterojob.sim.telemetry.prometheus import PrometheusServer
from heterojob.telemetry.recording import rules_file
from tests.conftest import eventually
from tests.e2e.test_telemetry_aggregate_e2e import SHAPE_NODES, SHAPES, monitor, read, same
from tests.e2e.test_telemetry_e2e import RecordedExporters

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(os.environ.get("HETEROJOB_SKIP_E2E") == "1",
                                                  reason="HETEROJOB_SKIP_E2E=1")]

WINDOW_S = 4  # the aggregate test's window


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusServer, PrometheusServer]]:
    """(a Prometheus evaluating the rules every second, one without them), scraping the same recorded shapes."""
    work: Path = tmp_path_factory.mktemp("recording")
    rules = work / "heterojob-recording-rules.yaml"
    rules.write_text(yaml.safe_dump(rules_file(WINDOW_S, interval="1s")))
    exporters = RecordedExporters(SHAPES)
    with_rules = PrometheusServer(exporters.targets(), "unused:0", scrape_interval_s=1.0, workdir=work / "rules",
                                  rule_files=[str(rules)]).start()
    without = PrometheusServer(exporters.targets(), "unused:0", scrape_interval_s=1.0, workdir=work / "plain").start()
    yield with_rules, without
    with_rules.stop()
    without.stop()
    exporters.stop()


def test_recorded_figures_are_the_computed_ones_for_every_recorded_shape(
        two: tuple[PrometheusServer, PrometheusServer]) -> None:
    with_rules, without = two
    recorded, computed = monitor(with_rules.url, SHAPE_NODES, True), monitor(without.url, SHAPE_NODES, True)
    full = monitor(without.url, SHAPE_NODES, False)
    eventually(lambda: len(read(full, time.time()).devices) >= 30, timeout=30, interval=0.5,
               what="the recorded shapes' devices")
    time.sleep(WINDOW_S + 2.5)  # a full window of samples, then a rule evaluation over it
    read(recorded, time.time())  # learns that this Prometheus evaluates the rules
    assert recorded.collector.recorded == {with_rules.url: False}
    at = time.time()
    f, c, r = read(full, at), read(computed, at), read(recorded, at)
    assert recorded.collector.recorded == {with_rules.url: True}  # read from the recorded series
    assert computed.collector.recorded == {without.url: False}
    same(f, c)
    same(f, r)
    assert r.pods == c.pods and r.pods  # the same figures per pod, with and without the rules
    assert r.failed_nodes and r.failed_nodes.keys() == c.failed_nodes.keys()
