"""What a HeteroJob asks of the planner: its spec and status as an engine `Request` (pure conversion)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from heterojob.api.job import DeviceAlternative, HeteroJobSpec, Priority
from heterojob.api.job_status import HeteroJobStatus, Reservation
from heterojob.engine.capacity import transfer
from heterojob.engine.capacity.fleet import DeviceClass
from heterojob.engine.basics.phases import MOVING as MOVING  # controller/scheduler.py imports it from here
from heterojob.engine.placing.placement import OUTSIDE_ALLOWED, Alternative, Request
from heterojob.kube.convert import template_requests
from heterojob.api.times import timestamp

UPGRADE = "upgrade"  # engine.capacity.migration.UPGRADE: a move up (or a probe) to the class it reserved
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
    region, cls = origin_of(status)
    # the size it moves with, within the spec as it is now (edited while it checkpointed: the new placement
    # follows the edit, as any placement does)
    replicas = min(max(moving.replicas or spec.replicas.start, spec.replicas.min), spec.replicas.upper)
    request = move_request(key, job, spec, region, cls, moving.exclude, replicas)
    if moving.trigger == UPGRADE and moving.reserved is not None:  # it moves for that class: nowhere else
        only = [a for a in request.alternatives if a.device_class == moving.reserved.device_class]
        request = replace(request, alternatives=only or request.alternatives)
    return request


def origin_of(status: HeteroJobStatus) -> tuple[str, str]:
    """(region, class) a moving job left: its reservation's, else the open move's history entry's ('', '')."""
    moving = status.migration
    origin = ""
    if moving is not None and moving.reserved is not None:
        origin = f"{moving.reserved.region}/{moving.reserved.device_class}"
    elif status.history and status.history[-1].action in MOVES:
        origin = (status.history[-1].from_ or "").split(" ")[0]
    region, _, cls = origin.partition("/")
    return region, cls


def move_began(status: HeteroJobStatus) -> float | None:
    """When the open move began: its history entry's time (None: no open move entry)."""
    last = status.history[-1] if status.history else None
    return timestamp(last.time) if last is not None and last.action in MOVES and not last.to else None


def transfer_move(spec: HeteroJobSpec, status: HeteroJobStatus, origin: str, device_class: str, replicas: int,
                  classes: Mapping[str, DeviceClass], now: float, settings: transfer.TransferSettings,
                  trigger: str | None = None, voluntary: bool = True) -> transfer.Move:
    """What `engine.capacity.transfer` weighs for this job's move out of `origin`: its checkpoint's size (reported,
    hinted or estimated), the last save time, what a voluntary move of this `trigger` saves, whether a
    checkpoint was acked at all and, if not, the run a restart from scratch would lose."""
    last = status.checkpoint.last if status.checkpoint else None
    per_replica = next((a.per_replica for a in spec.devices if a.device_class == device_class),
                       spec.devices[0].per_replica)
    cls = classes.get(device_class)
    size = transfer.checkpoint_size(last.size_bytes if last else None, spec.checkpoint.size_hint_bytes,
                                    replicas * per_replica, cls.memory_gib if cls else None, settings.default_memory_gib)
    saves: float | None = None
    started = timestamp(status.start_time)
    if voluntary and trigger is not None:
        slow = transfer.slowdown(trigger, spec.policy.straggler_ratio)
        if slow is not None:
            saves = transfer.saving(transfer.horizon(now - started if started else 0.0, settings), slow)
    # without an acked checkpoint (one with a URI to resume from) a restart from scratch loses the current run
    run_since = timestamp(status.placement.since) if status.placement is not None else None
    run_since = run_since or started
    return transfer.Move(origin, size, last.save_seconds if last else None, saves, voluntary, settings,
                         checkpointed=bool(last is not None and last.uri),
                         lost_s=max(0.0, now - run_since) if run_since else 0.0)


def move_request(key: str, job: Mapping[str, Any], spec: HeteroJobSpec, region: str, device_class: str,
                 exclude: Iterable[str], replicas: int) -> Request:
    """A job leaving `exclude` from `region`/`device_class`: it stays in that region and class unless its
    policy allows crossing (an empty region or class: unknown, anywhere the spec allows)."""
    allowed = tuple(spec.regions.allowed)
    alternatives = list(spec.devices)
    outside = OUTSIDE_ALLOWED
    if region and device_class:
        if not spec.policy.allow_cross_region:
            allowed = (region,)
            outside = f"a move stays in {region} (spec.policy.allowCrossRegion is false)"
        if not spec.policy.allow_cross_class:
            alternatives = [a for a in spec.devices if a.device_class == device_class] or alternatives
    return _request(key, job, spec, alternatives, allowed, frozenset(exclude), replicas, outside)


def _request(key: str, job: Mapping[str, Any], spec: HeteroJobSpec, alternatives: Iterable[DeviceAlternative],
             allowed: tuple[str, ...], exclude: frozenset[str], replicas: int,
             outside: str = "") -> Request:
    pod_requests = template_requests(spec.template)
    return Request(
        job=key,
        alternatives=[Alternative(
            a.device_class, a.per_replica, a.requires.versions() if a.requires else {},
            dict(a.requires.node_labels or {}) if a.requires else {}, pod_requests)
            for a in alternatives],
        replicas=replicas,
        allowed_regions=allowed,
        preferred_regions=tuple(r for r in spec.regions.preferred if not allowed or r in allowed),
        exclude_nodes=exclude,
        priority=spec.priority.rank,
        created=timestamp((job.get("metadata") or {}).get("creationTimestamp")) or 0.0,
        outside_allowed=outside or OUTSIDE_ALLOWED,
    )


def base_request(mine: Request, device_class: str, region: str, replicas: int) -> Request:
    """`mine` at `replicas` in one class and region: what a grown elastic job goes back to."""
    return Request(mine.job, [a for a in mine.alternatives if a.device_class == device_class], replicas,
                   allowed_regions=(region,), priority=mine.priority, created=mine.created)


def reservation(candidate_region: str, device_class: str, per_replica: int, nodes: Iterable[str]) -> Reservation:
    """status.migration.reserved for room held for a move."""
    return Reservation(region=candidate_region, device_class=device_class, per_replica=per_replica, nodes=list(nodes))
