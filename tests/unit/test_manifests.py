"""The deployment manifests: every file loads, built-in kinds validate offline against the Kubernetes
schemas, our objects against our CRD schemas, each kustomize overlay renders, and the RBAC grants
exactly the verbs the code uses (derived from the code, not listed by hand)."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S_VERSION = "1.31"
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "AcceleratorClass",
                  "Region", "ClusterKopfPeering"}
OURS = {"heterojob.io", "kopf.dev"}
FOREIGN_CRDS = {"monitoring.coreos.com"}  # ServiceMonitor, PrometheusRule: checked for shape below


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


# --- a faithful-enough kustomize: resources (files or bases), namespace, labels -----------------------

def render(directory: Path) -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    out: list[dict[str, Any]] = []
    for entry in kustomization.get("resources", []):
        target = (directory / entry).resolve()
        assert target.is_relative_to(ROOT), f"{directory}: {entry} leaves the repository"
        if target.is_dir():
            assert (target / "kustomization.yaml").exists(), f"{entry}: a directory resource needs a kustomization"
            out += render(target)
        else:
            assert target.is_relative_to(directory.resolve()), \
                f"{directory}: {entry} is a file outside the kustomization root (kustomize refuses it)"
            out += docs(target)
    namespace = kustomization.get("namespace")
    for obj in out:
        if namespace and obj["kind"] not in CLUSTER_SCOPED:
            obj["metadata"]["namespace"] = namespace
        for subject in obj.get("subjects") or []:
            if namespace and subject.get("kind") == "ServiceAccount":
                subject["namespace"] = namespace
        for group in kustomization.get("labels") or []:
            obj["metadata"].setdefault("labels", {}).update(group.get("pairs") or {})
    return out


OVERLAYS = sorted(p for p in (ROOT / "manifests" / "overlays").iterdir() if p.is_dir())


def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for path in sorted((ROOT / "crds").glob("*.heterojob.io.yaml")):
        for crd in docs(path):
            if crd["kind"] != "CustomResourceDefinition":
                continue
            version = crd["spec"]["versions"][0]
            out[(f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])] = \
                version["schema"]["openAPIV3Schema"]
    return out


def all_manifest_files() -> Iterator[Path]:
    for path in sorted((ROOT / "manifests").rglob("*.yaml")) + sorted((ROOT / "crds").glob("*.yaml")):
        if path.name in ("kustomization.yaml", "heterojob-rules.yaml", "alertmanager-receiver.yaml",
                         "prometheus-scrape-configs.yaml", "heterojob-recording-rules.yaml"):  # Prometheus config, not Kubernetes objects
            continue
        yield path


@pytest.mark.parametrize("path", list(all_manifest_files()), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_manifest_is_valid(path: Path) -> None:
    schemas = crd_schemas()
    for obj in docs(path):
        group = obj["apiVersion"].split("/")[0] if "/" in obj["apiVersion"] else ""
        if group in OURS:
            schema = schemas[(obj["apiVersion"], obj["kind"])]
            # OpenAPI v3.0 is draft-4 JSON Schema (boolean exclusiveMinimum); x-kubernetes-* keys are ignored
            jsonschema.Draft4Validator(schema).validate(obj)
        elif group in FOREIGN_CRDS:
            assert obj["spec"], f"{path}: {obj['kind']} without spec"
        else:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_each_overlay_renders_without_duplicates(overlay: Path) -> None:
    objects = render(overlay)
    keys = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects]
    assert len(keys) == len(set(keys)), "duplicate objects"
    kinds = {k for k, _, _ in keys}
    assert {"Deployment", "ClusterRole", "Role", "NetworkPolicy", "AcceleratorClass"} <= kinds
    for obj in objects:
        if obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"]["namespace"] == "heterojob-system", obj["metadata"]["name"]
    if overlay.name == "prometheus-operator":
        assert {"ServiceMonitor", "PrometheusRule"} <= kinds


def test_pods_run_locked_down() -> None:
    for obj in render(ROOT / "manifests" / "overlays" / "plain"):
        if obj["kind"] != "Deployment":
            continue
        spec = obj["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["seccompProfile"]["type"] == \
            "RuntimeDefault"
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
            assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"]
            assert c["resources"]["requests"] and c["resources"]["limits"]
            assert c["livenessProbe"] and c["readinessProbe"]
    operator = next(o for o in render(ROOT / "manifests/base") if o["metadata"]["name"] == "heterojob-operator"
                    and o["kind"] == "Deployment")
    container = operator["spec"]["template"]["spec"]["containers"][0]
    assert operator["spec"]["replicas"] == 2 and "--leader-elect" in container["args"]
    # every healthy replica is Ready (rolling updates proceed); the Service selects the pod the leader labels
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert {e["name"] for e in container["env"]} >= {"POD_NAME", "POD_NAMESPACE"}
    service = next(o for o in render(ROOT / "manifests/base") if o["kind"] == "Service"
                   and o["metadata"]["name"] == "heterojob-operator")
    assert service["spec"]["selector"] == {"app.kubernetes.io/name": "heterojob-operator", "heterojob.io/role": "leader"}


# --- RBAC: what the code does -------------------------------------------------------------------------

PLURALS = {"heterojobs", "heteroquotas", "acceleratorclasses", "regions"}
CORE = {  # client method -> (resource, verb)
    "list_namespaced_pod": ("pods", "list"), "create_namespaced_pod": ("pods", "create"),
    "delete_namespaced_pod": ("pods", "delete"), "patch_namespaced_pod": ("pods", "patch"),
    "create_namespaced_service": ("services", "create"), "create_namespaced_event": ("events", "create"),
    "read_namespaced_service": ("services", "get"), "delete_namespaced_service": ("services", "delete"),
    "patch_namespaced_event": ("events", "patch"),
    "list_node": ("nodes", "list"), "list_namespaced_event": ("events", "list"),
    "read_namespaced_pod": ("pods", "get"), "list_pod_for_all_namespaces": ("pods", "list"),
    "create_namespaced_config_map": ("configmaps", "create"), "patch_namespaced_config_map": ("configmaps", "patch"),
}
CUSTOM = {  # custom-object method -> (verb, subresource)
    "get_namespaced_custom_object": ("get", ""), "list_cluster_custom_object": ("list", ""),
    "list_namespaced_custom_object": ("list", ""), "patch_namespaced_custom_object": ("patch", ""),
    "patch_namespaced_custom_object_status": ("patch", "/status"),
    "create_namespaced_custom_object": ("create", ""), "create_cluster_custom_object": ("create", ""),
    "patch_cluster_custom_object_status": ("patch", "/status"),
}
# What Kopf itself needs beyond the handlers' list/watch (standalone, no peering): CRD discovery, its Events.
KOPF = {("apiextensions.k8s.io", "customresourcedefinitions", v) for v in ("list", "watch")} | {("", "events", "create")}
LEASES = {"read_namespaced_lease": "get", "create_namespaced_lease": "create", "replace_namespaced_lease": "update"}
OTHER = {  # client method -> (apiGroup, resource, verb): the per-job access of training pods (kube/access.py)
    "create_namespaced_service_account": ("", "serviceaccounts", "create"),
    "patch_namespaced_service_account": ("", "serviceaccounts", "patch"),
    "create_namespaced_role": ("rbac.authorization.k8s.io", "roles", "create"),
    "patch_namespaced_role": ("rbac.authorization.k8s.io", "roles", "patch"),
    "create_namespaced_role_binding": ("rbac.authorization.k8s.io", "rolebindings", "create"),
    "patch_namespaced_role_binding": ("rbac.authorization.k8s.io", "rolebindings", "patch"),
}


def used(files_: list[Path]) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) for every Kubernetes client call (or reference) in these files."""
    out: set[tuple[str, str, str]] = set()
    for path in files_:
        tree = ast.parse(path.read_text())
        for func in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)] or [tree]:
            names = {n.value for n in ast.walk(func) if isinstance(n, ast.Constant) and n.value in PLURALS}
            for node in ast.walk(func):
                # a client method, or its name given to `Kube.send` (kube/routes.py's table itself names none)
                if isinstance(node, ast.Attribute):
                    call = node.attr
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and path.name != "routes.py":
                    call = node.value
                else:
                    continue
                if call in CORE:
                    resource, verb = CORE[call]
                    out.add(("", resource, verb))
                elif call in OTHER:
                    out.add(OTHER[call])
                elif call in LEASES:
                    out.add(("coordination.k8s.io", "leases", LEASES[call]))
                elif call in CUSTOM:
                    verb, sub = CUSTOM[call]
                    assert names, f"{path.name}:{node.lineno}: {call} with no plural in sight"
                    out |= {("heterojob.io", f"{plural}{sub}", verb) for plural in names}
    return out


def watched(handlers: Path) -> set[tuple[str, str, str]]:
    """list+watch for every resource a Kopf handler or index is registered on."""
    out = set()
    for node in ast.walk(ast.parse(handlers.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("event", "index"):
            strings = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if strings:
                plural = strings[-1]
                group = "heterojob.io" if plural in PLURALS else ""
                out |= {(group, plural, "list"), (group, plural, "watch")}
    return out


def informed(caches: Path) -> set[tuple[str, str, str]]:
    """list+watch for every resource the operator's informers list (then watch)."""
    listed = {(g, r, v) for g, r, v in used([caches]) if v == "list"}
    return listed | {(g, r, "watch") for g, r, _ in listed}


def granted(role: str) -> set[tuple[str, str, str]]:
    out = set()
    for obj in docs(ROOT / "manifests" / "base" / f"rbac-{role}.yaml"):
        if obj["kind"] not in ("ClusterRole", "Role"):
            continue
        for rule in obj["rules"]:
            out |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    return out


def test_the_operator_role_grants_exactly_what_the_operator_uses() -> None:
    pkg = ROOT / "operator" / "heterojob"
    needed = used([pkg / "kube" / "api.py", pkg / "kube" / "leader.py", pkg / "kube" / "access.py",
                   pkg / "kube" / "recorder.py"]) \
        | watched(pkg / "handlers.py") | informed(pkg / "kube" / "caches.py") | KOPF
    # RBAC's escalation check: the operator may grant a job's pods only what it holds itself
    from heterojob.kube import access
    needed |= {("", "pods", verb) for verb in access.VERBS}
    if "blockOwnerDeletion" in (pkg / "kube" / "manifests.py").read_text():
        # OwnerReferencesPermissionEnforcement: setting blockOwnerDeletion needs update on the owner's finalizers
        needed.add(("heterojob.io", "heterojobs/finalizers", "update"))
    assert granted("operator") == needed, (
        f"grants not used: {sorted(granted('operator') - needed)}; used, not granted: {sorted(needed - granted('operator'))}")


def test_the_console_role_grants_exactly_what_the_console_uses() -> None:
    console = ROOT / "console" / "heterojob_console"
    # the pages' cache lists each kind, then watches it (watch.py, with data.py's list calls), as the operator's
    # informers do (`informed`)
    needed = used(sorted(console.rglob("*.py"))) | informed(console / "watch.py") | {
        (g, r, "watch") for g, r, v in used([console / "data.py"]) if v == "list"}
    assert granted("console") == needed, (
        f"grants not used: {sorted(granted('console') - needed)}; used, not granted: {sorted(needed - granted('console'))}")
    assert not {v for _, r, v in needed if r.startswith("heterojobs")} - {"list", "watch", "patch"}  # reads, plus requests


def test_no_role_reads_secrets_the_token_comes_from_the_kubelet() -> None:
    """The alert token reaches the operator as an env var from the Secret `heterojob-alert-token` (the kubelet
    reads it), so no ServiceAccount needs `get secrets` at all."""
    for role in ("operator", "console"):
        for obj in docs(ROOT / "manifests/base" / f"rbac-{role}.yaml"):
            assert not any("secrets" in r["resources"] for r in obj.get("rules") or []), role
    operator = next(o for o in docs(ROOT / "manifests/base/operator.yaml") if o["kind"] == "Deployment")
    env = {e["name"]: e for e in operator["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["HETEROJOB_ALERT_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "heterojob-alert-token"


def test_the_grafana_dashboard_queries_metrics_that_exist() -> None:
    board = json.loads((ROOT / "manifests/grafana/heterojob-dashboard.json").read_text())
    text = " ".join(t["expr"] for p in board["panels"] for t in p["targets"])
    for metric in ("heterojob_alerts_received_total", "heterojob_migrations_total", "heterojob_decision_seconds_bucket",
                   "DCGM_FI_DEV_GPU_UTIL", "npu_chip_info_utilization"):
        assert metric in text


def test_leases_are_granted_in_the_operators_namespace_only() -> None:
    roles = {o["kind"]: o for o in docs(ROOT / "manifests/base/rbac-operator.yaml")}
    assert any("leases" in r["resources"] for r in roles["Role"]["rules"])
    assert not any("leases" in r["resources"] for r in roles["ClusterRole"]["rules"])
    assert roles["RoleBinding"]["roleRef"]["name"] == roles["Role"]["metadata"]["name"]


def test_no_env_value_is_empty_so_apply_is_idempotent() -> None:
    """The API server drops `value: ""`, so every `kubectl apply` would report the Deployment `configured`."""
    for obj in render(ROOT / "manifests" / "overlays" / "plain"):
        if obj["kind"] == "Deployment":
            for c in obj["spec"]["template"]["spec"]["containers"]:
                for env in c.get("env") or []:
                    assert env.get("value") != "", f"{obj['metadata']['name']}: {env['name']} has an empty value"


def test_crds_directory_applies_with_dash_f_and_dash_k() -> None:
    """`kubectl apply -f crds/` reads every .yaml/.yml/.json in the directory as objects, so the
    kustomization there must be `Kustomization` (no extension; kustomize accepts that name)."""
    directory = ROOT / "crds"
    read_by_kubectl = [p for p in directory.iterdir() if p.suffix in (".yaml", ".yml", ".json")]
    assert read_by_kubectl and all(d["kind"] == "CustomResourceDefinition" for p in read_by_kubectl for d in docs(p))
    assert not (directory / "kustomization.yaml").exists() and not (directory / "kustomization.yml").exists()
    listed = yaml.safe_load((directory / "Kustomization").read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in read_by_kubectl)


def test_no_overlay_mixes_crds_with_their_objects() -> None:
    """One pass on a fresh cluster: a kustomization that creates a CRD and objects of it fails the first time
    (`resource mapping not found ... ensure CRDs are installed first`)."""
    for overlay in OVERLAYS:
        kinds = {o["kind"] for o in render(overlay)}
        assert "CustomResourceDefinition" not in kinds, overlay.name


def test_crd_names_read_well_in_kubectl() -> None:
    """`kubectl get heterojob NAME` fails (`you must specify only one resource`) if a category equals a
    resource name; every kind gets printer columns and every field a description (kubectl explain)."""
    crds_ = [d for p in sorted((ROOT / "crds").glob("*.yaml")) for d in docs(p)]
    names = {n for c in crds_ for n in (c["spec"]["names"]["plural"], c["spec"]["names"]["singular"],
                                         c["spec"]["names"]["kind"].lower(), *c["spec"]["names"]["shortNames"])}
    for crd in crds_:
        assert not set(crd["spec"]["names"]["categories"]) & names, crd["metadata"]["name"]
        version = crd["spec"]["versions"][0]
        assert [c for c in version["additionalPrinterColumns"] if c["name"] != "Age"], crd["metadata"]["name"]
        missing: list[str] = []

        root = version["schema"]["openAPIV3Schema"]
        # the API server's structural-schema rule: root metadata carries nothing but its type
        assert root["properties"]["metadata"] == {"type": "object"}

        def walk(schema: dict[str, Any], path: str) -> None:
            for name, sub in (schema.get("properties") or {}).items():
                if schema is root and name == "metadata":
                    continue
                if not sub.get("description"):
                    missing.append(f"{path}.{name}")
                walk(sub, f"{path}.{name}")
            if isinstance(schema.get("items"), dict):
                walk(schema["items"], f"{path}[]")

        walk(version["schema"]["openAPIV3Schema"], crd["spec"]["names"]["kind"])
        assert not missing, missing
    quota = next(c for c in crds_ if c["spec"]["names"]["kind"] == "HeteroQuota")
    assert ".status.summary" in [c["jsonPath"] for c in quota["spec"]["versions"][0]["additionalPrinterColumns"]]
