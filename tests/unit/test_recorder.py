"""kube/recorder.py: Events are written in the background one at a time, in order, behind the decisions' own
calls; a repeat bumps the Event before it, even one still waiting to be written; the queue is bounded."""

from __future__ import annotations

import asyncio
from typing import Any

from heterojob.kube import recorder
from heterojob.kube.recorder import EventRecorder


class _Api:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.in_flight = 0
        self.most = 0

    async def send(self, route: str, body: Any = None, **where: str) -> Any:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        self.calls.append((route, body))
        return body


def _job(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team", "uid": f"u-{name}"}}


def test_a_burst_of_events_is_written_one_at_a_time_in_order_and_repeats_bump_the_first() -> None:
    api = _Api()
    events = EventRecorder(api.send)

    async def run() -> None:
        for i in range(20):
            events.post(_job(f"j{i}"), ("heterojob.io/v1alpha1", "HeteroJob"), "Normal", "Admitted", "placed", "now")
        for _ in range(3):  # posted before the first of them is written
            events.post(_job("j0"), ("heterojob.io/v1alpha1", "HeteroJob"), "Normal", "Running", "running", "now")
        await events.flush()

    asyncio.run(run())
    assert api.most == 1  # never more than one Event in flight (the decisions' calls go first)
    creates = [b["involvedObject"]["name"] for r, b in api.calls if r == "create_namespaced_event"]
    assert creates == [f"j{i}" for i in range(20)] + ["j0"]
    assert [b["count"] for r, b in api.calls if r == "patch_namespaced_event"] == [2, 3]


def test_events_the_api_server_does_not_keep_up_with_are_dropped_not_queued_without_bound(monkeypatch: Any) -> None:
    monkeypatch.setattr(recorder, "QUEUED", 5)
    api = _Api()
    events = EventRecorder(api.send)

    async def run() -> None:
        for i in range(12):
            events.post(_job(f"j{i}"), ("v1", "Pod"), "Warning", "Refused", "no", "now")
        await asyncio.sleep(0.3)

    asyncio.run(run())
    assert events.dropped >= 12 - 5 - 1 and len(api.calls) == 12 - events.dropped
