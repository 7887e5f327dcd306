"""Kubernetes label and field selectors, as the API server evaluates them."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Matcher = Callable[[Mapping[str, Any]], bool]

_SET_EXPR = re.compile(r"^\s*(!?)([^\s!=,()]+)\s*(?:(in|notin)\s*\(([^)]*)\))?\s*$")
_EQ_EXPR = re.compile(r"^\s*([^\s!=,()]+)\s*(==|=|!=)\s*([^\s!=,()]*)\s*$")


class SelectorError(ValueError):
    pass


def _split(selector: str) -> list[str]:
    """Split on commas that are not inside parentheses: `a in (x,y),b=c` -> two terms."""
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(selector):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            terms.append(selector[start:i])
            start = i + 1
    terms.append(selector[start:])
    return [t for t in terms if t.strip()]


def label_matcher(selector: str | None) -> Matcher:
    """`a=b,c!=d,e,!f,g in (x,y),h notin (z)` against metadata.labels."""
    if not selector:
        return lambda _obj: True
    checks: list[Callable[[Mapping[str, str]], bool]] = []
    for term in _split(selector):
        if m := _EQ_EXPR.match(term):
            key, op, value = m.groups()
            if op == "!=":
                checks.append(lambda ls, k=key, v=value: ls.get(k) != v)
            else:
                checks.append(lambda ls, k=key, v=value: ls.get(k) == v)
        elif m := _SET_EXPR.match(term):
            neg, key, op, values = m.groups()
            if op is None:
                checks.append((lambda ls, k=key: k not in ls) if neg else (lambda ls, k=key: k in ls))
            else:
                if neg:
                    raise SelectorError(f"unable to parse requirement: {term!r}")
                options = {v.strip() for v in values.split(",") if v.strip()}
                if op == "in":
                    checks.append(lambda ls, k=key, o=options: ls.get(k) in o)
                else:
                    checks.append(lambda ls, k=key, o=options: ls.get(k) not in o)
        else:
            raise SelectorError(f"unable to parse requirement: {term!r}")

    def match(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(check(labels) for check in checks)

    return match


_FALSE_WHEN_UNSET = {"spec.unschedulable", "spec.hostNetwork"}  # Go bools: the field set prints "false"


# Field labels whose value is not the object's field of that path (pkg/registry/core/event/strategy.go v1.32,
# EventToSelectableFields): an Event's `source` is source.component, else reportingController; its
# `reportingComponent` is reportingController (the core/v1 name of events.k8s.io's reportingController).
def _reporting(event: Mapping[str, Any]) -> Any:
    return event.get("reportingComponent") or event.get("reportingController")  # core/v1 or events.k8s.io name


_DERIVED: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "source": lambda o: (o.get("source") or {}).get("component") or _reporting(o),
    "reportingComponent": _reporting,
}


def _field(obj: Mapping[str, Any], path: str) -> str:
    if path in _DERIVED and obj.get("kind") == "Event":
        found = _DERIVED[path](obj)
        return "" if found is None else str(found)
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping):
            current = None
            break
        current = current.get(part)
    if current is None and path in _FALSE_WHEN_UNSET:
        return "false"
    if isinstance(current, bool):
        return "true" if current else "false"
    return "" if current is None else str(current)


# The field labels kube-apiserver v1.32 converts per resource (pkg/apis/*/v1/conversion.go AddFieldLabelConversion*,
# apiextensions' customresource handler for CRs: metadata.name, metadata.namespace and the CRD's selectableFields);
# every other label answers 400 "field label not supported: <label>". Resources not listed here accept any path.
FIELD_LABELS: dict[tuple[str, str], frozenset[str]] = {
    ("", "pods"): frozenset({"metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy",
                             "spec.schedulerName", "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
                             "status.podIP", "status.podIPs", "status.nominatedNodeName"}),
    ("", "nodes"): frozenset({"metadata.name", "spec.unschedulable"}),
    ("", "namespaces"): frozenset({"metadata.name", "status.phase"}),
    ("", "events"): frozenset({"metadata.name", "metadata.namespace", "involvedObject.kind",
                               "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
                               "involvedObject.apiVersion", "involvedObject.resourceVersion",
                               "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"}),
    ("", "secrets"): frozenset({"metadata.name", "metadata.namespace", "type"}),
    ("", "configmaps"): frozenset({"metadata.name", "metadata.namespace"}),
    ("", "services"): frozenset({"metadata.name", "metadata.namespace"}),
    ("", "serviceaccounts"): frozenset({"metadata.name", "metadata.namespace"}),
    ("", "resourcequotas"): frozenset({"metadata.name", "metadata.namespace"}),
    ("apps", "deployments"): frozenset({"metadata.name", "metadata.namespace"}),
    ("apps", "replicasets"): frozenset({"metadata.name", "metadata.namespace", "status.replicas"}),
    ("apps", "statefulsets"): frozenset({"metadata.name", "metadata.namespace", "status.successful"}),
    ("batch", "jobs"): frozenset({"metadata.name", "metadata.namespace", "status.successful"}),
    ("policy", "poddisruptionbudgets"): frozenset({"metadata.name", "metadata.namespace"}),
}
CR_FIELD_LABELS = frozenset({"metadata.name", "metadata.namespace"})


def field_matcher(selector: str | None, allowed: frozenset[str] | None = None) -> Matcher:
    """`metadata.name=x,spec.nodeName!=y`: equality on dotted paths; with `allowed`, other paths are refused
    (as the resource's field label conversion refuses them)."""
    if not selector:
        return lambda _obj: True
    checks: list[Matcher] = []
    for term in _split(selector):
        m = _EQ_EXPR.match(term)
        if not m:
            raise SelectorError(f"invalid field selector: {term!r}")
        path, op, value = m.groups()
        if allowed is not None and path not in allowed:
            raise SelectorError(f"field label not supported: {path}")
        if op == "!=":
            checks.append(lambda o, p=path, v=value: _field(o, p) != v)
        else:
            checks.append(lambda o, p=path, v=value: _field(o, p) == v)
    return lambda obj: all(check(obj) for check in checks)


def label_selector_matcher(selector: Mapping[str, Any] | None) -> Matcher:
    """A `metav1.LabelSelector` object (matchLabels, matchExpressions); an empty or missing one matches nothing
    here (as a PodDisruptionBudget's does in the eviction handler)."""
    if not selector or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        return lambda _obj: False
    terms = [f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        terms.append({"In": f"{key} in ({','.join(values)})", "NotIn": f"{key} notin ({','.join(values)})",
                      "Exists": key, "DoesNotExist": f"!{key}"}.get(op, f"{key} in ()"))
    return label_matcher(",".join(terms))
