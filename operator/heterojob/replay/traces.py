"""Job traces for `heterojob sim replay`: Gavel's Philly-derived traces and Gavel-style synthetic ones.

Gavel's device types map onto this fleet's classes by speed rank (documented, not a claim about them):
V100 -> nvidia-h100, P100 -> nvidia-a100, K80 -> ascend-910b. A job's throughput on `d` devices is Gavel's
measurement at that scale, linearly interpolated between measured scales (1, 2, 4, 8), flat beyond the
largest, and never better than linear scaling from the job's own scale (some of Gavel's multi-GPU numbers
are super-linear; growing a job is not credited with that).

The device type a user asks for (what the static baseline keeps) is drawn with probability proportional to
the job's throughput on it: users lean to the fast types, and each pool gets the same expected work, the
kindest partition for a static fleet.

Trace files (`read_trace`): either of Gavel's layouts (`LAYOUTS`: the 7-field Philly traces, the 10-field
lines of Gavel's `parse_trace`), blank lines and `#` comments skipped; jobs of a type the throughput table
lacks are left out and named; Gavel's priority weights become priority levels by rank; a line that cannot be
read, or a job longer than `MAX_HOURS` on its fastest class or arriving after them, is a TraceError naming the
line and the field.
"""

from __future__ import annotations

import ast
import csv
import json
import math
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

CLASS_OF = {"v100": "nvidia-h100", "p100": "nvidia-a100", "k80": "ascend-910b"}
CLASSES = list(CLASS_OF.values())
REFERENCE = "nvidia-h100"  # Gavel sizes synthetic jobs by their duration on V100
Rates = Mapping[int, Mapping[str, float]]  # measured scale (devices) -> class -> steps/s of the whole job


@dataclass(frozen=True)
class TraceJob:
    id: int
    job_type: str
    total_steps: float
    arrival_s: float
    gpus: int
    rates: Rates
    wants: str  # the class the user asks for (static keeps it)
    priority: int = 0

    @property
    def shape(self) -> tuple[int, int]:
        """(replicas, devices per replica): one replica up to 8 devices, whole 8-device nodes beyond."""
        return (1, self.gpus) if self.gpus <= 8 else (math.ceil(self.gpus / 8), 8)

    def max_replicas(self, cls: str) -> int:
        """Elastic on `cls` up to 8 devices (Gavel's measured range) when the type was measured at several
        scales (data-parallel) and runs faster there; otherwise the trace's own shape."""
        return self._max_replicas.get(cls, self.shape[0])

    @cached_property
    def _max_replicas(self) -> dict[str, int]:
        replicas, per = self.shape
        out = {}
        for cls in CLASSES:
            best = replicas
            if len(self.rates) > 1 and replicas == 1:
                for r in range(2, max(self.rates) // per + 1):
                    if self.rate(cls, r * per) > self.rate(cls, best * per):
                        best = r
            out[cls] = best
        return out

    def rate(self, cls: str, devices: int | None = None) -> float:
        """Steps/s of the whole job on `devices` of `cls` (default: the trace's own scale); 0: cannot run."""
        d = devices or self.gpus
        r = _interpolate(self.rates, cls, d)
        if d > self.gpus:
            r = min(r, _interpolate(self.rates, cls, self.gpus) * d / self.gpus)
        return r

    @cached_property
    def classes(self) -> tuple[str, ...]:
        """The classes it runs on, fastest first."""
        return tuple(sorted((c for c in CLASSES if self.rate(c) > 0), key=lambda c: (-self.rate(c), c)))


def _interpolate(rates: Rates, cls: str, devices: int) -> float:
    scales = sorted(rates)
    if devices in rates:
        return rates[devices].get(cls, 0.0)
    if devices > scales[-1]:
        return rates[scales[-1]].get(cls, 0.0)
    if devices < scales[0]:
        return rates[scales[0]].get(cls, 0.0) * devices / scales[0]
    lo = max(s for s in scales if s < devices)
    hi = min(s for s in scales if s > devices)
    a, b = rates[lo].get(cls, 0.0), rates[hi].get(cls, 0.0)
    if not a or not b:
        return 0.0
    return a + (b - a) * (devices - lo) / (hi - lo)


def throughputs(path: Path) -> dict[str, dict[int, dict[str, float]]]:
    """Gavel's isolated_throughputs.csv: job type -> scale -> class -> steps/s (an empty cell: 0, cannot run);
    or Gavel's own scheduler/simulation_throughputs.json (a `.json` path: each key's "null" entry, the job
    running alone)."""
    if path.suffix == ".json":
        return _gavel_json(path)
    out: dict[str, dict[int, dict[str, float]]] = defaultdict(dict)
    columns = ["job_type", "scale_factor", *(f"{t}_steps_per_s" for t in CLASS_OF)]
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in columns if c not in (reader.fieldnames or ())]
        if missing:
            raise TraceError(f"{path.name}: no column {', '.join(missing)} (columns: {', '.join(columns)})")
        for row in reader:
            where = f"{path.name}, line {reader.line_num}"
            scale = int(_number(row["scale_factor"] or "", "scale_factor", where, integer=True))
            out[row["job_type"]][scale] = {
                CLASS_OF[t]: _number(row[f"{t}_steps_per_s"] or "0", f"{t}_steps_per_s", where, positive=False)
                for t in CLASS_OF}
    return dict(out)


def _gavel_json(path: Path) -> dict[str, dict[int, dict[str, float]]]:
    """{"v100": {"('ResNet-18 (batch size 16)', 1)": {"null": steps/s, "<co-located key>": [..]}, ...}, ...}."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise TraceError(f"{path.name}: not JSON ({str(exc)[:120]})") from None
    missing = [t for t in CLASS_OF if not isinstance(data, dict) or not isinstance(data.get(t), dict)]
    if missing:
        raise TraceError(f"{path.name}: no worker type {', '.join(missing)} (Gavel's simulation_throughputs.json "
                         f"has k80, p100, v100)")
    out: dict[str, dict[int, dict[str, float]]] = defaultdict(dict)
    for worker, cls in CLASS_OF.items():
        for key, entry in data[worker].items():
            try:
                job_type, scale = ast.literal_eval(key)
                alone = float(entry["null"])
            except (ValueError, SyntaxError, TypeError, KeyError):
                raise TraceError(f"{path.name}: {worker}[{key!r}] is not ('job type', scale): "
                                 f'{{"null": steps/s}}') from None
            out[str(job_type)].setdefault(int(scale), {c: 0.0 for c in CLASSES})[cls] = alone
    return dict(out)


def _wants(rng: random.Random, rates: Rates, gpus: int) -> str | None:
    job = TraceJob(0, "", 0, 0, gpus, rates, "")
    usable = job.classes
    if not usable:
        return None
    return rng.choices(usable, weights=[job.rate(c) for c in usable])[0]


class TraceError(ValueError):
    """A trace or throughput table we cannot read: names the file, the line and the field."""


# Gavel's two trace layouts (tab-separated), told apart by their number of fields:
# - 7: the Philly-derived traces (scheduler/traces/msr/seed=*/): job_type, command, num_steps_arg,
#   needs_data_dir, total_steps, arrival_time, scale_factor;
# - 10: what Gavel's own `parse_trace` reads (scheduler/utils.py; `Job.__str__` + the arrival time, e.g.
#   scheduler/traces/physical_cluster/): job_type, command, working_directory, num_steps_arg, needs_data_dir,
#   total_steps, scale_factor, priority_weight, SLO, arrival_time.
LAYOUTS: dict[int, dict[str, int]] = {
    7: {"job_type": 0, "total_steps": 4, "arrival_time": 5, "scale_factor": 6},
    10: {"job_type": 0, "total_steps": 5, "scale_factor": 6, "priority_weight": 7, "SLO": 8, "arrival_time": 9},
}
# a job longer than this on its fastest class, or arriving later than this (about 114 years; Gavel's longest
# Philly job is ~3,100 hours, its traces span ~1,250 hours) is a unit mistake, not a workload: refused, naming
# its line (the replay simulates the fleet's failures over the whole span: hours of CPU)
MAX_HOURS = 1e6
GAVEL_MAX_H = 1e4 / 60  # Gavel's generator's longest job: 10^4 minutes on V100


@dataclass
class Trace:
    """A trace as read: its jobs, and what was left out and why (for the replay's JSON)."""

    jobs: list[TraceJob]
    unknown_types: dict[str, int]  # job type not in the throughput table -> jobs left out
    unrunnable: int = 0  # jobs whose type has no throughput on any class at their scale
    priority_weights: tuple[float, ...] = ()  # the trace's distinct weights, lowest first (priority = index)

    def left_out(self) -> str:
        """What was left out, in words ("" when nothing)."""
        parts = []
        if self.unknown_types:
            n = sum(self.unknown_types.values())
            kinds = ", ".join(f"{t!r} ({c})" for t, c in sorted(self.unknown_types.items())[:5])
            more = f" and {len(self.unknown_types) - 5} more" if len(self.unknown_types) > 5 else ""
            parts.append(f"{n} jobs of types not in the throughput table: {kinds}{more}")
        if self.unrunnable:
            parts.append(f"{self.unrunnable} jobs with no measured throughput on any class at their scale")
        return "; ".join(parts)


def _field(parts: list[str], layout: Mapping[str, int], name: str) -> str:
    return parts[layout[name]].strip()


def _number(text: str, name: str, where: str, *, positive: bool = True, integer: bool = False) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{where}: {name} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise TraceError(f"{where}: {name} {text!r} is not a finite number")
    if integer and value != int(value):
        raise TraceError(f"{where}: {name} {text!r} is not a whole number")
    if positive and value <= 0:
        raise TraceError(f"{where}: {name} {text!r} must be positive")
    if not positive and value < 0:
        raise TraceError(f"{where}: {name} {text!r} must not be negative")
    return value


def read_trace(trace: Path, table: Path, seed: int = 0, limit: int | None = None) -> Trace:
    """A Gavel-format trace (either layout, see LAYOUTS; blank lines and `#` comments are skipped).

    Jobs whose type the throughput table lacks, or that run nowhere at their scale, are left out and counted
    (`Trace.left_out`). Gavel's priority weights become priority levels by rank (the lowest weight is 0, the
    next 1, ...): the replay's policies order by priority, not by weighted fair share. Gavel's SLO is checked
    and not used. A line that cannot be read raises TraceError naming the line and the field.
    """
    by_type = throughputs(table)
    rng = random.Random(seed)
    rows: list[tuple[int, str, float, float, int, float]] = []
    try:
        text = trace.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(f"{trace}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.rstrip("\r\n").split("\t")
        while len(parts) not in LAYOUTS and len(parts) > 1 and not parts[-1].strip():
            parts.pop()  # a trailing tab (or several) adds no field
        where = f"{trace.name}, line {n}"
        layout = LAYOUTS.get(len(parts))
        if layout is None:
            raise TraceError(f"{where}: {len(parts)} tab-separated fields; a Gavel trace line has 7 (job_type, "
                             f"command, num_steps_arg, needs_data_dir, total_steps, arrival_time, scale_factor) "
                             f"or 10 (job_type, command, working_directory, num_steps_arg, needs_data_dir, "
                             f"total_steps, scale_factor, priority_weight, SLO, arrival_time)")
        job_type = _field(parts, layout, "job_type")
        if not job_type:
            raise TraceError(f"{where}: job_type is empty")
        steps = _number(_field(parts, layout, "total_steps"), "total_steps", where)
        arrival = _number(_field(parts, layout, "arrival_time"), "arrival_time", where, positive=False)
        if arrival > MAX_HOURS * 3600:
            raise TraceError(f"{where}: arrival_time {arrival:g} is past {MAX_HOURS:g} hours: arrival_time counts "
                             f"seconds from the trace's start (a unit mistake?)")
        gpus = int(_number(_field(parts, layout, "scale_factor"), "scale_factor", where, integer=True))
        weight = 1.0
        if "priority_weight" in layout:
            weight = _number(_field(parts, layout, "priority_weight"), "priority_weight", where)
            slo = _field(parts, layout, "SLO")
            try:
                float(slo)
            except ValueError:
                raise TraceError(f"{where}: SLO {slo!r} is not a number (-1 for none)") from None
        rows.append((n - 1, job_type, steps, arrival, gpus, weight))
    weights = tuple(sorted({r[5] for r in rows}))
    level = {w: i for i, w in enumerate(weights)}
    jobs: list[TraceJob] = []
    unknown: dict[str, int] = defaultdict(int)
    unrunnable = 0
    for i, job_type, steps, arrival, gpus, weight in rows:
        if job_type not in by_type:
            unknown[job_type] += 1
            continue
        wants = _wants(rng, by_type[job_type], gpus)
        if wants is None:
            unrunnable += 1
            continue
        job = TraceJob(i, job_type, steps, arrival, gpus, by_type[job_type], wants, level[weight])
        hours = steps / job.rate(job.classes[0]) / 3600
        if hours > MAX_HOURS:
            raise TraceError(f"{trace.name}, line {i + 1}: total_steps {steps:g} is {hours:.3g} hours of "
                             f"{job_type} on {gpus} device(s) of its fastest class, past {MAX_HOURS:g}: "
                             f"total_steps counts training steps (a unit mistake?)")
        jobs.append(job)
        if limit and len(jobs) >= limit:
            break
    return Trace(jobs, dict(unknown), unrunnable, weights)


def cluster(text: str) -> tuple[tuple[str, int], ...]:
    """`v100:16,p100:16,k80:16` (Gavel's types or this fleet's class names) -> ((class, devices), ...) in
    `CLASSES` order; a class left out has no devices. A bad entry is a TraceError naming it and the form."""
    out: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, _, count = part.partition(":")
        cls = CLASS_OF.get(name.strip().lower(), name.strip())
        if cls not in CLASSES or not count.strip().isdigit() or cls in out:
            raise TraceError(f"--cluster {part!r}: expected TYPE:DEVICES once per type, TYPE one of "
                             f"{', '.join([*CLASS_OF, *CLASSES])} (e.g. v100:16,p100:16,k80:16)")
        out[cls] = int(count)
    if not any(out.values()):
        raise TraceError(f"--cluster {text!r}: no devices (e.g. v100:16,p100:16,k80:16)")
    return tuple((c, out.get(c, 0)) for c in CLASSES)


def measured_everywhere(job: TraceJob) -> bool:
    """Whether the table measured the job's type at its own scale on every class. The replay interpolates
    other scales (`TraceJob.rate`); Gavel's simulator reads only measured ones and stops at any other (a
    KeyError on `(job_type, scale_factor)`; in Philly 6214e9, 2- and 4-GPU Recommendation jobs of batch sizes
    measured on 1 GPU alone)."""
    measured = job.rates.get(job.gpus, {})
    return all(measured.get(c, 0.0) > 0 for c in CLASSES)


def gavel_slice(jobs: Sequence[TraceJob], n: int, max_reference_h: float = GAVEL_MAX_H) -> list[TraceJob]:
    """Gavel's evaluation slice of a trace: the first `n` jobs with a throughput measured on every class at
    their own scale (`measured_everywhere`: what Gavel's simulator can run) that last at most `max_reference_h`
    on `REFERENCE` (V100; Gavel's generator caps a job at 10^4 minutes), their arrivals shifted so the first is
    at 0 (scale them with `Config.arrival_scale`)."""
    kept = [j for j in jobs if measured_everywhere(j)
            and j.total_steps / j.rate(REFERENCE) / 3600 <= max_reference_h][:n]
    first = min((j.arrival_s for j in kept), default=0.0)
    return [replace(j, arrival_s=j.arrival_s - first) for j in kept]


def write_gavel_trace(jobs: Sequence[TraceJob], path: Path, arrival_scale: float = 1.0) -> None:
    """The jobs in the 10-field layout Gavel's simulator reads (`LAYOUTS[10]`; scheduler/utils.py `parse_trace`,
    which reads every line: no comment, no blank line), so both tools run the same file: the job type as its
    command, total steps rounded to a whole step (Gavel's `int`), priority weight = priority level + 1 (read
    back, the same levels), SLO -1, arrivals multiplied by `arrival_scale` (replay the file at scale 1)."""
    rows = []
    for j in jobs:
        if "\t" in j.job_type or "\n" in j.job_type:
            raise TraceError(f"job {j.id}: job_type {j.job_type!r} holds a tab or a newline (Gavel's fields are "
                             f"tab-separated lines)")
        rows.append("\t".join([j.job_type, j.job_type, ".", "-n", "0", str(max(1, round(j.total_steps))),
                                str(j.gpus), str(j.priority + 1), "-1", f"{j.arrival_s * arrival_scale:.6f}"]))
    path.write_text("".join(row + "\n" for row in rows), encoding="utf-8")


def load_trace(trace: Path, table: Path, seed: int = 0, limit: int | None = None) -> list[TraceJob]:
    """The jobs of a Gavel-format trace (`read_trace`, without what was left out)."""
    return read_trace(trace, table, seed, limit).jobs


def synthetic_trace(n: int, jobs_per_hour: float, table: Path, seed: int = 0, high_priority_share: float = 0.0,
                    fastest_share: float | None = None) -> list[TraceJob]:
    """Gavel's generator (scheduler/utils.py, OSDI'20): job type uniform; 70% 1 GPU, 10% 2, 15% 4, 5% 8;
    duration 10^U(1.5, 3) minutes (80%) or 10^U(3, 4) minutes (20%) on V100; Poisson arrivals.
    `high_priority_share` of the jobs get priority 1 (the rest 0), to exercise preemption.
    The class a user asks for is drawn in proportion to throughput; with `fastest_share`, that share of the
    users ask for the fleet's fastest class (`REFERENCE`) when the job runs there (a real fleet's skew)."""
    by_type = throughputs(table)
    types = sorted(by_type)
    rng = random.Random(seed)
    jobs: list[TraceJob] = []
    now = 0.0
    while len(jobs) < n:
        job_type = rng.choice(types)
        r = rng.random()
        gpus = 1 if r < 0.7 else 2 if r < 0.8 else 4 if r < 0.95 else 8
        if gpus not in by_type[job_type]:
            gpus = 1
        minutes = 10 ** (rng.uniform(3, 4) if rng.random() >= 0.8 else rng.uniform(1.5, 3))
        priority = 1 if rng.random() < high_priority_share else 0
        rates = by_type[job_type]
        steps = 60 * minutes * rates[gpus][REFERENCE]
        wants = _wants(rng, rates, gpus)
        if fastest_share is not None and rng.random() < fastest_share and rates[gpus].get(REFERENCE, 0) > 0:
            wants = REFERENCE
        if steps <= 0 or wants is None:
            continue
        jobs.append(TraceJob(len(jobs), job_type, steps, now, gpus, rates, wants, priority))
        now += rng.expovariate(jobs_per_hour / 3600)
    return jobs
