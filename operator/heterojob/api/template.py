"""The shape of `spec.template`, checked when the spec is parsed, before any pod is built.

The operator builds each replica's pod from the template (`kube.manifests.pod`); a value of the wrong
type there (`metadata: "junk"`, labels as a list, `env: "A=1"`, `tolerations: "all"`) must be a clear
error with its field path, not a crash at pod creation. This checks, with a JSON schema (jsonschema),
the parts the operator reads or merges into, plus the names and quantities a real API server refuses
(Kubernetes v1.32: DNS-1123 container names, resource quantities, the toleration rules), and refuses the
fields that fight the placement: `nodeName` and `affinity.nodeAffinity` (heterojob chooses the nodes; use
`spec.devices` and `spec.regions`). Everything else in the pod spec is passed through for the API server to judge.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

from jsonschema import Draft202012Validator

from heterojob.api.names import DNS1123_LABEL_RE, LABEL_KEY_RE, LABEL_VALUE_RE, TAINT_EFFECTS, TOLERATION_OPERATORS

QUANTITY = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(([KMGTPE]i)|[numkMGTPE]|[eE][+-]?[0-9]+)?$"  # k8s resource.Quantity

_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_QUANTITIES = {"type": "object", "additionalProperties": {
    "anyOf": [{"type": "string", "pattern": QUANTITY}, {"type": "integer", "minimum": 0}]}}
_LIST_OF_OBJECTS = {"type": "array", "items": {"type": "object"}}
_CONTAINER = {
    "type": "object",
    "required": ["name", "image"],
    "properties": {
        "name": {"type": "string", "maxLength": 63, "pattern": DNS1123_LABEL_RE},
        "image": {"type": "string", "minLength": 1},
        "command": {"type": "array", "items": {"type": "string"}},
        "args": {"type": "array", "items": {"type": "string"}},
        "env": {"type": "array", "items": {
            "type": "object", "required": ["name"],
            "properties": {"name": {"type": "string", "minLength": 1}, "value": {"type": "string"}}}},
        "resources": {"type": "object", "properties": {"limits": _QUANTITIES, "requests": _QUANTITIES}},
        "volumeMounts": _LIST_OF_OBJECTS,
        "ports": _LIST_OF_OBJECTS,
    },
}
# a toleration as kube-apiserver v1.32 validates it (pkg/apis/core/validation ValidateTolerations): a key is a
# qualified name, operator Equal (or empty) or Exists, a known effect (or empty: every effect),
# tolerationSeconds (null: unset) only with NoExecute, no value with Exists, a label value with Equal (so a
# value that is one is checked whatever the operator), and an empty key only with Exists (every taint)
_TOLERATION = {
    "type": "object",
    "properties": {
        "key": {"type": "string", "anyOf": [{"const": ""}, {"pattern": LABEL_KEY_RE}]},
        "value": {"type": "string", "pattern": LABEL_VALUE_RE},
        "operator": {"enum": ["", *TOLERATION_OPERATORS]}, "effect": {"enum": ["", *TAINT_EFFECTS]},
        "tolerationSeconds": {"type": ["integer", "null"]},
    },
    "allOf": [
        {"if": {"required": ["tolerationSeconds"], "properties": {"tolerationSeconds": {"type": "integer"}}},
         "then": {"required": ["effect"], "properties": {"effect": {"const": "NoExecute"}}}},
        {"if": {"required": ["operator"], "properties": {"operator": {"const": "Exists"}}},
         "then": {"properties": {"value": {"const": ""}}}},
        {"if": {"properties": {"key": {"const": ""}}},
         "then": {"required": ["operator"], "properties": {"operator": {"const": "Exists"}}}},
    ],
}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["spec"],
    "properties": {
        "metadata": {"type": "object", "properties": {"labels": _STRING_MAP, "annotations": _STRING_MAP}},
        "spec": {
            "type": "object",
            "required": ["containers"],
            "properties": {
                "containers": {"type": "array", "minItems": 1, "items": _CONTAINER},
                "initContainers": {"type": "array", "items": _CONTAINER},
                "nodeSelector": _STRING_MAP,
                "tolerations": {"type": "array", "items": _TOLERATION},
                "volumes": {"type": "array", "items": {"type": "object", "required": ["name"]}},
                "affinity": {"type": "object", "properties": {"nodeAffinity": {"not": {}}}},
                "serviceAccountName": {"type": "string"},
                "nodeName": {"not": {}},
            },
        },
    },
}
_VALIDATOR = Draft202012Validator(SCHEMA)
KEPT = 1024  # templates whose problems are remembered
_lock = threading.Lock()
_known: OrderedDict[str, tuple[tuple[str, str], ...]] = OrderedDict()

_CONST_FIXES = {  # the toleration rules of `_TOLERATION`, by the field a `const` fails on
    "effect": "tolerationSeconds only applies to effect 'NoExecute'",
    "value": "a toleration with operator 'Exists' takes no value",
    "operator": "a toleration with an empty key must use operator 'Exists' (it tolerates every taint)",
}
_FIXES = {
    "nodeName": "remove it: heterojob places each replica (choose with spec.devices and spec.regions)",
    "nodeAffinity": "remove it: heterojob places each replica (choose with spec.devices and spec.regions)",
}


def problems(template: Any) -> list[tuple[str, str]]:
    """Every shape problem of a pod template: (path below the template, e.g. `.spec.containers[0].env`,
    what is wrong and what would do), or []. Remembered for the last `KEPT` templates (by their JSON): the jobs
    of a sweep, a pipeline or a resubmission share one, and the check was most of a new job's parse."""
    try:
        key = json.dumps(template, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):  # not JSON (no template from the API server is): checked afresh
        return _problems(template)
    with _lock:
        found = _known.get(key)
        if found is not None:
            _known.move_to_end(key)
            return list(found)
    found = tuple(_problems(template))
    with _lock:
        _known[key] = found
        while len(_known) > KEPT:
            _known.popitem(last=False)
    return list(found)


def _problems(template: Any) -> list[tuple[str, str]]:
    out = []
    for error in sorted(_VALIDATOR.iter_errors(template), key=lambda e: list(map(str, e.absolute_path))):
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        out.append((path, _describe(error)))
    return out


def _describe(error: Any) -> str:
    if error.validator == "not":
        field = str(error.absolute_path[-1]) if error.absolute_path else ""
        return f"not allowed; {_FIXES.get(field, 'remove it')}"
    if error.validator == "type":
        return f"must be {_article(error.validator_value)}, not {_kind(error.instance)} {error.instance!r:.60}"
    if error.validator == "pattern" and error.validator_value == DNS1123_LABEL_RE:
        return (f"invalid name {error.instance!r}: lower-case letters, digits and '-', starting and ending with a "
                "letter or digit (RFC 1123 label)")
    if error.validator == "anyOf" and error.absolute_path and error.absolute_path[-1] == "key":
        return (f"invalid key {error.instance!r:.80}: a label key, e.g. 'gpu' or 'example.com/gpu-health' (letters, "
                "digits, '-', '_' and '.', starting and ending with a letter or digit, at most 63 after the prefix)")
    if error.validator == "pattern" and error.validator_value == LABEL_VALUE_RE:
        return (f"invalid value {error.instance!r:.80}: a label value (at most 63 letters, digits, '-', '_' and '.', "
                "starting and ending with a letter or digit)")
    if error.validator == "anyOf":
        return f"invalid quantity {error.instance!r}: e.g. '8', '500m', '64Gi'"
    if error.validator == "required" and error.validator_value == ["effect"]:
        return "effect: 'NoExecute' is required when tolerationSeconds is set"
    if error.validator == "required" and error.validator_value == ["operator"]:
        return "operator: 'Exists' is required when the key is empty (a toleration of every taint)"
    if error.validator == "required":
        return error.message.replace("'", "")
    field = str(error.absolute_path[-1]) if error.absolute_path else ""
    if error.validator == "const" and field in _CONST_FIXES:
        return f"{error.instance!r:.60} is not allowed: {_CONST_FIXES[field]}"
    return error.message


def _kind(value: Any) -> str:
    return {"str": "a string", "list": "a list", "dict": "an object", "int": "a number", "float": "a number",
            "bool": "a boolean", "NoneType": "null"}.get(type(value).__name__, type(value).__name__)


def _article(kind: Any) -> str:
    names = {"object": "an object (a mapping)", "array": "a list", "string": "a string", "integer": "an integer"}
    return names.get(kind, str(kind))
