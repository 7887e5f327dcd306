"""Decoding the Kubernetes protobuf bodies kubectl >= 1.2x sends from its typed clients.

`kubectl create namespace|configmap|secret|serviceaccount|quota` (v1.32) post `application/vnd.kubernetes.protobuf`:
the 4-byte magic `k8s\\0`, then a `runtime.Unknown` (typeMeta = 1 {apiVersion = 1, kind = 2}, raw = 2) whose
`raw` is the kind's generated message (k8s.io/api/core/v1/generated.proto). Only the kinds and fields below are
decoded (ObjectMeta: name, generateName, namespace, labels, annotations, finalizers); anything else is None and
the server answers 415 as it does for a format it cannot read. Besides those kinds: the bodies `kubectl drain`
(policy/v1 Eviction, meta/v1 DeleteOptions) and `kubectl auth can-i|whoami` (authorization/v1
SelfSubjectAccessReview, SelfSubjectRulesReview; authentication/v1 SelfSubjectReview) send, and what `kubectl
create role|clusterrole|rolebinding|clusterrolebinding|pdb|priorityclass|deployment|job|cronjob|token` send
(`_SCHEMAS`: the fields those commands set; a pod template's containers with name, image, command, args,
workingDir, ports, env, resources, imagePullPolicy, stdin, tty), field numbers from
k8s.io/api/{core,apps,batch,policy,authorization,authentication,rbac,scheduling}/v1/generated.proto and
apimachinery meta/v1 and util/intstr (v1.32). Not decoded (415): e.g. `kubectl autoscale` (autoscaling/v2);
`kubectl apply -f` of any object sends JSON.
"""

from __future__ import annotations

import base64
from typing import Any

MAGIC = b"k8s\x00"
Fields = dict[int, list[Any]]


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def fields(data: bytes) -> Fields:
    """A message's fields by number: varints as int, length-delimited as bytes (fixed widths skipped)."""
    out: Fields = {}
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            size, i = _varint(data, i)
            value, i = data[i:i + size], i + size
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        out.setdefault(num, []).append(value)
    return out


def _str(f: Fields, num: int) -> str | None:
    return f[num][-1].decode() if num in f else None


def _map(f: Fields, num: int, as_bytes: bool = False) -> dict[str, Any] | None:
    if num not in f:
        return None
    out = {}
    for entry in f[num]:
        kv = fields(entry)
        key = kv.get(1, [b""])[-1].decode()
        value = kv.get(2, [b""])[-1]
        out[key] = base64.b64encode(value).decode() if as_bytes else value.decode()
    return out


def _meta(data: bytes) -> dict[str, Any]:
    f = fields(data)
    meta: dict[str, Any] = {}
    for num, key in ((1, "name"), (2, "generateName"), (3, "namespace")):
        if value := _str(f, num):  # Go's JSON omits empty strings
            meta[key] = value
    for num, key in ((11, "labels"), (12, "annotations")):
        if (value := _map(f, num)) is not None:
            meta[key] = value
    if 14 in f:
        meta["finalizers"] = [v.decode() for v in f[14]]
    return meta


def _quantity_map(f: Fields, num: int) -> dict[str, str] | None:
    if num not in f:
        return None
    out = {}
    for entry in f[num]:
        kv = fields(entry)
        out[kv.get(1, [b""])[-1].decode()] = _str(fields(kv.get(2, [b""])[-1]), 1) or "0"
    return out


# message -> {field number: (JSON name, type, repeated)}; a type is "string", "int", "bool", "intstr",
# "map" (string to string) or the name of another message here.
_SCHEMAS: dict[str, dict[int, tuple[str, str, bool]]] = {
    "LabelSelector": {1: ("matchLabels", "map", False), 2: ("matchExpressions", "LabelSelectorRequirement", True)},
    "LabelSelectorRequirement": {1: ("key", "string", False), 2: ("operator", "string", False),
                                 3: ("values", "string", True)},
    "PolicyRule": {1: ("verbs", "string", True), 2: ("apiGroups", "string", True), 3: ("resources", "string", True),
                   4: ("resourceNames", "string", True), 5: ("nonResourceURLs", "string", True)},
    "AggregationRule": {1: ("clusterRoleSelectors", "LabelSelector", True)},
    "Subject": {1: ("kind", "string", False), 2: ("apiGroup", "string", False), 3: ("name", "string", False),
                4: ("namespace", "string", False)},
    "RoleRef": {1: ("apiGroup", "string", False), 2: ("kind", "string", False), 3: ("name", "string", False)},
    "Role": {2: ("rules", "PolicyRule", True)},
    "ClusterRole": {2: ("rules", "PolicyRule", True), 3: ("aggregationRule", "AggregationRule", False)},
    "RoleBinding": {2: ("subjects", "Subject", True), 3: ("roleRef", "RoleRef", False)},
    "PodDisruptionBudgetSpec": {1: ("minAvailable", "intstr", False), 2: ("selector", "LabelSelector", False),
                                3: ("maxUnavailable", "intstr", False),
                                4: ("unhealthyPodEvictionPolicy", "string", False)},
    "PodDisruptionBudget": {2: ("spec", "PodDisruptionBudgetSpec", False)},
    "ObjectMeta": {},  # decoded by _meta
    "EnvVar": {1: ("name", "string", False), 2: ("value", "string", False)},
    "ContainerPort": {1: ("name", "string", False), 2: ("hostPort", "int", False), 3: ("containerPort", "int", False),
                      4: ("protocol", "string", False), 5: ("hostIP", "string", False)},
    "ResourceRequirements": {1: ("limits", "quantities", False), 2: ("requests", "quantities", False)},
    "Container": {1: ("name", "string", False), 2: ("image", "string", False), 3: ("command", "string", True),
                  4: ("args", "string", True), 5: ("workingDir", "string", False),
                  6: ("ports", "ContainerPort", True), 7: ("env", "EnvVar", True),
                  8: ("resources", "ResourceRequirements", False), 14: ("imagePullPolicy", "string", False),
                  16: ("stdin", "bool", False), 17: ("stdinOnce", "bool", False), 18: ("tty", "bool", False)},
    "PodSpec": {2: ("containers", "Container", True), 3: ("restartPolicy", "string", False),
                4: ("terminationGracePeriodSeconds", "int", False), 5: ("activeDeadlineSeconds", "int", False),
                6: ("dnsPolicy", "string", False), 7: ("nodeSelector", "map", False),
                8: ("serviceAccountName", "string", False), 10: ("nodeName", "string", False),
                20: ("initContainers", "Container", True)},
    "PodTemplateSpec": {1: ("metadata", "ObjectMeta", False), 2: ("spec", "PodSpec", False)},
    "DeploymentStrategy": {1: ("type", "string", False)},
    "DeploymentSpec": {1: ("replicas", "int", False), 2: ("selector", "LabelSelector", False),
                       3: ("template", "PodTemplateSpec", False), 4: ("strategy", "DeploymentStrategy", False),
                       6: ("revisionHistoryLimit", "int", False), 9: ("progressDeadlineSeconds", "int", False)},
    "Deployment": {2: ("spec", "DeploymentSpec", False)},
    "JobSpec": {1: ("parallelism", "int", False), 2: ("completions", "int", False),
                3: ("activeDeadlineSeconds", "int", False), 4: ("selector", "LabelSelector", False),
                6: ("template", "PodTemplateSpec", False), 7: ("backoffLimit", "int", False),
                8: ("ttlSecondsAfterFinished", "int", False), 9: ("completionMode", "string", False),
                10: ("suspend", "bool", False)},
    "Job": {2: ("spec", "JobSpec", False)},
    "JobTemplateSpec": {1: ("metadata", "ObjectMeta", False), 2: ("spec", "JobSpec", False)},
    "CronJobSpec": {1: ("schedule", "string", False), 2: ("startingDeadlineSeconds", "int", False),
                    3: ("concurrencyPolicy", "string", False), 4: ("suspend", "bool", False),
                    5: ("jobTemplate", "JobTemplateSpec", False), 6: ("successfulJobsHistoryLimit", "int", False),
                    7: ("failedJobsHistoryLimit", "int", False), 8: ("timeZone", "string", False)},
    "CronJob": {2: ("spec", "CronJobSpec", False)},
    "PriorityClass": {2: ("value", "int", False), 3: ("globalDefault", "bool", False),
                      4: ("description", "string", False), 5: ("preemptionPolicy", "string", False)},
    # authentication/v1 TokenRequest (`kubectl create token`)
    "TokenRequest": {2: ("spec", "TokenRequestSpec", False)},
    "TokenRequestSpec": {1: ("audiences", "string", True), 4: ("expirationSeconds", "int", False),
                         3: ("boundObjectRef", "BoundObjectReference", False)},
    "BoundObjectReference": {1: ("kind", "string", False), 2: ("apiVersion", "string", False),
                             3: ("name", "string", False), 4: ("uid", "string", False)},
}
_KINDS = {("rbac.authorization.k8s.io/v1", "Role"): "Role", ("rbac.authorization.k8s.io/v1", "ClusterRole"):
          "ClusterRole", ("rbac.authorization.k8s.io/v1", "RoleBinding"): "RoleBinding",
          ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "RoleBinding",
          ("policy/v1", "PodDisruptionBudget"): "PodDisruptionBudget",
          ("scheduling.k8s.io/v1", "PriorityClass"): "PriorityClass", ("apps/v1", "Deployment"): "Deployment",
          ("batch/v1", "Job"): "Job", ("batch/v1", "CronJob"): "CronJob",
          ("authentication.k8s.io/v1", "TokenRequest"): "TokenRequest"}


def _int(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _message(data: bytes, name: str) -> dict[str, Any]:
    schema, f, out = _SCHEMAS[name], fields(data), {}
    for num, (key, kind, repeated) in schema.items():
        if num not in f:
            continue
        if kind == "string":
            values: list[Any] = [v.decode() for v in f[num]]
        elif kind == "int":
            values = [_int(v) for v in f[num]]
        elif kind == "bool":
            values = [bool(v) for v in f[num]]
        elif kind == "intstr":  # util/intstr: type = 1 (0 int, 1 string), intVal = 2, strVal = 3
            values = []
            for raw in f[num]:
                parts = fields(raw)
                values.append(_str(parts, 3) if parts.get(1, [0])[-1] == 1 else _int(parts.get(2, [0])[-1]))
        elif kind == "map":
            values = [_map(f, num)]
            repeated = False
        elif kind == "quantities":
            values = [_quantity_map(f, num)]
            repeated = False
        elif kind == "ObjectMeta":
            values = [_meta(v) for v in f[num]]
        else:
            values = [_message(v, kind) for v in f[num]]
        if repeated:
            out[key] = values
        elif values[-1] not in ("", False):  # Go's JSON omits empty strings and false bools (`omitempty`)
            out[key] = values[-1]
    return out


def _delete_options(f: Fields) -> dict[str, Any]:
    """meta/v1 DeleteOptions: gracePeriodSeconds = 1, preconditions = 2 {uid = 1, resourceVersion = 2},
    orphanDependents = 3, propagationPolicy = 4, dryRun = 5."""
    out: dict[str, Any] = {}
    if 1 in f:
        value = f[1][-1]
        out["gracePeriodSeconds"] = value - (1 << 64) if value >= 1 << 63 else value
    if 2 in f:
        pre = fields(f[2][-1])
        out["preconditions"] = {k: v for n, k in ((1, "uid"), (2, "resourceVersion")) if (v := _str(pre, n))}
    if 3 in f:
        out["orphanDependents"] = bool(f[3][-1])
    if (policy := _str(f, 4)) is not None:
        out["propagationPolicy"] = policy
    if 5 in f:
        out["dryRun"] = [v.decode() for v in f[5]]
    return out


def decode(body: bytes) -> dict[str, Any] | None:
    """The JSON-shaped object of a protobuf request body, or None for kinds/fields not decoded here."""
    if not body.startswith(MAGIC):
        return None
    try:
        unknown = fields(body[len(MAGIC):])
        type_meta = fields(unknown.get(1, [b""])[-1])
        api_version, kind = _str(type_meta, 1) or "", _str(type_meta, 2) or ""
        raw = fields(unknown.get(2, [b""])[-1])
        if kind == "DeleteOptions":
            return {"apiVersion": api_version, "kind": kind, **_delete_options(raw)}
        obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": _meta(raw.get(1, [b""])[-1])}
        if (api_version, kind) == ("v1", "Namespace"):
            spec = fields(raw.get(2, [b""])[-1])
            if 1 in spec:
                obj["spec"] = {"finalizers": [v.decode() for v in spec[1]]}
        elif (api_version, kind) == ("v1", "ConfigMap"):
            for num, key, as_bytes in ((2, "data", False), (3, "binaryData", True)):
                if (value := _map(raw, num, as_bytes)) is not None:
                    obj[key] = value
            if 4 in raw:
                obj["immutable"] = bool(raw[4][-1])
        elif (api_version, kind) == ("v1", "Secret"):
            for num, key, as_bytes in ((2, "data", True), (4, "stringData", False)):
                if (value := _map(raw, num, as_bytes)) is not None:
                    obj[key] = value
            if (kind_type := _str(raw, 3)) is not None:
                obj["type"] = kind_type
            if 5 in raw:
                obj["immutable"] = bool(raw[5][-1])
        elif (api_version, kind) == ("v1", "ServiceAccount"):
            if 4 in raw:
                obj["automountServiceAccountToken"] = bool(raw[4][-1])
        elif (api_version, kind) == ("v1", "ResourceQuota"):
            spec = fields(raw.get(2, [b""])[-1])
            obj["spec"] = {k: v for k, v in (("hard", _quantity_map(spec, 1)),
                                             ("scopes", [s.decode() for s in spec.get(2, [])] or None)) if v}
        elif (api_version, kind) == ("policy/v1", "Eviction"):
            if 2 in raw:
                obj["deleteOptions"] = _delete_options(fields(raw[2][-1]))
        elif (api_version, kind) == ("authorization.k8s.io/v1", "SelfSubjectAccessReview"):
            spec = fields(raw.get(2, [b""])[-1])
            obj["spec"] = {}
            if 1 in spec:
                attrs = fields(spec[1][-1])
                obj["spec"]["resourceAttributes"] = {
                    key: value for n, key in enumerate(("namespace", "verb", "group", "version", "resource",
                                                       "subresource", "name"), start=1)
                    if (value := _str(attrs, n)) is not None}
            if 2 in spec:
                attrs = fields(spec[2][-1])
                obj["spec"]["nonResourceAttributes"] = {
                    key: value for n, key in ((1, "path"), (2, "verb")) if (value := _str(attrs, n)) is not None}
        elif (api_version, kind) == ("authorization.k8s.io/v1", "SelfSubjectRulesReview"):
            spec = fields(raw.get(2, [b""])[-1])
            obj["spec"] = {"namespace": _str(spec, 1) or ""}
        elif (api_version, kind) == ("authentication.k8s.io/v1", "SelfSubjectReview"):
            pass
        elif (api_version, kind) in _KINDS:
            obj.update(_message(unknown.get(2, [b""])[-1], _KINDS[(api_version, kind)]))
        else:
            return None
        return obj
    except (ValueError, IndexError, UnicodeDecodeError, TypeError, AttributeError):
        return None
