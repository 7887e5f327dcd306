"""The comparison with Gavel's simulator (issue 43): a `--cluster` fleet, Gavel's evaluation slice of a trace,
and a replay without failures."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from heterojob.replay import cli
from heterojob.replay.config import Config
from heterojob.replay.replay import fleet, replay
from heterojob.replay.traces import (CLASSES, REFERENCE, TraceError, cluster, gavel_slice, load_trace,
                                     measured_everywhere, read_trace, write_gavel_trace)

DATA = Path(__file__).resolve().parents[2] / "data" / "gavel"
TABLE = DATA / "isolated_throughputs.csv"


def test_a_cluster_names_gavels_types_or_classes_and_builds_nodes_of_the_rest() -> None:
    spec = cluster("v100:16,p100:12,ascend-910b:3")
    assert spec == (("nvidia-h100", 16), ("nvidia-a100", 12), ("ascend-910b", 3))
    config = Config(cluster=spec, devices_per_node=8)
    nodes = fleet(config).nodes.values()
    assert sorted(sum(n.allocatable.values()) for n in nodes) == [3, 4, 8, 8, 8]
    assert config.devices == 31 and config.largest_gang == 16
    for bad in ("v100:16,v100:8", "h200:8", "v100:x", ""):
        with pytest.raises(TraceError, match="--cluster"):
            cluster(bad)


def test_gavels_slice_keeps_jobs_that_run_everywhere_and_are_not_too_long_from_zero() -> None:
    jobs = load_trace(DATA / "philly-6214e9.trace", TABLE)
    cut = gavel_slice(jobs, 300)
    assert len(cut) == 300 and cut[0].arrival_s == 0
    assert all(len(j.classes) == 3 and j.total_steps / j.rate(REFERENCE) <= 1e4 * 60 for j in cut)
    kept = {j.id for j in cut}
    skipped = [j for j in jobs if j.id < max(kept) and j.id not in kept]
    assert skipped and all(len(j.classes) < 3 or not measured_everywhere(j)
                           or j.total_steps / j.rate(REFERENCE) > 1e4 * 60 for j in skipped)


def test_gavels_slice_keeps_only_jobs_gavels_simulator_can_run() -> None:
    """Gavel's simulator reads a job's throughput at its own scale, `('job type', scale)`, and stops at a scale
    it never measured: the replay's interpolation must not let such a job into the slice both tools run."""
    jobs = load_trace(DATA / "philly-6214e9.trace", TABLE)
    cut = gavel_slice(jobs, 300)
    assert all(j.gpus in j.rates and all(j.rates[j.gpus].get(c, 0) > 0 for c in CLASSES) for j in cut)
    interpolated = [j for j in jobs[:max(j.id for j in cut)] if len(j.classes) == 3 and j.gpus not in j.rates]
    assert interpolated and not {j.id for j in interpolated} & {j.id for j in cut}
    assert sum(j.gpus > 1 for j in cut) == 13  # the slice Gavel's simulator ran (issue 43): 287 1-GPU jobs


def test_a_replay_without_failures_on_a_cluster_finishes_every_job() -> None:
    jobs = gavel_slice(load_trace(DATA / "philly-6214e9.trace", TABLE), 20)
    report = replay(jobs, "heterojob", Config(cluster=cluster("v100:8,p100:8,k80:8"), mtbf_h=float("inf"),
                                              arrival_scale=0.1))
    assert report.jobs == 20 and report.failures == 0


def test_the_cli_replays_gavels_slice_on_a_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--trace", str(DATA / "philly-6214e9.trace"), "--gavel-slice", "15", "--cluster",
                     "v100:8,p100:8,k80:8", "--mtbf-hours", "inf", "--policy", "heterojob"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["devices"] == 24 and out["heterojob"]["failures"] == 0 and "15 jobs" in out["trace"]
    with pytest.raises(SystemExit):
        cli.main(["--cluster", "v100:8,a100"])


def test_the_slice_written_in_gavels_layout_replays_as_the_slice(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """`--write-trace`: the file Gavel's simulator runs (its parse_trace unpacks 10 tab-separated fields of every
    line: int total_steps and scale_factor, float weight, SLO and arrival) holds the slice the replay runs."""
    path = tmp_path / "slice.trace"
    argv = ["--trace", str(DATA / "philly-6214e9.trace"), "--gavel-slice", "12", "--cluster", "v100:8,p100:8,k80:8",
            "--mtbf-hours", "inf", "--policy", "heterojob"]
    assert cli.main([*argv, "--arrival-scale", "0.25", "--write-trace", str(path)]) == 0
    sliced = json.loads(capsys.readouterr().out)["heterojob"]
    jobs = gavel_slice(load_trace(DATA / "philly-6214e9.trace", TABLE), 12)
    lines = path.read_text().splitlines()
    assert len(lines) == 12
    for line, job in zip(lines, jobs):
        (job_type, _command, _directory, _steps_arg, needs_data, steps, scale, weight, slo,
         arrival) = line.split("\t")
        assert (job_type, int(steps), int(scale), bool(int(needs_data))) == (job.job_type, job.total_steps,
                                                                           job.gpus, False)
        assert (float(weight), float(slo), float(arrival)) == (1.0, -1.0, job.arrival_s * 0.25)
    assert cli.main(["--trace", str(path), *argv[4:], "--arrival-scale", "1"]) == 0
    again = json.loads(capsys.readouterr().out)["heterojob"]
    assert again["avg_jct_h"] == sliced["avg_jct_h"] and again["makespan_h"] == sliced["makespan_h"]


def test_a_written_trace_keeps_priority_levels_and_whole_steps(tmp_path: Path) -> None:
    jobs = gavel_slice(load_trace(DATA / "philly-6214e9.trace", TABLE), 3)
    jobs = [replace(jobs[0], priority=1, total_steps=1234.6), *jobs[1:]]
    path = tmp_path / "t.trace"
    write_gavel_trace(jobs, path)
    back = read_trace(path, TABLE)
    assert [j.priority for j in back.jobs] == [1, 0, 0] and back.priority_weights == (1.0, 2.0)
    assert back.jobs[0].total_steps == 1235 and [j.arrival_s for j in back.jobs] == [j.arrival_s for j in jobs]
    with pytest.raises(TraceError, match="job_type"):
        write_gavel_trace([replace(jobs[0], job_type="a\tb")], path)
