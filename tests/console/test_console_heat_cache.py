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


def test_a_heat_map_is_drawn_once_per_data_version(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from heterojob.telemetry.sources import DEFAULT
    from heterojob_console import devices as dev

    nodes = pd.DataFrame({"node": ["n1", "n2"], "region": ["cn-east", "cn-west"], "class": ["nvidia-h100"] * 2})
    times = pd.date_range("2026-01-01T10:00Z", periods=3, freq="60s")
    series = pd.DataFrame([[10.0, 20.0, 30.0], [50.0, 60.0, 70.0]], index=["n1", "n2"], columns=times)
    series.insert(0, "node", ["n1", "n2"])
    cluster, found = SimpleNamespace(nodes=nodes), [("http://p", (DEFAULT,))]
    grouped: list[int] = []
    real = dev.heat
    monkeypatch.setattr(dev, "heat", lambda *a, **k: grouped.append(1) or real(*a, **k))
    rows, drawing = ui.heat_drawing(cluster, found, {"http://p": series}, "region/class", None, 60)  # type: ignore[arg-type]
    assert list(rows.index) == ["cn-east · nvidia-h100", "cn-west · nvidia-h100"] and "heat-map" in drawing
    again = ui.heat_drawing(cluster, found, {"http://p": series}, "region/class", None, 60)  # type: ignore[arg-type]
    assert again[1] is drawing and len(grouped) == 1  # another visit, same data: nothing grouped or drawn again
    newer = series.copy()  # the next read (a new object, as `Latest` replaces its answer)
    newer.iloc[0, 1:] = 90.0
    rows, _ = ui.heat_drawing(cluster, found, {"http://p": newer}, "region/class", None, 60)  # type: ignore[arg-type]
    assert len(grouped) == 2 and rows.iloc[0].tolist() == [90.0] * 3
