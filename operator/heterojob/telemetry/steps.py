"""Training steps: each job's step rate from the SDK's counter, and when it is worth a status write.

The SDK (heterojob_sdk/metrics.py) serves `heterojob_training_steps_total` from every rank whose container
declares the port `heterojob-steps`; the shipped PodMonitor (or scrape config) scrapes it with the pod's
`namespace` and `pod`. One query per Prometheus, folded into the `up` query (no extra round trip): steps/s per
pod over `window_s`, only for counters that started (`_created`, the rank's first step) before the window did,
so a pod's start, restore or warm-up never reads as slow steps, and that counted at least MIN_STEPS in it (a
slower job's figure would be mostly rounding). The slope is `deriv` (least squares over the samples present),
not `rate`: a counter that started before the window has no reset in it (a restarted process has a new
`_created`), and `rate` divides by the whole window, so a pod Prometheus discovered late in it (service
discovery takes its time) would read as slow. A job's rate is the fastest of its ranks' (data-parallel ranks
step together; a rank whose series is missing says nothing).

Pure: plain vectors in, numbers out; time is an argument.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from heterojob.api.times import timestamp
from heterojob.telemetry.family import ROLE_LABEL, Vector
from heterojob.telemetry.model import number

STEPS_TOTAL = "heterojob_training_steps_total"
STEPS_CREATED = "heterojob_training_steps_created"
STEPS = "steps"  # ROLE_LABEL of the step-rate series in the `up` answer
STEPS_WINDOW_S = 300  # a job's speed is known after its ranks have stepped this long (and at least 2 scrapes)
MIN_STEPS = 5  # steps a window must count for a figure: a job slower than this is measured by its checkpoints only
# A scrape target labelled with a heterojob pod's job (the shipped PodMonitor relabels the pod label
# heterojob.io/job to `heterojob_job`; a labelmap of every pod label gives `heterojob_io_job`) is a training pod,
# not an exporter: its `pod`/`namespace` name the workload and its `up` says nothing about a node's exporter.
TRAINING_TARGET_LABELS = ("heterojob_job", "heterojob_io_job")
# A recorded speed is rewritten only when the measured one differs by more than this fraction, and not more
# often than every REWRITE_AFTER_S: status changes when the figure moves, not with every cycle's noise.
RELATIVE_CHANGE = 0.10
REWRITE_AFTER_S = 300.0


def query(window_s: int) -> str:
    """PromQL: steps/s per (namespace, pod) over the window, for counters older than the window that counted
    MIN_STEPS in it, tagged with ROLE_LABEL=STEPS so it can ride on the `up` query."""
    w = max(1, int(window_s))
    counted = f"max_over_time({STEPS_TOTAL}[{w}s]) - min_over_time({STEPS_TOTAL}[{w}s]) >= {MIN_STEPS}"
    return (f'label_replace(max by (namespace, pod) (deriv({STEPS_TOTAL}[{w}s]) '
            f'and on (namespace, pod) ({STEPS_CREATED} < time() - {w}) and on (namespace, pod) ({counted})), '
            f'"{ROLE_LABEL}", "{STEPS}", "", "")')


def is_training_target(labels: Mapping[str, str]) -> bool:
    return any(labels.get(name) for name in TRAINING_TARGET_LABELS)


def rates(up: Vector) -> dict[tuple[str, str], float]:
    """(namespace, pod) -> steps/s from the `up` answer's STEPS series (no pod label, no figure; a value
    that is not a finite number >= 0 is no figure either)."""
    out: dict[tuple[str, str], float] = {}
    for series in up or ():
        labels = series.get("metric") or {}
        if labels.get(ROLE_LABEL) != STEPS or not labels.get("pod"):
            continue
        value = number((series.get("value") or [None, None])[1])
        if value is None or value < 0:
            continue
        key = (labels.get("namespace") or "", labels["pod"])
        out[key] = max(value, out.get(key, 0.0))
    return out


def job_rate(namespace: str, pods: Sequence[str], measured: Mapping[tuple[str, str], float]) -> float | None:
    """A job's steps/s: the fastest of its ranks' pods that report one; None when none does, or all report 0
    (a stalled or not yet stepping job has no speed to record: never a fault)."""
    known = [measured[(namespace, p)] for p in pods if (namespace, p) in measured]
    best = max(known, default=0.0)
    return best if best > 0 else None


def worth_writing(speeds: Sequence[Mapping[str, Any]], device_class: str, replicas: int, rate: float,
                  now: float) -> bool:
    """Whether `rate` at (class, replicas) is news for status.scheduling.speeds: none is recorded there, or the
    recorded one is off by more than RELATIVE_CHANGE and was written at least REWRITE_AFTER_S ago (a time that
    does not read counts as long ago)."""
    entry = next((s for s in reversed(speeds)
                  if s.get("deviceClass") == device_class and s.get("replicas") == replicas), None)
    if entry is None:
        return True
    old = number(entry.get("stepsPerSecond"))
    if old is None or old <= 0:
        return True
    if abs(rate - old) <= RELATIVE_CHANGE * old:
        return False
    written = timestamp(entry.get("time"))
    return written is None or now - written >= REWRITE_AFTER_S
