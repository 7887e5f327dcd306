"""CRD structural-schema enforcement, as kube-apiserver v1.32 applies it to custom resources.

One step of a custom-resource write: prune fields the schema does not declare (unless
`x-kubernetes-preserve-unknown-fields`), apply `default`s, then validate with `jsonschema` (Draft 4 semantics:
OpenAPI 3.0's boolean `exclusiveMinimum`, plus `nullable` and `x-kubernetes-int-or-string`). Errors are worded
as k8s.io/apiextensions-apiserver's `kubeOpenAPIResultToFieldErrors` words kube-openapi's results:
`spec.priority: Unsupported value: "critical": supported values: "urgent", "high", ...`,
`spec.replicas.min: Invalid value: 0: spec.replicas.min in body should be greater than or equal to 1`,
`spec.x: Invalid value: "string": spec.x in body must be of type integer: "string"`, `spec.devices: Required value`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jsonschema
from jsonschema import Draft4Validator
from jsonschema.exceptions import ValidationError

from heterojob.sim.cluster import errors
from heterojob.sim.cluster.errors import FieldError

_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return {dict: "object", list: "array", str: "string"}.get(type(value), type(value).__name__)


def _is_type(value: Any, wanted: str) -> bool:
    if wanted == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
    if wanted == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    cls = _TYPES.get(wanted)
    return cls is not None and isinstance(value, cls) and not (cls is not bool and isinstance(value, bool))


def _type_keyword(validator: Any, wanted: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if instance is None and schema.get("nullable"):
        return
    for name in ([wanted] if isinstance(wanted, str) else wanted):
        if _is_type(instance, name):
            return
    yield ValidationError(f"must be of type {wanted}", validator="type", validator_value=wanted, instance=instance)


def _nullable_wrap(keyword_fn: Any) -> Any:
    def check(validator: Any, value: Any, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
        if instance is None and schema.get("nullable"):
            return iter(())
        return keyword_fn(validator, value, instance, schema)
    return check


_BASE = Draft4Validator.VALIDATORS
StructuralValidator = jsonschema.validators.extend(
    Draft4Validator,
    {"type": _type_keyword, **{k: _nullable_wrap(_BASE[k]) for k in ("enum", "required", "properties")}},
)


def _path(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _child(parent: str, name: str) -> str:
    return f"{parent}.{name}" if parent else name


def _translate(error: ValidationError) -> list[FieldError]:
    where = _path(error.absolute_path)
    keyword, want, value = error.validator, error.validator_value, error.instance
    body = where or "body"
    if keyword == "required":
        present = value if isinstance(value, dict) else {}
        return [errors.required(_child(where, name)) for name in want if name not in present]
    if keyword == "enum":
        return [errors.not_supported(where, value, [v if isinstance(v, str) else errors.go_value(v) for v in want])]
    if keyword == "type":
        return [FieldError("FieldValueTypeInvalid", where, _json_type(value),
                           f'{body} in body must be of type {want}: "{_json_type(value)}"')]
    if keyword == "maxLength":
        return [errors.too_long(where, int(want))]
    if keyword == "maxItems":
        return [errors.too_many(where, len(value), int(want))]
    words = {
        "minimum": lambda s: (f"should be greater than {want}" if s.get("exclusiveMinimum")
                              else f"should be greater than or equal to {errors.go_value(want)}"),
        "maximum": lambda s: (f"should be less than {want}" if s.get("exclusiveMaximum")
                              else f"should be less than or equal to {errors.go_value(want)}"),
        "minLength": lambda s: f"should be at least {want} chars long",
        "pattern": lambda s: f"should match '{want}'",
        "minItems": lambda s: f"should have at least {want} items",
        "uniqueItems": lambda s: "shouldn't contain duplicates",
        "multipleOf": lambda s: f"should be a multiple of {errors.go_value(want)}",
        "minProperties": lambda s: f"should have at least {want} properties",
        "maxProperties": lambda s: f"should have at most {want} properties",
    }
    if keyword in words:
        return [errors.invalid(where, value, f"{body} in body {words[keyword](error.schema)}")]
    if keyword in ("anyOf", "oneOf", "allOf", "not"):
        return [errors.invalid(where, value, f"{body} in body must validate {keyword} the given schemas")]
    return [errors.invalid(where, value, error.message)]


def compile_schema(schema: Mapping[str, Any], unchanged: frozenset[str] = frozenset()) -> Any:
    """A validator for a CRD's `openAPIV3Schema` (root metadata is checked as ObjectMeta, elsewhere). `unchanged`:
    top-level fields an update leaves as they were, not validated again (ratcheting: a status write does not
    re-check the spec)."""
    root = dict(schema)
    props = dict(root.get("properties") or {})
    props.pop("metadata", None)
    for name in unchanged & props.keys():
        props[name] = {}
    root["properties"] = props
    return StructuralValidator(root)


def validate(obj: Mapping[str, Any], schema: Mapping[str, Any], validator: Any = None) -> list[FieldError]:
    """Field errors of `obj` against a CRD's `openAPIV3Schema` (pass `compile_schema`'s result to reuse it)."""
    validator = validator or compile_schema(schema)
    found: list[FieldError] = []
    for error in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path))):
        found.extend(_translate(error))
    return found


Resolver = Callable[[Mapping[str, Any]], Mapping[str, Any]]


def no_refs(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    return schema


def prune_and_default(obj: dict[str, Any], schema: Mapping[str, Any], resolve: Resolver = no_refs,
                      defaults: bool = True) -> list[str]:
    """Drop undeclared fields and fill defaults in place; the dropped field paths (for warnings/Strict).

    `resolve` follows `$ref`s (built-in kinds' schemas have them; a CRD's structural schema has none). An
    object schema with neither properties nor additionalProperties keeps what it holds (RawExtension-like)."""
    unknown: list[str] = []
    _walk(obj, schema, "", unknown, resolve, defaults, root=True)
    return unknown


def _walk(value: Any, schema: Mapping[str, Any], where: str, unknown: list[str], resolve: Resolver,
          defaults: bool, root: bool = False) -> None:
    schema = resolve(schema)
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields")) or (props is None and extra is None)
        embedded = bool(schema.get("x-kubernetes-embedded-resource"))
        for key in list(value):
            if (root or embedded) and key in ("apiVersion", "kind"):
                continue
            if (root or embedded) and key == "metadata":
                meta = resolve({"$ref": "ObjectMeta"})
                if meta.get("properties") and isinstance(value[key], dict):  # ObjectMeta's fields, when known
                    _walk(value[key], meta, "metadata", unknown, resolve, False)
                continue
            if props is not None and key in props:
                _walk(value[key], props[key], _child(where, key), unknown, resolve, defaults)
            elif isinstance(extra, dict):
                _walk(value[key], extra, _child(where, key), unknown, resolve, defaults)
            elif not preserve and extra is not True:
                unknown.append(_child(where, key))
                del value[key]
        for key, sub in (props or {}).items() if defaults else ():
            if "default" not in sub:
                continue
            if key not in value or (value[key] is None and not sub.get("nullable")):
                value[key] = copy.deepcopy(sub["default"])
                _walk(value[key], sub, _child(where, key), unknown, resolve, defaults)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _walk(item, schema["items"], f"{where}[{i}]", unknown, resolve, defaults)


def version_schema(crd: Mapping[str, Any], version: str) -> dict[str, Any] | None:
    """The `openAPIV3Schema` of one served version of a posted CRD object (None: none given)."""
    spec = crd.get("spec") or {}
    for entry in spec.get("versions") or []:
        if entry.get("name") == version:
            found = ((entry.get("schema") or {}).get("openAPIV3Schema")
                     or ((spec.get("validation") or {}).get("openAPIV3Schema")))
            return copy.deepcopy(found) if found else None
    return None
