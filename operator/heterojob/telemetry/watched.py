"""A Running HeteroJob as the monitor watches it, read from the job object (Kopf's index keeps these)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from heterojob.api.job import Policy, Scheduling
from heterojob.telemetry.snapshot import JobRef, StragglerPolicy, WatchedJob


def straggler_policy(policy: Policy) -> StragglerPolicy:
    """The one straggler policy of a job: its spec.policy.stragglerRatio (the monitor's Straggler condition
    and the symptom that moves the job judge alike)."""
    return StragglerPolicy(ratio=policy.straggler_ratio)


def _policy(spec: object) -> Policy:
    raw = spec.get("policy") if isinstance(spec, Mapping) else None
    try:
        return Policy.model_validate(raw if isinstance(raw, Mapping) else {})
    except ValidationError:
        return Policy()  # the API server validated the spec: only a hand-made object lands here


def watched_job(obj: Mapping[str, Any]) -> WatchedJob | None:
    """A Running HeteroJob as the monitor needs it, or None (not running, not placed, unreadable)."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    placement = status.get("placement") or {}
    if status.get("phase") != "Running" or not isinstance(placement, dict):
        return None
    try:
        ref = JobRef(namespace=meta["namespace"], name=meta["name"], region=str(placement["region"]),
                     generation=int(placement["generation"]), replicas=int(placement["replicas"]),
                     per_replica=int(placement["perReplica"]))
    except (KeyError, TypeError, ValueError):
        return None
    raw_conditions, raw_utilization = status.get("conditions"), status.get("utilization")
    conditions = raw_conditions if isinstance(raw_conditions, list) else []
    utilization = raw_utilization if isinstance(raw_utilization, dict) else None
    policy = _policy(obj.get("spec"))
    return WatchedJob(ref=ref, device_class=str(placement.get("deviceClass", "")),
                      resource_version=str(meta.get("resourceVersion", "")), utilization=utilization,
                      conditions=tuple(c for c in conditions if isinstance(c, dict)),
                      stragglers=straggler_policy(policy), speeds=_speeds(status.get("scheduling")),
                      overheat_celsius=policy.overheat_celsius)


def _speeds(raw: object) -> tuple[dict[str, Any], ...]:
    """status.scheduling.speeds as far as it reads (status is untrusted: what does not read is dropped)."""
    if not isinstance(raw, Mapping):
        return ()
    try:
        scheduling = Scheduling.model_validate(dict(raw))
    except ValidationError:
        return ()
    return tuple(s.model_dump(by_alias=True, exclude_none=True) for s in scheduling.speeds)
