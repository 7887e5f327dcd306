"""The one place that builds a HeteroJob's status patch: phase, conditions, history entries, checkpoints.

Every step of the controller accumulates its changes in a `StatusPatch` and hands it to `StatusWriter`,
which applies it once (with observedGeneration) through the status subresource. Conditions keep their
lastTransitionTime while their status holds; history is bounded.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from heterojob.api.job import HeteroJobStatus, Phase
from heterojob.kube.api import Kube, now_iso
from heterojob.kube.conditions import set_condition

log = logging.getLogger("heterojob.controller")

HISTORY_LIMIT = 50
REASON_MAX = 512


def read_status(job: Mapping[str, Any]) -> HeteroJobStatus:
    """The job's status, or an empty one when it is unreadable (status is untrusted input)."""
    try:
        return HeteroJobStatus.model_validate(job.get("status") or {})
    except ValidationError as exc:
        meta = job.get("metadata") or {}
        log.warning("unreadable status of %s/%s, treating it as new: %s", meta.get("namespace"), meta.get("name"),
                    exc)
        return HeteroJobStatus()


def where(status: HeteroJobStatus) -> str | None:
    """`region/class xN (generation G)` of the job's placement, as history entries spell it."""
    p = status.placement
    return f"{p.region}/{p.device_class} x{p.replicas} (generation {p.generation})" if p else None


class StatusPatch:
    """Changes to one job's status, accumulated and then written once."""

    def __init__(self, status: HeteroJobStatus) -> None:
        self.status = status
        self.fields: dict[str, Any] = {}
        self._conditions: list[dict[str, Any]] | None = None
        self._history: list[dict[str, Any]] | None = None

    def set(self, **fields: Any) -> StatusPatch:
        """Set status fields by their API names (camelCase); None deletes a field."""
        self.fields.update(fields)
        return self

    def phase(self, phase: Phase, reason: str | None, message: str) -> StatusPatch:
        return self.set(phase=phase.value, reason=reason, message=message)

    def condition(self, type_: str, status: str, reason: str, message: str) -> StatusPatch:
        if self._conditions is None:
            self._conditions = [c.model_dump(by_alias=True, exclude_none=True) for c in self.status.conditions]
        self._conditions = set_condition(self._conditions, type_, status, reason, message, now_iso())
        return self

    def history_entries(self) -> list[dict[str, Any]]:
        if self._history is None:
            self._history = [h.model_dump(by_alias=True, exclude_none=True) for h in self.status.history]
        return self._history

    def history(self, action: str, reason: str, from_: str | None, to: str | None = None,
                **extra: Any) -> StatusPatch:
        """Append one entry (time now); `extra` are further API fields (durationSeconds, progressLost...)."""
        entry = {"time": now_iso(), "action": action, "reason": reason[:REASON_MAX], "from": from_, "to": to,
                 **extra}
        self.history_entries().append({k: v for k, v in entry.items() if v is not None})
        return self

    def finish_move(self, to: str) -> StatusPatch:
        """Record where the last migration or resize landed, when that entry is still open."""
        last = self.status.history[-1] if self.status.history else None
        if self._history is None and not (last and last.action in ("migrate", "resize") and not last.to):
            return self
        history = self.history_entries()
        if history and history[-1].get("action") in ("migrate", "resize") and not history[-1].get("to"):
            history[-1]["to"] = to
        return self

    def body(self, observed_generation: int | None) -> dict[str, Any]:
        out = dict(self.fields)
        if self._conditions is not None:
            out["conditions"] = self._conditions
        if self._history is not None:
            out["history"] = self._history[-HISTORY_LIMIT:]
        out.setdefault("observedGeneration", observed_generation)
        return out

    def __bool__(self) -> bool:
        return bool(self.fields) or self._conditions is not None or self._history is not None


class StatusWriter:
    """Applies patches to HeteroJob status (the only writer of phase, placement, checkpoint and history)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    async def write(self, job: Mapping[str, Any], patch: StatusPatch) -> bool:
        """Apply `patch`; False when the job is gone."""
        meta = job["metadata"]
        body = patch.body(meta.get("generation"))
        return await self.kube.patch_job_status(meta["namespace"], meta["name"], body) is not None
