"""The liveness verdict of a replica under Lease election (operator/heterojob/elected.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from heterojob.elected import KOPF_READY_WITHIN_S, ReplicaHealth
from heterojob.kube.leader import LeaseConfig


def elector(last_contact: float, leader: bool = False) -> SimpleNamespace:
    return SimpleNamespace(config=LeaseConfig(namespace="ns", duration_s=15), last_contact=last_contact,
                           is_leader=leader)


def test_a_standby_that_reaches_the_api_is_healthy_and_one_that_does_not_is_not() -> None:
    assert ReplicaHealth(elector(100.0)).problem(now=120.0) is None  # type: ignore[arg-type]
    stale = ReplicaHealth(elector(100.0))  # type: ignore[arg-type]
    assert "no answer from the API server" in (stale.problem(now=146.0) or "")


def test_a_leader_whose_operator_stopped_or_never_got_ready_is_not_live() -> None:
    async def run() -> None:
        health = ReplicaHealth(elector(150.0, leader=True))  # type: ignore[arg-type]
        health.started_leading = 100.0
        assert health.problem(now=100.0 + KOPF_READY_WITHIN_S - 1) is None
        assert "not ready" in (health.problem(now=100.0 + KOPF_READY_WITHIN_S + 1) or "")
        health.kopf_ready.set()
        assert health.problem(now=100.0 + KOPF_READY_WITHIN_S + 1) is None
        health.kopf_task = asyncio.get_running_loop().create_task(asyncio.sleep(0))
        await health.kopf_task
        assert health.problem(now=110.0) == "the operator has stopped"

    asyncio.run(run())
