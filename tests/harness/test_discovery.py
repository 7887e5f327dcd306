"""Compute discovery and per-node software checks, on the harness (real operator, API emulator over HTTP).

Simulated nodes publish the labels GPU Feature Discovery (NVIDIA/k8s-device-plugin internal/lm/nvml.go) and
Node Feature Discovery (static RDMA rules) publish; see tests/unit/test_discovery.py for the label sources.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from heterojob.constants import GROUP, VERSION
from heterojob.controller.discovery import DiscoveryConfig
from heterojob.sim.cluster.harness import Emulator, OperatorRunner
from heterojob.sim.cluster.nodes import node
from tests.conftest import Cluster, eventually

pytestmark = pytest.mark.harness

RESYNC = 3.0
B200 = {"nvidia.com/gpu.product": "NVIDIA-B200", "nvidia.com/gpu.memory": "183359", "nvidia.com/gpu.family": "blackwell"}


def run(emulator: Emulator, **discovery: Any) -> OperatorRunner:
    return OperatorRunner(emulator.kubeconfig, resync_seconds=RESYNC,
                          discovery=DiscoveryConfig(namespace="team-a", **discovery))


def report(cluster: Cluster) -> dict[str, Any] | None:
    try:
        cm = cluster.core.read_namespaced_config_map("heterojob-discovery", "team-a")
    except Exception:  # noqa: BLE001 - not written yet
        return None
    return {"json": json.loads(cm.data["report.json"]), "yaml": cm.data["proposed.yaml"]}


def acc(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.custom.get_cluster_custom_object(GROUP, VERSION, "acceleratorclasses", name)


def job_spec(device_class: str, replicas: int, requires: dict[str, Any] | None = None) -> dict[str, Any]:
    alt: dict[str, Any] = {"deviceClass": device_class, "perReplica": 8}
    if requires:
        alt["requires"] = requires
    return {"replicas": {"min": replicas}, "devices": [alt],
            "template": {"spec": {"containers": [{"name": "main", "image": "ghcr.io/example/train:cuda12"}]}}}


@pytest.fixture
def seeded(cluster: Cluster) -> Iterator[Cluster]:
    # a class mid-upgrade: h100-new runs CUDA 12.4 (stack 0), h100-old CUDA 12.2 (stack 3: driver 535)
    cluster.seed([node("h100-new", "cn-east", "nvidia-h100"), node("h100-old", "cn-east", "nvidia-h100", stack=3)])
    yield cluster


def test_a_new_gpu_model_is_proposed_within_one_resync_and_classes_show_their_software_range(
        seeded: Cluster, emulator: Emulator) -> None:
    cluster = seeded
    with run(emulator):
        h100 = eventually(lambda: (s := acc(cluster, "nvidia-h100").get("status")) and s.get("software") and s,
                          what="nvidia-h100 status.software")
        assert (h100["nodes"], h100["devices"]) == (2, 16)
        assert h100["software"]["cuda"] == {"oldest": "12.2", "newest": "12.4", "nodes": 2}
        assert h100["software"]["driver"] == {"oldest": "535.183.06", "newest": "550.54.15", "nodes": 2}
        first = eventually(lambda: report(cluster), what="the discovery report")
        assert first["json"]["proposed"] == []

        # a rack of a new model arrives: no class covers it
        cluster.core.create_node(node("b200-a", "cn-east", "nvidia-h100", labels=B200,
                                      software={"driver": "570.124.06", "cuda": "12.8"}))
        found = eventually(lambda: (r := report(cluster)) and r["json"]["proposed"] and r, timeout=RESYNC + 2,
                           what="a proposal within one resync")
        [proposal] = found["json"]["proposed"]
        assert proposal["name"] == "nvidia-b200" and proposal["nodes"] == 1 and proposal["devices"] == 8
        assert proposal["software"]["cuda"]["newest"] == "12.8"
        assert "nodeSelector:\n    nvidia.com/gpu.product: NVIDIA-B200" in found["yaml"]
        events = eventually(lambda: [e for e in cluster.core.list_namespaced_event("team-a").items
                                     if e.reason == "ClassProposed"], what="the ClassProposed Event")
        assert events[0].involved_object.kind == "ConfigMap" and "proposed nvidia-b200" in events[0].message
        # proposing is not creating: the admin did not enable it
        with pytest.raises(Exception, match="Not Found|404"):
            acc(cluster, "nvidia-b200")


def test_with_the_flag_the_proposed_class_is_created_and_takes_jobs(seeded: Cluster, emulator: Emulator) -> None:
    cluster = seeded
    cluster.core.create_node(node("b200-a", "cn-east", "nvidia-h100", labels=B200,
                                  software={"driver": "570.124.06", "cuda": "12.8"}))
    with run(emulator, create_classes=True):
        created = eventually(lambda: _try(lambda: acc(cluster, "nvidia-b200")), timeout=RESYNC + 2,
                             what="the created class")
        assert created["spec"]["resourceName"] == "nvidia.com/gpu"
        assert created["metadata"]["annotations"]["heterojob.io/proposed-by"] == "heterojob discovery"
        cluster.create_job("on-b200", job_spec("nvidia-b200", 1, {"cuda": ">=12.8"}))
        (pod,) = eventually(lambda: cluster.pods("on-b200"), what="a pod on the new model")
        assert pod.metadata.annotations["heterojob.io/node"] == "b200-a"
        eventually(lambda: (r := report(cluster)) and r["json"]["proposed"] == [] and "nvidia-b200" in r["json"]["classes"],
                   what="the report no longer proposing a class that exists")


def test_a_cuda_12_4_job_avoids_the_12_2_node_says_so_and_an_in_place_upgrade_lets_it_in(
        seeded: Cluster, emulator: Emulator) -> None:
    cluster = seeded
    with run(emulator):
        cluster.create_job("one", job_spec("nvidia-h100", 1, {"cuda": ">=12.4"}))
        (pod,) = eventually(lambda: cluster.pods("one"), what="the 1-replica job's pod")
        assert pod.metadata.annotations["heterojob.io/node"] == "h100-new"

        cluster.create_job("two", job_spec("nvidia-h100", 2, {"cuda": ">=12.4"}))
        status = eventually(lambda: (s := cluster.job("two").get("status")) and s.get("message") and s,
                            what="the Pending message")
        assert status["phase"] == "Pending"
        assert "1 node(s) fail the software check: cuda 12.2 does not satisfy >=12.4" in status["message"], \
            status["message"]
        assert not cluster.pods("two")
        cluster.delete_job("one")  # frees h100-new; h100-old still fails the check
        eventually(lambda: not cluster.pods("one"), what="the first job gone")
        status = eventually(lambda: "room for 1 of 2" in ((s := cluster.job("two").get("status") or {})
                                                          .get("message") or "") and s, what="the new message")
        assert "1 node(s) fail the software check" in status["message"]
        assert not cluster.pods("two")

        # the driver on h100-old is upgraded in place (GFD rewrites its labels): no operator restart
        upgraded = node("h100-old", "cn-east", "nvidia-h100", software={"driver": "560.35.03", "cuda": "12.6"})
        cluster.core.patch_node("h100-old", {"metadata": {"labels": upgraded["metadata"]["labels"]}})
        pods = eventually(lambda: (p := cluster.pods("two")) and len(p) == 2 and p, what="admission after the upgrade")
        assert sorted(p.metadata.annotations["heterojob.io/node"] for p in pods) == ["h100-new", "h100-old"]
        eventually(lambda: (acc(cluster, "nvidia-h100").get("status") or {}).get("software", {}).get("cuda")
                   == {"oldest": "12.4", "newest": "12.6", "nodes": 2}, what="the class's observed range updated")


def _try(fn: Any) -> Any:
    try:
        return fn()
    except Exception:  # noqa: BLE001 - a read that fails is "not yet" to the caller's poll
        return None
