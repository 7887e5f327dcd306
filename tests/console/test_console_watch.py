"""What the console reads at national scale: every kind in pages (`limit`/`continue`), then only what changes
(`watch.Watched`, list-then-watch caches shared by every session): a change shows in the next snapshot without
listing again, an unchanged cluster is not rebuilt, and pods are kept as per-node summaries."""

from __future__ import annotations

import time

import pytest

from heterojob.sim.cluster.nodes import node
from heterojob_console import data, watch
from tests.conftest import Cluster


def gpu_pod(name: str, node_name: str, gpus: int) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"nodeName": node_name, "containers": [{"name": "m", "image": "i", "resources": {
                "limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def test_a_paged_read_gets_every_node_and_pod(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data, "PAGE", 2)  # 5 nodes, 3 pods: three and two pages
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(5)])
    for i in range(3):
        cluster.core.create_namespaced_pod("team-a", gpu_pod(f"p{i}", f"h100-{i}", 2))
    read = data.read_cluster(cluster.api)
    assert sorted(read.nodes["node"]) == [f"h100-{i}" for i in range(5)]
    assert read.nodes.set_index("node")["held"].to_dict() == {"h100-0": 2, "h100-1": 2, "h100-2": 2, "h100-3": 0,
                                                             "h100-4": 0}


def test_the_watched_snapshot_follows_a_change_without_listing_again(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch, "PAGE", 1)  # every kind listed one object a page
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("h100-b", "cn-east", "nvidia-h100")])
    cluster.core.create_namespaced_pod("team-a", gpu_pod("first", "h100-b", 8))
    watched = watch.Watched(cluster.api)
    try:
        first = watched.read()
        assert first.nodes.set_index("node")["held"].to_dict() == {"h100-a": 0, "h100-b": 8}
        again = watched.read()
        assert again.nodes is first.nodes and again.at >= first.at  # nothing changed: the same tables, read now
        cluster.core.create_namespaced_pod("team-a", gpu_pod("train-0", "h100-a", 4))
        deadline = time.monotonic() + 20
        now = watched.read()
        while now.nodes.set_index("node").at["h100-a", "held"] != 4 and time.monotonic() < deadline:
            time.sleep(0.1)
            now = watched.read()
        assert now.nodes.set_index("node")["held"].to_dict() == {"h100-a": 4, "h100-b": 8}
        assert now.pods_by_node["h100-a"] == [{"pod": "team-a/train-0", "job": "", "held": "4"}]
        assert [i.lists for i in watched.informers.values()] == [1] * len(watched.informers)  # watched, not relisted
    finally:
        watched.close()
