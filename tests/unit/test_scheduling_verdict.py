"""The scheduler's verdict on a job (issue 33 item 8d) is written and said once: a second pass that finds the
same verdict writes nothing and posts nothing, also for a message longer than a condition keeps."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from heterojob.controller.pods import Pods
from heterojob.controller.status import StatusWriter
from heterojob.state.job_status import read_status
from heterojob.engine.execution.lifecycle import SchedulingVerdict
from heterojob.state.cache import Cache


class FakeKube:
    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.writes: list[dict[str, Any]] = []
        self.events: list[tuple[str, str, str]] = []

    async def patch_job_status(self, namespace: str, name: str, status: Mapping[str, Any],
                               resource_version: str | None = None) -> dict[str, Any]:
        self.writes.append(dict(status))
        self.job["status"] = {**self.job["status"], **{k: v for k, v in status.items() if v is not None}}
        return self.job

    def post_event(self, job: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))


def test_the_same_verdict_is_written_and_posted_once_however_long_its_words() -> None:
    job: dict[str, Any] = {"metadata": {"namespace": "team-a", "name": "big", "uid": "u1", "generation": 1},
                           "status": {"phase": "Admitted", "reason": "Placed", "message": "placed",
                                      "observedGeneration": 1}}
    kube = FakeKube(job)
    pods = Pods(kube, StatusWriter(kube), Cache(), lambda: None, lambda _: None, lambda: None)  # type: ignore[arg-type]
    words = "0/5000 nodes are available: " + ", ".join(f"{i} node(s) had untolerated taint {{t{i}: x}}"
                                                        for i in range(80))
    verdict = SchedulingVerdict("False", "Unschedulable", f"the scheduler cannot place the job's pods: {words}")

    async def passes() -> list[bool]:
        return [await pods.scheduling(job, read_status(job), verdict) for _ in range(3)]

    assert asyncio.run(passes()) == [True, False, False]
    assert len(kube.writes) == 1 and [e[:2] for e in kube.events] == [("Warning", "Unschedulable")]
    cond = next(c for c in job["status"]["conditions"] if c["type"] == "PodsScheduled")
    assert cond["status"] == "False" and job["status"]["reason"] == "Unschedulable"
    bound = SchedulingVerdict("True", "Scheduled", "every pod of the gang is bound to its node")
    assert asyncio.run(pods.scheduling(job, read_status(job), bound)) is True
    assert next(c for c in job["status"]["conditions"] if c["type"] == "PodsScheduled")["status"] == "True"
    assert len(kube.events) == 1  # a True is no Warning
