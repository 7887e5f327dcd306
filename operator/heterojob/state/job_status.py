"""Reading a HeteroJob's status: untrusted input (anyone with write access to the status subresource can
put anything there), read field by field so one bad value never erases the rest."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from heterojob.api.job_status import HeteroJobStatus
from heterojob.api.times import timestamp

log = logging.getLogger("heterojob.controller")


def read_status(job: Mapping[str, Any]) -> HeteroJobStatus:
    """The job's status as far as it is readable (status is untrusted input: anyone with write access to
    the status subresource can put anything there). An unreadable field is dropped and an unreadable list
    entry (a history entry, a condition) is left out, so one bad value never erases the rest; what was
    dropped is remembered (`_repaired`) and rewritten, cleaned, with the next status write."""
    raw = job.get("status")
    meta = job.get("metadata") or {}
    if raw is None:
        return HeteroJobStatus()
    try:
        return _scheduling_notes(HeteroJobStatus.model_validate(raw), meta)
    except ValidationError:
        pass
    cleaned: dict[str, Any] = {}
    repaired: list[str] = []
    for name, value in (raw.items() if isinstance(raw, Mapping) else ()):
        field = FIELDS.get(name)
        if field is None:
            continue  # a field this version does not know: dropped from the model, not rewritten
        if isinstance(value, list) and name in _LISTS:
            kept = [item for item in value if _valid({name: [item]})]
            cleaned[name] = kept
            if len(kept) != len(value):
                repaired.append(name)
        elif _valid({name: value}):
            cleaned[name] = value
        else:
            repaired.append(name)
    status = HeteroJobStatus.model_validate(cleaned)
    status._repaired = sorted(set(repaired))
    if repaired or not isinstance(raw, Mapping):
        log.warning("status of %s/%s: unreadable %s dropped", meta.get("namespace"), meta.get("name"),
                    ", ".join(repaired) or "status")
    return _scheduling_notes(status, meta)


def _scheduling_notes(status: HeteroJobStatus, meta: Mapping[str, Any]) -> HeteroJobStatus:
    """status.scheduling is read part by part (`api.scheduling.clean_scheduling`): what it had to drop or clamp is
    logged and the field rewritten, cleaned, with the next status write."""
    notes = status.scheduling._notes if status.scheduling is not None else []
    if notes:
        log.warning("status of %s/%s: status.scheduling: %s", meta.get("namespace"), meta.get("name"),
                    "; ".join(notes))
        if "scheduling" not in status._repaired:
            status._repaired = sorted({*status._repaired, "scheduling"})
    return status


FIELDS = {(f.alias or n): n for n, f in HeteroJobStatus.model_fields.items()}
_LISTS = {"conditions", "history"}


def _valid(fragment: dict[str, Any]) -> bool:
    try:
        HeteroJobStatus.model_validate(fragment)
        return True
    except ValidationError:
        return False


def where(status: HeteroJobStatus) -> str | None:
    """`region/class xN (generation G)` of the job's placement, as history entries spell it."""
    p = status.placement
    return f"{p.region}/{p.device_class} x{p.replicas} (generation {p.generation})" if p else None


def waited_from(job: Mapping[str, Any], status: HeteroJobStatus) -> float:
    """When the job last started waiting: status.scheduling.waitingSince, else its creation (else now)."""
    since = timestamp(status.scheduling.waiting_since) if status.scheduling is not None else None
    return since or timestamp((job.get("metadata") or {}).get("creationTimestamp")) or time.time()
