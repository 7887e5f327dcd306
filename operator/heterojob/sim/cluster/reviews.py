"""Review resources (created, answered, never stored): what `kubectl auth can-i` and `kubectl auth whoami` ask.

The emulator has no authentication and no RBAC: it answers as a kube-apiserver v1.32 with
`--authorization-mode=AlwaysAllow` does (k8s.io/apiserver `pkg/authorization/authorizerfactory` AlwaysAllow:
every access allowed, reason ""; its rule resolver lists `*` verbs on `*` groups/resources and `*` non-resource
URLs), for the one user every request is taken to come from.
"""

from __future__ import annotations

import copy
from typing import Any

from heterojob.sim.cluster.errors import ApiError

USER = {"username": "emulator", "groups": ["system:masters", "system:authenticated"]}
REVIEWS = {("authorization.k8s.io", "selfsubjectaccessreviews"), ("authorization.k8s.io", "selfsubjectrulesreviews"),
           ("authentication.k8s.io", "selfsubjectreviews")}


def answer(group: str, plural: str, kind: str, api_version: str, body: Any) -> dict[str, Any]:
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
        out["status"] = {"allowed": True}
    elif plural == "selfsubjectrulesreviews":
        out["status"] = {"resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
                         "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}], "incomplete": False}
    else:
        out["status"] = {"userInfo": copy.deepcopy(USER)}
    return out
