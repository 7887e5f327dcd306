"""`heterojob sim replay`: a discrete-event replay of a job trace on a simulated heterogeneous fleet.

The heterojob policy places through the operator's own engine (`engine.placement.schedule`: alternatives,
gang packing, priority and age order); the static baseline is strict FIFO with the device type the user
asked for. Device failures come at a configurable MTBF per device; a failed node is repaired after
`repair_h`. Jobs checkpoint every `checkpoint_s` (saving costs `save_s`, restoring `restore_s`); a failure
loses the work since the last checkpoint. Static: the job restarts after Kubernetes' default eviction
delay (node-monitor grace 40 s + 300 s toleration) on the same device type; heterojob: at once, on any
class the job can use, off the failed node.

Gavel's device types map onto this fleet's classes by speed rank (documented, not a claim about them):
V100 -> nvidia-h100, P100 -> nvidia-a100, K80 -> ascend-910b.

Utilization = device-hours of useful training / (devices x makespan); work redone after a failure, checkpoint
saving and restoring are not useful. Same trace, seed and config: same numbers.
"""

from __future__ import annotations

import csv
import heapq
import math
import random
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from heterojob.engine.fleet import DeviceClass, Fleet, Node
from heterojob.engine.placement import Alternative, Request, place, schedule

CLASS_OF = {"v100": "nvidia-h100", "p100": "nvidia-a100", "k80": "ascend-910b"}
CLASSES = list(CLASS_OF.values())
REGIONS = ("cn-east", "cn-north", "eu-west")
K8S_EVICTION_S = 40.0 + 300.0


@dataclass(frozen=True)
class TraceJob:
    id: int
    job_type: str
    total_steps: float
    arrival_s: float
    gpus: int
    rate: dict[str, float]  # class -> steps/s of the whole job at its scale (0: cannot run there)
    wants: str  # the class the user asks for (static keeps it)

    @property
    def shape(self) -> tuple[int, int]:
        """(replicas, devices per replica): whole 8-device nodes beyond 8 devices."""
        return (1, self.gpus) if self.gpus <= 8 else (math.ceil(self.gpus / 8), 8)


def throughputs(path: Path) -> dict[tuple[str, int], dict[str, float]]:
    out = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            out[(row["job_type"], int(row["scale_factor"]))] = {
                CLASS_OF[t]: float(row[f"{t}_steps_per_s"] or 0) for t in CLASS_OF}
    return out


def load_trace(trace: Path, table: Path, seed: int = 0, limit: int | None = None) -> list[TraceJob]:
    """A Gavel/Philly trace: one job per line; jobs whose (type, scale) has no throughput are skipped."""
    rates = throughputs(table)
    rng = random.Random(seed)
    jobs = []
    for i, line in enumerate(trace.read_text().splitlines()):
        parts = line.split("\t")
        if len(parts) < 7:
            continue
        job_type, steps, arrival, gpus = parts[0], float(parts[4]), float(parts[5]), int(parts[6])
        rate = rates.get((job_type, gpus)) or rates.get((job_type, min((1, 2, 4, 8), key=lambda s: abs(s - gpus))))
        if not rate or not any(rate.values()):
            continue
        usable = [c for c, r in rate.items() if r > 0]
        jobs.append(TraceJob(i, job_type, steps, arrival, gpus, rate, rng.choice(usable)))
        if limit and len(jobs) >= limit:
            break
    return jobs


@dataclass(frozen=True)
class Config:
    nodes_per_class_region: int = 12  # x 3 classes x 3 regions x 8 devices = 864 devices
    devices_per_node: int = 8
    arrival_scale: float = 1.0  # arrivals at t * scale: < 1 compresses the trace (more load)
    mtbf_h: float = 50_000.0  # per device
    repair_h: float = 4.0
    checkpoint_s: float = 1800.0
    save_s: float = 20.0
    restore_s: float = 60.0
    recovery_s: float = 1.0  # heterojob: fault seen -> replacement pods (bench/recovery.py measures 0.1 s)
    lookahead: int = 128  # heterojob: how far down the queue one scheduling pass looks
    seed: int = 0


@dataclass
class _Run:
    job: TraceJob
    cls: str
    nodes: tuple[str, ...]
    per_node: dict[str, int]
    started: float
    steps_at_start: float
    rate: float  # effective steps/s (checkpoint saving included)


@dataclass
class Report:
    policy: str
    jobs: int
    utilization: float
    avg_jct_h: float
    p99_jct_h: float
    makespan_h: float
    lost_device_h: float
    failures: int
    restarts: int
    max_lost_per_failure_s: float
    timeline: list[tuple[float, float]] = field(default_factory=list)  # (hour, busy devices share)
    jcts_h: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"utilization": round(self.utilization, 4), "avg_jct_h": round(self.avg_jct_h, 3),
                "p99_jct_h": round(self.p99_jct_h, 3), "makespan_h": round(self.makespan_h, 2),
                "lost_device_h": round(self.lost_device_h, 2), "failures": self.failures,
                "restarts": self.restarts, "max_lost_per_failure_s": round(self.max_lost_per_failure_s, 1)}


def fleet(config: Config) -> Fleet:
    nodes = {}
    for region in REGIONS:
        for cls in CLASSES:
            for i in range(config.nodes_per_class_region):
                name = f"{region}-{cls}-{i:02d}"
                nodes[name] = Node(name, {"class": cls, "topology.kubernetes.io/region": region},
                                   {cls: config.devices_per_node})
    classes = {c: DeviceClass(c, c, {"class": c}) for c in CLASSES}
    return Fleet(nodes, classes)


def replay(jobs: Sequence[TraceJob], policy: str, config: Config) -> Report:
    assert policy in ("static", "heterojob"), policy
    rng = random.Random(config.seed)
    base = fleet(config)
    used: dict[tuple[str, str], int] = {}
    down: set[str] = set()
    events: list[tuple[float, int, str, Any]] = []
    seq = 0

    def push(t: float, kind: str, payload: Any) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind, payload))

    for job in jobs:
        push(job.arrival_s * config.arrival_scale, "arrive", job)
    per_node_rate = config.devices_per_node / (config.mtbf_h * 3600)
    for name in sorted(base.nodes):
        push(rng.expovariate(per_node_rate), "fail", name)

    progress: dict[int, float] = {j.id: 0.0 for j in jobs}  # steps saved in the last checkpoint (or done)
    queue: list[tuple[float, int, TraceJob]] = []  # (order time, id, job)
    running: dict[int, _Run] = {}
    finished: dict[int, float] = {}
    useful_s = lost_s = 0.0  # device-seconds
    failures = restarts = 0
    max_lost = 0.0
    busy_area: list[tuple[float, float]] = []
    total_devices = sum(n.allocatable[next(iter(n.allocatable))] for n in base.nodes.values())
    last_t = 0.0
    busy = 0
    first_arrival = min((j.arrival_s * config.arrival_scale for j in jobs), default=0.0)
    end_time = first_arrival

    def effective(job: TraceJob, cls: str) -> float:
        return job.rate[cls] * config.checkpoint_s / (config.checkpoint_s + config.save_s)

    def current_fleet() -> Fleet:
        nodes = {n: (Node(v.name, v.labels, v.allocatable, ready=False) if n in down else v)
                 for n, v in base.nodes.items()}
        return Fleet(nodes, base.classes, used=dict(used))

    def start(job: TraceJob, cls: str, nodes: tuple[str, ...], per: int, now: float) -> None:
        nonlocal busy
        per_node: dict[str, int] = {}
        for n in nodes:
            per_node[n] = per_node.get(n, 0) + per
            used[(n, cls)] = used.get((n, cls), 0) + per
        busy += sum(per_node.values())
        restore = config.restore_s if progress[job.id] > 0 else 0.0
        run = _Run(job, cls, nodes, per_node, now + restore, progress[job.id], effective(job, cls))
        running[job.id] = run
        remaining = (job.total_steps - progress[job.id]) / run.rate
        push(run.started + remaining, "finish", (job.id, run.started))

    def stop(run: _Run) -> None:
        nonlocal busy
        for n, c in run.per_node.items():
            used[(n, run.cls)] -= c
        busy -= sum(run.per_node.values())
        del running[run.job.id]

    def place_static(now: float) -> None:
        while queue:
            _, _, job = queue[0]
            replicas, per = job.shape
            result = place(Request(f"t/{job.id}", [Alternative(job.wants, per)], replicas), current_fleet())
            if result.chosen is None:
                return  # strict FIFO: the head blocks the queue
            heapq.heappop(queue)
            start(job, job.wants, result.chosen.nodes, per, now)

    def place_heterojob(now: float) -> None:
        if not queue:
            return
        ahead = heapq.nsmallest(config.lookahead, queue)
        requests = []
        for order, _, job in ahead:
            replicas, per = job.shape
            alternatives = [Alternative(c, per) for c in sorted(job.rate, key=lambda c: -job.rate[c])
                            if job.rate[c] > 0]
            requests.append(Request(f"t/{job.id}", alternatives, replicas, created=order))
        results = schedule(requests, current_fleet())
        placed = set()
        for order, _, job in ahead:
            chosen = results[f"t/{job.id}"].chosen
            if chosen is not None:
                start(job, chosen.device_class, chosen.nodes, chosen.per_replica, now)
                placed.add(job.id)
        if placed:
            queue[:] = [q for q in queue if q[2].id not in placed]
            heapq.heapify(queue)

    schedule_now = place_static if policy == "static" else place_heterojob
    while events and len(finished) < len(jobs):
        now, _, kind, payload = heapq.heappop(events)
        busy_area.append((now, busy))
        last_t = now
        if kind == "arrive":
            heapq.heappush(queue, (now, payload.id, payload))
        elif kind == "finish":
            job_id, started = payload
            run = running.get(job_id)
            if run is None or run.started != started:
                continue  # a stale completion of a run a failure ended
            useful_s += (run.job.total_steps - run.steps_at_start) / run.rate * sum(run.per_node.values())
            progress[job_id] = run.job.total_steps
            stop(run)
            finished[job_id] = now
            end_time = now
        elif kind == "fail":
            node = payload
            failures += 1
            down.add(node)
            push(now + config.repair_h * 3600, "repair", node)
            for run in [r for r in running.values() if node in r.per_node]:
                ran = max(0.0, now - run.started)
                done = run.steps_at_start + ran * run.rate
                kept_intervals = math.floor(ran / (config.checkpoint_s + config.save_s))
                saved = min(done, run.steps_at_start + kept_intervals * config.checkpoint_s * run.job.rate[run.cls])
                devices = sum(run.per_node.values())
                kept_s = (saved - run.steps_at_start) / run.rate
                useful_s += kept_s * devices
                lost = ran - kept_s
                lost_s += lost * devices
                max_lost = max(max_lost, lost)
                progress[run.job.id] = saved
                stop(run)
                restarts += 1
                delay = K8S_EVICTION_S if policy == "static" else config.recovery_s
                push(now + delay, "requeue", run.job)
        elif kind == "requeue":
            heapq.heappush(queue, (payload.arrival_s * config.arrival_scale, payload.id, payload))
        elif kind == "repair":
            down.discard(payload)
            push(now + rng.expovariate(per_node_rate), "fail", payload)
        schedule_now(now)

    makespan = max(end_time - first_arrival, 1e-9)
    jcts = sorted((finished[j.id] - j.arrival_s * config.arrival_scale) / 3600 for j in jobs if j.id in finished)
    timeline = _timeline(busy_area, total_devices, first_arrival, end_time)
    return Report(policy, len(finished), useful_s / (total_devices * makespan), statistics.fmean(jcts) if jcts else 0,
                  jcts[min(len(jcts) - 1, int(0.99 * len(jcts)))] if jcts else 0, makespan / 3600,
                  lost_s / 3600, failures, restarts, max_lost, timeline, jcts)


def _timeline(points: Iterable[tuple[float, float]], total: int, start: float, end: float,
              buckets: int = 200) -> list[tuple[float, float]]:
    """Busy share of the fleet over time, time-weighted per bucket."""
    pts = list(points)
    if not pts or end <= start:
        return []
    width = (end - start) / buckets
    area = [0.0] * buckets
    for (t0, b), (t1, _) in zip(pts, pts[1:], strict=False):
        t0, t1 = max(t0, start), min(t1, end)
        if t1 <= t0 or not b:
            continue
        for k in range(min(buckets - 1, int((t0 - start) / width)), min(buckets - 1, int((t1 - start) / width)) + 1):
            overlap = min(t1, start + (k + 1) * width) - max(t0, start + k * width)
            if overlap > 0:
                area[k] += b * overlap
    return [((start + (k + 0.5) * width) / 3600, area[k] / (width * total)) for k in range(buckets)]


def html_report(reports: Sequence[Report], path: Path) -> None:
    """Utilization over time and the JCT CDF of each policy, as one self-contained plotly HTML file."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("Busy share of the fleet", "Job completion time CDF"))
    for r in reports:
        fig.add_trace(go.Scatter(x=[t for t, _ in r.timeline], y=[u for _, u in r.timeline], name=f"{r.policy} busy",
                                 mode="lines"), row=1, col=1)
        n = len(r.jcts_h)
        fig.add_trace(go.Scatter(x=r.jcts_h, y=[(i + 1) / n for i in range(n)], name=f"{r.policy} JCT",
                                 mode="lines"), row=1, col=2)
    fig.update_xaxes(title_text="hours", row=1, col=1)
    fig.update_xaxes(title_text="JCT (hours)", type="log", row=1, col=2)
    fig.write_html(str(path), include_plotlyjs=True)


def main(argv: Sequence[str] | None = None) -> int:
    """`heterojob sim replay`: replay a trace under one or both policies; JSON on stdout, HTML optionally."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="heterojob sim replay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    root = Path(__file__).resolve().parents[3] / "data" / "gavel"
    parser.add_argument("--trace", type=Path, default=root / "philly-ee9e8c.trace")
    parser.add_argument("--throughputs", type=Path, default=root / "isolated_throughputs.csv")
    parser.add_argument("--policy", choices=["static", "heterojob", "both"], default="both")
    parser.add_argument("--nodes-per-class-region", type=int, default=2)
    parser.add_argument("--arrival-scale", type=float, default=0.1)
    parser.add_argument("--mtbf-hours", type=float, default=50_000.0)
    parser.add_argument("--checkpoint-seconds", type=float, default=1800.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--limit", type=int, default=None, help="replay only the first N jobs")
    parser.add_argument("--html", type=Path, default=None, help="write a plotly report here")
    args = parser.parse_args(argv)
    for path in (args.trace, args.throughputs):
        if not path.is_file():
            parser.error(f"{path} is not a file (a Gavel-format trace and its isolated_throughputs.csv)")
    config = Config(nodes_per_class_region=args.nodes_per_class_region, arrival_scale=args.arrival_scale,
                    mtbf_h=args.mtbf_hours, checkpoint_s=args.checkpoint_seconds, seed=args.seed)
    jobs = [j for j in load_trace(args.trace, args.throughputs, seed=args.seed, limit=args.limit)
            if j.gpus <= config.nodes_per_class_region * config.devices_per_node]
    policies = ["static", "heterojob"] if args.policy == "both" else [args.policy]
    reports = [replay(jobs, p, config) for p in policies]
    print(json.dumps({"trace": f"{args.trace.name} ({len(jobs)} jobs)", **{r.policy: r.summary() for r in reports}}))
    if args.html:
        html_report(reports, args.html)
    return 0
