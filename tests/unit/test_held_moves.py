"""A held move is said once per verdict: its MigrationHeld Event and MoveHeld condition carry a message that
stays the same while the hold does (the cause, and when it lifts as an RFC 3339 time), so passes that find
the same hold (also after an operator restart) post nothing and write nothing; a countdown is only logged."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from heterojob.engine.execution.lifecycle import Action

from heterojob.api.common import parse_spec
from heterojob.api.job import HeteroJobSpec
from heterojob.constants import ANNOTATION_MIGRATE
from heterojob.controller.moves import Moves
from heterojob.controller.planning import Planning
from heterojob.controller.status import StatusWriter
from heterojob.state.job_status import read_status
from heterojob.engine.queue import admission as planner
from heterojob.engine.capacity.fleet import DeviceClass, Fleet
from heterojob.engine.capacity.migration import MANUAL, Hold, Rules, Symptom, judge
from heterojob.metrics import OperatorMetrics
from heterojob.state.cache import Cache
from heterojob.api.times import iso

RULES = Rules(triggers=frozenset({MANUAL}), cooldown_s=600, max_per_hour=3, budget=2)
H100 = DeviceClass("nvidia-h100", "nvidia.com/gpu", {"gpu": "h100"}, throughput=1.0)
MANUAL_MOVE = [Symptom(MANUAL, 5000.0, ("n1",), "migration requested: drain")]


def test_a_held_verdict_names_its_cause_in_words_that_do_not_count_down() -> None:
    first, later = judge(MANUAL_MOVE, RULES, 5000.0, [4800.0], 0), judge(MANUAL_MOVE, RULES, 5150.0, [4800.0], 0)
    assert first.reason != later.reason  # the countdown, for the decision log
    assert (first.hold, first.cause, first.until) == (later.hold, later.cause, later.until)
    assert first.hold == Hold.COOLDOWN and first.until == 5400.0
    assert first.cause == "manual move held: cooldown of 600s after the last move"
    cap = judge(MANUAL_MOVE, RULES, 5000.0, [1500.0, 2200.0, 3000.0, 4000.0], 0)
    assert cap.hold == Hold.HOURLY_CAP and "maxMigrationsPerHour (3)" in cap.cause
    assert cap.until == 2200.0 + 3600  # then two of the last hour's moves remain, under the cap
    assert judge(MANUAL_MOVE, RULES, 5000.0, [1500.0, 2200.0, 3000.0, 4000.0], 0).cause == \
        judge(MANUAL_MOVE, RULES, 5700.0, [1500.0, 2200.0, 3000.0, 4000.0], 0).cause
    budget = [judge(MANUAL_MOVE, RULES, 5000.0, [], n) for n in (2, 3)]
    assert budget[0].hold == Hold.BUDGET and budget[0].cause == budget[1].cause and budget[0].until is None
    advisory = judge(MANUAL_MOVE, Rules(triggers=frozenset({MANUAL}), advisory=True), 5000.0, [], 0)
    assert advisory.hold == Hold.ADVISORY and advisory.cause.startswith("advisory mode: would migrate (manual")
    assert judge(MANUAL_MOVE, RULES, 5000.0, [], 0).hold is None  # it acts


class FakeKube:
    """What `Moves` and `StatusWriter` call: status patches applied to one stored job, Events kept."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.events: list[tuple[str, str, str]] = []
        self.patches: list[dict[str, Any]] = []

    def post_event(self, job: Any, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))

    async def patch_job_status(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self.patches.append(body)
        self.job["status"] = {**self.job["status"], **body}
        return self.job

    async def annotate_job(self, namespace: str, name: str, annotations: dict[str, Any]) -> None:
        raise AssertionError("a held move's annotation stays")


def running_job(moved_at: float) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "mover", "uid": "u1", "generation": 1,
                         "annotations": {ANNOTATION_MIGRATE: "again"}},
            "spec": {"devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
                     "policy": {"cooldownSeconds": 600},
                     "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}},
            "status": {"phase": "Running", "observedGeneration": 1,
                       "placement": {"region": "cn-east", "deviceClass": "nvidia-h100", "replicas": 1,
                                     "perReplica": 8, "nodes": ["h100-1"], "generation": 2,
                                     "since": iso(moved_at + 5)},
                       "history": [{"time": iso(moved_at), "action": "migrate", "reason": "manual",
                                    "from": "cn-east/nvidia-h100 x1 (generation 1)",
                                    "to": "cn-east/nvidia-h100 x1 (generation 2)"}]}}


async def consider(d: Moves, job: dict[str, Any], spec: HeteroJobSpec, status: Any, now: float) -> None:
    """A Running job's pass as the reconcile pass runs it: its step decided (`engine.execution.running.decide`), applied."""
    step, gathered = d.decide("ns/mover", job, spec, status, Action.NONE, now)
    await d.apply(job, spec, status, step, gathered, now)


def moves(kube: FakeKube, wakes: list[float]) -> Moves:
    return Moves(planning(kube, Cache()), dict, lambda: None, lambda key, at: wakes.append(at), 5, False)


def planning(kube: FakeKube, cache: Cache, fleet: Any = lambda exclude: None, classes: Any = dict) -> Planning:
    """What admission and moves share, with the fakes these tests read (no checkpoint is asked here)."""
    return Planning(kube, StatusWriter(kube), cache, None, OperatorMetrics(),  # type: ignore[arg-type]  # the fakes above
                    fleet, planner.AdmissionSettings(), classes)


def test_a_move_held_by_cooldown_is_said_once_across_passes_and_a_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    moved_at = 1_800_000_000.0
    kube = FakeKube(running_job(moved_at))
    wakes: list[float] = []
    clock = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])  # the passes' time goes by as in the cluster

    async def passes(d: Moves, times: list[float]) -> None:
        for now in times:
            clock[0] = now
            spec = parse_spec(HeteroJobSpec, kube.job["spec"])
            await consider(d, kube.job, spec, read_status(kube.job), now)

    asyncio.run(passes(moves(kube, wakes), [moved_at + 100 + 2.5 * i for i in range(60)]))  # 2.5 min
    assert [(t, r) for t, r, _ in kube.events] == [("Normal", "MigrationHeld")], kube.events
    message = f"manual move held: cooldown of 600s after the last move until {iso(moved_at + 600)}"
    assert kube.events[0][2] == message
    assert len(kube.patches) == 1, kube.patches  # the condition written once
    held = next(c for c in kube.job["status"]["conditions"] if c["type"] == "MoveHeld")
    assert (held["status"], held["reason"], held["message"]) == ("True", "Cooldown", message)
    assert moved_at + 600 in wakes  # it looks again when the cooldown ends

    asyncio.run(passes(moves(kube, wakes), [moved_at + 300, moved_at + 301]))  # a restarted operator
    assert len(kube.events) == 1 and len(kube.patches) == 1


def test_a_move_with_no_destination_is_said_once_by_its_reason_also_after_a_restart() -> None:
    moved_at = 1_800_000_000.0
    job = running_job(moved_at - 3600)  # long out of its cooldown
    kube = FakeKube(job)

    def no_room(exclude: object) -> Fleet:
        return Fleet({}, {H100.name: H100}, used={})

    async def passes(times: list[float]) -> None:
        d = Moves(planning(kube, Cache(), no_room, lambda: {H100.name: H100}), dict, lambda: None,
                  lambda key, at: None, 5, False)
        for now in times:
            await consider(d, kube.job, parse_spec(HeteroJobSpec, kube.job["spec"]), read_status(kube.job), now)

    asyncio.run(passes([moved_at + i for i in range(5)]))
    asyncio.run(passes([moved_at + 10 + i for i in range(5)]))  # a restarted operator finds the same hold
    assert len(kube.events) == 1 and kube.events[0][1] == "MigrationHeld", kube.events
    assert kube.events[0][2].startswith("no destination: ")
    held = next(c for c in kube.job["status"]["conditions"] if c["type"] == "MoveHeld")
    assert (held["status"], held["reason"]) == ("True", "NoDestination") and held["message"] == kube.events[0][2]
    assert len(kube.patches) == 1


def test_a_hold_whose_cause_flips_with_the_fleet_is_said_again_at_most_every_few_seconds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The budget fills and frees as other jobs move, and between two such passes there is no destination:
    each pass's verdict differs, but the job's status is not rewritten on every pass (a hot loop)."""
    start = 1_800_000_000.0
    kube = FakeKube(running_job(start - 3600))
    clock = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])

    async def passes() -> None:
        cache = Cache()
        d = Moves(planning(kube, cache, lambda exclude: Fleet({}, {H100.name: H100}, used={}),
                           lambda: {H100.name: H100}), dict, lambda: None, lambda key, at: None, 1, False)
        for i in range(20):  # 10 s, a pass every half second
            clock[0] = i / 2
            monkeypatch.setattr(cache, "disrupted", lambda n=i % 2: n)  # the budget (1) full, then free
            await consider(d, kube.job, parse_spec(HeteroJobSpec, kube.job["spec"]), read_status(kube.job),
                             start + i / 2)

    asyncio.run(passes())
    assert {r for _, r, _ in kube.events} == {"MigrationHeld"}
    reasons = [next(c for c in p["conditions"] if c["type"] == "MoveHeld")["reason"] for p in kube.patches]
    assert 2 <= len(reasons) <= 3 and {"NoDestination", "DisruptionBudget"} <= set(reasons), reasons
