"""The one place that builds a HeteroJob's status patch: phase, conditions, history entries, checkpoints.

Every step of the controller accumulates its changes in a `StatusPatch` and hands it to `StatusWriter`,
which applies it once (with observedGeneration) through the status subresource. Conditions keep their
lastTransitionTime while their status holds; history is bounded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from heterojob.api import crds
from heterojob.api.job import SPEEDS_MAX, HeteroJob, HeteroJobStatus, Phase
from heterojob.engine import queueing, spec_changes
from heterojob.controller.known import Known
from heterojob.kube.api import Kube, now_iso
from heterojob.kube.conditions import set_condition
from heterojob.state.requests import MOVES
from heterojob.state.times import iso, timestamp

log = logging.getLogger("heterojob.controller")

HISTORY_LIMIT = 50
REASON_MAX = 512
STATUS_SCHEMA = crds.object_schema(HeteroJob)["properties"]["status"]  # the CRD's: the defaults the API server fills


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
        field = _FIELDS.get(name)
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
    """status.scheduling is read part by part (`api.job.clean_scheduling`): what it had to drop or clamp is
    logged and the field rewritten, cleaned, with the next status write."""
    notes = status.scheduling._notes if status.scheduling is not None else []
    if notes:
        log.warning("status of %s/%s: status.scheduling: %s", meta.get("namespace"), meta.get("name"),
                    "; ".join(notes))
        if "scheduling" not in status._repaired:
            status._repaired = sorted({*status._repaired, "scheduling"})
    return status


_FIELDS = {(f.alias or n): n for n, f in HeteroJobStatus.model_fields.items()}
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
        if self._history is None and not (last and last.action in MOVES and not last.to):
            return self
        history = self.history_entries()
        if history and history[-1].get("action") in MOVES and not history[-1].get("to"):
            history[-1]["to"] = to
        return self

    # --- status.scheduling: what the queue policy keeps across runs and restarts ------------------------

    def scheduling(self) -> dict[str, Any]:
        """The patch's status.scheduling (a copy of the job's, changed in place by the methods below)."""
        current = self.fields.get("scheduling")
        if current is None:
            s = self.status.scheduling
            current = s.model_dump(by_alias=True, exclude_none=True) if s is not None else {}
            # a merge patch keeps what it does not name: a key that did not read is deleted by name
            current.update({k: None for k in (s._dropped if s is not None else ()) if k not in current})
            current["runSeconds"] = dict(current.get("runSeconds") or {})
            current["speeds"] = list(current.get("speeds") or [])
            self.fields["scheduling"] = current
        return current

    def start_run(self, queue: queueing.QueueSettings | None, waited_from: float, now: float) -> StatusPatch:
        """A placement starts: under MLFQ a job that waited the starvation bound (since `waited_from`) runs
        promoted, its attained service counted again from zero (`engine.queueing.on_start`)."""
        s = self.scheduling()
        service = queueing.Service(float(s.get("attainedDeviceSeconds") or 0.0), waited_from)
        if queue is not None:
            service = queueing.on_start(service, now, queue)
        else:
            service = queueing.Service(service.attained_device_s, waited_from, False)
        s.update(attainedDeviceSeconds=service.attained_device_s, promoted=service.promoted)
        return self

    def measured(self, device_class: str, replicas: int, steps_per_second: float, now: float) -> StatusPatch:
        """Record the job's measured speed at a class and size (the newest per pair; at most SPEEDS_MAX)."""
        s = self.scheduling()
        kept = [x for x in s["speeds"] if (x.get("deviceClass"), x.get("replicas")) != (device_class, replicas)]
        kept.append({"deviceClass": device_class, "replicas": replicas,
                     "stepsPerSecond": float(f"{steps_per_second:.6g}"), "time": iso(now)})
        s["speeds"] = kept[-SPEEDS_MAX:]
        return self

    def _ends(self, out: dict[str, Any]) -> tuple[bool, bool]:
        """(the placement ends: set to None or replaced by another generation, the job finishes)."""
        old = self.status.placement
        new = out["placement"] if "placement" in out else old
        new_generation = new.get("generation") if isinstance(new, Mapping) else getattr(new, "generation", None)
        ends = old is not None and "placement" in out and (new is None or new_generation != old.generation)
        return ends, out.get("phase") in (Phase.SUCCEEDED.value, Phase.FAILED.value)

    def _account(self, out: dict[str, Any], now: float) -> None:
        """A placement that ends (set to None or replaced by another generation) or a job that finishes:
        its run is counted once (accountedGeneration) into status.scheduling, attained device-seconds and
        seconds per class; a placement that ends starts the starvation clock (waitingSince)."""
        old = self.status.placement
        if old is None:
            return
        ends, finishes = self._ends(out)
        new = out["placement"] if "placement" in out else old
        if not (ends or finishes):
            return
        s = self.scheduling()
        if int(s.get("accountedGeneration") or 0) < old.generation:
            since = timestamp(old.since) or timestamp(self.status.start_time)
            ran = max(0.0, now - since) if since is not None else 0.0
            devices = len(old.nodes) * old.per_replica
            s["attainedDeviceSeconds"] = round(float(s.get("attainedDeviceSeconds") or 0.0) + ran * devices, 1)
            runs = s["runSeconds"]
            runs[old.device_class] = round(float(runs.get(old.device_class, 0.0)) + ran, 1)
            s["accountedGeneration"] = old.generation
            if ends and new is None:
                s["waitingSince"] = iso(now)
        out["scheduling"] = s

    def _forget_utilization(self, out: dict[str, Any]) -> None:
        """status.utilization measures the devices of the current placement (the monitor writes it while the job
        runs): a job that holds none (its placement ended, replaced by a new gang not measured yet, finished,
        or none at all) has none, absent rather than 0 or its last run's figure (kubectl's Util column, the
        console, the low-utilization policy)."""
        if "utilization" in out or self.status.utilization is None:
            return
        ends, finishes = self._ends(out)
        holds = (out["placement"] if "placement" in out else self.status.placement) is not None
        if ends or finishes or not holds:
            out["utilization"] = None

    def body(self, observed_generation: int | None) -> dict[str, Any]:
        self._account(self.fields, time.time())
        self._forget_utilization(self.fields)
        if "scheduling" in self.status._repaired:
            self.scheduling()  # cleaned, with what did not read deleted by name
        out = dict(self.fields)
        for name in self.status._repaired:  # write back what reading had to leave out
            if name not in out:
                value = getattr(self.status, _FIELDS[name])
                out[name] = [v.model_dump(by_alias=True, exclude_none=True) for v in value] \
                    if isinstance(value, list) else value.model_dump(by_alias=True, exclude_none=True) \
                    if hasattr(value, "model_dump") else value
        if self._conditions is not None:
            out["conditions"] = self._conditions
        if self._history is not None:
            out["history"] = self._history[-HISTORY_LIMIT:]
        out.setdefault("observedGeneration", observed_generation)
        return out

    def __bool__(self) -> bool:
        return bool(self.fields) or self._conditions is not None or self._history is not None


class StatusWriter:
    """Applies patches to HeteroJob status (the only writer of phase, placement, checkpoint and history).

    A patch that changes nothing the job's status already says is not sent: passes are level-triggered
    and run often, and a write per pass is load on the API server and noise for every watcher."""

    def __init__(self, kube: Kube, known: Known | None = None) -> None:
        self.kube = kube
        self.known = known  # what the operator knows of each job: told every answer (`controller.known`)

    async def write(self, job: Mapping[str, Any], patch: StatusPatch) -> bool:
        """Apply `patch`; False when the job is gone."""
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        # a step holding the body its pass read, after another step of the pass wrote: written onto that answer
        base = self.known.base(key, job) if self.known is not None else job
        # observedGeneration advances only where the reconcile pass read the edit (`spec_changes`), so no
        # other write (telemetry, a checkpoint) swallows it; a job's first write records what it read
        seen = patch.status.observed_generation
        body = patch.body(seen if seen is not None else meta.get("generation"))
        if not patch.status.observed_spec:
            body.setdefault("observedSpec", spec_changes.digests(job.get("spec")))
        current = base.get("status") if isinstance(base.get("status"), Mapping) else {}
        changed = {k: v for k, v in body.items() if current.get(k) != v}
        if not changed:
            return True
        answer = await self.kube.patch_job_status(meta["namespace"], meta["name"], body)
        if answer is None:
            return False
        if self.known is not None:
            self.known.written(key, answer, base, body)
        return True
