"""What a replay measures (utilization, JCT, work lost, moves, the busy timeline) and its report.

Utilization = device-hours of useful training / (devices x makespan): work redone after a failure,
checkpoint saving and restoring are not useful; a grown job's devices all count. The steady state leaves out
warm-up and drain (the 10th to 90th percentile arrival); a `window` is Gavel's measurement window (see
`replay.replay`)."""

from __future__ import annotations

import bisect
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence

from heterojob.replay.devices import Run
from heterojob.replay.report import Report, Window, timeline
from heterojob.replay.traces import CLASSES, TraceJob


class Metrics:
    def __init__(self, jobs: Sequence[TraceJob], devices: int, arrival: Callable[[TraceJob], float]) -> None:
        self.jobs, self.devices, self.arrival = jobs, devices, arrival
        self.finished: dict[int, float] = {}
        self.useful_s = self.lost_s = self.max_lost = 0.0
        self.useful: list[tuple[float, float, float]] = []  # (from, to, useful device-seconds), per run
        self.segments: list[tuple[float, float, float]] = []  # (from, to, device-s x speed share), per run
        # (from, to, work served): steps trained in fastest-class device-seconds at the job's own size, per run
        self.work: list[tuple[float, float, float]] = []
        self.device_s: dict[int, float] = defaultdict(float)  # devices held x seconds, per job
        self.failures = self.restarts = self.resizes = self.preemptions = self.reclaims = self.upgrades = 0
        self.promotions = 0  # runs a starvation promotion started
        self.preempted_device_s = 0.0  # devices idle for preemptions (saves, restores, the preemptor's wait)
        self.busy_points: list[tuple[float, int]] = []

    def trained(self, run: Run, steps: float, now: float) -> float:
        """The run's training up to `steps` counted as useful (spread evenly over the run, for windows);
        the seconds it trained."""
        trained = (steps - run.steps_at_start) / run.raw
        useful = trained * run.devices
        self.useful_s += useful
        if useful > 0:
            self.useful.append((min(run.started, now), now, useful))
            best = max(run.job.rate(c) for c in CLASSES)  # the report's yardstick, never the policy's
            share = run.job.rate(run.cls) / best if best > 0 else 0.0
            self.segments.append((min(run.started, now), now, useful * share))
            self.work.append((min(run.started, now), now, work_s(run.job, steps - run.steps_at_start)))
        return trained

    def lost(self, seconds: float, devices: int) -> None:
        """Training redone after a failure."""
        self.lost_s += seconds * devices
        self.max_lost = max(self.max_lost, seconds)

    def held(self, run: Run, now: float) -> None:
        self.device_s[run.job.id] += run.devices * (now - run.held)

    def busy(self, now: float, busy: int) -> None:
        if not self.busy_points or self.busy_points[-1] != (now, busy):
            self.busy_points.append((now, busy))

    # --- report ---------------------------------------------------------------------------------------

    def report(self, policy: str, first: float, end: float, window: tuple[int, int] | None) -> Report:
        makespan = max(end - first, 1e-9)
        by_job = {j.id: (self.finished[j.id] - self.arrival(j)) / 3600 for j in self.jobs if j.id in self.finished}
        jcts = sorted(by_job.values())
        total = self.devices
        arrivals = sorted(self.arrival(j) for j in self.jobs)
        lo, hi = (arrivals[len(arrivals) // 10], arrivals[-1 - len(arrivals) // 10]) if arrivals else (0.0, 0.0)
        steady = [by_job[j.id] for j in self.jobs if j.id in by_job and lo <= self.arrival(j) <= hi]
        in_window = sum(u * max(0.0, min(t1, hi) - max(t0, lo)) / (t1 - t0) for t0, t1, u in self.useful if t1 > t0)
        report = Report(policy, len(self.finished), self.useful_s / (total * makespan),
                        statistics.fmean(jcts) if jcts else 0.0,
                        jcts[min(len(jcts) - 1, int(0.99 * len(jcts)))] if jcts else 0.0, makespan / 3600,
                        self.lost_s / 3600, self.failures, self.restarts, self.resizes, self.preemptions,
                        self.reclaims, self.max_lost, in_window / (total * (hi - lo)) if hi > lo else 0.0,
                        statistics.fmean(steady) if steady else 0.0, (lo / 3600, hi / 3600),
                        timeline(self.busy_points, total, first, end), jcts, by_job, upgrades=self.upgrades,
                        preempted_device_h=self.preempted_device_s / 3600, promotions=self.promotions)
        if window:
            report.window = self.window_report(*window)
        return report

    def window_report(self, a: int, b: int) -> Window:
        inside = self.jobs[a:b]
        t0, t1 = self.arrival(inside[0]), self.arrival(inside[-1])
        span = max(t1 - t0, 1e-9)
        busy = sum(max(0.0, min(t, t1) - max(s, t0)) * b_ for (s, b_), (t, _) in
                   zip(self.busy_points, self.busy_points[1:], strict=False))
        useful = sum(u * max(0.0, min(e, t1) - max(s, t0)) / (e - s) for s, e, u in self.segments if e > s)
        served = sum(w * max(0.0, min(e, t1) - max(s, t0)) / (e - s) for s, e, w in self.work if e > s)
        ends = sorted(self.finished.values())
        starts = sorted(self.arrival(j) for j in self.jobs)

        def in_system(t: float) -> int:
            return bisect.bisect_right(starts, t) - bisect.bisect_right(ends, t)

        done = [j for j in inside if j.id in self.finished]
        quarter = max(1, len(inside) // 4)
        return Window(statistics.fmean((self.finished[j.id] - self.arrival(j)) / 3600 for j in done) if done else 0.0,
                      len(done), busy / (self.devices * span), useful / (self.devices * span),
                      statistics.fmean(self.device_s[j.id] / 3600 for j in done) if done else 0.0,
                      in_system(t0), in_system(t1),
                      statistics.fmean(in_system(self.arrival(j)) for j in inside[:quarter]),
                      statistics.fmean(in_system(self.arrival(j)) for j in inside[-quarter:]),
                      len(inside) - quarter, arrived_work_h=sum(work_s(j, j.total_steps) for j in inside) / 3600,
                      served_work_h=served / 3600, span_h=span / 3600)


def work_s(job: TraceJob, steps: float) -> float:
    """`steps` of `job` as fastest-class device-seconds at the job's own size (its trace size): the work rule's
    unit, the same for every policy (a grown or slower run does the same work in more device-seconds)."""
    best = max(job.rate(c) for c in CLASSES)
    return steps / best * job.gpus if best > 0 else 0.0
