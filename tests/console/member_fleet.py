"""The member-cluster fleet the console's member tests share (AppTest and Chromium alike): the manager (the
session's emulator) with one node in cn-east, member cluster cn-zhongwei (an API emulator of its own, joined
as docs/multicluster.md's "Join a member cluster" does, through heterojob.sim.members.join, the demo's wiring) with its
nodes and the pod of job team-a/far, and member cn-guiyang whose API server does not answer (nothing listens
at 127.0.0.1:9) and whose kubeconfig holds a token that must never show."""

from __future__ import annotations

from typing import Any

import kubernetes
import yaml

from heterojob.constants import GROUP, LABEL_GENERATION, LABEL_JOB, VERSION
from heterojob.sim.cluster.apiserver import kubeconfig
from heterojob.sim.cluster.harness import Emulator, apply
from heterojob.sim.cluster.nodes import node
from heterojob.sim.members import join, kubeconfig_secret
from tests.conftest import Cluster

SECRET_TOKEN = "s3cr3t-t0ken-never-shown"
AWAY = "127.0.0.1:9"  # the unreachable member's server: it must not show either (it is in the kubeconfig)
JOB_SPEC = {"devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
            "template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}}


def run_in_member(member: Emulator, job: str, node_name: str, namespace: str = "team-a") -> None:
    """The pod the manager would have created in the member for `job`, running on `node_name`."""
    core = kubernetes.client.CoreV1Api(member.client())
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{job}-g1-0", "namespace": namespace,
                         "labels": {LABEL_JOB: job, LABEL_GENERATION: "1"}},
            "spec": {"nodeName": node_name, "containers": [{"name": "main", "image": "train",
                                                            "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    core.create_namespaced_pod(namespace, body)
    core.patch_namespaced_pod_status(body["metadata"]["name"], namespace, {"status": {"phase": "Running"}})


def join_member(cluster: Cluster, member: Emulator, region: str, nodes: int,
                prometheus_url: str | None = None) -> list[dict[str, Any]]:
    """`member` serves `region` with `nodes` 8-GPU H100 nodes named <region>-h100-<i>."""
    objs = [node(f"{region}-h100-{i}", region, "nvidia-h100") for i in range(nodes)]
    join(cluster.api, member.client(), region, member.kubeconfig.read_text(), namespaces=("team-a",), nodes=objs,
         prometheus_url=prometheus_url)
    return objs


def join_unreachable(cluster: Cluster, region: str = "cn-guiyang") -> None:
    """Region `region` names a member cluster whose API server does not answer."""
    away = yaml.safe_dump({**kubeconfig(f"http://{AWAY}"),
                           "users": [{"name": "heterojob-emulator", "user": {"token": SECRET_TOKEN}}]})
    apply(cluster.api, [kubeconfig_secret(region, away)])
    cluster.custom.patch_cluster_custom_object(GROUP, VERSION, "regions", region, {
        "spec": {"cluster": {"secretRef": {"name": f"{region}-kubeconfig"}}}})


def place(cluster: Cluster, job: str, region: str, node_name: str, phase: str = "Running",
          cluster_name: str | None = None) -> None:
    """`job` created and placed as the operator records it (status.placement.cluster: its member)."""
    cluster.create_job(job, JOB_SPEC)
    cluster.custom.patch_namespaced_custom_object_status(GROUP, VERSION, "team-a", "heterojobs", job, {"status": {
        "phase": phase, "placement": {"region": region, "cluster": cluster_name, "generation": 1,
                                      "deviceClass": "nvidia-h100", "replicas": 1, "perReplica": 8,
                                      "nodes": [node_name]}}})


def member_fleet(cluster: Cluster, member: Emulator, member_nodes: int = 2) -> str:
    """The fleet of the module docstring; returns the member node job `far`'s pod runs on (the last)."""
    member.reset()
    cluster.seed([node("cn-east-h100-0", "cn-east", "nvidia-h100")], namespaces=("team-a",))
    join_member(cluster, member, "cn-zhongwei", member_nodes)
    join_unreachable(cluster)
    where = f"cn-zhongwei-h100-{member_nodes - 1}"
    place(cluster, "far", "cn-zhongwei", where, cluster_name="cn-zhongwei")
    run_in_member(member, "far", where)
    return where
