"""Fleet efficiency the way the field measures it (Gavel, OSDI'20): static vs kueue vs heterojob, judged by
work served, by overhead and by what the operator can know (issue 34).

Method (Gavel's continuous-trace simulations): a fleet of 36:36:36 devices of three speeds (3 regions x
3 nodes x 4 devices per class); 6,000 Gavel-style synthetic jobs with Poisson arrivals
(heterojob.replay.traces.synthetic_trace); the average JCT of jobs 4000-4999 (steady state: no warm-up,
no drain); a sweep of input rates from light load to past every policy's knee; 3 seeds; three demand
mixes: `proportional` (users ask for a class in proportion to their job's throughput there, the kindest
partition for a static fleet), `skewed` (70% ask for the fastest class) and `seedmix` (30% ask for the
fastest class: the cluster of the seeds' claim, where static sits near 68% busy at its knee).

The work rule: a rate is sustained when at least 95% of the work arriving over the window (jobs 4000-4999;
work in fastest-class device-hours at the job's own size) is served over the window's span
(`replay.report.Window.work_sustained`). Counting jobs lets a partition through that serves the small jobs
and starves the large ones (the count rule, `Window.sustained`, is printed beside). A policy's knee at a
seed is the highest rate below which every rate replayed at that seed is sustained: the grid, then
`HETEROJOB_BENCH_BISECT` bisections between its last sustained and first unsustained rate. Ratios are
paired per seed: heterojob's figure at a seed over static's (or kueue's) at the same seed and rate.

Variants (each the whole sweep): `default`, what a default deployment knows (the new default: a job's
speed on a class becomes known once it has trained there for the operator's step window, no workload
names, no periodic checkpoints); `informed`, the bound (every speed known at once, each job naming its
type as its workload, checkpoints every 30 min), its figures printed beside; `cost3x`, the default mode
with the move cost tripled (save 60 s, restore 180 s). The targets hold in `default` (and the JCT,
device-hour and worse-than-static ones in `cost3x` too).

Policies (heterojob.replay.replay): `static` (partitioned by the user's class, the default scheduler),
`kueue` (flavor fallback in the user's order, FIFO, no migration or resize), `heterojob` (the operator's
queue policy, completion-time placement, upgrade moves, the planner and elastic growth into idle room,
all with the operator's defaults).

Yardsticks: Gavel's fluid max-throughput LP (`replay.capacity.best_rate`: every job's true speed known, no
gang packing or move cost) per mix and seed, and static's partition the same way (`static_rate`); their
ratio is the fluid model's throughput gain (`fluid`, `throughput_lp`). The same LP with one split for every
job of a size (`capacity.blind_rate`: what a policy can do that never tells models apart) is printed as
`fluid.work_vs_lp_blind`. `work_vs_lp` is the work a policy serves an hour at saturation (the most over the
rates replayed, past its knee) over the LP optimum's (its rate x the trace's mean work per job). Fluid
figures are not bounds: past saturation a policy may serve a backlog in another mix than the one arriving,
and the work rule lets 5% of the arriving work go unserved. `bounds` holds only what no policy can beat
(`real_bounds`): the fleet's most work an hour whatever jobs it picks (`capacity.work_cap`) over the LP's
work, and the highest rate the work rule can call sustained over static's measured knee; a target past its
bound is out of reach, and the notes say so.
Preemptions, starvation promotions and upgrade moves per completed job are printed at each rate. Also:
two vendored Philly traces (data/gavel) at three arrival scales each, average JCT of every job, on the same
devices in one region (ee9e8c has 32-device gangs; a gang never spans regions), in the default mode.

Last line: one JSON object with the issue's keys, `targets` (which are met), `bounds` (what no policy
can beat, where a target may be out of reach) and `fluid` (the LP's figures beside them); each replay's figures go to stderr as it ends. Runs the
replays on two worker processes; `replay_6000_jobs_s_max` is the CPU time of the slowest single replay.

Reduced runs (for iterating; the defaults are the method above, and the JSON says `reduced: true` when a
knob is set): HETEROJOB_BENCH_SEEDS=1 (seeds), HETEROJOB_BENCH_MIXES=seedmix,skewed (mixes),
HETEROJOB_BENCH_RATES=2.5,2.8 (jobs/h), HETEROJOB_BENCH_JOBS=3000 (jobs per replay; the window is the same
share of the trace, jobs 2/3 to 5/6), HETEROJOB_BENCH_VARIANTS=default (variants),
HETEROJOB_BENCH_PHILLY=0 (no Philly traces) or =0.1 (those scales), HETEROJOB_BENCH_WORKERS=2
(processes), HETEROJOB_BENCH_BISECT=0 (no extra rates at the knees; default 2).
HETEROJOB_BENCH_FROM_LOG=FILE summarizes the stderr of an earlier run (finished or not; points never run
are reported as such) with the same knobs.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from heterojob.replay import capacity
from heterojob.replay.metrics import work_s
from heterojob.replay.config import Config
from heterojob.replay.replay import replay
from heterojob.replay.report import WORK_SERVED
from heterojob.replay.traces import CLASSES, load_trace, synthetic_trace, throughputs

DATA = Path(__file__).resolve().parents[1] / "data" / "gavel"
TABLE = DATA / "isolated_throughputs.csv"
POLICIES = ("static", "kueue", "heterojob")
ALL_MIXES = {"proportional": None, "skewed": 0.7, "seedmix": 0.3}
ALL_VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},  # what a default deployment knows (the replay's default)
    "informed": {"knowledge": "informed"},  # the bound: every speed known, workloads named, periodic checkpoints
    "cost3x": {"save_s": 60.0, "restore_s": 180.0},  # the default mode, each move 3x as dear
}
ALL_RATES = (0.5, 1.0, 1.5, 2.0, 2.5, 2.8, 3.1, 3.4, 3.7, 4.0)  # jobs/h, finer near the knees
PHILLY = ("philly-6214e9.trace", "philly-ee9e8c.trace")
ALL_SCALES = (0.2, 0.1, 0.05)
FLEET = dict(nodes_per_class_region=3, regions=3, devices_per_node=4)
# the Philly traces hold gangs of up to 32 devices (ee9e8c), more than a region of FLEET has of a class: the
# same 36:36:36 devices in one region, as on Gavel's cluster (a gang never spans regions)
PHILLY_FLEET = dict(nodes_per_class_region=9, regions=1, devices_per_node=4)
KNOBS = ("HETEROJOB_BENCH_SEEDS", "HETEROJOB_BENCH_MIXES", "HETEROJOB_BENCH_RATES", "HETEROJOB_BENCH_JOBS",
         "HETEROJOB_BENCH_PHILLY", "HETEROJOB_BENCH_BISECT", "HETEROJOB_BENCH_VARIANTS")
TARGETS = {  # key -> (comparison, bound): the acceptance
    "work_vs_lp_min": (">=", 0.95), "busy_at_knee_seedmix": (">=", 0.92),
    "throughput_gain_seedmix": (">=", 1.28), "throughput_gain_skewed": (">=", 1.28),
    "jct_ratio_max": ("<=", 0.63), "jct_ratio_max_vs_kueue": ("<", 1.0), "device_hours_per_job_ratio": ("<=", 1.0),
    "worse_than_static": ("==", 0), "preemptions_per_job_max": ("<=", 1.0),
}
ALSO_COSTLY = ("jct_ratio_max", "jct_ratio_max_vs_kueue", "device_hours_per_job_ratio", "worse_than_static")


def _env_list(name: str, default: str, kind: type) -> tuple[Any, ...]:
    raw = os.environ.get(name, default).strip()
    try:
        return tuple(kind(x) for x in raw.split(",") if x.strip())
    except ValueError:
        raise SystemExit(f"{name}={raw!r}: expected a comma-separated list of {kind.__name__} values") from None


SEEDS = _env_list("HETEROJOB_BENCH_SEEDS", "1,2,3", int)
MIXES = {m: ALL_MIXES[m] for m in _env_list("HETEROJOB_BENCH_MIXES", ",".join(ALL_MIXES), str) if m in ALL_MIXES}
VARIANTS = [v for v in _env_list("HETEROJOB_BENCH_VARIANTS", ",".join(ALL_VARIANTS), str) if v in ALL_VARIANTS]
RATES = tuple(sorted(_env_list("HETEROJOB_BENCH_RATES", ",".join(map(str, ALL_RATES)), float)))
JOBS = int(os.environ.get("HETEROJOB_BENCH_JOBS", "6000"))
WINDOW = (JOBS * 2 // 3, JOBS * 5 // 6)  # 6,000 jobs: 4000-4999, Gavel's window
_philly = os.environ.get("HETEROJOB_BENCH_PHILLY", "1").strip()
SCALES = ALL_SCALES if _philly == "1" else () if _philly == "0" else _env_list("HETEROJOB_BENCH_PHILLY", "", float)
WORKERS = int(os.environ.get("HETEROJOB_BENCH_WORKERS", "2"))
BISECT = int(os.environ.get("HETEROJOB_BENCH_BISECT", "2"))  # extra rates per policy's knee, per mix and seed
if not MIXES or not RATES or not SEEDS or not VARIANTS or JOBS < 60 or WORKERS < 1 or BISECT < 0:
    raise SystemExit(f"bench knobs: mixes from {list(ALL_MIXES)}, variants from {list(ALL_VARIANTS)}, at least "
                     "one rate and seed, HETEROJOB_BENCH_JOBS >= 60, HETEROJOB_BENCH_WORKERS >= 1")


def useful_cap(table: Path = TABLE) -> dict[str, Any]:
    """The most useful utilization any policy can reach on this fleet: each device busy all the time with the
    job whose speed there is the highest share of its speed on its fastest class, weighted by devices."""
    best: dict[str, float] = {}
    for scales in throughputs(table).values():
        for rates in scales.values():
            top = max(rates.values(), default=0.0)
            if top <= 0:
                continue
            for cls, r in rates.items():
                best[cls] = max(best.get(cls, 0.0), r / top)
    devices = FLEET["nodes_per_class_region"] * FLEET["regions"] * FLEET["devices_per_node"]
    cap = sum(devices * best.get(c, 0.0) for c in CLASSES) / (devices * len(CLASSES))
    return {"cap": round(cap, 3), "best_share_per_class": {c: round(best.get(c, 0.0), 3) for c in CLASSES}}


def lp_bounds() -> dict[str, dict[int, tuple[float, float, float]]]:
    """mix -> seed -> (`Yardstick.best`, `.static`, `.work`)."""
    return {m: {s: (v.best, v.static, v.work) for s, v in seeds.items()} for m, seeds in _lp().items()}


@dataclass(frozen=True)
class Yardstick:
    """One mix and seed's fluid figures (`lp_bounds`), and what bounds a policy's figures there (`bounds`)."""

    best: float  # Gavel's fluid max-throughput rate, jobs/h (capacity.best_rate)
    static: float  # the static partition's, jobs/h (capacity.static_rate)
    work: float  # the trace's mean work per job, fastest-class device-hours
    blind: float  # the fluid optimum with one split per job size (capacity.blind_rate), jobs/h
    cap: float  # the most work the fleet can do an hour, whatever jobs it picks (capacity.work_cap)
    window_work: float  # the window's arriving work an hour at 1 job/h (arrivals scale as 1 / rate)

    @property
    def work_vs_lp_bound(self) -> float:
        """`work_vs_lp` is the work served an hour over the LP's (best x work): at most `cap` over it. Not 1.0:
        past saturation a policy may serve a backlog richer in the jobs that suit the slow classes than the
        mix the LP must serve as it arrives."""
        return self.cap / (self.best * self.work)

    @property
    def knee_bound(self) -> float:
        """The highest rate the work rule can call sustained: at rate r the window's work arrives at
        r x `window_work` an hour and at least 95% of it must be served, at most `cap` an hour."""
        return self.cap / (WORK_SERVED * self.window_work) if self.window_work > 0 else math.inf


_LP: dict[str, dict[int, Yardstick]] = {}


def _lp() -> dict[str, dict[int, Yardstick]]:
    """Each mix and seed's `Yardstick`, over the whole trace (a trace's jobs are the same at every rate,
    only their arrival times scale: `synthetic_trace` draws each gap as an exponential over the rate)."""
    if _LP:
        return _LP
    devices = dict.fromkeys(CLASSES, FLEET["nodes_per_class_region"] * FLEET["regions"] * FLEET["devices_per_node"])
    for m, share in MIXES.items():
        _LP[m] = {}
        for seed in SEEDS:
            trace = synthetic_trace(JOBS, 1.0, TABLE, seed=seed, fastest_share=share)
            mean_work = statistics.fmean(work_s(j, j.total_steps) for j in trace) / 3600
            inside = trace[WINDOW[0]:WINDOW[1]]
            span_h = (inside[-1].arrival_s - inside[0].arrival_s) / 3600
            window_work = sum(work_s(j, j.total_steps) for j in inside) / 3600 / span_h if span_h > 0 else 0.0
            _LP[m][seed] = Yardstick(capacity.best_rate(trace, devices), capacity.static_rate(trace, devices),
                                     mean_work, capacity.blind_rate(trace, devices),
                                     capacity.work_cap(trace, devices), window_work)
    return _LP


def one(policy: str, mix: str, seed: int, rate: float, variant: str) -> dict[str, Any]:
    """One replay of the synthetic trace; its figures go to stderr as it ends."""
    trace = synthetic_trace(JOBS, rate, TABLE, seed=seed, fastest_share=MIXES[mix])
    wall, cpu = time.perf_counter(), time.process_time()
    report = replay(trace, policy, Config(**FLEET, window=WINDOW, seed=seed, **ALL_VARIANTS[variant]))
    assert report.window is not None
    run = {"task": (policy, mix, seed, rate, variant), "wall_s": time.perf_counter() - wall,
           "cpu_s": time.process_time() - cpu, **report.window.summary(),
           "preemptions": report.preemptions, "preempted_device_h": round(report.preempted_device_h, 1),
           "upgrades": report.upgrades, "resizes": report.resizes, "reclaims": report.reclaims,
           "promotions": report.promotions, "completed": report.jobs, **report.per_job()}
    print(json.dumps(run), file=sys.stderr, flush=True)
    return run


def ok(run: dict[str, Any]) -> bool:
    """The work rule (`Window.work_sustained`)."""
    return bool(run["work_sustained"])


def chain(task: tuple[str, int, str]) -> list[dict[str, Any]]:
    """One mix, seed and variant, rates ascending, every policy; a policy is not run past the second rate it
    failed to sustain once static has failed too (every figure the targets read is then known, and the work it
    serves at saturation, past its knee, for `work_vs_lp`). Then each policy's knee is bisected `BISECT` times
    between its last sustained and its first unsustained rate of the grid (static and kueue, cheap, are
    replayed at each new rate too, so heterojob's JCT there has both yardsticks)."""
    mix, seed, variant = task
    out: list[dict[str, Any]] = []
    failed: dict[str, int] = defaultdict(int)
    for rate in RATES:
        for policy in POLICIES:
            if failed[policy] >= 2 and failed["static"]:
                continue
            run = one(policy, mix, seed, rate, variant)
            out.append(run)
            if not ok(run):
                failed[policy] += 1
    done = {(run["task"][0], run["task"][3]): run for run in out}  # (policy, rate) -> run
    for policy in POLICIES:
        for _ in range(BISECT):
            lo, hi = knee({r: ok(run) for (p, r), run in done.items() if p == policy})
            if hi is None or hi - lo < 0.02:
                break
            mid = round((lo + hi) / 2, 3)
            for p in dict.fromkeys((policy, "static", "kueue")):
                if (p, mid) not in done:
                    done[(p, mid)] = run = one(p, mix, seed, mid, variant)
                    out.append(run)
    return out


def knee(sustained: dict[float, bool]) -> tuple[float, float | None]:
    """(highest rate below which every replayed rate was sustained, the first rate that was not, or None)."""
    best = 0.0
    for r in sorted(sustained):
        if not sustained[r]:
            return best, r
        best = r
    return best, None


def philly(task: tuple[str, str, float]) -> dict[str, Any]:
    policy, name, scale = task
    trace = load_trace(DATA / name, TABLE, seed=1)
    fleet = PHILLY_FLEET
    trace = [j for j in trace if j.gpus <= fleet["nodes_per_class_region"] * fleet["devices_per_node"]]
    cpu = time.process_time()
    report = replay(trace, policy, Config(**fleet, arrival_scale=scale, seed=1))
    out = {"task": task, "avg_jct_h": report.avg_jct_h, "jobs": report.jobs, "cpu_s": time.process_time() - cpu}
    print(json.dumps(out), file=sys.stderr, flush=True)
    return out


def num(x: float | None, digits: int) -> float | None:
    return None if x is None or math.isnan(x) else round(x, digits)


def main() -> int:
    started = time.perf_counter()
    log = os.environ.get("HETEROJOB_BENCH_FROM_LOG")
    if log:  # summarize the replays a run (finished or not) wrote to stderr; missing points say so
        runs, pruns = [], []
        for line in Path(log).read_text().splitlines():
            if not line.startswith('{"task"'):
                continue
            run = json.loads(line)
            task = tuple(run["task"])
            if len(task) == 4:  # a run from before the variants: the informed mode, the count rule only
                task = (*task, "informed")
            run["task"] = task
            if len(task) == 5 and "work_sustained" not in run:
                continue  # no work figures: the work rule cannot read it
            (runs if len(task) == 5 else pruns).append(run)
        return summarize(runs, pruns, float("nan"))
    tasks = [(m, s, v) for v in VARIANTS for m in MIXES for s in SEEDS]
    ptasks = [(p, n, x) for n in PHILLY for x in SCALES for p in POLICIES]
    print(json.dumps({"bench": "efficiency", "jobs": JOBS, "window": WINDOW, "seeds": SEEDS, "mixes": list(MIXES),
                      "variants": VARIANTS, "rates": RATES, "philly_scales": SCALES, "workers": WORKERS}),
          file=sys.stderr, flush=True)
    with ProcessPoolExecutor(max_workers=WORKERS) as pool:
        cfuture = [pool.submit(chain, t) for t in tasks]  # the long ones first
        pfuture = [pool.submit(philly, t) for t in ptasks]
        runs = [run for f in cfuture for run in f.result()]
        pruns = [f.result() for f in pfuture]
    return summarize(runs, pruns, time.perf_counter() - started)


def figures(runs: list[dict[str, Any]], variant: str, lp: dict[str, dict[int, tuple[float, float, float]]]
            ) -> dict[str, Any]:
    """The issue's figures for one variant, ratios paired per seed."""
    at: dict[tuple[str, str, int, float], dict[str, Any]] = {}  # (policy, mix, seed, rate) -> run
    for run in runs:
        p, m, seed, r, v = run["task"]
        if v == variant and m in MIXES and seed in SEEDS:
            at[(p, m, seed, r)] = run
    knees = {p: {m: {s: knee({r: ok(x) for (p2, m2, s2, r), x in at.items() if (p2, m2, s2) == (p, m, s)})[0]
                     for s in SEEDS} for m in MIXES} for p in POLICIES}
    jct, jct_kueue, dh, worse, churn, promo = [], [], [], [], [], []
    by_rate: dict[str, Any] = {}
    for (p, m, s, r), x in sorted(at.items(), key=lambda kv: (kv[0][1], kv[0][3], kv[0][2], kv[0][0])):
        row = by_rate.setdefault(f"{m} {r:g}/h", {}).setdefault(p, {})
        row[s] = {k: x.get(k) for k in ("avg_jct_h", "busy_share", "useful_share", "work_served", "work_sustained",
                                        "sustained", "device_h_per_job", "preemptions_per_job",
                                        "promotions_per_job", "upgrades_per_job")}
        if p != "heterojob":
            continue
        where = f"{m} {r:g}/h seed {s}"
        if ok(x):
            churn.append((x.get("preemptions_per_job", math.nan), where))
            promo.append((x.get("promotions_per_job", math.nan), where))
        st, ku = at.get(("static", m, s, r)), at.get(("kueue", m, s, r))
        if st is not None:
            if x["avg_jct_h"] > st["avg_jct_h"]:
                worse.append(where)
            if r <= knees["static"][m][s]:
                jct.append((x["avg_jct_h"] / st["avg_jct_h"], where))
                dh.append((x["device_h_per_job"] / st["device_h_per_job"], where))
        if ku is not None and r <= knees["kueue"][m][s]:
            jct_kueue.append((x["avg_jct_h"] / ku["avg_jct_h"], where))
    gain = {m: {s: num(knees["heterojob"][m][s] / knees["static"][m][s], 3) if knees["static"][m][s] else None
                for s in SEEDS} for m in MIXES}
    busy_knee = {p: {m: {s: num(at[(p, m, s, knees[p][m][s])]["busy_share"], 3)
                         if (p, m, s, knees[p][m][s]) in at else None for s in SEEDS} for m in MIXES}
                 for p in POLICIES}
    # work served an hour at saturation (the most over the rates replayed) over the LP optimum's
    work_vs_lp: dict[str, dict[str, dict[int, Any]]] = {p: {m: {} for m in MIXES} for p in POLICIES}
    for p in POLICIES:
        for m in MIXES:
            for s in SEEDS:
                served = [x["served_work_h"] / x["span_h"] for (p2, m2, s2, _), x in at.items()
                          if (p2, m2, s2) == (p, m, s) and x.get("span_h")]
                best, _, work = lp[m][s]
                saturated = any(not ok(x) for (p2, m2, s2, _), x in at.items() if (p2, m2, s2) == (p, m, s))
                work_vs_lp[p][m][s] = {"value": num(max(served) / (best * work), 3) if served else None,
                                       "saturated": saturated}

    def peak(values: list[tuple[float, str]]) -> tuple[float | None, str | None]:
        values = [v for v in values if not math.isnan(v[0])]
        return (round(max(values)[0], 3), max(values)[1]) if values else (None, None)

    def least(d: dict[int, Any]) -> float | None:
        vals = [v for v in d.values() if v is not None]
        return min(vals) if vals else None

    ours = [v["value"] for m in MIXES for v in work_vs_lp["heterojob"][m].values() if v["value"] is not None]
    out: dict[str, Any] = {
        "work_vs_lp_min": min(ours) if ours else None,
        "work_vs_lp_saturated": all(v["saturated"] for m in MIXES for v in work_vs_lp["heterojob"][m].values()),
        "busy_at_knee_seedmix": least(busy_knee["heterojob"]["seedmix"]) if "seedmix" in MIXES else None,
        "throughput_gain_seedmix": least(gain["seedmix"]) if "seedmix" in MIXES else None,
        "throughput_gain_skewed": least(gain["skewed"]) if "skewed" in MIXES else None,
        "throughput_gain_proportional": least(gain["proportional"]) if "proportional" in MIXES else None,
        "jct_ratio_max": peak(jct)[0], "jct_ratio_peak_at": peak(jct)[1],
        "jct_ratio_max_vs_kueue": peak(jct_kueue)[0], "jct_ratio_vs_kueue_peak_at": peak(jct_kueue)[1],
        "device_hours_per_job_ratio": peak(dh)[0], "device_hours_ratio_peak_at": peak(dh)[1],
        "worse_than_static": len(worse), "worse_points": worse,
        "preemptions_per_job_max": peak(churn)[0], "preemptions_per_job_peak_at": peak(churn)[1],
        "promotions_per_job_max": peak(promo)[0],
        "knee_jobs_per_h": knees, "throughput_gain_per_seed": gain, "busy_at_knee": busy_knee,
        "work_vs_lp": work_vs_lp, "by_rate": by_rate,
    }
    return out


def real_bounds(head: dict[str, Any]) -> dict[str, float | None]:
    """What no policy can beat on this fleet and trace, per target where one is known (lowest mix and seed,
    as the targets read them); a target past its bound is out of reach. Each is a bound, not a fluid
    estimate: `work_vs_lp_min` by `Yardstick.work_vs_lp_bound` (the fleet's most work an hour, over the LP's:
    above 1.0, since a saturated policy need not serve the arriving mix); `busy_at_knee_seedmix` 1.0; each
    `throughput_gain_{mix}` is at most `Yardstick.knee_bound` (the work rule's highest sustainable rate) over
    static's measured knee at the same seed (None where static sustained no rate replayed). The fluid LP's
    figures (its gain, the blind LP) are printed apart (`fluid`): the work rule's 5% margin and a backlog
    served out of its arrival mix let a policy's figures pass them."""
    out: dict[str, float | None] = {
        "work_vs_lp_min": round(min(v.work_vs_lp_bound for seeds in _lp().values() for v in seeds.values()), 3),
        "busy_at_knee_seedmix": 1.0}
    static_knees = head.get("knee_jobs_per_h", {}).get("static", {})
    for m in ("seedmix", "skewed"):
        if m not in MIXES:
            continue
        ratios = [v.knee_bound / static_knees[m][s] for s, v in _lp()[m].items()
                  if static_knees.get(m, {}).get(s)]
        out[f"throughput_gain_{m}"] = round(min(ratios), 3) if ratios else None
    return out


def check(result: dict[str, Any], key: str) -> bool:
    op, bound = TARGETS[key]
    value = result.get(key)
    if value is None:
        return False
    return {">=": value >= bound, "<=": value <= bound, "<": value < bound, "==": value == bound}[op]


def summarize(runs: list[dict[str, Any]], pruns: list[dict[str, Any]], wall: float) -> int:
    """The JSON line and the exit status from the replays' figures."""
    lp = lp_bounds()
    per_variant = {v: figures(runs, v, lp) for v in VARIANTS if any(r["task"][4] == v for r in runs)}
    head = per_variant.get("default") or next(iter(per_variant.values()), {})
    worse_philly: list[str] = []
    philly_out: dict[str, Any] = {}
    pj = {tuple(run["task"]): run["avg_jct_h"] for run in pruns}
    for n in PHILLY:
        for x in SCALES:
            row = {p: round(pj[(p, n, x)], 2) if (p, n, x) in pj else "not run" for p in POLICIES}
            philly_out[f"{n} x{x:g}"] = row
            if all((p, n, x) in pj for p in POLICIES) and pj[("heterojob", n, x)] > pj[("static", n, x)]:
                worse_philly.append(f"{n} x{x:g}")
    reduced = sorted(k for k in KNOBS if k in os.environ)
    cap = useful_cap()
    result: dict[str, Any] = {
        "seeds": list(SEEDS), "reduced": bool(reduced), "knobs": {k: os.environ[k] for k in reduced},
        "method": f"Gavel: 36:36:36 devices, {JOBS} Poisson jobs, window jobs {WINDOW[0]}-{WINDOW[1] - 1}, "
                  f"{len(RATES)} rates, seeds {list(SEEDS)}, mixes {list(MIXES)}, variants {VARIANTS}; "
                  f"sustained: >= 95% of the arriving work served",
        "mode": "default" if "default" in per_variant else next(iter(per_variant), None),
    }
    for key in TARGETS:
        result[key] = head.get(key)
    if "default" in per_variant:
        result["worse_than_static"] = head["worse_than_static"] + len(worse_philly)
    result["worse_points"] = [*head.get("worse_points", []), *worse_philly]
    result["philly"] = philly_out
    result["variants"] = {v: {k: f[k] for k in (*TARGETS, "throughput_gain_proportional", "promotions_per_job_max",
                                                "work_vs_lp_saturated")} for v, f in per_variant.items()}
    result["detail"] = per_variant
    lp_out = {m: {"best_jobs_per_h": {s: round(b, 3) for s, (b, _, _) in lp[m].items()},
                  "static_jobs_per_h": {s: round(st, 3) for s, (_, st, _) in lp[m].items()},
                  "mean_work_device_h": {s: round(w, 2) for s, (_, _, w) in lp[m].items()},
                  "gain_fluid_per_seed": {s: round(b / st, 3) for s, (b, st, _) in lp[m].items()}} for m in MIXES}
    for m in MIXES:
        lp_out[m]["blind_jobs_per_h"] = {s: round(v.blind, 3) for s, v in _lp()[m].items()}
        lp_out[m]["work_cap_device_h_per_h"] = {s: round(v.cap, 1) for s, v in _lp()[m].items()}
    result["throughput_lp"] = lp_out
    result["useful_utilization_cap"] = cap["cap"]
    bounds = real_bounds(head)
    result["bounds"] = bounds
    # fluid figures beside them, not bounds: the LP's gain (best over static's rate) and the LP of a policy that
    # never tells models apart (one split per job size), as shares of the LP's work (lowest mix and seed)
    blind = round(min(v.blind / v.best for seeds in _lp().values() for v in seeds.values()), 3)
    result["fluid"] = {"work_vs_lp_blind": blind, **{
        f"throughput_gain_{m}": round(min(v.best / v.static for v in _lp()[m].values()), 3)
        for m in ("seedmix", "skewed") if m in MIXES}}
    result["replay_jobs"] = JOBS
    result["replay_6000_jobs_s_max"] = round(max((run["cpu_s"] for run in runs), default=0.0), 1)
    result["wall_s"] = num(wall, 1)
    targets = {f"{k} {op} {bound:g}": check(result, k) for k, (op, bound) in TARGETS.items()}
    if "cost3x" in per_variant:
        for k in ALSO_COSTLY:
            op, bound = TARGETS[k]
            targets[f"cost3x {k} {op} {bound:g}"] = check(per_variant["cost3x"], k)
    result["targets"] = targets
    result["targets_missed"] = [k for k, met in targets.items() if not met]
    notes = []
    for key, bound in bounds.items():
        op, target = TARGETS[key]
        if op == ">=" and bound is not None and bound < target:
            notes.append(f"{key} >= {target:g} is out of reach for any policy on this fleet: at most {bound} "
                         f"(bounds: lowest mix and seed)")
    if result["mode"] == "default" and (head.get("work_vs_lp_min") or 0.0) < TARGETS["work_vs_lp_min"][1]:
        notes.append(f"work_vs_lp_min in the default mode: in the fluid model a policy that cannot tell models "
                     f"apart (one split over the classes for every job of a size: what the declared throughput "
                     f"alone allows) serves {blind} of the LP's work (capacity.blind_rate, lowest mix and seed; "
                     f"not a bound: a saturated queue's backlog may be served in another mix); past it only what "
                     f"jobs measure on a second class, or their workload names, can take it")
    if not head.get("work_vs_lp_saturated", True):
        notes.append("work_vs_lp: heterojob sustained every rate replayed at some seed: not saturated there, "
                     "so its figure is a lower bound")
    if reduced:
        notes.append(f"reduced run ({', '.join(reduced)}): not the issue's method")
    result["notes"] = notes
    result["meets_targets"] = all(targets.values())
    print(json.dumps(result))
    return 0 if result["meets_targets"] else 1


if __name__ == "__main__":
    sys.exit(main())
