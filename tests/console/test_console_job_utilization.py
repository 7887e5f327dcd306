"""The Jobs page's utilization is the job's status.utilization.average only while it holds devices: what kubectl's
Util column shows once the operator has cleared a figure whose placement ended (controller/status.py), also for
an object an earlier operator left stale."""

from __future__ import annotations

from typing import Any

import pytest

from heterojob_console.data import utilization

PLACED = {"region": "cn-east", "deviceClass": "nvidia-h100", "replicas": 1, "perReplica": 8, "nodes": ["g0"]}


@pytest.mark.parametrize(("status", "shown"), [
    ({"phase": "Running", "placement": PLACED, "utilization": {"average": 91.5}}, 91.5),
    ({"phase": "Running", "placement": PLACED, "utilization": {"average": 0}}, 0.0),  # measured idle: 0
    ({"phase": "Running", "placement": PLACED}, None),  # not measured yet
    ({"phase": "Pending", "utilization": {"average": 91.5}}, None),  # no placement: no devices
    ({"phase": "Migrating", "placement": None, "utilization": {"average": 91.5}}, None),
    ({"phase": "Succeeded", "placement": PLACED, "utilization": {"average": 91.5}}, None),
    ({"phase": "Running", "placement": PLACED, "utilization": {"average": "junk"}}, None),  # untrusted status
    ({"phase": "Running", "placement": PLACED, "utilization": "junk"}, None),
])
def test_a_job_shows_utilization_only_while_it_holds_devices(status: dict[str, Any], shown: float | None) -> None:
    assert utilization(status) == shown
