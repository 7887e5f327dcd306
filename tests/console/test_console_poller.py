"""The console's poller: one snapshot for every page, started when the console starts."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import pytest

from heterojob_console import ui
from heterojob_console.data import NODE_COLUMNS, Cluster


def cluster(devices: int) -> Cluster:
    nodes = pd.DataFrame([{**{c: "" for c in NODE_COLUMNS}, "node": "g0", "kind": "accelerator",
                           "capacity": devices, "held": 0, "ready": True, "schedulable": True}], columns=NODE_COLUMNS)
    return Cluster(at=datetime.now(UTC), nodes=nodes, jobs=pd.DataFrame(), regions=pd.DataFrame(),
                   links=pd.DataFrame())


class Reader:
    """Prometheus before and after its first scrape of every exporter: 2 devices, then all 8."""

    def __init__(self) -> None:
        self.reads = 0

    def current(self, _: Cluster) -> tuple[pd.DataFrame, dict[str, str]]:
        self.reads += 1
        return pd.DataFrame({"device": [f"d{i}" for i in range(2 if self.reads == 1 else 8)]}), {}


def test_a_read_missing_declared_devices_is_read_again_at_the_next_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ui, "REFRESH_S", 0.2)  # TELEMETRY_S stays 15 s: only a partial read comes back early
    monkeypatch.setattr(ui, "client", lambda _: None)
    monkeypatch.setattr(ui, "read_cluster", lambda _: cluster(8))
    poller = ui.Poller(None, "http://127.0.0.1:9")
    reader = Reader()
    poller._reader = reader  # type: ignore[assignment]
    poller.start()
    assert len(poller.telemetry(timeout=10)[0]) in (2, 8)
    deadline = time.monotonic() + 5
    while len(poller.telemetry()[0]) < 8 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(poller.telemetry()[0]) == 8 and reader.reads == 2
    time.sleep(1.0)  # complete now: the next read waits for TELEMETRY_S
    assert reader.reads == 2


def test_the_console_starts_reading_before_anyone_visits(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[Any] = []
    monkeypatch.setattr(ui, "client", lambda config: config)
    monkeypatch.setattr(ui, "read_cluster", lambda api: reads.append(api) or cluster(0))
    monkeypatch.setenv("HETEROJOB_KUBECONFIG", "/nonexistent/prefetch-test")
    monkeypatch.delenv("HETEROJOB_PROMETHEUS_URL", raising=False)
    ui.prefetch()
    deadline = time.monotonic() + 30  # a thread's first read: seconds on a loaded 2-core machine
    # (a poller of an earlier test may still be reading until it goes idle: only this kubeconfig's reads count)
    while "/nonexistent/prefetch-test" not in reads and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "/nonexistent/prefetch-test" in reads
    assert ui.poller("/nonexistent/prefetch-test", None).cluster(timeout=1).nodes["capacity"].sum() == 0  # the same poller


class SlowReader:
    """A national fleet's Prometheus: the first read takes a while."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def current(self, _: Cluster) -> tuple[pd.DataFrame, dict[str, str]]:
        time.sleep(self.seconds)
        return pd.DataFrame({"device": ["d0"]}), {}


def test_a_page_does_not_wait_for_a_slow_first_telemetry_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """While the first telemetry read is under way a page gets `Pending` after its short wait (and shows the API's
    figures), not the read's 10 s timeouts; once the read lands, the page gets it."""
    monkeypatch.setattr(ui, "REFRESH_S", 0.2)
    monkeypatch.setattr(ui, "client", lambda _: None)
    monkeypatch.setattr(ui, "read_cluster", lambda _: cluster(1))
    poller = ui.Poller(None, "http://127.0.0.1:9")
    poller._reader = SlowReader(3.0)  # type: ignore[assignment]
    poller.start()
    poller.cluster(timeout=10)
    deadline = time.monotonic() + 10
    while not poller._measuring and time.monotonic() < deadline:  # the read has begun
        time.sleep(0.02)
    with pytest.raises(ui.Pending):
        poller.telemetry(timeout=0.5)
    assert poller._measuring  # the page was answered while the read went on
    assert len(poller.telemetry(timeout=20).table) == 1
