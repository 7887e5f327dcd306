"""The scale subresource (`autoscaling/v1` Scale), what `kubectl scale` patches.

Served for the built-in workloads that have it (`apps/v1` deployments, replicasets, statefulsets: `.spec.replicas`,
`.status.replicas`, `.spec.selector`) and for a custom resource whose CRD version declares `subresources.scale`
(its `specReplicasPath`, `statusReplicasPath`, `labelSelectorPath`), as kube-apiserver v1.32 and apiextensions'
`registry/customresource` ScaleREST do. A custom resource without it answers 404 NotFound for its name.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

BUILTIN = {("apps", "deployments"), ("apps", "replicasets"), ("apps", "statefulsets")}


@dataclass(frozen=True)
class Paths:
    spec_replicas: str
    status_replicas: str
    label_selector: str | None
    selector_object: bool  # built-ins keep a LabelSelector object; CRs a selector string at labelSelectorPath


def paths_for(kind_key: tuple[str, str], crd_version: Mapping[str, Any] | None) -> Paths | None:
    if crd_version is not None:
        declared = (crd_version.get("subresources") or {}).get("scale")
        if declared is None:
            return None
        return Paths(declared.get("specReplicasPath", ".spec.replicas"),
                     declared.get("statusReplicasPath", ".status.replicas"), declared.get("labelSelectorPath"), False)
    if kind_key in BUILTIN:
        return Paths(".spec.replicas", ".status.replicas", ".spec.selector", True)
    return None


def _get(obj: Any, path: str) -> Any:
    for part in [p for p in path.split(".") if p]:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(part)
    return obj


def _set(obj: dict[str, Any], path: str, value: Any) -> None:
    parts = [p for p in path.split(".") if p]
    for part in parts[:-1]:
        obj = obj.setdefault(part, {})
    obj[parts[-1]] = value


def selector_string(selector: Any) -> str:
    if isinstance(selector, str):
        return selector
    if not isinstance(selector, Mapping):
        return ""
    terms = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), sorted(expr.get("values") or [])
        terms.append({"In": f"{key} in ({','.join(values)})", "NotIn": f"{key} notin ({','.join(values)})",
                      "Exists": key, "DoesNotExist": f"!{key}"}.get(op, key))
    return ",".join(terms)


def to_scale(obj: Mapping[str, Any], paths: Paths) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    status: dict[str, Any] = {"replicas": int(_get(obj, paths.status_replicas) or 0)}
    if paths.label_selector:
        selector = selector_string(_get(obj, paths.label_selector))
        if selector:
            status["selector"] = selector
    return {"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                         if k in meta},
            "spec": {"replicas": int(_get(obj, paths.spec_replicas) or 0)}, "status": status}


def with_replicas(obj: Mapping[str, Any], paths: Paths, replicas: int) -> dict[str, Any]:
    new = copy.deepcopy(dict(obj))
    _set(new, paths.spec_replicas, replicas)
    return new
