"""The SDK's step metric (heterojob_sdk/metrics.py): the text exposition format a Prometheus parses, counted by
`Checkpointer.maybe_checkpoint` without any checkpoint, served over HTTP on the port the operator gives, and never
a reason for the training loop to stop (a port in use, a bad port, a failing counter)."""

from __future__ import annotations

import logging
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from heterojob_sdk import Checkpointer, StepMetrics
from heterojob_sdk import metrics as step_metrics


class NoAPI:
    """A pod API that is never asked: no checkpoint is requested (the downward-API file says nothing)."""

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return {"metadata": {"annotations": {}}}

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> Any:
        raise AssertionError("no checkpoint was asked for")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def port() -> Iterator[int]:
    p = free_port()
    yield p
    step_metrics.stop(p)


def checkpointer(tmp_path: Path, **kwargs: Any) -> Checkpointer:
    (tmp_path / "annotations").write_text("")
    return Checkpointer(directory="file:///ckpt/j", pod="p", namespace="ns", podinfo=tmp_path, api=NoAPI(),
                        poll_s=0, **kwargs)


def samples(text: str) -> dict[str, float]:
    """What Prometheus' own text parser reads (prometheus_client's, the format 0.0.4 Prometheus scrapes)."""
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}


def scrape(port: int, path: str = "/metrics") -> tuple[str, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return r.headers["Content-Type"], r.read().decode()


def test_the_counter_starts_at_the_first_report_and_only_goes_up() -> None:
    clock = iter([1000.5, 2000.0])
    m = StepMetrics(clock=lambda: next(clock))
    assert samples(m.render().decode()) == {}  # nothing before the first step: no series, no slow start
    m.report(500)  # resumed at step 500: the steps before are not this process's
    assert samples(m.render().decode()) == {"heterojob_training_steps_total": 0.0,
                                           "heterojob_training_steps_created": 1000.5,
                                           "heterojob_training_step": 500.0}
    for step in (501, 502, 505):
        m.report(step)
    m.report(505)  # the same step again counts nothing
    m.report(100)  # the loop went back: re-based, the counter never goes down
    m.report(103)
    m.report(True)  # not a step
    m.report("7")  # type: ignore[arg-type]
    got = samples(m.render().decode())
    assert got["heterojob_training_steps_total"] == 8.0  # 5 + 3
    assert got["heterojob_training_step"] == 103.0 and got["heterojob_training_steps_created"] == 1000.5
    families = {f.name: f.type for f in text_string_to_metric_families(m.render().decode())}
    assert families == {"heterojob_training_steps": "counter", "heterojob_training_steps_created": "gauge",
                        "heterojob_training_step": "gauge"}


def test_maybe_checkpoint_serves_the_step_without_any_checkpoint(tmp_path: Path, port: int) -> None:
    ckpt = checkpointer(tmp_path, metrics_port=port, metrics_host="127.0.0.1")
    assert samples(scrape(port)[1]) == {}  # served from the start, counted from the first step
    for step in range(1, 31):
        assert ckpt.maybe_checkpoint(step, lambda uri: 0) is None  # no checkpoint asked
    ctype, body = scrape(port)
    assert ctype == "text/plain; version=0.0.4; charset=utf-8"
    got = samples(body)
    assert got["heterojob_training_steps_total"] == 29.0 and got["heterojob_training_step"] == 30.0
    ckpt.report(40)  # a loop that checkpoints elsewhere reports on its own
    assert samples(scrape(port)[1])["heterojob_training_steps_total"] == 39.0
    assert samples(scrape(port, "/")[1])["heterojob_training_step"] == 40.0
    with pytest.raises(urllib.error.HTTPError) as err:
        scrape(port, "/other")
    assert err.value.code == 404


def test_a_second_checkpointer_of_the_process_shares_the_port(tmp_path: Path, port: int) -> None:
    first = checkpointer(tmp_path, metrics_port=port, metrics_host="127.0.0.1")
    second = checkpointer(tmp_path, metrics_port=port, metrics_host="127.0.0.1")
    assert first.metrics is second.metrics is not None
    second.report(3)
    second.report(5)
    assert samples(scrape(port)[1])["heterojob_training_steps_total"] == 2.0


def test_the_port_comes_from_the_environment_and_is_off_without_it(tmp_path: Path, port: int,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("HETEROJOB_METRICS_PORT", raising=False)
    assert checkpointer(tmp_path).metrics is None  # off by default: nothing listens
    monkeypatch.setenv("HETEROJOB_METRICS_PORT", "0")
    assert checkpointer(tmp_path).metrics is None
    for bad in ("http", "70000", "-1"):
        monkeypatch.setenv("HETEROJOB_METRICS_PORT", bad)
        with caplog.at_level(logging.WARNING, "heterojob.sdk"):
            ckpt = checkpointer(tmp_path)
        assert ckpt.metrics is None and ckpt.maybe_checkpoint(1, lambda uri: 0) is None
        assert "is not a TCP port" in caplog.text
    monkeypatch.setenv("HETEROJOB_METRICS_PORT", str(port))
    ckpt = checkpointer(tmp_path, metrics_host="127.0.0.1")
    ckpt.report(1)
    ckpt.report(4)
    assert samples(scrape(port)[1])["heterojob_training_steps_total"] == 3.0
    assert checkpointer(tmp_path, metrics_port=0).metrics is None  # the parameter wins: 0 turns it off


def test_a_port_in_use_is_logged_and_training_goes_on(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with caplog.at_level(logging.WARNING, "heterojob.sdk"):
            ckpt = checkpointer(tmp_path, metrics_port=port, metrics_host="127.0.0.1")
        assert f"cannot serve the step metric on port {port}" in caplog.text
        for step in range(1, 4):
            assert ckpt.maybe_checkpoint(step, lambda uri: 0) is None
        assert ckpt.metrics is not None and ckpt.metrics.total == 2  # counted in memory, served by nobody
    step_metrics.stop(port)  # nothing was registered: a no-op


def test_a_failing_counter_never_reaches_the_loop(tmp_path: Path, port: int, monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    ckpt = checkpointer(tmp_path, metrics_port=port, metrics_host="127.0.0.1")

    def broken(step: int) -> None:
        raise RuntimeError("boom")

    assert ckpt.metrics is not None
    monkeypatch.setattr(ckpt.metrics, "report", broken)
    with caplog.at_level(logging.ERROR, "heterojob.sdk"):
        assert ckpt.maybe_checkpoint(7, lambda uri: 0) is None
        ckpt.report(8)
    assert "counting step 7 failed; training goes on" in caplog.text

    def unbindable(port: int, host: str = "") -> StepMetrics:
        raise OSError("no sockets here")

    monkeypatch.setattr(step_metrics, "serve", unbindable)
    quiet = checkpointer(tmp_path, metrics_port=free_port())
    assert quiet.metrics is None and quiet.maybe_checkpoint(1, lambda uri: 0) is None
