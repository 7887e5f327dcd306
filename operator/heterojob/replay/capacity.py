"""The highest arrival rate any policy could sustain on a fleet, for a trace's mix of jobs (the bench's yardstick).

Gavel's max-throughput allocation (OSDI'20, section 4), in its fluid form: each group of alike jobs (same
type and size, so the same speed on every class) is split over the classes in any shares, and a rate is
sustainable when every class's devices can do the device-hours that rate brings. The linear program
minimizes t (device-hours per arrival over devices, the largest over classes); its rate is 1 / t.

- `best_rate`: the fluid optimum: every job's true speed on every class known, no gang packing, no region,
  no checkpoint or move cost, no queueing. No policy sustains more, up to the sustained rule's own margin.
- `blind_rate`: the same when jobs of one size cannot be told apart (one split for all of them): the most a
  policy that never learns which model suits which class can do.
- `static_rate`: the same for the partition a static fleet keeps (each job on the class its user asked for).
- `work_cap`: the most work (fastest-class device-hours) the fleet can do in an hour whatever jobs it picks:
  the bound on work served at saturation, where a policy may leave the jobs that suit no class waiting and
  serve a backlog richer in the ones that do, so the LP's work an hour is not a bound there.

The ratio of the two bounds the throughput gain a heterogeneity-aware policy can show over static on that
trace. Device-hours are the trace's ground truth (`TraceJob.rate`): this judges policies, it never feeds one.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence

from heterojob.replay.traces import TraceJob


def _device_hours(job: TraceJob, cls: str) -> float:
    rate = job.rate(cls)
    return job.gpus * job.total_steps / rate / 3600 if rate > 0 else math.inf


def best_rate(jobs: Sequence[TraceJob], devices: Mapping[str, int],
              kind: Callable[[TraceJob], Hashable] = lambda j: (j.job_type, j.gpus)) -> float:
    """Jobs per hour at Gavel's fluid max-throughput allocation of `jobs` over `devices` (class -> count);
    `kind`: the jobs the allocation tells apart (one split over the classes per kind)."""
    import numpy as np  # the bench's yardstick only: the operator never needs these
    from scipy.optimize import linprog

    if not jobs:
        return math.inf
    classes = [c for c in devices if devices[c] > 0]
    groups: dict[Hashable, dict[str, float]] = defaultdict(lambda: dict.fromkeys(classes, 0.0))
    for job in jobs:
        for c in classes:
            groups[kind(job)][c] += _device_hours(job, c) / len(jobs)
    keys = sorted(groups, key=repr)
    n_c = len(classes)
    cost = np.zeros(len(keys) * n_c + 1)
    cost[-1] = 1.0  # minimize t
    load = np.zeros((n_c, cost.size))  # per class: device-hours per arrival - devices x t <= 0
    split = np.zeros((len(keys), cost.size))  # per group: its shares sum to 1
    bounds: list[tuple[float, float | None]] = []
    for g, key in enumerate(keys):
        for i, c in enumerate(classes):
            hours = groups[key][c]
            runs = math.isfinite(hours)
            load[i, g * n_c + i] = hours if runs else 0.0
            split[g, g * n_c + i] = 1.0
            bounds.append((0.0, None if runs else 0.0))
    for i, c in enumerate(classes):
        load[i, -1] = -devices[c]
    bounds.append((0.0, None))
    result = linprog(cost, A_ub=load, b_ub=np.zeros(n_c), A_eq=split, b_eq=np.ones(len(keys)), bounds=bounds,
                     method="highs")
    if not result.success:
        raise ValueError(f"max-throughput LP: {result.message}")
    return 1.0 / float(result.x[-1]) if result.x[-1] > 0 else math.inf


def blind_rate(jobs: Sequence[TraceJob], devices: Mapping[str, int]) -> float:
    """`best_rate` for a policy that cannot tell jobs of one size apart: every job of a size is split over
    the classes in the same shares (what a policy can do that knows only the declared throughput and never
    measures a job on a second class, nor reads its workload's name). Its ratio to `best_rate` is what
    telling models apart is worth on the trace: a policy that does not learn them stays under it."""
    return best_rate(jobs, devices, kind=lambda j: j.gpus)


def work_cap(jobs: Sequence[TraceJob], devices: Mapping[str, int]) -> float:
    """Fastest-class device-hours of work an hour the fleet can do at most: every device busy all the time
    with the job of the trace whose speed on its class is the highest share of its speed on its own fastest
    class. A bound on the work served over any span (`replay.metrics.work_s`: steps at the job's fastest speed
    x its size), whichever jobs a policy picks and however long they wait: a device-second of class c does
    at most rate(c) / best-rate of one job's work at the job's own size, and no more at a larger one (the
    trace's speed at a size above the job's is at most linear, `TraceJob.rate`; jobs never run below their
    size)."""
    best = dict.fromkeys(devices, 0.0)
    for job in jobs:
        top = max((job.rate(c) for c in devices), default=0.0)
        if top > 0:
            for c in devices:
                best[c] = max(best[c], job.rate(c) / top)
    return sum(n * best[c] for c, n in devices.items())


def static_rate(jobs: Sequence[TraceJob], devices: Mapping[str, int]) -> float:
    """Jobs per hour a static partition sustains at best: each class does the device-hours of the jobs that
    asked for it; the first class to fill sets the rate."""
    demand: dict[str, float] = defaultdict(float)
    for job in jobs:
        demand[job.wants] += _device_hours(job, job.wants) / len(jobs)
    rates = [devices.get(c, 0) / hours if hours > 0 else math.inf for c, hours in demand.items()]
    return min(rates, default=math.inf)
