"""What a HeteroJob asks of the planner: its spec and status as an engine `Request` (pure conversion)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from heterojob.api.job import HeteroJobSpec, HeteroJobStatus, Phase, Priority
from heterojob.engine.placement import Alternative, Request
from heterojob.state.times import timestamp

MOVING = (Phase.MIGRATING, Phase.RESIZING)  # placed again after a checkpoint, avoiding the nodes it left


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
    alternatives = spec.devices
    allowed = tuple(spec.regions.allowed)
    exclude: frozenset[str] = frozenset()
    moving = status.migration if status is not None and status.phase in MOVING else None
    replicas = spec.replicas.start
    if moving is not None:
        assert status is not None
        exclude = frozenset(moving.exclude)
        replicas = moving.replicas or replicas
        last = status.history[-1] if status.history else None
        origin = (last.from_ or "").split(" ")[0] if last and last.action in ("migrate", "resize") else ""
        if "/" in origin:
            region, cls = origin.split("/", 1)
            if not spec.policy.allow_cross_region:
                allowed = (region,)
            if not spec.policy.allow_cross_class:
                alternatives = [a for a in spec.devices if a.device_class == cls] or spec.devices
    return Request(
        job=key,
        alternatives=[Alternative(
            a.device_class, a.per_replica,
            {k: v for k, v in (a.requires.model_dump() if a.requires else {}).items() if v})
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
