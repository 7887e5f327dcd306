"""At start the operator plans nothing until its caches hold their first complete listing (kube/caches.py): a pass
that saw part of the pods' listing would place a job on devices other pods hold, or create a running job's pods
again. The listing is made long here (one pod a page, the pods that matter listed last)."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import unquote

import pytest
import urllib3

from heterojob.constants import LABEL_JOB
from heterojob.sim.cluster.harness import Emulator, OperatorRunner
from heterojob.sim.cluster.nodes import node

from tests.conftest import Cluster, eventually

pytestmark = pytest.mark.harness

FILLERS = 250  # pods listed before the ones that matter, one a page
SPEC = {"replicas": {"min": 2}, "devices": [{"deviceClass": "nvidia-h100", "perReplica": 4}],
        "template": {"spec": {"containers": [{"name": "main", "image": "train:1"}]}}}


def requests(emulator: Emulator) -> list[tuple[str, str]]:
    log = json.loads(urllib3.request("GET", f"{emulator.url}/_emulator/requests").data)
    return [(method, unquote(path)) for method, path, _, _ in log]


def fill(cluster: Cluster, namespace: str) -> None:
    """FILLERS pods in `namespace` (listed before team-a's and zz-*'s: a list goes in key order)."""
    body = {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: cluster.core.create_namespaced_pod(
            namespace, {**body, "metadata": {"name": f"filler-{i:03d}"}}, _preload_content=False).release_conn(),
            range(FILLERS)))


def pod_writes(emulator: Emulator) -> dict[tuple[str, str], int]:
    rows = json.loads(urllib3.request("GET", f"{emulator.url}/_emulator/writes").data)
    out: dict[tuple[str, str], int] = {}
    for row in rows:
        if row["resource"] == "pods":
            out[(row["method"], row["subresource"] or "")] = out.get((row["method"], row["subresource"] or ""), 0) \
                + row["count"]
    return out


def job_pod_lists(emulator: Emulator) -> int:
    return sum(1 for m, p in requests(emulator) if m == "GET" and f"labelSelector={LABEL_JOB}=train" in p)


def listed_pages(emulator: Emulator) -> int:
    return sum(1 for m, p in requests(emulator) if m == "GET" and p.startswith("/api/v1/pods?") and "watch" not in p)


def test_no_job_lands_on_devices_a_pod_listed_late_holds(emulator: Emulator, cluster: Cluster) -> None:
    cluster.seed([node("h100-0", "cn-east", "nvidia-h100", devices=8)], namespaces=("team-a", "aa-fill", "zz-other"))
    fill(cluster, "aa-fill")
    cluster.core.create_namespaced_pod("zz-other", {  # another workload holds every GPU of the one node
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "inference"},
        "spec": {"nodeName": "h100-0", "containers": [{"name": "c", "image": "serve:1", "resources": {
            "limits": {"nvidia.com/gpu": "8"}}}]}})
    cluster.create_job("train", SPEC)
    with OperatorRunner(emulator.kubeconfig, cache_page_size=1):
        eventually(lambda: (cluster.job("train").get("status") or {}).get("phase"), timeout=60,
                   what="the job's first verdict")
        time.sleep(1.0)
        assert cluster.pods("train") == []
        assert (cluster.job("train").get("status") or {}).get("phase") == "Pending"
        assert listed_pages(emulator) >= FILLERS  # the listing was long: the verdict came after it


def test_a_restart_during_a_long_pod_listing_creates_no_pod_again(emulator: Emulator, cluster: Cluster) -> None:
    """A running job's first pass after a restart finds its pods in the cache: nothing written, and no cause to
    list them afresh (a pass that saw them missing would, before recreating them)."""
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100", devices=8) for i in range(2)],
                 namespaces=("team-a", "aa-fill"))
    with OperatorRunner(emulator.kubeconfig):
        cluster.create_job("train", SPEC)
        eventually(lambda: len(cluster.pods("train")) == 2, timeout=30, what="the job's 2 pods")
        for p in cluster.pods("train"):
            cluster.set_pod_phase(p.metadata.name, "Running")
        eventually(lambda: (cluster.job("train").get("status") or {}).get("phase") == "Running", timeout=30,
                   what="Running")
    before = {p.metadata.name: p.metadata.uid for p in cluster.pods("train")}
    fill(cluster, "aa-fill")
    status: dict[str, Any] = cluster.job("train")["status"]
    written = pod_writes(emulator)
    asked = job_pod_lists(emulator)
    with OperatorRunner(emulator.kubeconfig, cache_page_size=1):
        eventually(lambda: listed_pages(emulator) > FILLERS, timeout=60, what="the pods listed")
        time.sleep(2.0)  # every job's first pass, on what the caches hold
        assert pod_writes(emulator) == written  # no pod created, deleted or annotated again
        # its first pass read the pods from the cache and found them all: it had no cause to list them afresh
        assert job_pod_lists(emulator) == asked
        assert {p.metadata.name: p.metadata.uid for p in cluster.pods("train")} == before
        after = cluster.job("train")["status"]
        assert (after["phase"], after.get("placement")) == (status["phase"], status.get("placement"))


def test_the_collector_runs_less_often_while_the_operator_runs_and_as_before_after(emulator: Emulator,
                                                                                     cluster: Cluster) -> None:
    """Once the controller runs, the youngest generation is collected every YOUNG_GC net allocations, not 700 (a
    tenth of the operator's CPU in an admission burst went to collections); the thresholds come back at cleanup."""
    import gc

    from heterojob.handlers import YOUNG_GC

    cluster.seed([node("h100-0", "cn-east", "nvidia-h100", devices=8)], namespaces=("team-a",))
    before = gc.get_threshold()
    assert before[0] < YOUNG_GC
    with OperatorRunner(emulator.kubeconfig):
        eventually(lambda: gc.get_threshold()[0] == YOUNG_GC, timeout=30, what="the controller started")
        assert gc.get_threshold()[1:] == before[1:]
    assert gc.get_threshold() == before
