"""Events are aggregated like client-go's recorder does (issue 18, rule 8): a repeat bumps count."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from heterojob.kube.api import Kube
from tests.conftest import Cluster, eventually


@pytest.mark.harness
def test_the_same_event_twice_is_one_event_with_count_two(cluster: Cluster) -> None:
    cluster.seed([])
    job: dict[str, Any] = {"metadata": {"name": "train", "namespace": "team-a", "uid": "u-1"}}
    kube = Kube(cluster.api)

    async def post(times: int, message: str) -> None:
        for _ in range(times):
            kube.post_event(job, "Normal", "MigrationHeld", message)
            await asyncio.sleep(0.3)  # posted in the background
        await kube.events.flush()

    asyncio.run(post(2, "cooldown: 400s left"))
    events = eventually(lambda: cluster.events("train"), what="the event")
    assert len(events) == 1 and events[0].count == 2
    asyncio.run(post(1, "another reason"))
    assert sorted(e.count for e in eventually(lambda: len(cluster.events("train")) == 2 and cluster.events("train"),
                                              what="a second event")) == [1, 2]
