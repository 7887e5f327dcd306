"""`meta.k8s.io/v1` Table responses for `kubectl get`, as kube-apiserver v1.32 renders them.

A client asks with `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`. Custom resources get `Name` plus
their CRD's `additionalPrinterColumns` (a `date` column rendered as an age, as the apiextensions table
convertor does; `priority: 1` columns show with `-o wide`); pods, nodes, events, namespaces and services get
the columns of kube's own printers (pkg/printers/internalversion); anything else `Name` and `Age`.
Rows carry the object as `PartialObjectMetadata` (`includeObject=Metadata`, the default), whole
(`Object`) or not at all (`None`).
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

Row = list[Any]


def wanted(accept: str) -> bool:
    """Does the client prefer a Table (its first acceptable type is one)?"""
    first = accept.split(",")[0].replace(" ", "")
    return "as=Table" in first and "g=meta.k8s.io" in first and ("v=v1;" in first + ";")


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if days < 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    years = days // 365
    if years < 8:
        return f"{years}y{days % 365}d" if days % 365 else f"{years}y"
    return f"{years}y"


def age(timestamp: Any, now: datetime.datetime | None = None) -> str:
    if not timestamp:
        return "<unknown>"
    try:
        when = datetime.datetime.fromisoformat(str(timestamp).replace("Z", "+00:00"))
    except ValueError:
        return str(timestamp)
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    now = now or datetime.datetime.now(tz=datetime.UTC)
    return human_duration((now - when).total_seconds())


_STEP = re.compile(r"\.?([^.\[\]]+)|\[(\*|-?\d+)\]|\['([^']+)'\]")


def json_path(obj: Any, path: str) -> list[Any]:
    """The simple JSONPath CRD printer columns use: `.status.phase`, `.spec.devices[0].deviceClass`, `[*]`."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    values = [obj]
    for match in _STEP.finditer(path):
        key, index, quoted = match.groups()
        nxt: list[Any] = []
        for v in values:
            if key is not None or quoted is not None:
                name = key if key is not None else quoted
                if isinstance(v, dict) and name in v:
                    nxt.append(v[name])
            elif isinstance(v, list):
                if index == "*":
                    nxt.extend(v)
                elif -len(v) <= int(index) < len(v):
                    nxt.append(v[int(index)])
        values = nxt
    return values


def _cell(value: Any, col_type: str) -> Any:
    if value is None:
        return None
    if col_type == "date":
        return age(value)
    if col_type == "integer" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if col_type == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if col_type == "boolean" and isinstance(value, bool):
        return value
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return value if isinstance(value, str) else json.dumps(value)


def _col(name: str, col_type: str = "string", description: str = "", priority: int = 0, fmt: str = ""
         ) -> dict[str, Any]:
    return {"name": name, "type": col_type, "format": fmt, "description": description, "priority": priority}


NAME = _col("Name", fmt="name", description="Name must be unique within a namespace.")


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _pod_row(pod: Mapping[str, Any]) -> Row:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    shown = status.get("reason") or status.get("phase") or "Pending"
    for c in statuses:
        state = c.get("state") or {}
        reason = (state.get("waiting") or {}).get("reason") or (state.get("terminated") or {}).get("reason")
        if reason:
            shown = reason
    if _meta(pod).get("deletionTimestamp"):
        shown = "Terminating"
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    gates = spec.get("readinessGates") or []
    return [_meta(pod).get("name"), f"{ready}/{len(spec.get('containers') or [])}", shown, restarts,
            age(_meta(pod).get("creationTimestamp")), status.get("podIP") or "<none>", spec.get("nodeName") or "<none>",
            status.get("nominatedNodeName") or "<none>", f"{len(gates)}/{len(gates)}" if gates else "<none>"]


def _node_row(node: Mapping[str, Any]) -> Row:
    spec, status = node.get("spec") or {}, node.get("status") or {}
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    state = "Ready" if conds.get("Ready") == "True" else "NotReady" if "Ready" in conds else "Unknown"
    if spec.get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = _meta(node).get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and "/" in k)
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    info = status.get("nodeInfo") or {}
    return [_meta(node).get("name"), state, ",".join(r for r in roles if r) or "<none>",
            age(_meta(node).get("creationTimestamp")), info.get("kubeletVersion") or "",
            addresses.get("InternalIP") or "<none>", addresses.get("ExternalIP") or "<none>",
            info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
            info.get("containerRuntimeVersion") or "<unknown>"]


def _event_row(ev: Mapping[str, Any]) -> Row:
    involved = ev.get("involvedObject") or ev.get("regarding") or {}
    source = ev.get("source") or ev.get("deprecatedSource") or {}
    last = ev.get("lastTimestamp") or ev.get("deprecatedLastTimestamp") or ev.get("eventTime") \
        or _meta(ev).get("creationTimestamp")
    first = ev.get("firstTimestamp") or ev.get("deprecatedFirstTimestamp") or ev.get("eventTime") \
        or _meta(ev).get("creationTimestamp")
    count = ev.get("count") or ev.get("deprecatedCount") or 1
    src = source.get("component") or ev.get("reportingComponent") or ev.get("reportingController") or ""
    if source.get("host"):
        src = f"{src}, {source['host']}"
    return [age(last), ev.get("type") or "", ev.get("reason") or "",
            f"{str(involved.get('kind') or '').lower()}/{involved.get('name') or ''}",
            involved.get("fieldPath") or "", src, ev.get("message") or ev.get("note") or "", age(first), count,
            _meta(ev).get("name")]


def _namespace_row(ns: Mapping[str, Any]) -> Row:
    return [_meta(ns).get("name"), (ns.get("status") or {}).get("phase") or "Active",
            age(_meta(ns).get("creationTimestamp"))]


def _service_row(svc: Mapping[str, Any]) -> Row:
    spec = svc.get("spec") or {}
    ports = ",".join(f"{p.get('port')}/{p.get('protocol') or 'TCP'}" for p in spec.get("ports") or []) or "<none>"
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items())) or "<none>"
    return [_meta(svc).get("name"), spec.get("type") or "ClusterIP", spec.get("clusterIP") or "<none>",
            ",".join(spec.get("externalIPs") or []) or "<none>", ports, age(_meta(svc).get("creationTimestamp")),
            selector]


def _quota_row(q: Mapping[str, Any]) -> Row:
    hard = (q.get("spec") or {}).get("hard") or {}
    used = (q.get("status") or {}).get("used") or {}
    req = ", ".join(f"{k}: {used.get(k, '0')}/{v}" for k, v in sorted(hard.items()) if not k.startswith("limits."))
    lim = ", ".join(f"{k}: {used.get(k, '0')}/{v}" for k, v in sorted(hard.items()) if k.startswith("limits."))
    return [_meta(q).get("name"), age(_meta(q).get("creationTimestamp")), req, lim]


def _pdb_row(pdb: Mapping[str, Any]) -> Row:
    spec, status = pdb.get("spec") or {}, pdb.get("status") or {}
    shown = [str(spec[k]) if spec.get(k) is not None else "N/A" for k in ("minAvailable", "maxUnavailable")]
    return [_meta(pdb).get("name"), *shown, int(status.get("disruptionsAllowed") or 0),
            age(_meta(pdb).get("creationTimestamp"))]


def _deployment_row(dep: Mapping[str, Any]) -> Row:
    spec, status = dep.get("spec") or {}, dep.get("status") or {}
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    selector = spec.get("selector") or {}
    terms = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    return [_meta(dep).get("name"), f"{int(status.get('readyReplicas') or 0)}/{int(spec.get('replicas', 1) or 0)}",
            int(status.get("updatedReplicas") or 0), int(status.get("availableReplicas") or 0),
            age(_meta(dep).get("creationTimestamp")), ",".join(str(c.get("name")) for c in containers),
            ",".join(str(c.get("image")) for c in containers), ",".join(terms) or "<none>"]


_AGE = _col("Age", description="CreationTimestamp is a timestamp representing the server time when this object "
            "was created.")
BUILTIN: dict[tuple[str, str], tuple[list[dict[str, Any]], Callable[[Mapping[str, Any]], Row]]] = {
    ("", "pods"): ([NAME, _col("Ready", description="The aggregate readiness state of this pod for accepting "
                                "traffic."), _col("Status", description="The aggregate status of the containers "
                                                  "in this pod."),
                    _col("Restarts", "string", "The number of times the containers in this pod have been "
                         "restarted and when the last container in this pod has restarted."), _AGE,
                    _col("IP", description="IP address allocated to the pod.", priority=1),
                    _col("Node", description="Name of the node where the pod is running.", priority=1),
                    _col("Nominated Node", description="Nominated node name, if any.", priority=1),
                    _col("Readiness Gates", description="Pod readiness gates.", priority=1)], _pod_row),
    ("", "nodes"): ([NAME, _col("Status", description="The status of the node"),
                     _col("Roles", description="The roles of the node"), _AGE,
                     _col("Version", description="Kubelet Version reported by the node."),
                     _col("Internal-IP", description="List of internal IPs.", priority=1),
                     _col("External-IP", description="List of external IPs.", priority=1),
                     _col("OS-Image", description="OS Image reported by the node.", priority=1),
                     _col("Kernel-Version", description="Kernel Version reported by the node.", priority=1),
                     _col("Container-Runtime", description="Container Runtime Version reported by the node.",
                          priority=1)], _node_row),
    ("", "events"): ([_col("Last Seen", description="Time when this Event was last seen."),
                      _col("Type", description="Type of this event (Normal, Warning)."),
                      _col("Reason", description="Short, machine understandable string."),
                      _col("Object", description="The object that this event is about."),
                      _col("Subobject", description="The subobject this event is about.", priority=1),
                      _col("Source", description="The component reporting this event.", priority=1),
                      _col("Message", description="A human-readable description of the status of this operation."),
                      _col("First Seen", description="The first time that this event was seen.", priority=1),
                      _col("Count", "integer", "The number of times this event has occurred.", priority=1),
                      {**NAME, "priority": 1}], _event_row),
    ("", "namespaces"): ([NAME, _col("Status", description="The status of the namespace"), _AGE], _namespace_row),
    ("", "services"): ([NAME, _col("Type", description="The type of the service."),
                        _col("Cluster-IP", description="The cluster IP of the service."),
                        _col("External-IP", description="The external IP of the service."),
                        _col("Port(s)", description="The ports of the service."), _AGE,
                        _col("Selector", description="The selector of the service.", priority=1)], _service_row),
    ("", "resourcequotas"): ([NAME, _AGE, _col("Request", description="Request represents a minimum amount of "
                                                "cpu/memory that a container may consume."),
                              _col("Limit", description="Limits control the maximum amount of cpu/memory that a "
                                   "container may use independent of contention on the node.")], _quota_row),
}
BUILTIN[("events.k8s.io", "events")] = BUILTIN[("", "events")]
# pkg/printers/internalversion/printers.go (v1.32): podDisruptionBudgetColumnDefinitions, deploymentColumnDefinitions
BUILTIN[("policy", "poddisruptionbudgets")] = ([
    NAME, _col("Min Available", description="The minimum number of pods that must be available."),
    _col("Max Unavailable", description="The maximum number of pods that may be unavailable."),
    _col("Allowed Disruptions", "integer", "Calculated number of pods that may be disrupted at this time."), _AGE],
    _pdb_row)
BUILTIN[("apps", "deployments")] = ([
    NAME, _col("Ready", description="Number of the pod with ready state"),
    _col("Up-to-date", "integer", "Total number of non-terminated pods targeted by this deployment that have the "
         "desired template spec."),
    _col("Available", "integer", "Total number of available pods (ready for at least minReadySeconds) targeted by "
         "this deployment."), _AGE,
    _col("Containers", description="Names of each container in the template.", priority=1),
    _col("Images", description="Images referenced by each container in the template.", priority=1),
    _col("Selector", description="Label selector for pods. Existing ReplicaSets whose pods are selected by this "
         "will be the ones affected by this deployment.", priority=1)], _deployment_row)


def _row_object(obj: Mapping[str, Any], include: str) -> Any:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata") or {}}


def table(kind_key: tuple[str, str], items: list[Mapping[str, Any]], printer_columns: list[Mapping[str, Any]] | None,
          include_object: str, meta: dict[str, Any], *, is_crd: bool, no_headers: bool = False) -> dict[str, Any]:
    if is_crd:
        extra = list(printer_columns or [])
        if not extra:
            extra = [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]
        columns = [NAME] + [_col(c.get("name", ""), c.get("type", "string"), c.get("description", ""),
                                 int(c.get("priority") or 0), c.get("format", "")) for c in extra]

        def make(obj: Mapping[str, Any]) -> Row:
            cells: Row = [_meta(obj).get("name")]
            for c in extra:
                found = json_path(obj, c.get("jsonPath", ""))
                cells.append(_cell(found[0] if found else None, c.get("type", "string")))
            return cells
    elif kind_key in BUILTIN:
        columns, make = BUILTIN[kind_key]
    else:
        columns = [NAME, _AGE]

        def make(obj: Mapping[str, Any]) -> Row:
            return [_meta(obj).get("name"), age(_meta(obj).get("creationTimestamp"))]
    rows = []
    for obj in items:
        row: dict[str, Any] = {"cells": make(obj)}
        shown = _row_object(obj, include_object)
        if shown is not None:
            row["object"] = shown
        rows.append(row)
    out: dict[str, Any] = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "rows": rows}
    if not no_headers:
        out["columnDefinitions"] = columns
    else:
        out["columnDefinitions"] = None
    return out
