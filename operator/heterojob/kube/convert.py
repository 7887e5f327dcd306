"""Kubernetes objects (plain dicts) to the engine's plain data."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from heterojob.api.accelerator import AcceleratorClassSpec
from heterojob.api.common import SpecError, parse_spec
from heterojob.api.quota import HeteroQuotaSpec
from heterojob.api.region import RegionSpec
from heterojob.constants import (
    ANNOTATION_CHECKPOINT_ACK,
    ANNOTATION_CHECKPOINT_SAVE_TIME,
    ANNOTATION_CHECKPOINT_REQUEST,
    ANNOTATION_NODE,
    LABEL_GENERATION,
    LABEL_JOB,
    LABEL_RANK,
    LABEL_REGION,
)
from heterojob.engine.placing.discovery import node_software
from heterojob.engine.capacity.fleet import DeviceClass, Limit, Node, RegionInfo
from heterojob.engine.capacity.transfer import Link
from heterojob.engine.execution.lifecycle import PodView
from heterojob.api.times import timestamp

log = logging.getLogger(__name__)

# Taints that keep new pods off a node unless tolerated (docs/telemetry.md, section 5).
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def quantity(value: Any) -> int:
    """Whole units of a resource quantity ('8', '63500m' -> 63); 0 when unparseable."""
    try:
        return int(parse_quantity(value).to_integral_value(rounding="ROUND_FLOOR"))
    except (ValueError, TypeError, ArithmeticError):
        return 0


def ready_condition(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A Node's Ready condition (status "True", "False" or "Unknown": its kubelet stopped posting), or None."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if isinstance(c, dict) and c.get("type") == "Ready"), None)


def node_view(obj: Mapping[str, Any]) -> Node:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    allocatable = {k: quantity(v) for k, v in (status.get("allocatable") or {}).items()}
    capacity = {k: quantity(v) for k, v in (status.get("capacity") or {}).items()}
    ready_cond = ready_condition(obj)
    ready = ready_cond is not None and ready_cond.get("status") == "True"
    reasons = []
    if not ready:
        reasons.append("NotReady" if ready_cond and ready_cond.get("status") == "False" else "ReadyUnknown")
    schedulable = not spec.get("unschedulable", False)
    if not schedulable:
        reasons.append("cordoned")
    taints = set()
    for taint in spec.get("taints") or []:
        if taint.get("effect") in _BLOCKING_EFFECTS:
            taints.add(str(taint.get("key", "")))
            reasons.append(f"taint {taint.get('key')}:{taint.get('effect')}")
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    return Node(
        name=meta.get("name", ""),
        labels=labels,
        allocatable=allocatable,
        ready=ready,
        schedulable=schedulable,
        taints=frozenset(taints),
        reason=", ".join(reasons),
        software=node_software(labels),
        capacity=capacity,
        addresses=tuple(str(a["address"]) for a in status.get("addresses") or []
                        if isinstance(a, Mapping) and a.get("address")),
    )


def device_class(obj: Mapping[str, Any]) -> DeviceClass | None:
    """An AcceleratorClass object, or None (logged) when its spec is invalid."""
    name = (obj.get("metadata") or {}).get("name", "")
    try:
        spec = parse_spec(AcceleratorClassSpec, obj.get("spec"))
    except SpecError as exc:
        log.warning("AcceleratorClass %s is ignored: %s", name, exc)
        return None
    software = {k: v for k, v in spec.software.model_dump().items() if v}
    return DeviceClass(name, spec.resource_name, dict(spec.node_selector), spec.throughput, software,
                       exporter=spec.exporter.value, memory_gib=spec.memory_gib)


def region_info(obj: Mapping[str, Any]) -> RegionInfo | None:
    name = (obj.get("metadata") or {}).get("name", "")
    try:
        spec = parse_spec(RegionSpec, obj.get("spec"))
    except SpecError as exc:
        log.warning("Region %s is ignored: %s", name, exc)
        return None
    return RegionInfo(name, dict(spec.node_selector) if spec.node_selector else {LABEL_REGION: name},
                      prometheus_url=str(spec.prometheus_url).rstrip("/") if spec.prometheus_url else None,
                      links={link.region: Link(link.bandwidth_gbps, link.latency_ms) for link in spec.links})


def pod_terminal(obj: Mapping[str, Any]) -> bool:
    return (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def pod_view(obj: Mapping[str, Any]) -> PodView | None:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    try:
        rank, generation = int(labels[LABEL_RANK]), int(labels[LABEL_GENERATION])
    except (KeyError, ValueError):
        return None
    status = obj.get("status") or {}
    reason = status.get("reason") or status.get("message") or ""
    for cs in status.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated") or {}
        if term.get("exitCode"):
            reason = f"container {cs.get('name')} exited with code {term['exitCode']}" + (
                f" ({term['reason']})" if term.get("reason") else "")
            break
    unschedulable, since, disruption = "", 0.0, ""
    scheduled = bool((obj.get("spec") or {}).get("nodeName")) or status.get("phase") not in (None, "Pending")
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "PodScheduled" and c.get("status") == "True":
            scheduled = True
        if isinstance(c, dict) and c.get("type") == "DisruptionTarget" and c.get("status") == "True":
            disruption = str(c.get("reason") or "")
        if isinstance(c, dict) and c.get("type") == "PodScheduled" and c.get("status") == "False" \
                and c.get("reason") == "Unschedulable":
            unschedulable = str(c.get("message") or "the scheduler found no node for it")
            since = timestamp(c.get("lastTransitionTime")) or 0.0
    return PodView(
        name=meta.get("name", ""),
        rank=rank,
        generation=generation,
        phase=status.get("phase") or "Pending",
        node=(obj.get("spec") or {}).get("nodeName") or (meta.get("annotations") or {}).get(ANNOTATION_NODE),
        deleting=bool(meta.get("deletionTimestamp")),
        reason=reason,
        checkpoint_request=str((meta.get("annotations") or {}).get(ANNOTATION_CHECKPOINT_REQUEST, "")),
        checkpoint_ack=str((meta.get("annotations") or {}).get(ANNOTATION_CHECKPOINT_ACK, "")),
        checkpoint_save_time=str((meta.get("annotations") or {}).get(ANNOTATION_CHECKPOINT_SAVE_TIME, "")),
        unschedulable=unschedulable,
        unschedulable_since=since,
        disruption=disruption,
        deletion_at=timestamp(meta.get("deletionTimestamp")),
        scheduled=scheduled,
    )


def pod_holds(obj: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    """What a pod holds on its node, by (node, resource), whoever manages it: its containers' requests, a limit
    without a request standing for it (the API server's defaulting; what kube-scheduler counts and `kubectl
    describe node` lists under "Allocated resources"), in whole units, CPU rounded up (a node's whole cores
    left free are what a job can take). Nothing for a pod not bound to a node, or finished."""
    if pod_terminal(obj):
        return {}
    spec = obj.get("spec") or {}
    node = spec.get("nodeName")
    if not node:
        return {}
    used: dict[tuple[str, str], int] = {}
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in wanted.items():
            if name in ("memory", "ephemeral-storage") or name.startswith("hugepages-"):
                continue
            amount = parse_quantity(value) if name == "cpu" else Decimal(quantity(value))
            used[(node, name)] = used.get((node, name), 0) + int(amount.to_integral_value(rounding="ROUND_CEILING"))
    return used


def template_requests(template: Mapping[str, Any]) -> dict[str, int]:
    """What one replica's pod, built from a HeteroJob's `spec.template`, requests of each resource, in whole units
    rounded down (CPU cores, memory bytes): as kube-scheduler sums it, its containers' requests (a limit without
    a request standing for it) or its largest init container's, whichever is more. The device resource the
    operator adds is not in the template (and is not judged against it)."""
    spec = template.get("spec") if isinstance(template, Mapping) else None
    if not isinstance(spec, Mapping):
        return {}

    def wanted(container: Any) -> dict[str, Decimal]:
        resources = container.get("resources") if isinstance(container, Mapping) else None
        if not isinstance(resources, Mapping):
            return {}
        out: dict[str, Decimal] = {}
        for name, value in {**(resources.get("limits") or {}), **(resources.get("requests") or {})}.items():
            try:
                out[str(name)] = Decimal(parse_quantity(value))
            except (ValueError, TypeError, ArithmeticError):
                continue  # the template's schema refuses such a quantity before it gets here
        return out

    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        for name, amount in wanted(container).items():
            total[name] = total.get(name, Decimal(0)) + amount
    for container in spec.get("initContainers") or []:
        for name, amount in wanted(container).items():
            total[name] = max(total.get(name, Decimal(0)), amount)
    return {name: int(amount.to_integral_value(rounding="ROUND_FLOOR")) for name, amount in total.items()
            if amount > 0}


def pod_usage(obj: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    """What a pod that heterojob does not manage holds on its node, by resource (`pod_holds`; heterojob's own
    pods are counted from their jobs' placements)."""
    meta = obj.get("metadata") or {}
    if LABEL_JOB in (meta.get("labels") or {}):
        return {}
    return pod_holds(obj)


def quota_limits(obj: Mapping[str, Any]) -> tuple[list[Limit], str | None]:
    """A HeteroQuota's limits, and the error of an invalid spec (then one limit of 0 devices for all:
    an unreadable quota blocks new admissions in its namespace instead of lifting every limit)."""
    name = (obj.get("metadata") or {}).get("name", "")
    try:
        spec = parse_spec(HeteroQuotaSpec, obj.get("spec"))
    except SpecError as exc:
        return [Limit("*", "*", 0, quota=f"{name} (invalid spec, fix it)")], str(exc)
    return [Limit(lim.device_class, lim.region, lim.devices, quota=name) for lim in spec.limits], None
