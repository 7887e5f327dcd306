"""status.utilization measures the devices of the job's current placement: a job that holds none (its placement
ended, replaced by another generation, finished, or never placed) shows none, absent rather than its last figure
(kubectl's Util column, the console's Jobs page and the low-utilization policy read it)."""

from __future__ import annotations

from typing import Any

import pytest

from heterojob.api.job import HeteroJobSpec, Phase
from heterojob.controller.status import StatusPatch
from heterojob.state.job_status import read_status

SPEC = HeteroJobSpec.model_validate({"devices": [{"deviceClass": "fast", "perReplica": 8}],
                                     "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}})
FIGURES = {"average": 93.0, "perReplica": [93.0, 93.0], "stragglers": [], "time": "2026-11-21T10:00:00Z"}


def placed(generation: int = 1) -> dict[str, Any]:
    return {"region": "r", "deviceClass": "fast", "replicas": 2, "perReplica": 8, "nodes": ["n0", "n1"],
            "generation": generation, "since": "2026-11-21T09:00:00Z"}


def status_of(**fields: Any) -> Any:
    return read_status({"metadata": {"name": "j", "namespace": "ns"}, "spec": SPEC.model_dump(by_alias=True),
                        "status": {"utilization": FIGURES, **fields}})


@pytest.mark.parametrize(("phase", "fields"), [
    (Phase.PENDING, {"placement": None}),  # restarted: its pods are gone
    (Phase.MIGRATING, {"placement": None, "migration": {"trigger": "overheat"}}),  # the old gang is deleted
    (Phase.PREEMPTED, {"placement": None}),
])
def test_a_job_whose_placement_ends_has_no_utilization(phase: Phase, fields: dict[str, Any]) -> None:
    body = StatusPatch(status_of(phase="Running", placement=placed())).phase(phase, "x", "y").set(**fields).body(1)
    assert "utilization" in body and body["utilization"] is None  # a merge patch's null removes it


def test_a_new_gang_starts_without_the_last_ones_figures() -> None:
    body = StatusPatch(status_of(phase="Running", placement=placed(1))).set(placement=placed(2)).body(1)
    assert body["utilization"] is None


def test_a_finished_job_holds_no_devices() -> None:
    body = StatusPatch(status_of(phase="Running", placement=placed())).phase(Phase.SUCCEEDED, "Done", "ok").body(1)
    assert body["utilization"] is None


def test_a_waiting_job_left_with_stale_figures_is_cleaned_by_its_next_write() -> None:
    """An object an earlier operator version left Pending with its last run's figures."""
    body = StatusPatch(status_of(phase="Pending")).set(message="waiting for 16 fast devices").body(1)
    assert body["utilization"] is None


def test_a_running_job_keeps_its_figures() -> None:
    assert "utilization" not in StatusPatch(status_of(phase="Running", placement=placed())).set(message="x").body(1)
    # and a job without figures gets no null written
    fresh = read_status({"metadata": {"name": "j", "namespace": "ns"}, "status": {"phase": "Pending"}})
    assert "utilization" not in StatusPatch(fresh).set(placement=None).body(1)
