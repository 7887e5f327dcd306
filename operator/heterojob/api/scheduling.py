"""`status.scheduling`: what the queue policy (`--queue-policy mlfq`) keeps across a job's runs and operator
restarts (attained service, the starvation clock, time run per class, measured speeds), and how it is read:
untrusted, part by part (`clean_scheduling`)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, PrivateAttr, model_validator

from heterojob.api.common import MAX_REPLICAS, StatusModel

SPEEDS_MAX = 32  # measured (class, replicas) speeds kept per job, newest win
SERVICE_MAX_S = 1e13  # device-seconds: 100,000 devices for 3,000 years; a larger figure is clamped
RUN_CLASSES_MAX = 16


class MeasuredSpeed(StatusModel):
    """The job's own training speed at one device class and size, from its checkpoint acks."""

    device_class: str = Field(min_length=1, max_length=63, description="the AcceleratorClass it ran on")
    replicas: int = Field(ge=1, le=MAX_REPLICAS, description="replicas it ran with")
    steps_per_second: float = Field(gt=0, le=1e9, allow_inf_nan=False, description="training steps a second")
    time: str | None = Field(None, description="when it was measured")


class Scheduling(StatusModel):
    """What the queue policy (`--queue-policy mlfq`) needs to survive the job's runs and operator restarts.

    Status is untrusted: `clean` drops what does not read and clamps what is out of range, and says what
    (the operator logs it and rewrites the field cleaned)."""

    attained_device_seconds: float = Field(0.0, ge=0, le=SERVICE_MAX_S, allow_inf_nan=False, description=(
        "devices x seconds the job held devices since its last promotion, over its ended placements (the "
        "current one counts from placement.since)"))
    waiting_since: str | None = Field(None, description=(
        "when it last started waiting (arrival, or when its last placement ended): the starvation bound's clock"))
    promoted: bool = Field(False, description="its current (or next) run was started by a starvation promotion")
    run_seconds: dict[str, float] = Field(default_factory=dict, description=(
        "seconds it held devices per device class, over its ended placements (its work done, in the planner's "
        "estimates)"))
    accounted_generation: int = Field(0, ge=0, description=(
        "the last placement generation counted into attainedDeviceSeconds and runSeconds (never twice)"))
    preemptions: int = Field(0, ge=0, description=(
        "times the job was preempted: once the operator's --max-turns, only a higher priority displaces it"))
    speeds: list[MeasuredSpeed] = Field(default_factory=list, description=(
        "measured steps/s per device class and replicas, newest last (at most 32)"))

    @model_validator(mode="wrap")
    @classmethod
    def _untrusted(cls, value: Any, handler: Any) -> Any:
        """Never refuse the whole field: what does not read is dropped or clamped (see `clean`)."""
        cleaned, notes = clean_scheduling(value)
        out = handler(cleaned)
        out._notes = notes
        out._dropped = sorted(set(value) - set(cleaned)) if isinstance(value, dict) else []
        return out

    _notes: list[str] = PrivateAttr(default_factory=list)
    _dropped: list[str] = PrivateAttr(default_factory=list)  # keys status had that did not read


def clean_scheduling(value: Any) -> tuple[dict[str, Any], list[str]]:
    """status.scheduling as far as it reads, and a note per part dropped or clamped."""
    import math

    if isinstance(value, Scheduling):
        return value.model_dump(by_alias=True, exclude_none=True), []
    if not isinstance(value, dict):
        return {}, [f"not an object ({type(value).__name__}): ignored"]
    out: dict[str, Any] = {}
    notes: list[str] = []

    def number(name: str, raw: Any, top: float) -> float | None:
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or math.isnan(raw):
            notes.append(f"{name}={str(raw)[:40]!r} is not a number: ignored")
            return None
        if raw < 0:
            notes.append(f"{name}={raw} is negative: taken as 0")
            return 0.0
        if raw > top:
            notes.append(f"{name}={raw} is beyond {top:g}: clamped")
            return top
        return float(raw)

    for key, raw in value.items():
        if key == "attainedDeviceSeconds":
            n = number(key, raw, SERVICE_MAX_S)
            if n is not None:
                out[key] = n
        elif key == "waitingSince":
            from heterojob.api.times import timestamp

            if timestamp(raw) is None:
                notes.append(f"waitingSince={str(raw)[:40]!r} is not an RFC 3339 time: ignored")
            else:
                out[key] = raw
        elif key == "promoted":
            if isinstance(raw, bool):
                out[key] = raw
            else:
                notes.append(f"promoted={str(raw)[:40]!r} is not a boolean: ignored")
        elif key == "preemptions":
            if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
                out[key] = raw
            else:
                notes.append(f"preemptions={str(raw)[:40]!r} is not a whole number >= 0: ignored")
        elif key == "accountedGeneration":
            if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
                out[key] = raw
            else:
                notes.append(f"accountedGeneration={str(raw)[:40]!r} is not a whole number >= 0: ignored")
        elif key == "runSeconds":
            if not isinstance(raw, dict):
                notes.append("runSeconds is not an object: ignored")
                continue
            runs = {}
            for cls_name, seconds in list(raw.items())[:RUN_CLASSES_MAX]:
                n = number(f"runSeconds[{str(cls_name)[:63]}]", seconds, SERVICE_MAX_S)
                if n is not None and isinstance(cls_name, str) and 0 < len(cls_name) <= 63:
                    runs[cls_name] = n
            if len(raw) > RUN_CLASSES_MAX:
                notes.append(f"runSeconds has {len(raw)} classes: the first {RUN_CLASSES_MAX} kept")
            out[key] = runs
        elif key == "speeds":
            if not isinstance(raw, list):
                notes.append("speeds is not a list: ignored")
                continue
            kept = []
            for item in raw[-SPEEDS_MAX:]:
                try:
                    kept.append(MeasuredSpeed.model_validate(item).model_dump(by_alias=True, exclude_none=True))
                except ValueError:
                    notes.append(f"speeds entry {str(item)[:80]!r} does not read: ignored")
            if len(raw) > SPEEDS_MAX:
                notes.append(f"speeds has {len(raw)} entries: the newest {SPEEDS_MAX} kept")
            out[key] = kept
        else:  # a field of a newer version: kept as it is
            out[key] = raw
    return out, notes
