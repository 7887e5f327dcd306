"""`heterojob sim replay`: replay a trace under one or all policies; JSON on stdout, HTML optionally."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from heterojob.engine.basics.queueing import QueuePolicy, QueueSettings
from heterojob.replay.config import Config, KNOWLEDGE, POLICIES, REGIONS
from heterojob.replay.replay import replay
from heterojob.replay.replay import __doc__ as REPLAY_DOC
from heterojob.replay.report import html_report
from heterojob.replay.traces import TraceError, cluster, gavel_slice, read_trace, synthetic_trace, write_gavel_trace


def main(argv: Sequence[str] | None = None) -> int:
    """`heterojob sim replay`: replay a trace under one or all policies; JSON on stdout, HTML optionally."""
    parser = argparse.ArgumentParser(prog="heterojob sim replay", description=REPLAY_DOC,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    root = Path(__file__).resolve().parents[3] / "data" / "gavel"
    parser.add_argument("--trace", type=Path, default=root / "philly-ee9e8c.trace",
                        help="a Gavel-format trace: 7 tab-separated fields per line (Philly traces) or 10 (Gavel's "
                             "parse_trace: with priority weight and SLO); # comments and blank lines skipped "
                             "(default: Philly ee9e8c)")
    parser.add_argument("--synthetic", type=int, default=None, metavar="N",
                        help="replay N Gavel-style synthetic jobs instead of --trace")
    parser.add_argument("--jobs-per-hour", type=float, default=4.0, help="synthetic arrival rate")
    parser.add_argument("--high-priority-share", type=float, default=0.0, help="synthetic jobs with priority 1")
    parser.add_argument("--throughputs", type=Path, default=root / "isolated_throughputs.csv",
                        help="steps/s per job type, scale and device type: this CSV, or Gavel's own "
                             "scheduler/simulation_throughputs.json")
    parser.add_argument("--policy", choices=[*POLICIES, "all", "both"], default="all",
                        help="one policy, all three, or both (static and heterojob)")
    parser.add_argument("--queue-policy", choices=[q.value for q in QueuePolicy], default=QueuePolicy.MLFQ.value,
                        help="heterojob's order within a priority level: mlfq (least attained service, "
                             "starvation bound) or fifo")
    parser.add_argument("--starvation-hours", type=float, default=4.0,
                        help="mlfq: a job waiting this long is promoted to the first level")
    parser.add_argument("--no-upgrades", action="store_true", help="heterojob: never move a running job up")
    parser.add_argument("--fastest-share", type=float, default=None, metavar="SHARE",
                        help="synthetic: this share of users ask for the fastest class (default: by throughput)")
    parser.add_argument("--cluster", default=None, metavar="TYPE:DEVICES,...",
                        help="devices per type in one region, in nodes of --devices-per-node (Gavel's types or "
                             "class names, e.g. v100:16,p100:16,k80:16); replaces --regions and "
                             "--nodes-per-class-region")
    parser.add_argument("--devices-per-node", type=int, default=8)
    parser.add_argument("--regions", type=int, default=3, choices=range(1, len(REGIONS) + 1))
    parser.add_argument("--nodes-per-class-region", type=int, default=2)
    parser.add_argument("--arrival-scale", type=float, default=None,
                        help="multiply arrival times (< 1: more load); default 0.1 for --trace, 1 for --synthetic")
    parser.add_argument("--mtbf-hours", type=float, default=50_000.0,
                        help="mean hours between failures of a device (inf: no failures)")
    parser.add_argument("--knowledge", choices=KNOWLEDGE, default="default",
                        help="what the operator knows: default (a job's speed on a class once it has trained there "
                             "for the step window, no workload names, no periodic checkpoints) or informed (every "
                             "speed at once, each job naming its type as its workload, periodic checkpoints)")
    parser.add_argument("--workloads", action=argparse.BooleanOptionalAction, default=None,
                        help="each job names its type as spec.workload (default: in the informed mode only)")
    parser.add_argument("--periodic-checkpoints", action=argparse.BooleanOptionalAction, default=None,
                        help="jobs checkpoint every --checkpoint-seconds (default: in the informed mode only)")
    parser.add_argument("--checkpoint-seconds", type=float, default=1800.0)
    parser.add_argument("--save-seconds", type=float, default=20.0, help="an on-demand checkpoint's save")
    parser.add_argument("--restore-seconds", type=float, default=60.0, help="loading a checkpoint where a job lands")
    parser.add_argument("--no-elastic", action="store_true", help="heterojob: never grow a job")
    parser.add_argument("--alternatives-within", type=float, default=0.0, metavar="SHARE",
                        help="heterojob: a job lists only the classes where it runs at least SHARE of its best speed")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--limit", type=int, default=None, help="replay only the first N jobs of --trace")
    parser.add_argument("--gavel-slice", type=int, default=None, metavar="N",
                        help="Gavel's evaluation slice of --trace: the first N jobs that run on every type and last "
                             "at most 10^4 minutes on V100, arrivals shifted to start at 0 (bench/gavel.py)")
    parser.add_argument("--html", type=Path, default=None, help="write a plotly report here")
    parser.add_argument("--write-trace", type=Path, default=None, metavar="FILE",
                        help="also write the jobs replayed, arrivals times --arrival-scale, in the 10-field layout "
                             "Gavel's simulator reads (scripts/drivers/simulate_scheduler_with_trace.py -t FILE): "
                             "both tools then run the same file (replay it with --arrival-scale 1)")
    args = parser.parse_args(argv)
    for path in (args.throughputs,) if args.synthetic else (args.trace, args.throughputs):
        if not path.is_file():
            parser.error(f"{path} is not a file (a Gavel-format trace and its isolated_throughputs.csv)")
    if args.arrival_scale is None:
        args.arrival_scale = 1.0 if args.synthetic else 0.1
    fleet_classes: tuple[tuple[str, int], ...] = ()
    if args.cluster is not None:
        try:
            fleet_classes = cluster(args.cluster)
        except TraceError as exc:
            parser.error(str(exc))
    if args.devices_per_node < 1:
        parser.error("--devices-per-node must be positive")
    if args.nodes_per_class_region < 1 or args.arrival_scale <= 0 or args.mtbf_hours <= 0:
        parser.error("--nodes-per-class-region, --arrival-scale and --mtbf-hours must be positive")
    if not 0 <= args.alternatives_within <= 1:
        parser.error("--alternatives-within is a share of the best speed, from 0 to 1")
    if args.checkpoint_seconds <= 0 or args.save_seconds < 0 or args.restore_seconds < 0:
        parser.error("--checkpoint-seconds must be positive, --save-seconds and --restore-seconds 0 or more")
    if args.starvation_hours <= 0:
        parser.error("--starvation-hours must be positive")
    if args.fastest_share is not None and not 0 <= args.fastest_share <= 1:
        parser.error("--fastest-share is a share of the users, from 0 to 1")
    config = Config(nodes_per_class_region=args.nodes_per_class_region, regions=args.regions,
                    devices_per_node=args.devices_per_node, cluster=fleet_classes,
                    arrival_scale=args.arrival_scale, mtbf_h=args.mtbf_hours, checkpoint_s=args.checkpoint_seconds,
                    elastic=not args.no_elastic, within=args.alternatives_within, seed=args.seed,
                    queue=QueueSettings(policy=QueuePolicy(args.queue_policy),
                                        starvation_s=args.starvation_hours * 3600),
                    upgrades=not args.no_upgrades, knowledge=args.knowledge, workloads=args.workloads,
                    periodic=args.periodic_checkpoints, save_s=args.save_seconds, restore_s=args.restore_seconds)
    left_out = []
    try:
        if args.synthetic:
            jobs = synthetic_trace(args.synthetic, args.jobs_per_hour, args.throughputs, seed=args.seed,
                                   high_priority_share=args.high_priority_share, fastest_share=args.fastest_share)
            name = f"synthetic ({len(jobs)} jobs, {args.jobs_per_hour:g}/h)"
        else:
            trace = read_trace(args.trace, args.throughputs, seed=args.seed, limit=args.limit)
            jobs = trace.jobs if args.gavel_slice is None else gavel_slice(trace.jobs, args.gavel_slice)
            name = f"{args.trace.name} ({len(jobs)} jobs)"
            left_out.append(trace.left_out())
    except TraceError as exc:
        parser.error(str(exc))
    too_big = sum(1 for j in jobs if j.gpus > config.largest_gang)
    jobs = [j for j in jobs if j.gpus <= config.largest_gang]
    if too_big:
        left_out.append(f"{too_big} jobs larger than one class in one region")
    if not jobs:
        parser.error(f"no job of {args.trace if not args.synthetic else 'the synthetic trace'} can be replayed"
                     + (f" ({'; '.join(p for p in left_out if p)})" if any(left_out) else " (the trace is empty)"))
    if args.write_trace is not None:
        try:
            write_gavel_trace(jobs, args.write_trace, config.arrival_scale)
        except (OSError, TraceError) as exc:
            parser.error(f"--write-trace {args.write_trace}: {exc}")
    policies = {"both": ["static", "heterojob"], "all": list(POLICIES)}.get(args.policy, [args.policy])
    reports = [replay(jobs, p, config) for p in policies]
    out: dict[str, Any] = {"trace": name, "devices": config.devices, "knowledge": config.knowledge,
                           **{r.policy: r.summary() for r in reports}}
    if any(left_out):
        out["left_out"] = "; ".join(p for p in left_out if p)
    print(json.dumps(out))
    if args.html:
        html_report(reports, args.html, title=name)
    return 0
