"""What a HeteroJob asks of the planner: its spec and status as an engine `Request` (pure conversion)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from heterojob.api.job import DeviceAlternative, HeteroJobSpec, HeteroJobStatus, Phase, Priority
from heterojob.engine.placement import Alternative, Request
from heterojob.state.times import timestamp

MOVING = (Phase.MIGRATING, Phase.RESIZING)  # placed again after a checkpoint, avoiding the nodes it left
MOVES = ("migrate", "resize", "reschedule")  # history actions that open a move (closed by the next placement)


def priority_of(job: Mapping[str, Any]) -> int:
    """The job's priority rank, medium when its spec is unreadable."""
    try:
        return Priority((job.get("spec") or {}).get("priority", "medium")).rank
    except (ValueError, AttributeError):
        return Priority.MEDIUM.rank


def request_for(key: str, job: Mapping[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus | None = None
                ) -> Request:
    """What a waiting job asks of placement; a migrating or resizing one also avoids the nodes it left and
    stays in its region or class unless spec.policy allows crossing."""
    moving = status.migration if status is not None and status.phase in MOVING else None
    if moving is None:
        return _request(key, job, spec, spec.devices, tuple(spec.regions.allowed), frozenset(), spec.replicas.start)
    assert status is not None
    origin = ""
    if moving.reserved is not None:
        origin = f"{moving.reserved.region}/{moving.reserved.device_class}"
    elif status.history and status.history[-1].action in MOVES:
        origin = (status.history[-1].from_ or "").split(" ")[0]
    region, _, cls = origin.partition("/")
    return move_request(key, job, spec, region, cls, moving.exclude, moving.replicas or spec.replicas.start)


def move_request(key: str, job: Mapping[str, Any], spec: HeteroJobSpec, region: str, device_class: str,
                 exclude: Iterable[str], replicas: int) -> Request:
    """A job leaving `exclude` from `region`/`device_class`: it stays in that region and class unless its
    policy allows crossing (an empty region or class: unknown, anywhere the spec allows)."""
    allowed = tuple(spec.regions.allowed)
    alternatives = list(spec.devices)
    if region and device_class:
        if not spec.policy.allow_cross_region:
            allowed = (region,)
        if not spec.policy.allow_cross_class:
            alternatives = [a for a in spec.devices if a.device_class == device_class] or alternatives
    return _request(key, job, spec, alternatives, allowed, frozenset(exclude), replicas)


def _request(key: str, job: Mapping[str, Any], spec: HeteroJobSpec, alternatives: Iterable[DeviceAlternative],
             allowed: tuple[str, ...], exclude: frozenset[str], replicas: int) -> Request:
    return Request(
        job=key,
        alternatives=[Alternative(
            a.device_class, a.per_replica, a.requires.versions() if a.requires else {},
            dict(a.requires.node_labels or {}) if a.requires else {})
            for a in alternatives],
        replicas=replicas,
        allowed_regions=allowed,
        preferred_regions=tuple(r for r in spec.regions.preferred if not allowed or r in allowed),
        exclude_nodes=exclude,
        priority=spec.priority.rank,
        created=timestamp((job.get("metadata") or {}).get("creationTimestamp")) or 0.0,
    )


def base_request(mine: Request, device_class: str, region: str, replicas: int) -> Request:
    """`mine` at `replicas` in one class and region: what a grown elastic job goes back to."""
    return Request(mine.job, [a for a in mine.alternatives if a.device_class == device_class], replicas,
                   allowed_regions=(region,), priority=mine.priority, created=mine.created)


def reservation(candidate_region: str, device_class: str, per_replica: int, nodes: Iterable[str]) -> dict[str, Any]:
    """status.migration.reserved for room held for a move."""
    return {"region": candidate_region, "deviceClass": device_class, "perReplica": per_replica, "nodes": list(nodes)}
