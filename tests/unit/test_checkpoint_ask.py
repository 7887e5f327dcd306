"""Asking for a checkpoint (`controller.checkpoints.Checkpoints.ask`, step 1 of the protocol) writes the job's
status onto the body the asking pass holds, with its resourceVersion as a precondition, and reads nothing first
(client-go's optimistic concurrency). Only a 409 Conflict (someone wrote since) reads the job again: the ask is
decided again on that body, so a request is neither lost nor written over one that came meanwhile."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any

from heterojob.api.common import parse_spec
from heterojob.api.job import HeteroJobSpec
from heterojob.controller.checkpoints import ASK_ATTEMPTS, Checkpoints
from heterojob.controller.known import merged
from heterojob.controller.moves import Moves
from heterojob.controller.planning import Planning
from heterojob.controller.status import StatusWriter
from heterojob.engine.queue import admission as planner
from heterojob.engine.capacity.fleet import Node
from heterojob.engine.execution.lifecycle import Action
from heterojob.engine.basics.phases import Then
from heterojob.kube.api import Conflict
from heterojob.metrics import OperatorMetrics
from heterojob.state.cache import Cache
from heterojob.state.job_status import read_status

KEY = "ns/train"
REGION = {"topology.kubernetes.io/region": "east"}


class FakeKube:
    """One stored job behind what a `Kube` answers: status merge patches with kube-apiserver's precondition
    (a resourceVersion that is not the stored one: 409), every call counted."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.gets = 0
        self.patches: list[tuple[dict[str, Any], str | None]] = []  # (status, resourceVersion precondition)
        self.events: list[str] = []
        self.before_patch: list[dict[str, Any]] = []  # status another writer writes before each of ours lands

    async def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.gets += 1
        return copy.deepcopy(self.job)

    def write(self, status: Mapping[str, Any]) -> None:
        """A write of someone else's (a user, another controller): a new resourceVersion."""
        self.job["status"] = merged(self.job.get("status") or {}, status)
        meta = self.job["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)

    async def patch_job_status(self, namespace: str, name: str, status: Mapping[str, Any],
                               resource_version: str | None = None) -> dict[str, Any] | None:
        if self.before_patch:
            self.write(self.before_patch.pop(0))
        self.patches.append((dict(status), resource_version))
        if resource_version is not None and resource_version != self.job["metadata"]["resourceVersion"]:
            raise Conflict(f"{namespace}/{name} changed since resourceVersion {resource_version}")
        self.write(status)
        return copy.deepcopy(self.job)

    def post_event(self, job: Any, type_: str, reason: str, message: str) -> None:
        self.events.append(reason)


def running_job() -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "train", "uid": "u1", "generation": 1, "resourceVersion": "7"},
            "spec": {"devices": [{"deviceClass": "h100", "perReplica": 8}], "replicas": {"min": 2},
                     "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}},
            "status": {"phase": "Running", "observedGeneration": 1,
                       "placement": {"region": "east", "deviceClass": "h100", "replicas": 2, "perReplica": 8,
                                     "nodes": ["n1", "n2"], "generation": 1, "since": "2026-01-01T00:00:00Z"}}}


def checkpoints(kube: FakeKube, cache: Cache, pokes: list[str]) -> Checkpoints:
    return Checkpoints(kube, StatusWriter(kube), cache, None, pokes.append, lambda: None)  # type: ignore[arg-type]  # the fake above; no pods are released here


def test_an_urgent_move_writes_its_status_onto_the_passs_body_without_reading_the_job_first() -> None:
    """A node of the job goes NotReady: the pass's urgent move (`Moves.apply`) records its checkpoint in one
    status write, preconditioned on the version the pass read, and no GET of the job."""
    kube = FakeKube(running_job())
    cache, pokes = Cache(), []
    nodes = {"n1": Node("n1", REGION, {"nvidia.com/gpu": 8}, ready=False, reason="NodeStatusUnknown"),
             "n2": Node("n2", REGION, {"nvidia.com/gpu": 8})}
    planning = Planning(kube, StatusWriter(kube), cache, checkpoints(kube, cache, pokes),  # type: ignore[arg-type]  # the fake
                        OperatorMetrics(), lambda exclude: None, planner.AdmissionSettings(), dict)  # type: ignore[arg-type, return-value]  # an urgent move plans nothing
    moves = Moves(planning, lambda: nodes, lambda: None, lambda key, at: None, 5, False)
    job = copy.deepcopy(kube.job)
    spec, status = parse_spec(HeteroJobSpec, job["spec"]), read_status(job)

    async def one_pass() -> None:
        step, gathered = moves.decide(KEY, job, spec, status, Action.NONE, 1_800_000_000.0)
        await moves.apply(job, spec, status, step, gathered, 1_800_000_000.0)

    asyncio.run(one_pass())
    assert kube.gets == 0
    assert len(kube.patches) == 1 and kube.patches[0][1] == "7"
    now = read_status(kube.job)
    pending = now.checkpoint.pending if now.checkpoint else None
    assert now.phase is not None and now.phase.value == "Checkpointing" and pending is not None
    assert pending.then == Then.MIGRATE and pending.deadline == pending.requested_at  # urgent: waits for none
    assert now.migration is not None and now.migration.involuntary and now.migration.exclude == ["n1"]
    assert kube.events == [] and pokes == [KEY]  # no rank is asked: the move's Migrating Event tells it


def test_a_conflict_reads_the_job_again_and_the_request_is_written_onto_the_new_version() -> None:
    kube = FakeKube(running_job())
    kube.before_patch = [{"conditions": [{"type": "Telemetry", "status": "True", "reason": "Read",
                                          "message": "x", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]
    cache, pokes = Cache(), []
    asked = asyncio.run(checkpoints(kube, cache, pokes).ask(
        KEY, then=Then.MIGRATE, by=None, reason="nodeNotReady: n1", exclude=("n1",), urgent=True,
        job=copy.deepcopy(kube.job)))
    assert asked and kube.gets == 1
    assert [rv for _, rv in kube.patches] == ["7", "8"]  # refused on the old version, written on the one read
    now = read_status(kube.job)
    assert now.checkpoint is not None and now.checkpoint.pending is not None
    assert now.checkpoint.pending.reason == "nodeNotReady: n1" and pokes == [KEY]
    assert [c.type for c in now.conditions if c.type == "Telemetry"] == ["Telemetry"]  # the other write kept


def test_a_checkpoint_asked_meanwhile_is_seen_on_the_fresh_read_and_not_written_over() -> None:
    """The first one asked goes on: a preemption asked between the pass's read and its write is not replaced."""
    kube = FakeKube(running_job())
    kube.before_patch = [{"phase": "Checkpointing", "checkpoint": {"pending": {
        "id": "g1-1", "reason": "preempted by ns/vip", "requestedAt": "2026-01-01T00:00:00Z",
        "deadline": "2026-01-01T00:02:00Z", "then": "preempt", "by": "ns/vip"}}}]
    cache, pokes = Cache(), []
    asked = asyncio.run(checkpoints(kube, cache, pokes).ask(KEY, then=Then.RESIZE, by=None, reason="grow",
                                                            replicas=3, job=copy.deepcopy(kube.job)))
    assert not asked and kube.gets == 1 and len(kube.patches) == 1  # the refused write only
    pending = read_status(kube.job).checkpoint.pending  # type: ignore[union-attr]  # written above
    assert pending is not None and pending.by == "ns/vip" and pokes == []


def test_conflicts_every_time_ask_nothing_and_the_jobs_pass_looks_again() -> None:
    kube = FakeKube(running_job())
    kube.before_patch = [{"message": f"someone else {i}"} for i in range(ASK_ATTEMPTS)]
    pokes: list[str] = []
    asked = asyncio.run(checkpoints(kube, Cache(), pokes).ask(KEY, then=Then.MIGRATE, by=None, reason="r",
                                                              urgent=True, job=copy.deepcopy(kube.job)))
    assert not asked and kube.gets == ASK_ATTEMPTS - 1 and len(kube.patches) == ASK_ATTEMPTS
    assert read_status(kube.job).checkpoint is None and pokes == [KEY]  # its pass decides again on what is there


def test_a_job_asked_from_another_pass_is_written_onto_the_newest_body_known() -> None:
    """A victim asked by its preemptor's pass (no body in hand): the body the operator's watch brought."""
    kube = FakeKube(running_job())
    writer = StatusWriter(kube)  # type: ignore[arg-type]  # the fake above
    from heterojob.controller.known import Known

    writer.known = Known()
    writer.known.event(KEY, copy.deepcopy(kube.job))
    pokes: list[str] = []
    c = Checkpoints(kube, writer, Cache(), None, pokes.append, lambda: None)  # type: ignore[arg-type]  # the fake
    assert asyncio.run(c.ask(KEY, then=Then.PREEMPT, by="ns/vip", reason="preempted"))
    assert kube.gets == 0 and [rv for _, rv in kube.patches] == ["7"]
