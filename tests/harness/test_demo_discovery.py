"""Compute discovery in the demo's cluster (issue 33 item 10): the demo seeds the operator's namespace
(heterojob-system, where the discovery report ConfigMap and its Events live), so a node of a GPU model no class
covers, joining while the operator runs on its defaults as the demo starts it, is named within 60 s: the report
proposes a class for it and a ClassProposed Event says so."""

from __future__ import annotations

import json
from typing import Any

import pytest

from heterojob.sim.cluster.harness import Emulator, OperatorRunner
from heterojob.sim.cluster.nodes import node
from heterojob.sim.demo.fleet import OPERATOR_NAMESPACE, prepare
from tests.conftest import Cluster, eventually

pytestmark = pytest.mark.harness

B200 = {"nvidia.com/gpu.product": "NVIDIA-B200", "nvidia.com/gpu.memory": "183359",
        "nvidia.com/gpu.family": "blackwell"}


def report(cluster: Cluster) -> dict[str, Any] | None:
    try:
        cm = cluster.core.read_namespaced_config_map("heterojob-discovery", OPERATOR_NAMESPACE)
    except Exception:  # noqa: BLE001 - not written yet
        return None
    return dict(json.loads(cm.data["report.json"]))


def test_a_new_gpu_model_joining_the_demo_is_named_within_60s(cluster: Cluster, emulator: Emulator) -> None:
    prepare(cluster.api, members=())  # the one-cluster demo's seeding
    assert OPERATOR_NAMESPACE == "heterojob-system"
    with OperatorRunner(emulator.kubeconfig):  # the discovery defaults the demo's operator runs with
        eventually(lambda: report(cluster), timeout=60, what="the discovery report in the operator's namespace")
        cluster.core.create_node(node("cn-east-b200-00", "cn-east", "nvidia-h100", labels=B200,
                                      software={"driver": "570.124.06", "cuda": "12.8"}))
        events = eventually(lambda: [e for e in cluster.core.list_namespaced_event(OPERATOR_NAMESPACE).items
                                     if e.reason == "ClassProposed"], timeout=60, what="a ClassProposed Event")
        assert "nvidia-b200" in events[0].message and events[0].involved_object.name == "heterojob-discovery"
        assert [p["name"] for p in (report(cluster) or {})["proposed"]] == ["nvidia-b200"]
