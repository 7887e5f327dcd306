"""Job traces for `heterojob sim replay`: Gavel's Philly-derived traces and Gavel-style synthetic ones.

Gavel's device types map onto this fleet's classes by speed rank (documented, not a claim about them):
V100 -> nvidia-h100, P100 -> nvidia-a100, K80 -> ascend-910b. A job's throughput on `d` devices is Gavel's
measurement at that scale, linearly interpolated between measured scales (1, 2, 4, 8), flat beyond the
largest, and never better than linear scaling from the job's own scale (some of Gavel's multi-GPU numbers
are super-linear; growing a job is not credited with that).

The device type a user asks for (what the static baseline keeps) is drawn with probability proportional to
the job's throughput on it: users lean to the fast types, and each pool gets the same expected work, the
kindest partition for a static fleet.
"""

from __future__ import annotations

import csv
import math
import random
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
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
    """Gavel's isolated_throughputs.csv: job type -> scale -> class -> steps/s."""
    out: dict[str, dict[int, dict[str, float]]] = defaultdict(dict)
    with path.open() as f:
        for row in csv.DictReader(f):
            out[row["job_type"]][int(row["scale_factor"])] = {
                CLASS_OF[t]: float(row[f"{t}_steps_per_s"] or 0) for t in CLASS_OF}
    return dict(out)


def _wants(rng: random.Random, rates: Rates, gpus: int) -> str | None:
    job = TraceJob(0, "", 0, 0, gpus, rates, "")
    usable = job.classes
    if not usable:
        return None
    return rng.choices(usable, weights=[job.rate(c) for c in usable])[0]


def load_trace(trace: Path, table: Path, seed: int = 0, limit: int | None = None) -> list[TraceJob]:
    """A Gavel/Philly trace: one job per line (job_type, command, steps arg, needs data dir, total_steps,
    arrival seconds, GPUs); jobs whose type has no throughput anywhere are skipped."""
    by_type = throughputs(table)
    rng = random.Random(seed)
    jobs = []
    for i, line in enumerate(trace.read_text().splitlines()):
        parts = line.split("\t")
        if len(parts) < 7 or parts[0] not in by_type:
            continue
        job_type, steps, arrival, gpus = parts[0], float(parts[4]), float(parts[5]), int(parts[6])
        wants = _wants(rng, by_type[job_type], gpus)
        if wants is None:
            continue
        jobs.append(TraceJob(i, job_type, steps, arrival, gpus, by_type[job_type], wants))
        if limit and len(jobs) >= limit:
            break
    return jobs


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
