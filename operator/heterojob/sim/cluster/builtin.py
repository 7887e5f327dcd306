"""Validation of built-in objects as kube-apiserver v1.32 applies it (pkg/apis/core/validation, apimachinery's
ObjectMeta and name validation): metadata of every object, and Pods, Services and Namespaces.

Messages and the 400-versus-422 split follow the real server: a quantity that does not parse fails decoding
(400 `Pod in version "v1" cannot be handled as a Pod: quantities must match the regular expression ...`);
everything else is a 422 field error (`spec.containers[0].name: Invalid value: "Main_Container!": a lowercase
RFC 1123 label must consist of ...`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from heterojob.api.names import (
    DNS1035_LABEL, DNS1123_LABEL, DNS1123_SUBDOMAIN, LABEL_VALUE, QUALIFIED_NAME, TAINT_EFFECTS, TOLERATION_OPERATORS,
)
from heterojob.sim.cluster import errors
from heterojob.sim.cluster.errors import ApiError, FieldError

ENV_NAME = "[-._a-zA-Z][-._a-zA-Z0-9]*"
QUANTITY = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"

MSG_LABEL = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
             f"and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
             f"'{DNS1123_LABEL}')")
MSG_SUBDOMAIN = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
                 "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation "
                 f"is '{DNS1123_SUBDOMAIN}')")
MSG_DNS1035 = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
               "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
               f"validation is '{DNS1035_LABEL}')")
MSG_QUALIFIED = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                 "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
                 f"'{QUALIFIED_NAME}')")
MSG_LABEL_VALUE = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                   "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
                   f"'12345', regex used for validation is '{LABEL_VALUE}')")
MSG_ENV = ("a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', and "
           "must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or 'MyEnvName1', regex used for "
           f"validation is '{ENV_NAME}')")


def _full(pattern: str) -> re.Pattern[str]:
    return re.compile(f"^(?:{pattern})$")


_LABEL, _SUBDOMAIN, _DNS1035 = _full(DNS1123_LABEL), _full(DNS1123_SUBDOMAIN), _full(DNS1035_LABEL)
_QUALIFIED, _LABEL_VALUE, _ENV = _full(QUALIFIED_NAME), _full(LABEL_VALUE), _full(ENV_NAME)
_QUANTITY = re.compile(QUANTITY)
_SUFFIX = {"": 1, "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": 10**3, "M": 10**6,
           "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
           "Pi": 2**50, "Ei": 2**60}
TOTAL_ANNOTATION_SIZE = 256 * 1024


class QuantityError(ValueError):
    pass


def quantity(value: Any) -> Decimal:
    """resource.Quantity's parser: '500m', '16Gi', '1e3', 8 -> a Decimal; QuantityError when it does not parse."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise QuantityError(value)
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    match = _QUANTITY.match(value.strip() if value == value.strip() else "\0")
    if not match:
        raise QuantityError(value)
    number, suffix = match.groups()
    try:
        base = Decimal(number)
    except InvalidOperation:
        raise QuantityError(value) from None
    if suffix in _SUFFIX:
        return base * Decimal(_SUFFIX[suffix])
    if suffix[:1] in "eE" and re.fullmatch(r"[eE][-+]?[0-9]+", suffix):
        return base * (Decimal(10) ** int(suffix[1:]))
    raise QuantityError(value)


def undecodable(kind: str, api_version: str, detail: str) -> ApiError:
    version = api_version.split("/")[-1]
    return ApiError(400, "BadRequest", f'{kind} in version "{version}" cannot be handled as a {kind}: {detail}')


def qualified_name_errors(key: str) -> list[str]:
    """apimachinery v0.32 validation.IsQualifiedName: an optional DNS subdomain prefix and '/', then a name of at
    most 63 characters; one message per fault, in its words (a key with two '/' gets one message)."""
    parts = key.split("/")
    if len(parts) > 2:
        return ["a qualified name " + MSG_QUALIFIED.removeprefix("name part ")
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    found: list[str] = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            found.append("prefix part must be non-empty")
        else:
            if len(prefix) > 253:
                found.append("prefix part must be no more than 253 characters")
            if not _SUBDOMAIN.match(prefix):
                found.append("prefix part " + MSG_SUBDOMAIN)
    if not name:
        found.append("name part must be non-empty")
    elif len(name) > 63:
        found.append("name part must be no more than 63 characters")
    if not _QUALIFIED.match(name):
        found.append(MSG_QUALIFIED)
    return found


def label_value_errors(value: str) -> list[str]:
    """apimachinery v0.32 validation.IsValidLabelValue."""
    found = ["must be no more than 63 characters"] if len(value) > 63 else []
    return found + ([] if _LABEL_VALUE.match(value) else [MSG_LABEL_VALUE])


def _qualified_key(key: str, where: str) -> list[FieldError]:
    return [errors.invalid(where, key, msg) for msg in qualified_name_errors(key)]


def validate_metadata(meta: Mapping[str, Any], *, name_rule: str = "subdomain") -> list[FieldError]:
    """ObjectMeta: the name (subdomain, label or DNS-1035 label per kind), labels, annotations."""
    found: list[FieldError] = []
    name = meta.get("name")
    if isinstance(name, str) and name:
        rule = {"subdomain": (_SUBDOMAIN, 253, MSG_SUBDOMAIN), "label": (_LABEL, 63, MSG_LABEL),
                "dns1035": (_DNS1035, 63, MSG_DNS1035)}[name_rule]
        if len(name) > rule[1]:
            found.append(errors.invalid("metadata.name", name, f"must be no more than {rule[1]} characters"))
        elif not rule[0].match(name):
            found.append(errors.invalid("metadata.name", name, rule[2]))
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        found.append(errors.invalid("metadata.labels", labels, "must be a map of strings"))
        labels = {}
    for key, value in labels.items():
        found.extend(_qualified_key(key, "metadata.labels"))
        if not isinstance(value, str):
            found.append(errors.invalid("metadata.labels", value, "must be a string"))
        else:
            found.extend(errors.invalid("metadata.labels", value, msg) for msg in label_value_errors(value))
    annotations = meta.get("annotations") or {}
    total = 0
    for key, value in annotations.items() if isinstance(annotations, dict) else ():
        # IsQualifiedName of the key in lower case (case does not matter), the error naming the key as given
        found.extend(errors.invalid("metadata.annotations", key, msg) for msg in qualified_name_errors(key.lower()))
        total += len(key) + len(str(value))
    if total > TOTAL_ANNOTATION_SIZE:
        found.append(errors.too_long("metadata.annotations", TOTAL_ANNOTATION_SIZE))
    return found


def _resources(res: Mapping[str, Any], where: str, kind: str, api_version: str) -> list[FieldError]:
    found: list[FieldError] = []
    parsed: dict[str, dict[str, Decimal]] = {}
    for section in ("limits", "requests"):
        values = res.get(section) or {}
        parsed[section] = {}
        for rname, raw in values.items():
            try:
                amount = quantity(raw)
            except QuantityError:
                raise undecodable(kind, api_version, f"quantities must match the regular expression '{QUANTITY}'"
                                  ) from None
            parsed[section][rname] = amount
            field = f"{where}.{section}[{rname}]"
            if amount < 0:
                found.append(errors.invalid(field, str(raw), "must be greater than or equal to 0"))
            native = rname in ("cpu", "memory", "ephemeral-storage", "storage") or rname.startswith("hugepages-")
            if not native and "/" not in rname:
                found.append(errors.invalid(field, rname, "must be a standard resource type or fully qualified"))
            if not native and amount != amount.to_integral_value():
                found.append(errors.invalid(field, str(raw), "must be an integer"))
    for rname, req in parsed["requests"].items():
        limit = parsed["limits"].get(rname)
        native = rname in ("cpu", "memory", "ephemeral-storage", "storage") or rname.startswith("hugepages-")
        raw = (res.get("requests") or {})[rname]
        if limit is None:
            if not native:
                found.append(errors.required(f"{where}.limits", "Limit must be set for non overcommitable resources"))
            continue
        if native and req > limit:
            found.append(errors.invalid(f"{where}.requests", str(raw),
                                        f"must be less than or equal to {rname} limit of {(res.get('limits') or {})[rname]}"))
        if not native and req != limit:
            found.append(errors.invalid(f"{where}.requests[{rname}]", str(raw),
                                        f"must be equal to {rname} limit of {(res.get('limits') or {})[rname]}"))
    return found


def _container(c: Any, where: str, names: set[str], kind: str, api_version: str) -> list[FieldError]:
    if not isinstance(c, dict):
        return [errors.invalid(where, c, "must be an object")]
    found: list[FieldError] = []
    name = c.get("name")
    if not name:
        found.append(errors.required(f"{where}.name"))
    elif not isinstance(name, str) or len(name) > 63 or not _LABEL.match(name):
        found.append(errors.invalid(f"{where}.name", name, MSG_LABEL))
    elif name in names:
        found.append(errors.duplicate(f"{where}.name", name))
    else:
        names.add(name)
    if not c.get("image"):
        found.append(errors.required(f"{where}.image"))
    for i, env in enumerate(c.get("env") or []):
        ename = env.get("name") if isinstance(env, dict) else None
        if not ename:
            found.append(errors.required(f"{where}.env[{i}].name"))
        elif not _ENV.match(ename):
            found.append(errors.invalid(f"{where}.env[{i}].name", ename, MSG_ENV))
    for i, port in enumerate(c.get("ports") or []):
        number = port.get("containerPort") if isinstance(port, dict) else None
        if number is None:
            found.append(errors.required(f"{where}.ports[{i}].containerPort"))
        elif not isinstance(number, int) or not 1 <= number <= 65535:
            found.append(errors.invalid(f"{where}.ports[{i}].containerPort", number,
                                        "must be between 1 and 65535, inclusive"))
    found.extend(_resources(c.get("resources") or {}, f"{where}.resources", kind, api_version))
    return found


def _go_type(value: Any) -> str:
    """What Go's encoding/json calls a JSON value's type in `cannot unmarshal <type> into ...`."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(value), "value")


def validate_tolerations(tolerations: Any, where: str, kind: str = "Pod", api_version: str = "v1"
                         ) -> list[FieldError]:
    """`spec.tolerations` as kube-apiserver v1.32 decodes and validates it (pkg/apis/core/validation,
    ValidateTolerations): a wrong JSON type fails decoding (400); a key must be a qualified name, an empty key
    needs operator Exists, tolerationSeconds needs effect NoExecute, Exists takes no value, Equal (or none) a
    label value; operators Equal|Exists, effects NoSchedule|PreferNoSchedule|NoExecute (or none: all)."""
    if tolerations is None:
        return []
    if not isinstance(tolerations, list):
        raise undecodable(kind, api_version, f"json: cannot unmarshal {_go_type(tolerations)} into Go struct field "
                          f"PodSpec.{where} of type []v1.Toleration")
    found: list[FieldError] = []
    for i, t in enumerate(tolerations):
        if not isinstance(t, dict):
            raise undecodable(kind, api_version, f"json: cannot unmarshal {_go_type(t)} into Go struct field "
                              f"PodSpec.{where} of type v1.Toleration")
        seconds = t.get("tolerationSeconds")
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)):
            raise undecodable(kind, api_version, f"json: cannot unmarshal {_go_type(seconds)} into Go struct field "
                              f"Toleration.{where}.tolerationSeconds of type int64")
        for name in ("key", "operator", "value", "effect"):
            if t.get(name) is not None and not isinstance(t[name], str):
                raise undecodable(kind, api_version, f"json: cannot unmarshal {_go_type(t[name])} into Go struct "
                                  f"field Toleration.{where}.{name} of type string")
        at = f"{where}[{i}]"
        key, operator, value, effect = (t.get(n) or "" for n in ("key", "operator", "value", "effect"))
        if key:
            found.extend(_qualified_key(key, f"{at}.key"))
        elif operator != "Exists":
            found.append(errors.invalid(f"{at}.operator", operator, "operator must be Exists when `key` is empty, "
                                        'which means "match all values and all keys"'))
        if seconds is not None and effect != "NoExecute":
            found.append(errors.invalid(f"{at}.effect", effect, "effect must be 'NoExecute' when `tolerationSeconds` "
                                        "is set"))
        if operator in ("", "Equal"):
            if len(value) > 63:
                found.append(errors.invalid(f"{at}.operator", value, "must be no more than 63 characters"))
            elif not _LABEL_VALUE.match(value):
                found.append(errors.invalid(f"{at}.operator", value, MSG_LABEL_VALUE))
        elif operator == "Exists":
            if value:
                found.append(errors.invalid(f"{at}.operator", t, "value must be empty when `operator` is 'Exists'"))
        else:
            found.append(errors.not_supported(f"{at}.operator", operator, TOLERATION_OPERATORS))
        if effect and effect not in TAINT_EFFECTS:
            found.append(errors.not_supported(f"{at}.effect", effect, TAINT_EFFECTS))
    return found


def validate_pod_spec(spec: Any, where: str = "spec", kind: str = "Pod", api_version: str = "v1") -> list[FieldError]:
    if not isinstance(spec, dict):
        return [errors.required(where)]
    found: list[FieldError] = []
    containers = spec.get("containers")
    names: set[str] = set()
    if not containers:
        found.append(errors.required(f"{where}.containers"))
    for i, c in enumerate(containers or []):
        found.extend(_container(c, f"{where}.containers[{i}]", names, kind, api_version))
    for i, c in enumerate(spec.get("initContainers") or []):
        found.extend(_container(c, f"{where}.initContainers[{i}]", names, kind, api_version))
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in ("Always", "OnFailure", "Never"):
        found.append(errors.not_supported(f"{where}.restartPolicy", policy, ["Always", "OnFailure", "Never"]))
    for key in ("nodeSelector",):
        for label, value in (spec.get(key) or {}).items():
            found.extend(_qualified_key(label, f"{where}.{key}"))
            if not isinstance(value, str) or not _LABEL_VALUE.match(value):
                found.append(errors.invalid(f"{where}.{key}", value, MSG_LABEL_VALUE))
    sa = spec.get("serviceAccountName")
    if sa and not _SUBDOMAIN.match(sa):
        found.append(errors.invalid(f"{where}.serviceAccountName", sa, MSG_SUBDOMAIN))
    node = spec.get("nodeName")
    if node and not _SUBDOMAIN.match(node):
        found.append(errors.invalid(f"{where}.nodeName", node, MSG_SUBDOMAIN))
    found.extend(validate_tolerations(spec.get("tolerations"), f"{where}.tolerations", kind, api_version))
    return found


def default_pod(pod: dict[str, Any]) -> None:
    """The defaults the server fills in on create (the ones clients read back)."""
    spec = pod.setdefault("spec", {})
    if isinstance(spec, dict):
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        for c in spec.get("containers") or []:
            if isinstance(c, dict):
                c.setdefault("imagePullPolicy", "Always" if str(c.get("image", "")).endswith(":latest")
                             or ":" not in str(c.get("image", "")).rsplit("/", 1)[-1] else "IfNotPresent")
                c.setdefault("terminationMessagePath", "/dev/termination-log")
                c.setdefault("terminationMessagePolicy", "File")
                res = c.get("resources")
                if isinstance(res, dict) and res.get("limits") and not res.get("requests"):
                    res["requests"] = dict(res["limits"])  # requests default to limits


def _qos(pod: Mapping[str, Any]) -> str:
    containers = (pod.get("spec") or {}).get("containers") or []
    reqs = [((c.get("resources") or {}).get("requests") or {}) for c in containers]
    lims = [((c.get("resources") or {}).get("limits") or {}) for c in containers]
    if not any(r.get(k) or lim.get(k) for r, lim in zip(reqs, lims) for k in ("cpu", "memory")):
        return "BestEffort"
    if all(lim.get(k) and quantity(lim[k]) == quantity(r.get(k, lim[k])) for r, lim in zip(reqs, lims)
           for k in ("cpu", "memory")):
        return "Guaranteed"
    return "Burstable"


def qos_class(pod: Mapping[str, Any]) -> str:
    try:
        return _qos(pod)
    except QuantityError:
        return "BestEffort"


MUTABLE_POD_SPEC = "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`," \
                   "`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` " \
                   "(allow it to be set to 1 if it was previously negative)"


def validate_pod_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FieldError]:
    """Pod specs are immutable but for a few fields (ValidatePodUpdate)."""
    def comparable(spec: Any) -> Any:
        if not isinstance(spec, dict):
            return spec
        out = {k: v for k, v in spec.items() if k not in ("activeDeadlineSeconds", "tolerations",
                                                          "terminationGracePeriodSeconds")}
        for key in ("containers", "initContainers"):
            if isinstance(out.get(key), list):
                out[key] = [{k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c
                            for c in out[key]]
        return out
    found: list[FieldError] = []
    if not _only_added(old.get("spec"), new.get("spec")):
        found.append(errors.forbidden("spec.tolerations", "existing toleration can not be modified except its "
                                      "tolerationSeconds"))
    if comparable(old.get("spec")) != comparable(new.get("spec")):
        found.append(errors.forbidden("spec", f"pod updates may not change fields other than {MUTABLE_POD_SPEC}"))
    return found


def _only_added(old_spec: Any, new_spec: Any) -> bool:
    """validateOnlyAddedTolerations (v1.32): every old toleration is still there, but for its tolerationSeconds."""
    def listed(spec: Any) -> list[tuple[str, ...]]:
        items = spec.get("tolerations") if isinstance(spec, dict) else None
        return [tuple(str(t.get(k) or "") for k in ("key", "operator", "value", "effect"))
                for t in items if isinstance(t, dict)] if isinstance(items, list) else []
    kept = set(listed(new_spec))
    return all(t in kept for t in listed(old_spec))


def validate(kind_key: tuple[str, str], obj: dict[str, Any], kind: str, api_version: str) -> list[FieldError]:
    """Field errors of a built-in object on create or update (not the name rule: see `name_rule`)."""
    if kind_key == ("", "pods"):
        return validate_pod_spec(obj.get("spec"), "spec", kind, api_version)
    if kind_key == ("", "services"):
        found: list[FieldError] = []
        spec = obj.get("spec") or {}
        for i, port in enumerate(spec.get("ports") or []):
            number = port.get("port") if isinstance(port, dict) else None
            if not isinstance(number, int) or not 1 <= number <= 65535:
                found.append(errors.invalid(f"spec.ports[{i}].port", number, "must be between 1 and 65535, inclusive"))
        return found
    return []


def name_rule(kind_key: tuple[str, str]) -> str:
    """Which name rule a kind uses: namespaces are labels, services DNS-1035 labels, most others subdomains."""
    if kind_key in (("", "namespaces"),):
        return "label"
    if kind_key in (("", "services"),):
        return "dns1035"
    return "subdomain"


def resolver() -> Callable[[Mapping[str, Any]], Mapping[str, Any]] | None:
    """Follows `$ref`s into Kubernetes' own definitions (None without them; see openapi.builtin_definitions)."""
    from heterojob.sim.cluster.openapi import OBJECT_META, builtin_definitions

    defs = builtin_definitions()
    if not defs:
        return None

    def resolve(schema: Mapping[str, Any]) -> Mapping[str, Any]:
        seen = 0
        while isinstance(schema.get("$ref"), str) and seen < 16:
            ref = schema["$ref"]
            name = OBJECT_META if ref == "ObjectMeta" else ref.rsplit("/", 1)[-1]
            schema = defs.get(name, {})
            seen += 1
        return schema
    return resolve


def definition_of(group: str, version: str, kind: str) -> Mapping[str, Any] | None:
    """Kubernetes' definition of a kind (None: not known, or the definitions not installed)."""
    return _definitions_by_kind().get((group, version, kind))


@functools.cache
def _definitions_by_kind() -> dict[tuple[str, str, str], Mapping[str, Any]]:
    """The definitions by group, version and kind (indexed once: a write of a built-in kind looks its kind up)."""
    from heterojob.sim.cluster.openapi import builtin_definitions

    out: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for d in builtin_definitions().values():
        for gvk in d.get("x-kubernetes-group-version-kind") or []:
            out.setdefault((gvk.get("group", ""), gvk.get("version"), gvk.get("kind")), d)
    return out
