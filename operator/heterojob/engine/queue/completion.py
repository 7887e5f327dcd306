"""Completion-time estimates: which classes a waiting job should take now, and when a move up pays. Pure.

Step of the pipeline: between the queue order (`engine.basics.queueing`) and the planner (`engine.queue.admission`):
it narrows and orders each waiting job's device alternatives by expected completion, and after the plan
it proposes upgrade moves onto room nobody waiting takes.

Only what the operator can know is used:
- a class's speed for a job is the job's own measured steps/s there (the SDK reports it, status.speed);
  on a class it has not run on, a measured speed scaled by the job's sheet; with no measurement at all,
  the sheet alone. The sheet is the classes' declared throughput (AcceleratorClass spec.throughput), or,
  for a job that names its workload (spec.workload), what the jobs of that workload measured (`pooled`,
  `sheet`): models lose very differently on a slower class (Gavel's measurements: 3x to 12x from V100
  to K80), which no per-class figure can say;
- a job's remaining work is not known (the operator never sees total steps): `Residual` expects it from
  the work of jobs already completed, given the work this one has done (mean residual life of the
  empirical distribution); with too few completions, a job is expected to run as long again as it has
  (at least `prior_s`);
- a class's expected wait is when the running jobs there that this one cannot displace end (their
  expected remaining work) and the queue ahead of it has been served at the class's capacity.

Work is measured in seconds on the job's fastest class ("reference seconds"): a job at relative speed r
on a class does r reference seconds of work per second.

Growth into idle room (`growth_limit`) is held to sizes where the job's measured scaling is good: every
extra device must bring at least `min_efficiency` of a device's work at the admitted size (0.6: a doubling
must speed the job up at least 1.2x), else the device-hours a job burns grow far faster than its
completion time falls.
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


def speeds(declared: Mapping[str, float], measured: Mapping[str, float], classes: Iterable[str]
           ) -> dict[str, float]:
    """Relative speed (1.0 on its fastest) of one job on each of `classes`: measured where it ran, else a
    measured speed scaled by `declared` (the declared throughput, or the job's `sheet`), else `declared`
    alone."""
    classes = list(classes)
    est: dict[str, float] = {}
    known = {c: v for c, v in measured.items() if v > 0 and declared.get(c, 0) > 0}
    for c in classes:
        if c in known:
            est[c] = known[c]
        elif known:  # the mean of every measured class's prediction
            est[c] = sum(v * declared.get(c, 0.0) / declared[k] for k, v in known.items()) / len(known)
        else:
            est[c] = declared.get(c, 0.0)
    best = max(est.values(), default=0.0)
    return {c: v / best for c, v in est.items()} if best > 0 else {c: 0.0 for c in classes}


def pooled(samples: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """One workload's speed per class from its jobs' measurements: each sample is one job's steps/s per
    device on the classes it ran on (so jobs of different sizes compare, near-linear data-parallel scaling
    assumed); per class, the median over the jobs (one straggling job does not set it)."""
    by_class: dict[str, list[float]] = {}
    for sample in samples:
        for c, v in sample.items():
            if v > 0 and math.isfinite(v):
                by_class.setdefault(c, []).append(v)
    return {c: statistics.median(vs) for c, vs in by_class.items()}


def sheet(declared: Mapping[str, float], measured: Mapping[str, float]) -> dict[str, float]:
    """What `speeds` scales a job's own measurements by: `measured` (a workload's `pooled` speeds) on the
    classes it covers, and on the others the declared throughput scaled to it (the mean over the measured
    classes of measured x declared ratio); the declared throughput alone when nothing is measured."""
    known = {c: v for c, v in measured.items() if v > 0 and declared.get(c, 0) > 0}
    if not known:
        return dict(declared)
    out = {c: sum(v * d / declared[k] for k, v in known.items()) / len(known) for c, d in declared.items()}
    out.update(known)
    return out


class Residual:
    """Expected remaining work of a job given the work it has done, from completed jobs' total work."""

    def __init__(self, completed: Iterable[float] = (), prior_s: float = 3600.0, min_samples: int = 20) -> None:
        self.prior_s, self.min_samples = prior_s, min_samples
        self._work: list[float] = sorted(completed)
        self._suffix: list[float] | None = None
        self.version = 0  # how many completions were added since it was built

    def add(self, work_s: float) -> None:
        bisect.insort(self._work, work_s)
        self._suffix = None
        self.version += 1

    def __len__(self) -> int:
        return len(self._work)

    def remaining(self, done_s: float) -> float:
        """E[W - done | W > done] over completed jobs' work W; without enough history, max(done, prior)."""
        if len(self._work) < self.min_samples:
            return max(done_s, self.prior_s)
        if self._suffix is None:
            self._suffix = list(itertools.accumulate(reversed(self._work)))[::-1]
        i = bisect.bisect_right(self._work, done_s)
        if i >= len(self._work):
            return max(done_s, self.prior_s)  # longer than any completed job: as long again
        return self._suffix[i] / (len(self._work) - i) - done_s

    def remaining_each(self, done_s: Iterable[float]) -> list[float]:
        """`remaining` of each of `done_s` (the same numbers, in one call)."""
        work, n, prior = self._work, len(self._work), self.prior_s
        if n < self.min_samples:
            return [max(d, prior) for d in done_s]
        if self._suffix is None:
            self._suffix = list(itertools.accumulate(reversed(work)))[::-1]
        suffix, right = self._suffix, bisect.bisect_right
        return [suffix[i] / (n - i) - d if (i := right(work, d)) < n else max(d, prior) for d in done_s]


@dataclass(frozen=True)
class Busy:
    """A running job on a class, as the wait estimate needs it."""

    devices: int
    ends_in_s: float  # its expected remaining wall time


def expected_wait(need: int, free: int, capacity: int, running: Sequence[Busy], ahead_device_s: float) -> float:
    """Seconds until `need` devices of a class are likely free for this job: 0 when they are free now; else
    when enough running jobs (those it cannot displace) have ended, plus the queue ahead's device-seconds
    served at the class's capacity."""
    if capacity <= 0 or need > capacity:
        return float("inf")
    base = 0.0
    if free < need:
        have = free
        for busy in sorted(running, key=lambda b: b.ends_in_s):
            have += busy.devices
            if have >= need:
                base = busy.ends_in_s
                break
        # never reached: the rest is held by jobs it may displace (the planner preempts them)
    return base + ahead_device_s / capacity


class Ends:
    """Running jobs ordered by expected end, with the devices freed by each end (cumulative): `expected_wait`
    for many waiting jobs against the same running jobs, each a bisection instead of a sort and a scan.
    `wait` returns exactly what `expected_wait` returns for the same jobs: the wait is the first end by which
    enough devices are free, whichever order jobs ending at the same time come in."""

    def __init__(self, running: Iterable[Busy], ordered: bool = False) -> None:
        jobs = list(running) if ordered else sorted(running, key=lambda b: b.ends_in_s)
        self.ends = [b.ends_in_s for b in jobs]
        self.freed = list(itertools.accumulate(b.devices for b in jobs))
        self._scan = jobs if any(b.devices < 0 for b in jobs) else None  # not a count: no bisection

    @classmethod
    def ordered(cls, ends: list[float], devices: Iterable[int]) -> Ends:
        """From the ends already in order and each one's devices (no `Busy` objects built)."""
        devices = list(devices)
        if any(n < 0 for n in devices):
            return cls([Busy(n, e) for n, e in zip(devices, ends, strict=True)], ordered=True)
        out = cls.__new__(cls)
        out.ends, out.freed, out._scan = ends, list(itertools.accumulate(devices)), None
        return out

    def wait(self, need: int, free: int, capacity: int, ahead_device_s: float) -> float:
        if self._scan is not None:
            return expected_wait(need, free, capacity, self._scan, ahead_device_s)
        if capacity <= 0 or need > capacity:
            return float("inf")
        base = 0.0
        if free < need:
            i = bisect.bisect_left(self.freed, need - free)
            if i < len(self.freed):
                base = self.ends[i]
        return base + ahead_device_s / capacity


@dataclass(frozen=True)
class Choice:
    """A waiting job's classes worth taking now, best expected completion first, and the estimates."""

    classes: tuple[str, ...]
    completion_s: Mapping[str, float]  # expected seconds to completion per class (wait + run)
    declined: tuple[str, ...]  # classes it could start on now but is better off waiting for a faster one
    unfit: tuple[str, ...] = ()  # of those, the ones past the knee the fleet's optimum gives others (`guidance`)


KEEP_MARGIN = 0.1  # a job waiting for a class keeps it unless another is expected to complete this much sooner


def choose(remaining_s: float, rel: Mapping[str, float], wait_s: Mapping[str, float], kept: str | None = None
           ) -> Choice:
    """Rank the classes by expected completion (wait + remaining work / relative speed). A class where the
    job could start now is kept only when starting there completes sooner than waiting for a faster one;
    the class with the best expected completion is always kept (the job waits there if it must).

    `kept`: the class the job chose to wait for at the pass before. While it still has to wait there, it
    stays the job's choice unless another class is expected to complete sooner by more than `KEEP_MARGIN` of
    its own estimate: estimates of ten hours' wait drift with the clock, and a waiting job's choice (what its
    status says, where it queues) follows a real difference, not a drift (no flapping between near-equal
    classes)."""
    completion = {c: wait_s[c] + (remaining_s / r if r > 0 else math.inf) for c, r in rel.items() if c in wait_s}
    if not completion:
        return Choice((), {}, ())
    if len(completion) == 1:  # one class: it is the best, kept whether free now or not, none declined
        return Choice((next(iter(completion)),), completion, ())
    best = min(completion, key=lambda c: (completion[c], -rel[c], c))
    if (kept is not None and kept != best and kept in completion and wait_s[kept] != 0 and wait_s[best] != 0
            and math.isfinite(completion[kept]) and completion[best] >= completion[kept] * (1 - KEEP_MARGIN)):
        best = kept
    for c in completion:
        if wait_s[c] == 0:
            break
    else:  # no class free now: only the best is kept, none declined
        return Choice((best,), completion, ())
    keep = sorted((c for c in completion if c == best or (wait_s[c] == 0 and completion[c] <= completion[best])),
                  key=lambda c: (completion[c], -rel[c], c))
    declined = tuple(sorted(c for c in completion if wait_s[c] == 0 and c not in keep))
    return Choice(tuple(keep), completion, declined)


@dataclass(frozen=True)
class MoveCost:
    """What moving a running job costs, in seconds of its wall time."""

    save_s: float = 20.0  # the on-demand checkpoint
    restore_s: float = 60.0  # loading it where it lands
    risk: float = 0.5  # extra share of the cost for what can go wrong (a failed restore, a requeue)

    @property
    def seconds(self) -> float:
        return (self.save_s + self.restore_s) * (1 + self.risk)


def upgrade_saving(remaining_s: float, rel_from: float, rel_to: float, cost: MoveCost) -> float:
    """Seconds a move from a class at relative speed `rel_from` to one at `rel_to` saves (negative: it
    does not pay): remaining work there minus remaining work here minus the move's cost."""
    if rel_to <= rel_from or rel_from <= 0:
        return -cost.seconds
    return remaining_s / rel_from - remaining_s / rel_to - cost.seconds


@dataclass(frozen=True)
class Upgrade:
    job: str
    to_class: str
    saving_s: float  # for a probe: minus what it may cost
    probe: bool = False  # a move to measure a class the job has not run on (see `plan_upgrades`)


@dataclass(frozen=True)
class Mover:
    """A running job that might move up: its class, gang size and expected remaining work."""

    job: str
    device_class: str
    devices: int
    remaining_s: float
    rel: Mapping[str, float]  # relative speed per class it may run on
    settled: bool = True  # not restoring or checkpointing now, and past its minimum time in place
    unmeasured: frozenset[str] = frozenset()  # classes it may run on whose speed is the sheet's guess


def probe_cost(rel_here: float, rel_to: float, cost: MoveCost, min_runtime_s: float) -> float:
    """Seconds a probe may cost a job: a move there and one back, and `min_runtime_s` at the (guessed)
    lower speed before it may move back."""
    if rel_to <= 0 or rel_here <= 0:
        return float("inf")
    return 2 * cost.seconds + min_runtime_s * max(0.0, rel_here / rel_to - 1)


def plan_upgrades(movers: Iterable[Mover], free: Mapping[str, int], cost: MoveCost, min_saving_s: float = 0.0,
                  probe_share: float = 0.0, probe_floor: float = 0.5, min_runtime_s: float = 300.0
                  ) -> list[Upgrade]:
    """Moves up onto free devices (room no waiting job takes): largest saving first, each taking its room
    on the target class before the next is considered (make-before-break: the room is held before the
    old placement is released). A move is proposed only when it saves more than its cost and `min_saving_s`.

    Probes (`probe_share` > 0), after every move up: a declared throughput is a class's mean, and a job's
    speed ratio between two classes is its own (some models run faster on the class the sheet ranks
    second), so a job whose speed on a class is only the sheet's guess (at least `probe_floor` of its speed
    here, so never a class expected far slower) moves there to measure it when what the probe may cost
    (`probe_cost`: two moves and the minimum time in place at the guessed speed) is at most `probe_share`
    of its expected remaining time here. Once measured, the faster class wins through the moves up."""
    left = dict(free)
    movers = list(movers)
    size = {m.job: m.devices for m in movers}
    options, probes = [], []
    for m in movers:
        if not m.settled:
            continue
        here = m.rel.get(m.device_class, 0.0)
        for cls, r in m.rel.items():
            if cls == m.device_class or left.get(cls, 0) < m.devices:
                continue
            saving = upgrade_saving(m.remaining_s, here, r, cost)
            if saving > min_saving_s:
                options.append(Upgrade(m.job, cls, saving))
            elif probe_share > 0 and cls in m.unmeasured and here > 0 and r >= probe_floor * here:
                spend = probe_cost(here, r, cost, min_runtime_s)
                if spend <= probe_share * m.remaining_s / here:
                    probes.append(Upgrade(m.job, cls, -spend, probe=True))
    out, moved = [], set()
    ordered = sorted(options, key=lambda u: (-u.saving_s, u.job, u.to_class))
    ordered += sorted(probes, key=lambda u: (-u.saving_s, u.job, u.to_class))
    for u in ordered:
        if u.job in moved or left.get(u.to_class, 0) < size[u.job]:
            continue
        left[u.to_class] -= size[u.job]
        moved.add(u.job)
        out.append(u)
    return out


def growth_pays(remaining_s: float | None, replicas: int, to: int, efficiency: float, cost_s: float) -> bool:
    """Whether growing from `replicas` to `to` saves more of the job's expected remaining wall time
    (`remaining_s` at its size now; None: not known, it grows) than it costs: its move and the move back (lent
    room is taken back for a waiting job; a trial past good scaling shrinks), each `cost_s`
    (`MoveCost.seconds`), at the worst scaling growth is held to (`efficiency`, `growth_limit`'s floor).
    Without it a resize was a loss for a job near its end, and with checkpoints three times as dear the
    replay's grown jobs used 6% more device-hours per job than a static fleet (issue 34)."""
    if remaining_s is None or to <= replicas or replicas <= 0:
        return True
    speedup = to * efficiency / replicas
    if speedup <= 1.0:
        return False
    return remaining_s * (1 - 1 / speedup) > 2 * cost_s


def scaling_efficiency(base_replicas: int, base_rate: float, replicas: int, rate: float) -> float:
    """Steps/s per replica at `replicas` over steps/s per replica at `base_replicas` (1.0: linear)."""
    if base_replicas <= 0 or replicas <= 0 or base_rate <= 0:
        return 0.0
    return (rate / replicas) / (base_rate / base_replicas)


def growth_limit(base: int, maximum: int, measured: Mapping[int, float], min_efficiency: float = 0.6) -> int:
    """The most replicas an elastic job may grow to on a class, from its measured steps/s there per replica
    count (`measured`; the SDK reports steps/s at every size it ran at).

    A size is good when its scaling efficiency against `base` (the admitted size) is at least
    `min_efficiency`, bad otherwise. With no bad size measured, the job may grow as far as `maximum` (the
    first growth is the trial that measures it). Past the smallest bad size it may not: the limit is the
    largest good size below it, or half that bad size when that has not been measured yet (the next trial,
    halving toward `base`), so a job found at a bad size shrinks back. With no measurement at `base`,
    nothing is known and the job stays at `base`."""
    base_rate = measured.get(base, 0.0)
    if base_rate <= 0 or maximum <= base:
        return base
    sizes = sorted(r for r in measured if base < r)
    bad = [r for r in sizes if scaling_efficiency(base, base_rate, r, measured[r]) < min_efficiency]
    if not bad:
        return maximum
    good = [r for r in sizes if r < bad[0] and r not in bad]
    return min(maximum, max(base, bad[0] // 2, *good))
