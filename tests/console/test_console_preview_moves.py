"""The console's "Migrate now" preview asks the planner what the operator asks for a manual move: the same
transfer rule (a move to another region needs a Region link), on the cluster's own objects."""

from __future__ import annotations

from typing import Any

import pandas as pd

from heterojob import defaults
from heterojob.kube import convert
from heterojob.sim.cluster.nodes import node

from heterojob_console.data import Cluster
from heterojob_console.preview import migration_target

JOB = {"apiVersion": "heterojob.io/v1alpha1", "kind": "HeteroJob",
       "metadata": {"namespace": "team-a", "name": "train", "uid": "u1", "creationTimestamp": "2026-11-22T00:00:00Z"},
       "spec": {"priority": "medium", "policy": {"allowCrossRegion": True},
                "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
                "template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}},
       "status": {"phase": "Running", "startTime": "2026-11-22T00:00:00Z",
                  "placement": {"region": "cn-east", "deviceClass": "nvidia-h100", "replicas": 1, "perReplica": 8,
                                "nodes": ["east-0"], "generation": 1}}}


def cluster(spare_in: list[str]) -> Cluster:
    nodes = [node("east-0", "cn-east", "nvidia-h100")] + [node(f"{r}-0", r, "nvidia-h100") for r in spare_in]
    classes = [defaults.accelerator_class(c) for c in defaults.ACCELERATOR_CLASSES]
    objects: dict[str, list[dict[str, Any]]] = {
        "Node": nodes, "Region": [defaults.region(r) for r in defaults.REGIONS], "AcceleratorClass": classes,
        "HeteroJob": [JOB], "Pod": [], "HeteroQuota": []}
    empty = pd.DataFrame()
    return Cluster(at=pd.Timestamp.now(tz="UTC").to_pydatetime(), nodes=empty, jobs=empty, regions=empty,
                   links=empty, classes={o["metadata"]["name"]: c for o in classes
                                         if (c := convert.device_class(o)) is not None}, objects=objects)


def test_the_preview_names_a_missing_link_instead_of_an_unreachable_destination() -> None:
    # Guiyang has room but no link from Shanghai (defaults: the backbone links only neighbours)
    move = migration_target(cluster(["cn-guiyang"]), "team-a", "train")
    assert move is not None and move.target is None
    assert move.plan.reason == "NoLink" and "cn-guiyang: no link from cn-east" in move.why


def test_the_preview_goes_over_a_link_and_says_what_the_transfer_costs() -> None:
    move = migration_target(cluster(["cn-guiyang", "cn-wuhu"]), "team-a", "train")
    assert move is not None and move.target is not None and move.target.startswith("cn-wuhu/nvidia-h100")
    assert "cn-wuhu" in move.why and "Gbit/s" in move.why
