"""What the multi-cluster harness tests share (test_multicluster.py, test_multicluster_moves.py, and the e2e
telemetry test): three member emulators joined to the manager as docs/multicluster.md's "Join a member cluster" says,
and the few helpers every such test uses. The `members` fixture itself is in tests/harness/conftest.py."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kubernetes
import yaml

from heterojob.constants import GROUP, LABEL_JOB, VERSION
from heterojob.kube.members import MembersConfig
from heterojob.sim.cluster.harness import Emulator, apply
from heterojob.sim.cluster.nodes import node
from tests.conftest import Cluster

ROOT = Path(__file__).resolve().parents[2]
MEMBERS = ("m-east", "m-west", "m-north")
FAST = MembersConfig(poll_seconds=0.5, loss_timeout_s=4.0, request_timeout_s=1.0, secret_refresh_s=2.0,
                     contact_write_s=5.0)


class Member:
    """One member cluster, emptied: its client and what its pods look like."""

    def __init__(self, emulator: Emulator) -> None:
        emulator.reset()
        self.emulator = emulator
        self.api = emulator.client()
        self.core = kubernetes.client.CoreV1Api(self.api)

    def pods(self, job: str, live: bool = True) -> list[Any]:
        items = self.core.list_namespaced_pod("team-a", label_selector=f"{LABEL_JOB}={job}").items
        return sorted((p for p in items if not (live and p.metadata.deletion_timestamp)), key=lambda p: p.metadata.name)


def region(name: str, secret: str | None, key: str = "kubeconfig",
           links: Mapping[str, tuple[float, float]] | None = None) -> dict[str, Any]:
    """A Region (named by its member's kubeconfig Secret when `secret` is given), with `links`: the other
    region -> (bandwidth Gbit/s, latency ms)."""
    spec: dict[str, Any] = {"location": {"city": name, "latitude": 30.0, "longitude": 120.0}}
    if secret is not None:
        spec["cluster"] = {"secretRef": {"name": secret, "key": key}}
    if links:
        spec["links"] = [{"region": r, "bandwidthGbps": g, "latencyMs": ms} for r, (g, ms) in links.items()]
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Region", "metadata": {"name": name}, "spec": spec}


def secret(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "heterojob-members"},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def manifest(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((ROOT / "manifests" / "multicluster" / name).read_text()) if d]


def join(cluster: Cluster, members: dict[str, Emulator], regions: tuple[str, ...] = MEMBERS,
         links: Mapping[str, Mapping[str, tuple[float, float]]] | None = None) -> dict[str, Member]:
    """docs/multicluster.md's "Join a member cluster": the manager's and each member's manifests; each member has two
    8-GPU nodes; in the manager, a Secret with the member's kubeconfig and a Region naming it (with the
    links `links` declares on it)."""
    cluster.seed([])
    apply(cluster.api, manifest("manager.yaml"))
    out = {}
    for name in regions:
        member = out[name] = Member(members[name])
        apply(member.api, [*manifest("member.yaml"), *(node(f"{name}-h100-{i}", name, "nvidia-h100") for i in range(2))])
        apply(cluster.api, [secret(f"{name}-kubeconfig", {"kubeconfig": members[name].kubeconfig.read_text()}),
                            region(name, f"{name}-kubeconfig", links=(links or {}).get(name))])
    return out


def spec(preferred: list[str], allowed: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"priority": "high", "replicas": {"min": 2}, "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
            "regions": {"preferred": preferred, "allowed": allowed or list(MEMBERS)},
            "checkpoint": {"timeoutSeconds": 30, "storage": "s3://ckpt"}, "policy": {"allowCrossRegion": True},
            "template": {"spec": {"containers": [{"name": "main", "image": "train:cuda12"}]}}, **extra}


def status(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.job(name).get("status") or {}


def condition(cluster: Cluster, name: str) -> dict[str, Any]:
    obj = cluster.custom.get_cluster_custom_object(GROUP, VERSION, "regions", name)
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "MemberReachable"), {})
