"""Review resources (created, answered, never stored): what `kubectl auth can-i` and `kubectl auth whoami` ask.

Answered for the user the request authenticated as (`auth.authenticate`), as kube-apiserver v1.32 with
`--authorization-mode=RBAC` does: the cluster's admin (`system:masters`) may do anything (its rules review lists
`*`); a service account's SelfSubjectAccessReview is allowed when its RBAC rules cover the attributes
(`auth.allowed`: verb, group, resource/subresource, namespace, name), and a non-resource GET is allowed (the
bootstrap discovery roles every authenticated user holds); its SelfSubjectRulesReview lists the rules it holds in
the namespace asked (plus the bootstrap ones). SelfSubjectReview (whoami) says who it is.
"""

from __future__ import annotations

import copy
from typing import Any

from heterojob.sim.cluster import auth
from heterojob.sim.cluster.errors import ApiError

REVIEWS = {("authorization.k8s.io", "selfsubjectaccessreviews"), ("authorization.k8s.io", "selfsubjectrulesreviews"),
           ("authentication.k8s.io", "selfsubjectreviews")}


def answer(group: str, plural: str, kind: str, api_version: str, body: Any, user: auth.User = auth.ADMIN,
           store: auth.Store | None = None) -> dict[str, Any]:
    """The review `body` with its status filled for `user` (`store`: the RBAC objects, for a user not admin)."""
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "the request body must be a JSON object")
    out = copy.deepcopy(body)
    out["apiVersion"], out["kind"] = api_version, kind
    out.setdefault("metadata", {})
    if plural == "selfsubjectaccessreviews":
        spec = out.get("spec") or {}
        if not spec.get("resourceAttributes") and not spec.get("nonResourceAttributes"):
            raise ApiError(422, "Invalid", f'{kind}.{group} "" is invalid: spec.resourceAttributes: Invalid value: '
                           '"null": exactly one of nonResourceAttributes or resourceAttributes must be specified',
                           {"group": group, "kind": kind, "causes": [
                               {"reason": "FieldValueInvalid", "field": "spec.resourceAttributes",
                                "message": 'Invalid value: "null": exactly one of nonResourceAttributes or '
                                           "resourceAttributes must be specified"}]})
        out["status"] = {"allowed": _allowed(spec, user, store)}
    elif plural == "selfsubjectrulesreviews":
        if user.admin or store is None:
            out["status"] = {"resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
                             "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}], "incomplete": False}
        else:
            namespace = (out.get("spec") or {}).get("namespace") or None
            rules = [{k: list(r[k]) for k in ("verbs", "apiGroups", "resources", "resourceNames") if r.get(k)}
                     for r in auth.rules_of(store, user, namespace)]
            out["status"] = {"resourceRules": rules, "nonResourceRules": [
                {"verbs": ["get"], "nonResourceURLs": ["*"]}], "incomplete": False}
    else:
        out["status"] = {"userInfo": user.info()}
    return out


def _allowed(spec: dict[str, Any], user: auth.User, store: auth.Store | None) -> bool:
    if user.admin or store is None:
        return True
    resource = spec.get("resourceAttributes")
    if not isinstance(resource, dict):  # a non-resource URL: every authenticated user may GET discovery's
        return str((spec.get("nonResourceAttributes") or {}).get("verb") or "") == "get"
    return auth.allowed(store, user, str(resource.get("verb") or ""), str(resource.get("group") or ""),
                        str(resource.get("resource") or ""), resource.get("subresource") or None,
                        resource.get("namespace") or None, resource.get("name") or None)
