"""An existing cluster for the benchmarks (`bench/scale.py --kubeconfig`, `bench/admission.py --kubeconfig`): made
ready for them, the operator's credentials there, and what its kube-apiserver can tell about the operator's calls.

- `prepare`: the CRDs (waited for until Established) and the default classes and regions, each where missing.
- `operator_credentials`: a kubeconfig with a token (TokenRequest) of the operator's own ServiceAccount,
  `heterojob-system/heterojob-operator`, when the install made it and bound it to the shipped ClusterRole; else
  the admin's kubeconfig, and a sentence saying why.
- `WriteCounter`: a real kube-apiserver counts requests by verb and resource (`apiserver_request_total`) but not by
  client. API Priority and Fairness counts them by FlowSchema, and a FlowSchema can match one ServiceAccount and one
  verb on one resource: one FlowSchema per write the operator's ClusterRole allows (at the priority level its
  requests get anyway, `workload-low`, before the built-in `service-accounts` schema), plus one for any other write
  of that account, and `apiserver_flowcontrol_dispatched_requests_total{flow_schema=...}` counts exactly that
  account's writes, by verb and resource. An admin's requests are exempt from APF and cannot be counted so.
- `apiserver_cpu_seconds`: kube-apiserver's own `process_cpu_seconds_total`.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import kubernetes
import yaml

SYSTEM_NS, ACCOUNT = "heterojob-system", "heterojob-operator"
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
COUNTER_LABEL = "heterojob.io/bench-write-counter"
PRIORITY_LEVEL = "workload-low"  # where a ServiceAccount's requests go by default (FlowSchema service-accounts)
PRECEDENCE, PRECEDENCE_OTHER = 1000, 1001  # before service-accounts (9000); every built-in below 1000 names others


def prepare(api: kubernetes.client.ApiClient, timeout_s: float = 60.0) -> dict[str, Any]:
    """The CRDs and the default classes and regions, each only where missing (`kubectl apply -f crds/` and
    `manifests/defaults` leave the same); what was there says {"crds": "present"|"installed", ...}."""
    from heterojob import defaults as embedded
    from heterojob.api import crds
    from heterojob.sim.cluster.harness import apply

    ext = kubernetes.client.ApiextensionsV1Api(api)
    present = {c.metadata.name for c in ext.list_custom_resource_definition().items}
    wanted = [crds.crd(r) for r in crds.RESOURCES]
    missing = [c for c in wanted if c["metadata"]["name"] not in present]
    apply(api, missing)
    deadline = time.monotonic() + timeout_s
    for crd in missing:
        while not any(c.type == "Established" and c.status == "True" for c in
                      ext.read_custom_resource_definition(crd["metadata"]["name"]).status.conditions or []):
            if time.monotonic() > deadline:
                raise RuntimeError(f"CRD {crd['metadata']['name']} not Established within {timeout_s:g} s")
            time.sleep(0.2)
    apply(api, embedded.all_objects())  # kept as they are where they exist
    return {"crds": "installed" if missing else "present"}


def operator_credentials(api: kubernetes.client.ApiClient, admin_kubeconfig: Path, out: Path,
                         hours: int = 6) -> tuple[Path, str | None]:
    """(kubeconfig, None) with a token of the operator's ServiceAccount when the install made it and a
    ClusterRoleBinding grants it ClusterRole heterojob-operator; else (admin_kubeconfig, why not)."""
    core, rbac = kubernetes.client.CoreV1Api(api), kubernetes.client.RbacAuthorizationV1Api(api)
    try:
        core.read_namespaced_service_account(ACCOUNT, SYSTEM_NS)
    except kubernetes.client.ApiException as exc:
        if exc.status != 404:
            raise
        return admin_kubeconfig, (f"no ServiceAccount {SYSTEM_NS}/{ACCOUNT}: the operator ran as the admin "
                                  "(README 'Install on a cluster' makes it: kubectl apply -k manifests/overlays/plain)")
    bound = any(b.role_ref.name == ACCOUNT and b.role_ref.kind == "ClusterRole" and any(
        s.kind == "ServiceAccount" and s.name == ACCOUNT and s.namespace == SYSTEM_NS for s in b.subjects or [])
        for b in rbac.list_cluster_role_binding().items)
    if not bound:
        return admin_kubeconfig, (f"no ClusterRoleBinding of ClusterRole {ACCOUNT} to {SYSTEM_NS}/{ACCOUNT}: the "
                                  "operator ran as the admin")
    token = core.create_namespaced_service_account_token(
        ACCOUNT, SYSTEM_NS, {"spec": {"expirationSeconds": hours * 3600}}).status.token
    config = yaml.safe_load(admin_kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    out.write_text(yaml.safe_dump(config))
    out.chmod(0o600)
    return out, None


def metrics_text(api: kubernetes.client.ApiClient) -> str:
    """kube-apiserver's /metrics (the caller's credentials must allow `get` on that path: an admin's do)."""
    request = api.param_serialize(method="GET", resource_path="/metrics", auth_settings=["BearerToken"])
    answer = api.call_api(*request, _request_timeout=60)
    if answer.status != 200:
        raise RuntimeError(f"kube-apiserver /metrics answered {answer.status}")
    return str(answer.read().decode())


def apiserver_cpu_seconds(api: kubernetes.client.ApiClient) -> float | None:
    match = re.search(r"^process_cpu_seconds_total (\S+)$", metrics_text(api), re.M)
    return float(match.group(1)) if match else None


class WriteCounter:
    """The operator's ServiceAccount's writes, by verb and resource, counted by kube-apiserver's APF (module doc).
    `install` makes the FlowSchemas (labelled COUNTER_LABEL; those of an earlier run are replaced), `counts` reads
    {"PATCH heterojob.io/heterojobs/status": n, ...} (only what was counted), `remove` deletes them."""

    def __init__(self, api: kubernetes.client.ApiClient, prefix: str = "heterojob-bench-") -> None:
        self.api, self.prefix = api, prefix
        self.flow = kubernetes.client.FlowcontrolApiserverV1Api(api)
        self.names: dict[str, str] = {}  # FlowSchema name -> "VERB group/resource"

    def install(self) -> WriteCounter:
        self.remove()
        rules: list[tuple[str, str, str]] = []
        role = kubernetes.client.RbacAuthorizationV1Api(self.api).read_cluster_role(ACCOUNT)
        for rule in role.rules or []:
            for verb in rule.verbs or []:
                if verb not in WRITE_VERBS:
                    continue
                for group in rule.api_groups or []:
                    for resource in rule.resources or []:
                        if (verb, group, resource) not in rules:
                            rules.append((verb, group, resource))
        for verb, group, resource in rules:
            what = f"{verb.upper()} {group + '/' if group else ''}{resource}"
            self._schema(f"{self.prefix}{verb}-{group or 'core'}-{resource}".replace("/", "-").replace(".", "-"),
                         what, PRECEDENCE, [verb], [group], [resource])
        self._schema(f"{self.prefix}other-writes", "other writes", PRECEDENCE_OTHER, list(WRITE_VERBS), ["*"], ["*"])
        return self

    def _schema(self, name: str, what: str, precedence: int, verbs: list[str], groups: list[str],
                resources: list[str]) -> None:
        body = {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
                "metadata": {"name": name[:253], "labels": {COUNTER_LABEL: "true"}},
                "spec": {"priorityLevelConfiguration": {"name": PRIORITY_LEVEL}, "matchingPrecedence": precedence,
                         "distinguisherMethod": {"type": "ByUser"},
                         "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {
                             "name": ACCOUNT, "namespace": SYSTEM_NS}}],
                             "resourceRules": [{"verbs": verbs, "apiGroups": groups, "resources": resources,
                                                "clusterScope": True, "namespaces": ["*"]}]}]}}
        self.flow.create_flow_schema(body)
        self.names[name[:253]] = what

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for line in metrics_text(self.api).splitlines():
            if not line.startswith("apiserver_flowcontrol_dispatched_requests_total{"):
                continue
            labels, _, value = line.rpartition(" ")
            schema = re.search(r'flow_schema="([^"]*)"', labels)
            if schema and schema.group(1) in self.names:
                what = self.names[schema.group(1)]
                out[what] = out.get(what, 0) + int(float(value))
        return out

    def remove(self) -> None:
        self.flow.delete_collection_flow_schema(label_selector=COUNTER_LABEL)
