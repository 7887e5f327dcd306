"""A member cluster joined as docs/multicluster.md's "Join a member cluster" says, on both sites
(tests/tier/conftest.py): the member is a second cluster of the same kind (a second emulator, or a second real
control plane from the same kit), the manager reads it with the token of the member's `heterojob-manager`
ServiceAccount (the long-lived token Secret member.yaml asks for), under member.yaml's roles: never admin."""

from __future__ import annotations

import base64
import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from heterojob.constants import GROUP, LABEL_JOB, VERSION
from heterojob.sim import controlplane
from heterojob.sim.cluster import ipam
from heterojob.sim.cluster.harness import Emulator, apply
from heterojob.sim.cluster.kubelet import Kubelet
from heterojob.sim.cluster.nodes import node
from heterojob.sim.members import SECRETS_NAMESPACE, kubeconfig_secret, manifest, member_objects
from tests.conftest import eventually
from tests.tier.conftest import Flow, Site
from tests.tier.test_job_flows import job_spec

pytestmark = pytest.mark.tier
REGION = "cn-chengdu"  # no other flow uses it


class MemberCluster:
    """The member: its API server (of the site's kind), its admin client, its node stand-in."""

    def __init__(self, site: Site) -> None:
        workdir = Path(tempfile.mkdtemp(prefix="heterojob-tier-member-"))
        self._plane: controlplane.ControlPlane | Emulator
        if site.real:
            self._plane = controlplane.ControlPlane(controlplane.kit(), workdir).start()
        else:
            self._plane = Emulator(workdir).start()
        self.kubeconfig = self._plane.kubeconfig
        self.api = self._plane.client()
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.kubelet = Kubelet(self.api, schedule=not site.real, answer_checkpoints=True, interval=0.3).start()

    def close(self) -> None:
        self.kubelet.stop()
        self.api.close()
        self._plane.stop()


@pytest.fixture(scope="module")
def member(site: Site) -> Iterator[MemberCluster]:
    m = MemberCluster(site)
    try:
        yield m
    finally:
        m.close()


def member_kubeconfig(member: MemberCluster, timeout: float = 30) -> str:
    """The kubeconfig docs/multicluster.md builds: the member's server, the CA and token of the Secret
    `heterojob-system/heterojob-manager-token` (filled by the member's token controller)."""
    def secret() -> dict[str, str] | None:
        got = member.core.read_namespaced_secret("heterojob-manager-token", "heterojob-system")
        return got.data if got.data and got.data.get("token") else None

    data = eventually(secret, timeout=timeout, what="the member's token Secret filled")
    server = yaml.safe_load(member.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    cluster: dict[str, Any] = {"server": server}
    if data.get("ca.crt"):
        cluster["certificate-authority-data"] = data["ca.crt"]
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": REGION,
        "clusters": [{"name": REGION, "cluster": cluster}],
        "users": [{"name": "heterojob-manager", "user": {"token": base64.b64decode(data["token"]).decode()}}],
        "contexts": [{"name": REGION, "context": {"cluster": REGION, "user": "heterojob-manager"}}]})


def register(member: MemberCluster, nodes: list[dict[str, Any]]) -> None:
    existing = json.loads(member.core.list_node(_preload_content=False).data)["items"]
    for n in nodes:
        ipam.assign_node_addresses(n, existing)
        n["status"]["conditions"][0]["lastHeartbeatTime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        member.core.create_node(n)
        existing.append(n)


def test_a_job_runs_in_a_member_cluster_under_the_managers_member_roles(flow: Flow, member: MemberCluster) -> None:
    ns = flow.namespace("team")
    apply(member.api, member_objects([ns]))  # member.yaml, and its write RoleBinding in the job's namespace
    register(member, [node(f"{flow.prefix}-{REGION}-h100-{i}", REGION, "nvidia-h100") for i in range(2)])
    apply(flow.api, manifest("manager.yaml"))
    apply(flow.api, [kubeconfig_secret(REGION, member_kubeconfig(member))])
    regions = kubernetes.client.CustomObjectsApi(flow.api)
    regions.patch_cluster_custom_object(GROUP, VERSION, "regions", REGION, {
        "spec": {"cluster": {"secretRef": {"name": f"{REGION}-kubeconfig"}}}})
    try:
        flow.operator()

        def reachable() -> dict[str, Any] | None:
            got = regions.get_cluster_custom_object(GROUP, VERSION, "regions", REGION)
            return next((c for c in (got.get("status") or {}).get("conditions") or []
                         if c["type"] == "MemberReachable" and c["status"] == "True"), None)

        eventually(reachable, timeout=60, what=f"{REGION} MemberReachable")
        flow.create_job("away", job_spec(regions={"allowed": [REGION]}), ns)
        s = flow.phase("away", ns, "Running", timeout=90)
        assert s["placement"]["region"] == REGION and s["placement"]["generation"] == 1
        pods = member.core.list_namespaced_pod(ns, label_selector=f"{LABEL_JOB}=away").items
        assert len(pods) == 2 and all(p.status.phase == "Running" for p in pods)
        assert {p.spec.service_account_name for p in pods} == {"away-heterojob"}
        assert "PodsRefused" not in [e.reason for e in flow.events("away", ns)]
        flow.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "heterojobs", "away")
        eventually(lambda: not member.core.list_namespaced_pod(ns, label_selector=f"{LABEL_JOB}=away").items,
                   timeout=60, what="the member's pods gone with the job")
    finally:
        regions.patch_cluster_custom_object(GROUP, VERSION, "regions", REGION, {"spec": {"cluster": None}})
        kubernetes.client.CoreV1Api(flow.api).delete_namespaced_secret(f"{REGION}-kubeconfig", SECRETS_NAMESPACE)
