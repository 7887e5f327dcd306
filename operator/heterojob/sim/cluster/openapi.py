"""OpenAPI documents built from what the emulator serves, so `kubectl explain` and kubectl's validation work.

- `/openapi/v3` (index) and `/openapi/v3/apis/{group}/{version}` (`/openapi/v3/api/v1`): OpenAPI 3.0 JSON with a
  PATCH operation per resource carrying `x-kubernetes-group-version-kind` and the `dryRun`/`fieldValidation`
  query parameters (kubectl >= 1.27 looks there to decide on server-side field validation), and the custom
  resources' schemas from their posted CRDs (as kube-apiserver v1.32 publishes them: `metadata` refers to
  ObjectMeta).
- `/openapi/v2`: Swagger 2.0, as protobuf (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`,
  gnostic's openapi_v2.Document, what kubectl 1.20's validation, explain and dry-run check download) or JSON.
  As the real server does for v2, `nullable`, `anyOf`/`oneOf`/`allOf`/`not` and int-or-string types are dropped,
  and a `x-kubernetes-preserve-unknown-fields` node keeps no type or properties, so kubectl accepts anything there.
Built-in kinds get their schemas from the Kubernetes v1.32 definitions bundled with the `kubernetes-validate`
package when it is installed (a test extra; `scripts/install-deps` installs it), so `kubectl explain pod` works;
without it they have paths (for the verifiers) but no schemas.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import struct
from collections.abc import Mapping
from typing import Any

import yaml

from heterojob.sim.cluster.errors import ApiError

PROTOBUF = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"  # what clients ask for
PROTOBUF_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"  # what the server answers
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_META_FIELDS = {
    "name": {"type": "string", "description": "Name must be unique within a namespace."},
    "generateName": {"type": "string", "description": "An optional prefix used to generate a unique name."},
    "namespace": {"type": "string", "description": "The namespace of the object."},
    "labels": {"type": "object", "additionalProperties": {"type": "string"},
               "description": "Map of string keys and values that can be used to organize and categorize objects."},
    "annotations": {"type": "object", "additionalProperties": {"type": "string"},
                    "description": "Unstructured key value map stored with a resource."},
    "finalizers": {"type": "array", "items": {"type": "string"},
                   "description": "Must be empty before the object is deleted from the registry."},
    "ownerReferences": {"type": "array", "items": {"type": "object"},
                        "description": "List of objects depended by this object."},
    "uid": {"type": "string", "description": "UID is the unique in time and space value for this object."},
    "resourceVersion": {"type": "string", "description": "An opaque value that represents the internal version."},
    "generation": {"type": "integer", "format": "int64",
                   "description": "A sequence number representing a specific generation of the desired state."},
    "creationTimestamp": {"type": "string", "format": "date-time",
                          "description": "The server time when this object was created."},
    "deletionTimestamp": {"type": "string", "format": "date-time",
                          "description": "RFC 3339 date and time at which this resource will be deleted."},
    "deletionGracePeriodSeconds": {"type": "integer", "format": "int64",
                                   "description": "Seconds allowed for this object to gracefully terminate."},
    "managedFields": {"type": "array", "items": {"type": "object"},
                      "description": "Maps workflow-id and version to the set of fields managed by that workflow."},
    "selfLink": {"type": "string", "description": "Deprecated."},
}
OBJECT_META_SCHEMA = {"type": "object", "description": "ObjectMeta is metadata that all persisted resources must "
                      "have, which includes all objects users must create.", "properties": _META_FIELDS}


BUILTIN_VERSION = "v1.32.0"
_REF = "#/$defs/"


@functools.cache
def builtin_definitions() -> dict[str, dict[str, Any]]:
    """Kubernetes' own definitions (OpenAPI names -> schema, refs as `#/$defs/<name>`); {} when not installed."""
    try:
        import kubernetes_validate  # type: ignore[import-untyped]  # it ships no type hints
    except ImportError:
        return {}
    from pathlib import Path

    path = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"{BUILTIN_VERSION}-local" \
        / "_definitions.json"
    if not path.exists():
        return {}
    defs = {name: _from_json_schema(d) for name, d in json.loads(path.read_text())["$defs"].items()}
    for d in defs.values():  # kubernetes-validate pins apiVersion and kind; the published schemas do not
        for key in ("apiVersion", "kind"):
            (d.get("properties") or {}).get(key, {}).pop("enum", None)
    return defs


def _from_json_schema(node: Any) -> Any:
    """kubernetes-validate's JSON-schema spelling back to OpenAPI's: `["string", "null"]` -> `string`,
    int-or-string and quantity `oneOf`s -> untyped with `x-kubernetes-int-or-string` / format `quantity`."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: _from_json_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _from_json_schema(value)
        elif key in ("oneOf", "anyOf", "type") or key == "allOf" and isinstance(value, list):
            continue
        else:
            out[key] = copy.deepcopy(value)
    types = node.get("type")
    types = [t for t in ([types] if isinstance(types, str) else types or []) if t != "null"]
    if len(types) == 1:
        out["type"] = types[0]
    alternatives = node.get("oneOf") if isinstance(node.get("oneOf"), list) else []
    kinds = {t for alt in alternatives if isinstance(alt, dict)
             for t in ([alt.get("type")] if isinstance(alt.get("type"), str) else alt.get("type") or [])
             if t != "null"}
    if kinds == {"string", "integer"}:
        out["x-kubernetes-int-or-string"] = True
    elif kinds == {"string", "number"}:
        out["format"] = "quantity"
    return out


def _refs(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF):
            found.add(ref[len(_REF):])
        for v in node.values():
            _refs(v, found)
    elif isinstance(node, list):
        for v in node:
            _refs(v, found)


def _closure(names: set[str], defs: Mapping[str, Any]) -> set[str]:
    todo, seen = list(names), set()
    while todo:
        name = todo.pop()
        if name in seen or name not in defs:
            continue
        seen.add(name)
        more: set[str] = set()
        _refs(defs[name], more)
        todo.extend(more - seen)
    return seen


def _rebase(node: Any, prefix: str) -> Any:
    if isinstance(node, dict):
        return {k: (prefix + v[len(_REF):] if k == "$ref" and isinstance(v, str) and v.startswith(_REF)
                    else _rebase(v, prefix)) for k, v in node.items()}
    if isinstance(node, list):
        return [_rebase(v, prefix) for v in node]
    return node


def _builtin_schemas(gvks: set[tuple[str, str, str]], prefix: str) -> dict[str, Any]:
    """The built-in definitions for these kinds and everything they refer to, refs rebased onto `prefix`."""
    defs = builtin_definitions()
    roots = {name for name, d in defs.items()
             for gvk in d.get("x-kubernetes-group-version-kind") or []
             if (gvk.get("group", ""), gvk.get("version", ""), gvk.get("kind", "")) in gvks}
    return {name: _rebase(defs[name], prefix) for name in _closure(roots, defs)}


def _definition_name(group: str, version: str, kind: str) -> str:
    if not group:
        return f"io.k8s.api.core.{version}.{kind}"
    return ".".join(reversed(group.split("."))) + f".{version}.{kind}"


def _resources(emulator: Any) -> list[tuple[str, str, str, Any]]:
    return [(r.group or "", r.version, r.plural, emulator.resources[r]) for r in emulator.resources
            if r.version and r.plural and r.group is not None]


def _kind_schema(emulator: Any, group: str, version: str, plural: str, kind: str, ref_prefix: str
                 ) -> dict[str, Any] | None:
    crd_schema = emulator.schema_of(group, version, plural)
    if crd_schema is None:
        return None
    out = copy.deepcopy(crd_schema)
    props = out.setdefault("properties", {})
    props["apiVersion"] = {"type": "string", "description": "APIVersion defines the versioned schema of this "
                           "representation of an object."}
    props["kind"] = {"type": "string", "description": "Kind is a string value representing the REST resource this "
                     "object represents."}
    props["metadata"] = {"$ref": f"{ref_prefix}{OBJECT_META}", "description": "Standard object's metadata."}
    out["x-kubernetes-group-version-kind"] = [{"group": group, "kind": kind, "version": version}]
    return out


def _patch_path(group: str, version: str, plural: str, kind: str, namespaced: bool) -> tuple[str, str]:
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    ns = "/namespaces/{namespace}" if namespaced else ""
    return f"{base}{ns}/{plural}/{{name}}", f"patch{kind}"


_QUERY = [("dryRun", "When present, indicates that modifications should not be persisted."),
          ("fieldManager", "fieldManager is a name associated with the actor or entity that is making these "
                           "changes."),
          ("fieldValidation", "fieldValidation instructs the server on how to handle objects in the request "
                              "containing unknown or duplicate fields: Ignore, Warn (the default) or Strict.")]


def v3_index(emulator: Any) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for group, version, _, _ in _resources(emulator):
        key = f"apis/{group}/{version}" if group else f"api/{version}"
        digest = hashlib.sha256(json.dumps(v3_group(emulator, group, version), sort_keys=True).encode()
                                ).hexdigest()[:32].upper()
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
    return {"paths": paths}


def v3_group(emulator: Any, group: str, version: str) -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    for g, v, plural, info in _resources(emulator):
        if (g, v) != (group, version):
            continue
        kind = info.kind or plural.capitalize()
        found = _kind_schema(emulator, g, v, plural, kind, "#/components/schemas/")
        if found is not None:
            schemas[_definition_name(g, v, kind)] = found
            schemas[OBJECT_META] = OBJECT_META_SCHEMA
        path, op_id = _patch_path(g, v, plural, kind, bool(info.namespaced))
        paths[path] = {"patch": {
            "operationId": op_id, "description": f"partially update the specified {kind}",
            "parameters": [{"name": n, "in": "query", "description": d, "schema": {"type": "string",
                                                                                 "uniqueItems": True}}
                           for n, d in _QUERY],
            "responses": {"200": {"description": "OK"}},
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": {"group": g, "kind": kind, "version": v}}}
    if not paths:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    gvks = {(g, v, info.kind or plural.capitalize()) for g, v, plural, info in _resources(emulator)
            if (g, v) == (group, version) and emulator.schema_of(g, v, plural) is None}
    builtin = _builtin_schemas(gvks, "#/components/schemas/")
    if schemas:  # custom resources refer to the real ObjectMeta when the definitions are there
        builtin |= _builtin_schemas_named({OBJECT_META}, "#/components/schemas/")
    schemas = {**schemas, **builtin}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0"}, "paths": paths,
            "components": {"schemas": schemas}}


def _v2_schema(node: Any) -> Any:
    """A CRD schema node as Swagger 2.0 publishes it (see the module docstring)."""
    if not isinstance(node, Mapping):
        return node
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return {k: node[k] for k in ("description",) if k in node}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("nullable", "anyOf", "oneOf", "allOf", "not") or key.startswith("x-kubernetes-int-or-string"):
            continue
        if key == "properties":
            out[key] = {k: _v2_schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, Mapping):
            out[key] = _v2_schema(value)
        else:
            out[key] = copy.deepcopy(value)
    if node.get("nullable") or node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
    return out


def _builtin_schemas_named(names: set[str], prefix: str) -> dict[str, Any]:
    defs = builtin_definitions()
    return {name: _rebase(defs[name], prefix) for name in _closure(names, defs)}


def v2_document(emulator: Any) -> dict[str, Any]:
    builtin = {name: _v2_schema(d) for name, d in _builtin_schemas_named(set(builtin_definitions()),
                                                                         "#/definitions/").items()}
    definitions: dict[str, Any] = {OBJECT_META: OBJECT_META_SCHEMA, **builtin}
    paths: dict[str, Any] = {}
    for g, v, plural, info in _resources(emulator):
        kind = info.kind or plural.capitalize()
        found = _kind_schema(emulator, g, v, plural, kind, "#/definitions/")
        if found is not None:
            definitions[_definition_name(g, v, kind)] = _v2_schema(found) | {
                "x-kubernetes-group-version-kind": found["x-kubernetes-group-version-kind"]}
        path, op_id = _patch_path(g, v, plural, kind, bool(info.namespaced))
        paths[path] = {"patch": {
            "operationId": op_id, "description": f"partially update the specified {kind}",
            "parameters": [{"name": n, "in": "query", "type": "string", "uniqueItems": True, "description": d}
                           for n, d in _QUERY],
            "responses": {"200": {"description": "OK"}},
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": {"group": g, "kind": kind, "version": v}}}
    return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.32.0"}, "paths": paths,
            "definitions": definitions}


# --- protobuf (gnostic openapi_v2.Document), encoded by hand: only the fields kubectl reads --------------

def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num: int, wire: int) -> bytes:
    return _varint(num << 3 | wire)


def _msg(num: int, payload: bytes) -> bytes:
    return _field(num, 2) + _varint(len(payload)) + payload


def _str(num: int, text: str) -> bytes:
    return _msg(num, text.encode())


def _bool(num: int, value: bool) -> bytes:
    return _field(num, 0) + _varint(1 if value else 0) if value else b""


def _int(num: int, value: int) -> bytes:
    return _field(num, 0) + _varint(int(value))


def _double(num: int, value: float) -> bytes:
    return _field(num, 1) + struct.pack("<d", float(value))


def _any(value: Any) -> bytes:
    return _str(2, yaml.safe_dump(value, default_flow_style=False) if isinstance(value, (dict, list))
                else json.dumps(value))


def _named_any(name: str, value: Any) -> bytes:
    return _str(1, name) + _msg(2, _any(value))


def _pb_schema(s: Mapping[str, Any]) -> bytes:
    out = b""
    if "$ref" in s:
        out += _str(1, s["$ref"])
    for num, key in ((2, "format"), (3, "title"), (4, "description"), (13, "pattern")):
        if isinstance(s.get(key), str):
            out += _str(num, s[key])
    if "default" in s:
        out += _msg(5, _any(s["default"]))
    for num, key in ((6, "multipleOf"), (7, "maximum"), (9, "minimum")):
        if isinstance(s.get(key), (int, float)):
            out += _double(num, s[key])
    out += _bool(8, bool(s.get("exclusiveMaximum"))) + _bool(10, bool(s.get("exclusiveMinimum")))
    for num, key in ((11, "maxLength"), (12, "minLength"), (14, "maxItems"), (15, "minItems"),
                     (17, "maxProperties"), (18, "minProperties")):
        if isinstance(s.get(key), int):
            out += _int(num, s[key])
    out += _bool(16, bool(s.get("uniqueItems")))
    for name in s.get("required") or []:
        out += _str(19, name)
    for value in s.get("enum") or []:
        out += _msg(20, _any(value))
    extra = s.get("additionalProperties")
    if isinstance(extra, Mapping):
        out += _msg(21, _msg(1, _pb_schema(extra)))
    elif isinstance(extra, bool):
        out += _msg(21, _field(2, 0) + _varint(int(extra)))
    if isinstance(s.get("type"), str):
        out += _msg(22, _str(1, s["type"]))
    if isinstance(s.get("items"), Mapping):
        out += _msg(23, _msg(1, _pb_schema(s["items"])))
    if isinstance(s.get("properties"), Mapping):
        out += _msg(25, b"".join(_msg(1, _str(1, k) + _msg(2, _pb_schema(v))) for k, v in s["properties"].items()))
    for key, value in s.items():
        if key.startswith("x-"):
            out += _msg(31, _named_any(key, value))
    return out


def _pb_operation(op: Mapping[str, Any]) -> bytes:
    out = _str(3, op.get("description", "")) + _str(5, op.get("operationId", ""))
    for p in op.get("parameters") or []:
        query = _str(2, "query") + _str(3, p.get("description", "")) + _str(4, p["name"]) + _str(6, "string") \
            + _bool(20, True)
        out += _msg(8, _msg(1, _msg(2, _msg(3, query))))
    for key, value in op.items():
        if key.startswith("x-"):
            out += _msg(13, _named_any(key, value))
    return out


def v2_protobuf(doc: Mapping[str, Any]) -> bytes:
    info = _str(1, doc["info"]["title"]) + _str(2, doc["info"]["version"])
    paths = b"".join(_msg(2, _str(1, path) + _msg(2, _msg(8, _pb_operation(item["patch"]))))
                     for path, item in doc["paths"].items())
    definitions = b"".join(_msg(1, _str(1, name) + _msg(2, _pb_schema(schema)))
                           for name, schema in doc["definitions"].items())
    return _str(1, doc["swagger"]) + _msg(2, info) + _msg(8, paths) + _msg(9, definitions)


def serve(emulator: Any, parts: list[str], accept: str) -> tuple[bytes, str]:
    """The body and content type for GET /openapi/{parts...}."""
    if parts == ["v2"]:
        doc = v2_document(emulator)
        if "protobuf" in accept.split(",")[0]:
            return v2_protobuf(doc), PROTOBUF_TYPE
        return json.dumps(doc).encode(), "application/json"
    if parts == ["v3"]:
        return json.dumps(v3_index(emulator)).encode(), "application/json"
    if len(parts) >= 3 and parts[0] == "v3":
        if parts[1] == "api" and len(parts) == 3:
            return json.dumps(v3_group(emulator, "", parts[2])).encode(), "application/json"
        if parts[1] == "apis" and len(parts) == 4:
            return json.dumps(v3_group(emulator, parts[2], parts[3])).encode(), "application/json"
    raise ApiError(404, "NotFound", "the server could not find the requested resource")
