"""`events.k8s.io/v1` Events as a view of the core `v1` Events, converted field by field as kube-apiserver
v1.32 converts them (pkg/apis/events/v1 conversion): one store, two shapes. kubectl reads events.k8s.io/v1;
the operator (through the kubernetes client) writes core v1.
"""

from __future__ import annotations

import copy
from typing import Any

GROUP_KEY = ("events.k8s.io", "events")
CORE_KEY = ("", "events")

# core v1 field -> events.k8s.io/v1 field (the rest carry over unchanged: reason, type, action, related, ...)
_RENAMES = {"involvedObject": "regarding", "message": "note", "source": "deprecatedSource",
            "firstTimestamp": "deprecatedFirstTimestamp", "lastTimestamp": "deprecatedLastTimestamp",
            "count": "deprecatedCount"}


def to_events_v1(core: dict[str, Any]) -> dict[str, Any]:
    out = {_RENAMES.get(k, k): copy.deepcopy(v) for k, v in core.items()}
    out["apiVersion"], out["kind"] = "events.k8s.io/v1", "Event"
    source = core.get("source") or {}
    out.setdefault("reportingController", core.get("reportingComponent") or source.get("component") or "")
    out.pop("reportingComponent", None)
    if not out.get("reportingInstance") and source.get("host"):
        out["reportingInstance"] = source["host"]
    out.setdefault("eventTime", None)
    return out


def to_core(event: dict[str, Any]) -> dict[str, Any]:
    back = {v: k for k, v in _RENAMES.items()}
    out = {back.get(k, k): copy.deepcopy(v) for k, v in event.items()}
    out["apiVersion"], out["kind"] = "v1", "Event"
    if "reportingController" in out:
        out["reportingComponent"] = out.pop("reportingController")
    return out


def convert_payload(payload: Any) -> Any:
    """A core object, list, Table or watch event turned into the events.k8s.io/v1 shape."""
    if not isinstance(payload, dict):
        return payload
    if payload.get("kind") == "Event":
        return to_events_v1(payload)
    if isinstance(payload.get("items"), list):
        return {**payload, "apiVersion": "events.k8s.io/v1", "items": [to_events_v1(i) for i in payload["items"]]}
    if payload.get("kind") == "Table":
        return {**payload, "rows": [{**r, "object": convert_payload(r.get("object"))} for r in payload["rows"]]}
    if "type" in payload and isinstance(payload.get("object"), dict):
        return {**payload, "object": convert_payload(payload["object"])}
    return payload
