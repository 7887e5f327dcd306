"""The one place that builds a HeteroJob's status patch: phase, conditions, history entries, checkpoints.

Every step of the controller accumulates its changes in a `StatusPatch` and hands it to `StatusWriter`,
which applies it once (with observedGeneration) through the status subresource. Conditions keep their
lastTransitionTime while their status holds; history is bounded. Each change of a job's lifecycle has one
builder over the API's models ("transitions" below: `ask_checkpoint`, `cancel_move`, `end_checkpoint`,
`escalate`, `begin_move`, `preempt`, `reject`, `revalidate`, `run`, `restart`, `finish`, `repair`,
`observe`); a field the merge patch must delete is written as None by name.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from heterojob.api import crds
from heterojob.api.job import HeteroJob, Phase
from heterojob.api.job_status import CheckpointRef, HeteroJobStatus, MigrationState, PendingCheckpoint
from heterojob.api.scheduling import SPEEDS_MAX
from heterojob.api.onsets import SymptomOnsets
from heterojob.controller.known import Known
from heterojob.engine.basics import queueing
from heterojob.engine.placing import spec_changes
from heterojob.engine.basics.phases import Then
from heterojob.kube.api import Kube, now_iso
from heterojob.api.conditions import set_condition
from heterojob.state.job_status import FIELDS
from heterojob.state.requests import MOVES
from heterojob.api.times import iso, timestamp

log = logging.getLogger("heterojob.controller")

HISTORY_LIMIT = 50
REASON_MAX = 512
STATUS_SCHEMA = crds.object_schema(HeteroJob)["properties"]["status"]  # the CRD's: the defaults the API server fills


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

    def onsets(self, onsets: SymptomOnsets | None) -> StatusPatch:
        """status.symptoms: when each held symptom of the current placement began (`state.symptoms`)."""
        return self.set(symptoms=onsets.model_dump(by_alias=True, exclude_none=True) if onsets else None)

    # --- transitions: one builder per change of a job's lifecycle ------------------------------------------

    def checkpoint(self, pending: PendingCheckpoint | None, last: CheckpointRef | None) -> StatusPatch:
        """status.checkpoint: the one in progress (None: none) and the last completed."""
        return self.set(checkpoint={"pending": _dump(pending), "last": _dump(last)})

    def drop_pending(self) -> StatusPatch:
        """The checkpoint in progress ends with the placement (the last completed one stays)."""
        c = self.status.checkpoint
        return self.checkpoint(None, c.last) if c is not None else self.set(checkpoint=None)

    def migration(self, move: MigrationState | None) -> StatusPatch:
        """status.migration: the move in progress (None: none)."""
        return self.set(migration=_dump(move))

    def ask_checkpoint(self, pending: PendingCheckpoint, message: str, move: MigrationState | None = None,
                       handled: Mapping[str, str] | None = None) -> StatusPatch:
        """A checkpoint asked for (step 1), with the move it serves and the request annotation it consumes:
        intent is in the status before any trigger is let go. A periodic one leaves the job Running."""
        self.checkpoint(pending, self.status.checkpoint.last if self.status.checkpoint else None)
        if move is not None:
            self.migration(move)
        if handled:
            self.set(handled={**self.status.handled, **handled})
        word = pending.then.value.capitalize()
        self.condition("Checkpointing", "True", word, message)
        if pending.then != Then.CONTINUE:  # a periodic checkpoint is not a disruption
            self.phase(Phase.CHECKPOINTING, f"{word}Requested", message)
        return self

    def cancel_move(self, last: CheckpointRef | None, reason: str, cause: str, message: str) -> StatusPatch:
        """A move (or preemption, reclaim) called off at its checkpoint: the job runs on where it is."""
        self.phase(Phase.RUNNING, reason, message).checkpoint(None, last).migration(None)
        return self.condition("Checkpointing", "False", cause, message)

    def end_checkpoint(self, last: CheckpointRef | None, reason: str, message: str) -> StatusPatch:
        """The checkpoint in progress is over: saved (`last` is it) or missed (`last` as it was)."""
        return self.checkpoint(None, last).condition("Checkpointing", "False", reason, message)

    def escalate(self, pending: PendingCheckpoint, move: MigrationState | None, message: str) -> StatusPatch:
        """A fault while the job checkpoints for something that was not urgent: the checkpoint is urgent now."""
        self.checkpoint(pending, self.status.checkpoint.last if self.status.checkpoint else None)
        if move is not None:
            self.migration(move)
        self.condition("Checkpointing", "True", "Urgent", message)
        return self.phase(Phase.CHECKPOINTING, "FaultWhileCheckpointing", message)

    def begin_move(self, phase: Phase, reason: str, message: str, move: MigrationState,
                   ready_reason: str | None = None) -> StatusPatch:
        """The placement ends and the job is placed again (Migrating, Resizing) as `move` says."""
        self.phase(phase, reason, message).set(placement=None).migration(move)
        return self._pods_go(reason, message).condition("Ready", "False", ready_reason or reason, message)

    def preempt(self, message: str) -> StatusPatch:
        """The placement ends and the job goes back to the queue (Preempted), one more turn counted
        (status.scheduling.preemptions: `QueueSettings.max_turns`)."""
        s = self.scheduling()
        s["preemptions"] = int(s.get("preemptions") or 0) + 1
        self.phase(Phase.PREEMPTED, "Preempted", message).set(placement=None).migration(None)
        return self._pods_go("Preempted", message).condition("Ready", "False", "Preempted", message)

    def reject(self, reason: str, message: str) -> StatusPatch:
        """The spec can never run: Failed; a checkpoint or move in progress ends with its pods."""
        self.phase(Phase.FAILED, reason, message).set(placement=None)
        if (self.status.checkpoint and self.status.checkpoint.pending) or self.status.migration is not None:
            self.drop_pending().migration(None)
        return self._pods_go(reason, message).condition("SpecValid", "False", reason, message)

    def revalidate(self, reason: str, message: str) -> StatusPatch:
        """A rejected spec, edited, now reads: the job waits again (the condition says what stays true: it
        does not wait for room once placed)."""
        self.phase(Phase.PENDING, None, f"{message}; waiting for room")
        return self.condition("SpecValid", "True", reason, message)

    def run(self, reason: str, message: str) -> StatusPatch:
        """Every rank runs; a landed move's state, left by a stop before its gang was recorded, ends."""
        self.phase(Phase.RUNNING, reason, message).condition("Ready", "True", reason, message)
        return self.migration(None) if self.status.migration is not None else self

    def restart(self, reason: str, message: str, from_: str | None) -> StatusPatch:
        """A replica failed: the gang starts again (restarts + 1) from the queue."""
        self.phase(Phase.PENDING, reason, message).set(placement=None, restarts=self.status.restarts + 1)
        self._pods_go(reason, message)
        return self.history("restart", message, from_).condition("Ready", "False", reason, message)

    def _pods_go(self, reason: str, message: str) -> StatusPatch:
        """The placement ends and its gang's pods are deleted: PodsCreated no longer says they were made."""
        if any(c.type == "PodsCreated" and c.status == "True" for c in self.status.conditions):
            self.condition("PodsCreated", "False", reason, f"the gang's pods are deleted: {message}")
        return self

    def finish(self, failed: bool, reason: str, message: str) -> StatusPatch:
        """The job succeeded or failed for good."""
        self.phase(Phase.FAILED if failed else Phase.SUCCEEDED, reason, message).set(completionTime=now_iso())
        return self.condition("Ready", "False", reason, message)

    def repair(self, phase: Phase, message: str) -> StatusPatch:
        """A finished phase someone wrote while the placement's pods still run, repaired from the pods."""
        return self.phase(phase, "StatusRepaired", message).set(completionTime=None)

    def observe(self, generation: int | None, digests: Mapping[str, str]) -> StatusPatch:
        """The spec edit was read (`engine.placing.spec_changes`)."""
        return self.set(observedGeneration=generation, observedSpec=dict(digests))

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
        promoted, its attained service counted again from zero (`engine.basics.queueing.on_start`)."""
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
        s["speeds"] = with_speed(s["speeds"], device_class, replicas, steps_per_second, now)
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

    def _forget_onsets(self, out: dict[str, Any]) -> None:
        """status.symptoms is about the current placement: gone with it."""
        if "symptoms" in out or self.status.symptoms is None:
            return
        ends, finishes = self._ends(out)
        if ends or finishes:
            out["symptoms"] = None

    def body(self, observed_generation: int | None) -> dict[str, Any]:
        self._account(self.fields, time.time())
        self._forget_utilization(self.fields)
        self._forget_onsets(self.fields)
        if "scheduling" in self.status._repaired:
            self.scheduling()  # cleaned, with what did not read deleted by name
        out = dict(self.fields)
        for name in self.status._repaired:  # write back what reading had to leave out
            if name not in out:
                value = getattr(self.status, FIELDS[name])
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


def with_speed(speeds: Sequence[Mapping[str, Any]], device_class: str, replicas: int, steps_per_second: float,
               now: float) -> list[dict[str, Any]]:
    """status.scheduling.speeds with the job's speed at (class, replicas) recorded: the newest per pair, at
    most SPEEDS_MAX. From a checkpoint's ack (`StatusPatch.measured`) or the step metric (`speeds_patch`)."""
    kept = [dict(x) for x in speeds if (x.get("deviceClass"), x.get("replicas")) != (device_class, replicas)]
    kept.append({"deviceClass": device_class, "replicas": replicas,
                 "stepsPerSecond": float(f"{steps_per_second:.6g}"), "time": iso(now)})
    return kept[-SPEEDS_MAX:]


def speeds_patch(speeds: Sequence[Mapping[str, Any]], device_class: str, replicas: int, steps_per_second: float,
                 now: float) -> dict[str, Any]:
    """The monitor's status merge patch for a speed read from the step metric: status.scheduling.speeds only
    (a merge patch leaves the rest of status.scheduling as it is; the monitor sends it with a resourceVersion
    precondition, so a list changed meanwhile is never overwritten)."""
    return {"scheduling": {"speeds": with_speed(speeds, device_class, replicas, steps_per_second, now)}}


def _dump(model: BaseModel | None) -> dict[str, Any] | None:
    return model.model_dump(by_alias=True, exclude_none=True) if model is not None else None


class StatusWriter:
    """Applies patches to HeteroJob status (the only writer of phase, placement, checkpoint and history).

    A patch that changes nothing the job's status already says is not sent: passes are level-triggered
    and run often, and a write per pass is load on the API server and noise for every watcher."""

    def __init__(self, kube: Kube, known: Known | None = None) -> None:
        self.kube = kube
        self.known = known  # what the operator knows of each job: told every answer (`controller.known`)

    def base(self, key: str, job: Mapping[str, Any]) -> Mapping[str, Any]:
        """What a write based on `job` goes onto (`Known.base`: this pass's own answer written onto it, if any)."""
        return self.known.base(key, job) if self.known is not None else job

    def newest(self, key: str) -> Mapping[str, Any] | None:
        """The newest body of the job the operator knows (its watch, its own writes' answers), or None: read it."""
        return self.known.read(key) if self.known is not None else None

    async def write(self, job: Mapping[str, Any], patch: StatusPatch, precondition: bool = False) -> bool:
        """Apply `patch`; False when the job is gone. `precondition`: only onto the version the patch was built
        from (the resourceVersion of `job`, or of this pass's own answer written onto it), else `Conflict`
        (client-go's optimistic concurrency: the caller reads the job again and decides again)."""
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        # a step holding the body its pass read, after another step of the pass wrote: written onto that answer
        base = self.base(key, job)
        # observedGeneration advances only where the reconcile pass read the edit (`spec_changes`), so no
        # other write (telemetry, a checkpoint) swallows it; a job's first write records what it read
        seen = patch.status.observed_generation
        body = patch.body(seen if seen is not None else meta.get("generation"))
        if not patch.status.observed_spec:
            body.setdefault("observedSpec", spec_changes.digests(job.get("spec")))
        raw = base.get("status")
        current: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        changed = {k: v for k, v in body.items() if current.get(k) != v}
        if not changed:
            return True
        rv = (base.get("metadata") or {}).get("resourceVersion") if precondition else None
        answer = await self.kube.patch_job_status(meta["namespace"], meta["name"], body,
                                                  **({"resource_version": rv} if rv else {}))
        if answer is None:
            return False
        if self.known is not None:
            self.known.written(key, answer, base, body)
        return True
