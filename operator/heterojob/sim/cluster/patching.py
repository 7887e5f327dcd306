"""The three PATCH flavours of the Kubernetes API: JSON patch, merge patch, strategic merge patch.

Errors as kube-apiserver v1.32 answers them (k8s.io/apiserver pkg/endpoints/handlers/patch.go): a content type
the resource does not take is 415 UnsupportedMediaType (`negotiation.NewUnsupportedMediaTypeError`; custom
resources take no strategic merge patch: apiextensions-apiserver customresource_handler.go `supportedTypes`); a
JSON patch that does not decode is 400 BadRequest; one that does not apply (a failed `test`, a missing path) is
`errors.NewGenericServerResponse(422, ...)`, whose message drops the patch library's words.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from heterojob.sim.cluster.errors import ApiError

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

# Lists that a strategic merge patch merges by a key instead of replacing (the common core fields).
_MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name", "volumes": "name",
    "env": "name", "volumeMounts": "mountPath", "ports": "containerPort", "conditions": "type",
    "ownerReferences": "uid", "imagePullSecrets": "name", "containerStatuses": "name",
}
_SET_LISTS = {"finalizers"}


BUILTIN_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH)
CUSTOM_RESOURCE_TYPES = (JSON_PATCH, MERGE_PATCH, APPLY_PATCH)
MAX_JSON_PATCH_OPERATIONS = 10000  # handlers/patch.go maxJSONPatchOperations
NOT_APPLIED = "the server rejected our request due to an error in our request"  # NewGenericServerResponse, 422


def check_type(content_type: str, custom_resource: bool) -> None:
    accepted = CUSTOM_RESOURCE_TYPES if custom_resource else BUILTIN_TYPES
    if content_type not in accepted:
        raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted "
                       "media types include: " + ", ".join(accepted))


def json_patch(obj: dict[str, Any], ops: Any) -> dict[str, Any]:
    if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
        kind = "object" if isinstance(ops, dict) else "string" if isinstance(ops, str) else "value"
        raise ApiError(400, "BadRequest", f"json: cannot unmarshal {kind} into Go value of type jsonpatch.Patch")
    if len(ops) > MAX_JSON_PATCH_OPERATIONS:
        raise ApiError(413, "RequestEntityTooLarge", "Request entity too large: The allowed maximum operations in a "
                       f"JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {len(ops)}")
    try:
        return jsonpatch.apply_patch(obj, ops, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, KeyError, IndexError, TypeError,
            ValueError):
        raise ApiError(422, "Invalid", NOT_APPLIED) from None


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVES = "$deleteFromPrimitiveList/"


def _merge_list(target: list[Any], patch: list[Any], key: str) -> list[Any]:
    """A list under a patch strategy of merge: by its merge key (maps) or as a set (primitives)."""
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, dict) and "$patch" in i)]
    if key in _SET_LISTS:
        return list(dict.fromkeys([*target, *patch]))
    merge_key = _MERGE_KEYS.get(key)
    if not merge_key or not all(isinstance(i, dict) for i in [*target, *patch]):
        return [copy.deepcopy(i) for i in patch]
    merged = [copy.deepcopy(i) for i in target]
    for item in patch:
        index = {i.get(merge_key): n for n, i in enumerate(merged)}
        at = index.get(item.get(merge_key))
        if item.get("$patch") == "delete":
            if at is not None:
                del merged[at]
        elif at is None:
            merged.append(strategic_merge_patch({}, item))
        else:
            merged[at] = strategic_merge_patch(merged[at], item)
    return merged


def _order(items: list[Any], order: list[Any], key: str) -> list[Any]:
    """`$setElementOrder/<field>`: the listed elements first, in that order; the rest keep theirs after them."""
    merge_key = _MERGE_KEYS.get(key)
    ident = (lambda i: i.get(merge_key) if isinstance(i, dict) else i) if merge_key else (lambda i: i)
    wanted = [o.get(merge_key) if isinstance(o, dict) and merge_key else o for o in order]
    rank = {json_key: n for n, json_key in enumerate(wanted) if isinstance(json_key, (str, int, float, bool))}
    return sorted(items, key=lambda i: rank.get(ident(i), len(rank)))


def strategic_merge_patch(target: Any, patch: Any, key: str | None = None) -> Any:
    """Merge patch, except that known lists merge by their merge key and `finalizers` merge as a set, with the
    directives of k8s.io/apimachinery pkg/util/strategicpatch (v1.32): `$patch` (replace, delete, merge) on maps and
    list items, `$retainKeys`, `$setElementOrder/<list>` and `$deleteFromPrimitiveList/<list>`.

    Not supported (a real server supports them): merge keys of types other than the core fields listed in
    `_MERGE_KEYS` (any other list of maps is replaced).
    """
    if isinstance(patch, list):
        if isinstance(target, list):
            return _merge_list(target, patch, key or "")
        return [strategic_merge_patch({}, i) if isinstance(i, dict) else copy.deepcopy(i) for i in patch
                if not (isinstance(i, dict) and "$patch" in i and len(i) == 1)]
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: strategic_merge_patch({}, v, k) for k, v in patch.items() if not k.startswith("$")}
    result = dict(target) if isinstance(target, dict) else {}
    for k, value in patch.items():
        if k.startswith("$"):
            continue
        if value is None:
            result.pop(k, None)
        elif isinstance(value, dict) and value.get("$patch") == "delete":
            result.pop(k, None)
        else:
            result[k] = strategic_merge_patch(result.get(k), value, k)
    for k, value in patch.items():
        if k.startswith(_DELETE_PRIMITIVES) and isinstance(result.get(k[len(_DELETE_PRIMITIVES):]), list):
            field = k[len(_DELETE_PRIMITIVES):]
            result[field] = [v for v in result[field] if v not in (value or [])]
        elif k.startswith(_ORDER) and isinstance(result.get(k[len(_ORDER):]), list) and isinstance(value, list):
            field = k[len(_ORDER):]
            result[field] = _order(result[field], value, field)
    if isinstance(patch.get("$retainKeys"), list):
        keep = set(patch["$retainKeys"])
        result = {k: v for k, v in result.items() if k in keep}
    return result
