"""The console's snapshot of the cluster (`Cluster`): the plain tables the pages show and the views the planner
preview and the telemetry reader are given. Built by `data.build` (from a one-shot read, `data.read_cluster`, or
from the shared watch, `watch.Watched`); read by every page, `preview` and `devices`. It imports neither of them,
so the pipeline has no import circle: data -> preview -> snapshot, devices -> snapshot.

Figures worth computing once per snapshot rather than once per page view (the planner's job cache, the fleet's
views) are kept on it (`memo`): a snapshot never changes once built, and every session shares it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import pandas as pd

from heterojob.engine.capacity.fleet import DeviceClass, Node

from heterojob_console.members import COLUMNS as MEMBER_COLUMNS

T = TypeVar("T")
DONE = ("Succeeded", "Failed")
NODE_COLUMNS = ["node", "region", "class", "kind", "resource", "capacity", "declared", "held", "ready", "schedulable",
                "reason", "software", "network", "member", "unreachable"]
JOB_COLUMNS = ["namespace", "name", "priority", "phase", "class", "region", "member", "replicas", "devices",
               "utilization", "generation", "migrations", "queue", "migrate_requested", "message", "created"]
POD_COLUMNS = ["namespace", "pod", "job", "member", "node", "phase", "generation"]  # heterojob's pods, any phase


class SnapshotFigures:
    """Figures derived from one snapshot, computed once whoever asks first (other sessions wait for it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, Any] = {}

    def get(self, key: str, make: Callable[[], T]) -> T:
        with self._lock:
            if key not in self._values:
                self._values[key] = make()
            return self._values[key]  # type: ignore[no-any-return]  # what `make` returned for this key


@dataclass
class Cluster:
    """The cluster at `at`: plain tables for the pages, the objects and views for the planner preview."""

    at: datetime
    nodes: pd.DataFrame  # one row per node (NODE_COLUMNS)
    jobs: pd.DataFrame  # one row per HeteroJob (JOB_COLUMNS)
    regions: pd.DataFrame  # region, city, name, latitude, longitude
    links: pd.DataFrame  # a, b, bandwidth_gbps, latency_ms (each link once)
    classes: dict[str, DeviceClass] = field(default_factory=dict)
    # kind -> raw objects (HeteroJob, HeteroQuota, AcceleratorClass, Region; Node and Pod only in hand-built ones:
    # a built one keeps nodes as `views` and pods as per-node summaries)
    objects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    pods_by_node: dict[str, list[dict[str, str]]] = field(default_factory=dict)  # node -> [{pod, job, held}]
    members: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=MEMBER_COLUMNS))
    pods: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=POD_COLUMNS))  # heterojob's pods
    # per-node summaries built with the tables (None in a hand-built snapshot: derived from `objects` then)
    views: Mapping[str, Node] | None = None  # node -> the operator's view of it (convert.node_view)
    foreign: Mapping[tuple[str, str], int] | None = None  # (node, resource) -> held by pods heterojob does not manage
    memo: SnapshotFigures = field(default_factory=SnapshotFigures, repr=False, compare=False)

    @property
    def job_objects(self) -> list[dict[str, Any]]:
        return self.objects.get("HeteroJob", [])

    def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        index = self.memo.get("job-index", lambda: {(o["metadata"]["namespace"], o["metadata"]["name"]): o
                                                    for o in self.job_objects})
        return index.get((namespace, name))

    @property
    def namespaces(self) -> list[str]:
        return self.memo.get("namespaces", lambda: sorted({o["metadata"]["namespace"] for o in self.job_objects
                                                           + self.objects.get("HeteroQuota", [])}))


def utilization(status: Mapping[str, Any]) -> float | None:
    """A job's status.utilization.average while it holds devices (a placement, not finished), else None (shown
    as none, never 0): the operator clears the figure when the placement ends (controller/status.py), so
    kubectl's Util column and the console agree, for objects a previous operator version left stale as well."""
    placement, figures = status.get("placement"), status.get("utilization")
    if not placement or status.get("phase") in DONE or not isinstance(figures, Mapping):
        return None
    average = figures.get("average")
    return float(average) if isinstance(average, (int, float)) and not isinstance(average, bool) else None
