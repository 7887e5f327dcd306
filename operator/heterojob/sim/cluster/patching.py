"""The three PATCH flavours of the Kubernetes API: JSON patch, merge patch, strategic merge patch."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

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


class PatchTestFailed(ValueError):
    """A JSON-patch `test` operation did not hold."""


def json_patch(obj: dict[str, Any], ops: Any) -> dict[str, Any]:
    if not isinstance(ops, list):
        raise ValueError("a JSON patch must be a list of operations")
    try:
        return jsonpatch.apply_patch(obj, ops, in_place=False)
    except jsonpatch.JsonPatchTestFailed as exc:
        raise PatchTestFailed(str(exc)) from None
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, KeyError, IndexError, TypeError) as exc:
        raise ValueError(f"the JSON patch cannot be applied: {exc}") from None


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


def strategic_merge_patch(target: Any, patch: Any, key: str | None = None) -> Any:
    """Merge patch, except that known lists merge by their merge key and `finalizers` merge as a set.

    Not supported (a real server supports them): `$patch`, `$retainKeys` and `$deleteFromPrimitiveList`
    directives, and merge keys of types other than the core fields listed in `_MERGE_KEYS`.
    """
    if isinstance(patch, list) and isinstance(target, list):
        if key in _SET_LISTS:
            return list(dict.fromkeys([*target, *patch]))
        merge_key = _MERGE_KEYS.get(key or "")
        if merge_key and all(isinstance(i, dict) for i in [*target, *patch]):
            merged = [copy.deepcopy(i) for i in target]
            index = {i.get(merge_key): n for n, i in enumerate(merged)}
            for item in patch:
                at = index.get(item.get(merge_key))
                if at is None:
                    merged.append(copy.deepcopy(item))
                else:
                    merged[at] = strategic_merge_patch(merged[at], item)
            return merged
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, value in patch.items():
        if value is None:
            result.pop(k, None)
        else:
            result[k] = strategic_merge_patch(result.get(k), value, k)
    return result
