"""The trace replay: deterministic, both policies finish every job, heterojob never loses more than a
checkpoint interval per failure and beats strict FIFO on a loaded fleet."""

from __future__ import annotations

from pathlib import Path

from heterojob.sim.replay import Config, load_trace, replay

DATA = Path(__file__).resolve().parents[1] / "data" / "gavel"  # vendored, MIT (data/gavel/LICENSE)


def jobs(limit: int = 120):  # type: ignore[no-untyped-def]
    return load_trace(DATA / "philly-6214e9.trace", DATA / "isolated_throughputs.csv", seed=3, limit=limit)


def test_same_seed_same_numbers_and_every_job_finishes() -> None:
    trace = jobs()
    config = Config(nodes_per_class_region=2, arrival_scale=0.05, mtbf_h=2000, seed=9)
    a, b = replay(trace, "heterojob", config), replay(trace, "heterojob", config)
    assert a.summary() == b.summary() and a.jobs == len(trace)
    assert replay(trace, "static", config).jobs == len(trace)


def test_failures_lose_at_most_one_checkpoint_interval_and_heterojob_beats_fifo() -> None:
    trace = jobs()
    config = Config(nodes_per_class_region=2, arrival_scale=0.05, mtbf_h=2000, seed=9)
    static, ours = replay(trace, "static", config), replay(trace, "heterojob", config)
    assert ours.failures > 0 and ours.restarts > 0
    interval = config.checkpoint_s + config.save_s
    assert ours.max_lost_per_failure_s <= interval and static.max_lost_per_failure_s <= interval
    assert ours.avg_jct_h < static.avg_jct_h and ours.makespan_h <= static.makespan_h


def test_the_cli_prints_both_policies_and_writes_the_html_report(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "heterojob", "sim", "replay", "--limit", "40",
                          "--html", str(tmp_path / "r.html")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(result) == {"trace", "static", "heterojob"}
    assert {"utilization", "avg_jct_h", "p99_jct_h", "makespan_h", "lost_device_h"} <= set(result["static"])
    assert "Job completion time CDF" in (tmp_path / "r.html").read_text()
