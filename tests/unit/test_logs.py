"""Readable logs: tracebacks only under --verbose, Kopf's per-handler success lines at DEBUG."""

from __future__ import annotations

import io
import logging

import pytest

from heterojob import logs


@pytest.fixture
def capture() -> io.StringIO:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    yield stream
    root.handlers[:], _ = saved[0], root.setLevel(saved[1])


def emit() -> None:
    logging.getLogger("kopf.objects").info("Handler 'job_event' succeeded.")
    try:
        raise ConnectionError("Connection refused\nmore detail")
    except ConnectionError:
        logging.getLogger("heterojob.controller").exception("reconcile of team-a/x failed (attempt 3)")


def test_quiet_by_default(capture: io.StringIO) -> None:
    logs.configure(verbose=False)
    emit()
    lines = capture.getvalue().splitlines()
    assert lines == ["reconcile of team-a/x failed (attempt 3) [ConnectionError: Connection refused]"]
    assert logging.getLogger("urllib3").getEffectiveLevel() == logging.ERROR


def test_verbose_keeps_everything(capture: io.StringIO) -> None:
    logging.getLogger().setLevel(logging.DEBUG)
    logs.configure(verbose=True)
    emit()
    text = capture.getvalue()
    assert "Handler 'job_event' succeeded." in text and "Traceback (most recent call last)" in text
    logs.configure(verbose=False)
