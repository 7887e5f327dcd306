"""Join emulated member clusters to a manager the way docs/multicluster.md's "Join a member cluster" does it by hand.

On the member: `manifests/multicluster/member.yaml` (the manager's ServiceAccount, its read and write roles)
with one write RoleBinding per job namespace (the manifest binds team-a; each further namespace gets the
same binding, as its comment asks), and the member's nodes. On the manager: `manifests/multicluster/
manager.yaml`, a Secret in `heterojob-members` holding the member's kubeconfig, and the Region's
`spec.cluster.secretRef` (with the Prometheus that watches the member as its `prometheusURL`).

The demo's member kubeconfig is the emulator's own (the admin's token and the server URL, the shape
docs/multicluster.md builds from the ServiceAccount's token); the RBAC objects are created all the same, so
`kubectl get clusterrole,rolebinding -A` on a member shows what a real member holds. The flow tier
(tests/tier/test_member_flows.py) joins with the token of member.yaml's Secret instead, under its roles, on the
emulator (its token controller fills the Secret) and on a real control plane.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import kubernetes
import yaml

from heterojob.constants import GROUP, VERSION
from heterojob.sim.cluster.harness import apply

MANIFESTS = Path(__file__).resolve().parents[3] / "manifests" / "multicluster"
SECRETS_NAMESPACE = "heterojob-members"  # where the operator (and the console) may read member kubeconfigs


def manifest(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]


def member_objects(namespaces: Iterable[str]) -> list[dict[str, Any]]:
    """member.yaml, with its team-a Namespace and write RoleBinding repeated for every job namespace."""
    docs = manifest("member.yaml")
    binding = next(d for d in docs if d["kind"] == "RoleBinding")
    out = list(docs)
    for ns in namespaces:
        if ns == binding["metadata"]["namespace"]:
            continue
        extra = copy.deepcopy(binding)
        extra["metadata"]["namespace"] = ns
        out += [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, extra]
    return out


def kubeconfig_secret(region: str, kubeconfig: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": f"{region}-kubeconfig", "namespace": SECRETS_NAMESPACE},
            "data": {"kubeconfig": base64.b64encode(kubeconfig.encode()).decode()}}


def join(manager: kubernetes.client.ApiClient, member: kubernetes.client.ApiClient, region: str, kubeconfig: str,
         *, nodes: Iterable[Mapping[str, Any]], namespaces: Iterable[str], prometheus_url: str | None = None,
         loss_timeout_s: int | None = None) -> None:
    """Make `member` serve `region`: its side (RBAC, namespaces, nodes), then the manager's (manager.yaml,
    the kubeconfig Secret, the Region). The Region must exist (the demo seeds the default eleven)."""
    apply(member, [*member_objects(namespaces), *nodes])
    apply(manager, manifest("manager.yaml"))
    apply(manager, [kubeconfig_secret(region, kubeconfig)])
    cluster: dict[str, Any] = {"secretRef": {"name": f"{region}-kubeconfig"}}
    if loss_timeout_s is not None:
        cluster["lossTimeoutSeconds"] = loss_timeout_s
    spec: dict[str, Any] = {"cluster": cluster}
    if prometheus_url:
        spec["prometheusURL"] = prometheus_url
    kubernetes.client.CustomObjectsApi(manager).patch_cluster_custom_object(GROUP, VERSION, "regions", region,
                                                                            {"spec": spec})
