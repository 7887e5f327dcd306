"""One vocabulary: each headline figure computed from the same objects on every page and by kubectl (and
PromQL for utilization) agrees. kubectl is the real v1.32 client against the API emulator."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.parse
import urllib.request
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from heterojob.constants import GROUP, VERSION
from heterojob.sim.cluster.nodes import node
from heterojob.sim.telemetry.exporters import ExporterFleet
from heterojob.sim.telemetry.prometheus import PrometheusServer
from tests.conftest import Cluster, eventually

ROOT = files("heterojob_console")
PAGES = {"overview": str(ROOT / "Home.py"), "devices": str(ROOT / "pages" / "1_Devices.py"),
         "jobs": str(ROOT / "pages" / "2_Jobs.py")}
ACCELERATORS = ("nvidia.com/gpu", "huawei.com/Ascend910")
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(os.environ.get("HETEROJOB_SKIP_E2E") == "1" or
                                                  not shutil.which("kubectl"), reason="needs kubectl, Prometheus")]


def kubectl(kubeconfig: Path, *args: str) -> dict[str, Any]:
    out = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), *args], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    return json.loads(out)


def promql(url: str, query: str) -> float:
    with urllib.request.urlopen(f"{url}/api/v1/query?query={urllib.parse.quote(query)}", timeout=10) as r:
        result = json.load(r)["data"]["result"]
    return float(result[0]["value"][1]) if result else float("nan")


def pod(name: str, node_name: str, resource: str, count: int, phase: str = "Running") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"nodeName": node_name, "containers": [{"name": "m", "image": "i", "resources": {
                "requests": {resource: str(count)}, "limits": {resource: str(count)}}}]},
            "status": {"phase": phase}}


def test_every_page_and_kubectl_agree(cluster: Cluster, emulator: Any, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [node("g0", "cn-east", "nvidia-h100"), node("g1", "cn-north", "nvidia-a100", devices=4),
             node("n0", "cn-chengdu", "ascend-910b"), node("c0", "cn-east", "cpu")]
    cluster.seed(nodes)
    for body in (pod("a", "g0", "nvidia.com/gpu", 8), pod("b", "n0", "huawei.com/Ascend910", 4),
                 pod("old", "g1", "nvidia.com/gpu", 4, phase="Succeeded"), pod("c", "c0", "cpu", 32)):
        cluster.core.create_namespaced_pod("team-a", body)  # the API server drops status on create:
        cluster.core.patch_namespaced_pod_status(body["metadata"]["name"], "team-a", {"status": body["status"]})
    template = {"template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}}
    for name, phase in (("run", "Running"), ("wait", None)):
        cluster.create_job(name, {"devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}], **template})
        if phase:
            cluster.custom.patch_namespaced_custom_object_status(GROUP, VERSION, "team-a", "heterojobs", name, {
                "status": {"phase": phase, "placement": {"region": "cn-east", "deviceClass": "nvidia-h100",
                                                         "replicas": 1, "perReplica": 8, "nodes": ["g0"]}}})
    exporters = ExporterFleet(nodes, seed=3)
    host, port = exporters.serve()
    exporters.inject("fatal-xid", "g0", 1, 79)
    prom = PrometheusServer(exporters.targets(), f"{host}:{port}", scrape_interval_s=1.0, workdir=tmp_path).start()
    try:
        monkeypatch.setenv("HETEROJOB_KUBECONFIG", str(emulator.kubeconfig))
        monkeypatch.setenv("HETEROJOB_PROMETHEUS_URL", prom.url)
        eventually(lambda: promql(prom.url, "count(DCGM_FI_DEV_GPU_UTIL) + count(npu_chip_info_utilization)") == 20,
                   timeout=30, what="every accelerator scraped")

        # what kubectl says (--raw: the emulator's discovery lists metrics.k8s.io nodes/pods, which
        # `kubectl get nodes` would pick; a real API server's core group wins)
        listed = kubectl(emulator.kubeconfig, "get", "--raw", "/api/v1/nodes")["items"]
        total = sum(int(n["status"]["allocatable"].get(r, 0)) for n in listed for r in ACCELERATORS)
        pods = [p for p in kubectl(emulator.kubeconfig, "get", "--raw", "/api/v1/pods")["items"]
                if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed")]
        held = sum(int(c["resources"].get("requests", {}).get(r, 0)) for p in pods for c in p["spec"]["containers"]
                   for r in ACCELERATORS)
        running = sum(1 for j in kubectl(emulator.kubeconfig, "get", "hj", "-A", "-o", "json")["items"]
                      if (j.get("status") or {}).get("phase") == "Running")
        assert (total, held, running) == (20, 12, 1)

        st.cache_resource.clear()  # one snapshot for the three pages, as a user moving between them gets
        seen = {}
        for page, path in PAGES.items():
            at = AppTest.from_file(path, default_timeout=30).run()
            assert not at.exception, page
            seen[page] = {m.label: m.value for m in at.metric}
        overview, devices, jobs = seen["overview"], seen["devices"], seen["jobs"]

        assert overview["Accelerators"] == devices["Accelerators"] == str(total)  # CPU cores not counted
        assert overview["Accelerators allocated"] == f"{100 * held / total:.0f}%"
        assert overview["Jobs running"] == jobs["Jobs running"] == str(running)
        assert overview["Failed"] == devices["Failed"] == "1"
        assert overview["Unknown"] == devices["Unknown"]
        assert overview["Accelerator utilization"] == devices["Accelerator utilization"]
        util = promql(prom.url, "(sum(DCGM_FI_DEV_GPU_UTIL) + sum(npu_chip_info_utilization)) / "
                                "(count(DCGM_FI_DEV_GPU_UTIL) + count(npu_chip_info_utilization))")
        assert abs(float(overview["Accelerator utilization"].rstrip("%")) - util) <= 5  # sampled at other instants
    finally:
        prom.stop()
        exporters.stop()
