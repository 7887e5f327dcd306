"""The heat map's series, shared by every session (`ui.Latest`): one read of a view however many sessions ask at
once, the last answer shown while it is read again, and a failure never shown from the past."""

from __future__ import annotations

import threading
import time

import pandas as pd
import pytest

from heterojob_console import ui

KEY = ("http://prometheus", 60, None)


def test_sessions_asking_at_once_share_one_read() -> None:
    latest, calls, started, release = ui.Latest(), [], threading.Event(), threading.Event()
    frame = pd.DataFrame({"node": ["a"]})

    def fetch() -> pd.DataFrame:
        calls.append(1)
        started.set()
        release.wait(10)
        return frame

    got: list[pd.DataFrame] = []
    first = threading.Thread(target=lambda: got.append(latest.get(KEY, fetch)))
    first.start()
    assert started.wait(10)
    second = threading.Thread(target=lambda: got.append(latest.get(KEY, fetch)))
    second.start()
    release.set()
    first.join(10)
    second.join(10)
    assert len(calls) == 1 and len(got) == 2 and all(g is frame for g in got)


def test_the_last_answer_shows_while_it_is_read_again_but_a_failure_is_read_again_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ui, "HEAT_S", 0.0)  # every answer is old at once
    latest = ui.Latest()
    old, new = pd.DataFrame({"node": ["old"]}), pd.DataFrame({"node": ["new"]})
    answers = iter([old, new])
    assert latest.get(KEY, lambda: next(answers)) is old
    assert latest.get(KEY, lambda: next(answers)) is old  # shown at once; `new` is read in the background
    deadline = time.monotonic() + 10
    while latest._entries[KEY][1] is not new and time.monotonic() < deadline:
        time.sleep(0.02)
    assert latest._entries[KEY][1] is new

    def down() -> pd.DataFrame:
        raise ConnectionRefusedError("nothing listens there")

    with pytest.raises(ConnectionRefusedError):
        latest.get(("http://member", 60, None), down)
    assert latest.get(("http://member", 60, None), lambda: new) is new  # answers again: no old error shown


def test_a_view_is_kept_until_a_new_column_is_due_but_an_empty_answer_is_asked_again_soon(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ui, "HEAT_S", 0.0)
    latest, calls = ui.Latest(), []
    full = pd.DataFrame({"node": ["a"]})

    def fetch() -> pd.DataFrame:
        calls.append(1)
        return full

    assert latest.get(KEY, fetch, every_s=3600) is full
    assert latest.get(KEY, fetch, every_s=3600) is full
    assert len(calls) == 1  # a column is an hour here: not read again meanwhile
    answers = iter([pd.DataFrame(), full])
    other = ("http://prometheus", 60, ("n",))
    assert latest.get(other, lambda: next(answers), every_s=3600).empty  # no samples yet (Prometheus just started)
    latest.get(other, lambda: next(answers), every_s=3600)  # asked again in the background at once
    deadline = time.monotonic() + 10
    while latest._entries[other][1] is not full and time.monotonic() < deadline:
        time.sleep(0.02)
    assert latest._entries[other][1] is full
