"""Turns (issue 34): a running job preempted `QueueSettings.max_turns` times is displaced again only by a higher
priority, never by its level; the count lives in status.scheduling.preemptions (written when the job is
preempted, read back into `engine.queue.Facts.turns`), so it survives the job's runs and operator restarts."""

from __future__ import annotations

from typing import Any

import pytest

from heterojob.api.times import iso, timestamp
from heterojob.controller.status import StatusPatch
from heterojob.engine.basics import queueing
from heterojob.engine.queue import admission, completion, policy
from heterojob.engine.capacity.fleet import Allocation, DeviceClass, Fleet, Node
from heterojob.engine.placing.placement import Alternative, Request
from heterojob.state.job_status import read_status
from heterojob.state.knowledge import facts_of
from heterojob.engine.queue.facts import Facts
from heterojob.engine.disruption.holders import Holder

H = 3600.0
T0 = timestamp("2026-01-01T00:00:00Z") or 0.0


def test_a_job_out_of_turns_keeps_the_first_level_of_its_priority() -> None:
    settings = queueing.QueueSettings()  # max_turns 2
    long_run = 50 * H  # 50 device-hours: the last level
    assert queueing.running_rank(0, long_run, settings, turns=1) == queueing.effective_priority(0, 2, settings)
    assert queueing.running_rank(0, long_run, settings, turns=2) == queueing.effective_priority(0, 0, settings)
    # a higher priority still ranks above it
    assert queueing.running_rank(0, long_run, settings, turns=9) < queueing.effective_priority(1, 2, settings)
    unbounded = queueing.QueueSettings(max_turns=None)
    assert queueing.running_rank(0, long_run, unbounded, turns=99) == queueing.effective_priority(0, 2, unbounded)
    with pytest.raises(ValueError, match="max_turns"):
        queueing.QueueSettings(max_turns=-1)


def plan(turns: int, priority: int = 0) -> admission.QueuePlan:
    """A new job (level 0) and one node held by a job 100 h in (the last level), preempted `turns` times."""
    nodes = {"n1": Node("n1", {"topology.kubernetes.io/region": "r"}, {"gpu": 1})}
    fleet = Fleet(nodes, {"g": DeviceClass("g", "gpu")}, used={("n1", "gpu"): 1})
    now = 100 * H
    holder = Holder("ns/long", 0, 0.0, Allocation("gpu", {"n1": 1}, "ns", "g", "r"))
    new = Request("ns/new", [Alternative("g", 1)], 1, priority=priority, created=now)
    facts = {"ns/long": Facts(service=queueing.Service(0.0, 0.0), rel={"g": 1.0}, turns=turns),
             "ns/new": Facts(service=queueing.Service(0.0, now), rel={"g": 1.0})}
    known = policy.Knowledge(facts, completion.Residual([1 * H] * 25 + [1000 * H] * 5))
    return admission.plan_with_policy([new], [holder], fleet, now, known, queueing.QueueSettings(),
                                      admission.AdmissionSettings())[0]


def test_a_new_job_displaces_a_long_one_by_level_only_while_it_has_turns_left() -> None:
    assert plan(turns=1)["ns/new"].outcome == admission.Outcome.PREEMPTING
    assert [d.job for d in plan(turns=1)["ns/new"].disruptions] == ["ns/long"]
    assert plan(turns=2)["ns/new"].outcome == admission.Outcome.NO_ROOM  # out of turns: it runs on
    # priority is not a turn: a higher priority job still preempts it
    assert plan(turns=2, priority=1)["ns/new"].outcome == admission.Outcome.PREEMPTING


def job(status: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "j", "namespace": "ns", "creationTimestamp": iso(T0 - 600)},
            "spec": {"devices": [{"deviceClass": "fast", "perReplica": 8}],
                     "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}},
            "status": status}


def test_a_preemption_is_counted_in_status_and_read_back_as_a_turn() -> None:
    placement = {"region": "r", "deviceClass": "fast", "replicas": 1, "perReplica": 8, "nodes": ["n0"],
                 "generation": 1, "since": iso(T0)}
    first = StatusPatch(read_status(job({"phase": "Checkpointing", "placement": placement}))).preempt("for x")
    s = first.body(1)["scheduling"]
    assert s["preemptions"] == 1 and s["waitingSince"]
    again = StatusPatch(read_status(job({"phase": "Checkpointing", "placement": placement, "scheduling": s})))
    s2 = again.preempt("for y").body(1)["scheduling"]
    assert s2["preemptions"] == 2
    status = read_status(job({"scheduling": s2}))
    assert facts_of(status.scheduling, ["fast"], {"fast": 1.0}, T0).turns == 2
    # untrusted: a count that does not read is dropped (no turns), never a crash
    bad = read_status(job({"scheduling": {"preemptions": "many"}}))
    assert facts_of(bad.scheduling, ["fast"], {"fast": 1.0}, T0).turns == 0
