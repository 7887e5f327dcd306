"""CustomResourceDefinitions generated from the API types: one source of truth for schema and code.

Pydantic emits JSON Schema 2020-12; a CRD needs a *structural* OpenAPI v3.0 schema: every node typed,
no `$ref`, no `additionalProperties: false`, boolean `exclusiveMinimum`. `structural()` converts one into
the other; `crd()` wraps it with names, the status subresource and the printer columns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from heterojob.api.accelerator import AcceleratorClass
from heterojob.api.common import ResourceDef
from heterojob.api.job import HeteroJob
from heterojob.api.quota import HeteroQuota
from heterojob.api.region import Region
from heterojob.constants import GROUP, VERSION

RESOURCES: tuple[ResourceDef, ...] = (HeteroJob, HeteroQuota, AcceleratorClass, Region)

_KEEP = {"type", "description", "enum", "minimum", "maximum", "minLength", "maxLength", "pattern",
         "minItems", "maxItems", "required", "format", "default", "items", "properties", "additionalProperties"}


_ORDER = {k: i for i, k in enumerate((
    "description", "type", "enum", "format", "default", "minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum",
    "minLength", "maxLength", "pattern", "minItems", "maxItems", "items", "properties", "required",
    "additionalProperties", "x-kubernetes-preserve-unknown-fields"))}
_BOUNDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})


def structural(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> dict[str, Any]:
    defs = defs if defs is not None else schema.get("$defs", {})
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return structural(merged, defs)
    if "allOf" in schema and len(schema["allOf"]) == 1:  # pydantic < 2.9 wraps a described $ref in allOf
        return structural({**schema["allOf"][0], **{k: v for k, v in schema.items() if k != "allOf"}}, defs)
    if "anyOf" in schema:  # Optional[X]: keep X (absent fields are how we spell "none")
        options = [o for o in schema["anyOf"] if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express a union in a structural schema: {schema['anyOf']}")
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        if rest.get("default", 0) is None:
            rest.pop("default")
        one = structural({**options[0], **rest}, defs)
        if len(options) < len(schema["anyOf"]):
            one["nullable"] = True  # e.g. a rank without data in status.utilization.perReplica
        return one

    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _BOUNDS and isinstance(value, float) and value.is_integer():
            value = int(value)  # pydantic < 2.11 writes a float field's bound 90 as 90.0: one rendering for all
        if key == "exclusiveMinimum":
            out["minimum"], out["exclusiveMinimum"] = value, True
        elif key == "exclusiveMaximum":
            out["maximum"], out["exclusiveMaximum"] = value, True
        elif key == "properties":
            out["properties"] = {name: structural(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out["items"] = structural(value, defs)
        elif key == "additionalProperties":
            if isinstance(value, dict) and value:
                out["additionalProperties"] = structural(value, defs)
            elif value is True or value == {}:
                out["x-kubernetes-preserve-unknown-fields"] = True
            # `false` (extra="forbid") is the structural default once `properties` is given
        elif key in _KEEP and value is not None:
            out[key] = value
    if "type" not in out:
        out["type"] = "object"
    if out["type"] == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    if "properties" in out and "additionalProperties" in out:
        out.pop("additionalProperties")
        out["x-kubernetes-preserve-unknown-fields"] = True
    if out.get("default") == {} or out.get("default") == []:
        out.pop("default")
    # keywords in one order, whatever order the pydantic version emits them in (property order is kept)
    return dict(sorted(out.items(), key=lambda kv: _ORDER.get(kv[0], len(_ORDER))))


# as Kubernetes' own types describe them (kubectl explain pod.apiVersion)
API_VERSION_DOC = ("APIVersion defines the versioned schema of this representation of an object: "
                   f"{GROUP}/{VERSION}")
KIND_DOC = "Kind is a string value representing the REST resource this object represents."
CATEGORY = "heterojob-all"  # `kubectl get heterojob-all`; distinct from every kind's names


def object_schema(res: ResourceDef) -> dict[str, Any]:
    spec = structural(res.spec.model_json_schema(by_alias=True, mode="validation"))
    status = structural(res.status.model_json_schema(by_alias=True, mode="serialization"))
    spec.pop("title", None)
    status.pop("title", None)
    return {
        "type": "object",
        "description": res.description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": API_VERSION_DOC},
            "kind": {"type": "string", "description": KIND_DOC},
            # nothing but the type: the API server rejects any other keyword here, a description included
            # (apiextensions-apiserver schema/validation.go: "must not specify anything other than name and
            # generateName, but metadata is implicitly specified"); kubectl explain shows ObjectMeta's own
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }


def crd(res: ResourceDef) -> dict[str, Any]:
    columns = [
        {k: v for k, v in {
            "name": c.name, "type": c.type, "jsonPath": c.json_path,
            "description": c.description or None, "priority": c.priority or None,
        }.items() if v is not None}
        for c in res.printer_columns
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": res.crd_name},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced" if res.namespaced else "Cluster",
            "names": {
                "kind": res.kind,
                "listKind": f"{res.kind}List",
                "plural": res.plural,
                "singular": res.singular,
                "shortNames": list(res.short_names),
                "categories": [CATEGORY],
            },
            "versions": [{
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": columns,
                "schema": {"openAPIV3Schema": object_schema(res)},
            }],
        },
    }


HEADER = "# Generated from heterojob.api by `heterojob generate`. Do not edit by hand.\n"


def render(res: ResourceDef) -> str:
    return HEADER + yaml.safe_dump(crd(res), sort_keys=False, width=120)


def crd_path(directory: Path, res: ResourceDef) -> Path:
    return directory / f"{res.crd_name}.yaml"


def drifted(directory: Path) -> list[str]:
    """Names of CRD files in `directory` that differ from what the API types generate."""
    stale = []
    for res in RESOURCES:
        path = crd_path(directory, res)
        if not path.exists() or path.read_text() != render(res):
            stale.append(path.name)
    return stale


def write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for res in RESOURCES:
        path = crd_path(directory, res)
        path.write_text(render(res))
        paths.append(path)
    return paths
