"""The console across member clusters (docs/multicluster.md), with Streamlit's AppTest: nodes and pods read
from each member with the kubeconfig its Region's Secret holds, jobs from the manager; a member that does
not answer shows as unreachable and the rest of the page renders; the kubeconfig never shows.

The manager is the session's emulator; the members are API emulator processes of their own, joined the
way README's "Join a member cluster" does (heterojob.sim.members.join, also the demo's wiring)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from importlib.resources import files
from typing import Any

import kubernetes
import pytest
import yaml
from streamlit.testing.v1 import AppTest

from heterojob.constants import GROUP, LABEL_GENERATION, LABEL_JOB, VERSION
from heterojob.sim.cluster.apiserver import kubeconfig
from heterojob.sim.cluster.harness import Emulator, apply
from heterojob.sim.cluster.nodes import node
from heterojob.sim.members import join, kubeconfig_secret
from tests.conftest import Cluster

HOME = str(files("heterojob_console") / "Home.py")
JOBS = str(files("heterojob_console") / "pages" / "2_Jobs.py")
SECRET_TOKEN = "s3cr3t-t0ken-never-shown"


@pytest.fixture(scope="module")
def member() -> Iterator[Emulator]:
    with Emulator() as emu:
        yield emu


def run_in_member(member: Emulator, job: str, node_name: str) -> None:
    """The pod the manager would have created in the member for `job`, running on `node_name`."""
    core = kubernetes.client.CoreV1Api(member.client())
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{job}-g1-0", "namespace": "team-a",
                         "labels": {LABEL_JOB: job, LABEL_GENERATION: "1"}},
            "spec": {"nodeName": node_name, "containers": [{"name": "main", "image": "train",
                                                            "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    core.create_namespaced_pod("team-a", body)
    core.patch_namespaced_pod_status(body["metadata"]["name"], "team-a", {"status": {"phase": "Running"}})


def test_overview_and_jobs_show_each_members_nodes_and_pods_and_an_unreachable_member(
        cluster: Cluster, emulator: Any, member: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    member.reset()
    cluster.seed([node("cn-east-h100-0", "cn-east", "nvidia-h100")], namespaces=("team-a",))
    join(cluster.api, member.client(), "cn-zhongwei", member.kubeconfig.read_text(), namespaces=("team-a",),
         nodes=[node(f"cn-zhongwei-h100-{i}", "cn-zhongwei", "nvidia-h100") for i in range(2)])
    # a second member whose API server does not answer, its kubeconfig holding a token that must never show
    away = yaml.safe_dump({**kubeconfig("http://127.0.0.1:9"),
                           "users": [{"name": "heterojob-emulator", "user": {"token": SECRET_TOKEN}}]})
    apply(cluster.api, [kubeconfig_secret("cn-guiyang", away)])
    cluster.custom.patch_cluster_custom_object(GROUP, VERSION, "regions", "cn-guiyang", {
        "spec": {"cluster": {"secretRef": {"name": "cn-guiyang-kubeconfig"}}}})
    # a job placed in the member (as the operator records it), its pod there
    cluster.create_job("far", {"devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
                               "template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}})
    cluster.custom.patch_namespaced_custom_object_status(GROUP, VERSION, "team-a", "heterojobs", "far", {"status": {
        "phase": "Running", "placement": {"region": "cn-zhongwei", "cluster": "cn-zhongwei", "generation": 1,
                                          "deviceClass": "nvidia-h100", "replicas": 1, "perReplica": 8,
                                          "nodes": ["cn-zhongwei-h100-1"]}}})
    run_in_member(member, "far", "cn-zhongwei-h100-1")
    monkeypatch.setenv("HETEROJOB_KUBECONFIG", str(emulator.kubeconfig))
    monkeypatch.delenv("HETEROJOB_PROMETHEUS_URL", raising=False)

    started = time.monotonic()
    at = AppTest.from_file(HOME, default_timeout=60).run()
    assert not at.exception
    assert time.monotonic() - started < 30  # the member that does not answer costs a timeout, not the page
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Accelerators"] == "24"  # 8 in the manager + 16 read from the member
    assert metrics["Accelerators allocated"] == "33%"  # the member's pod holds 8 of them
    assert metrics["Nodes ready"] == "3/3" and metrics["Jobs running"] == "1"
    members = next(d.value for d in at.dataframe if "reachable" in d.value.columns).set_index("member")
    assert members.loc["cn-zhongwei", "reachable"] and members.loc["cn-zhongwei", "nodes"] == 2
    assert not members.loc["cn-guiyang", "reachable"]
    assert "did not answer" in members.loc["cn-guiyang", "message"]
    assert any("cn-guiyang is unreachable" in w.value for w in at.warning)
    shown = " ".join(str(e.value) for e in [*at.dataframe, *at.warning, *at.caption, *at.markdown])
    assert SECRET_TOKEN not in shown and "127.0.0.1:9" not in shown

    at = AppTest.from_file(JOBS, default_timeout=60)
    at.session_state["selected-job"] = "team-a/far"  # what clicking its row does
    at.run()
    assert not at.exception
    table = at.dataframe[0].value
    assert list(table["member"]) == ["cn-zhongwei"]
    pods = next(d.value for d in at.dataframe if "pod" in d.value.columns and "node" in d.value.columns)
    assert pods.to_dict("records") == [{"pod": "far-g1-0", "member": "cn-zhongwei", "node": "cn-zhongwei-h100-1",
                                        "phase": "Running", "generation": "1"}]
    assert SECRET_TOKEN not in " ".join(str(d.value) for d in at.dataframe)
