"""README's main command keeps working: the demo starts everything, runs jobs, moves the job whose GPU it
breaks (a fatal XID, about a third of the way in), and serves the console."""

from __future__ import annotations

import json
import subprocess
import sys


def test_demo_smoke_runs_jobs_and_serves_the_console(tmp_path: object) -> None:
    proc = subprocess.run([sys.executable, "-m", "heterojob", "demo", "--smoke", "--workdir", str(tmp_path)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(result) == {"jobs_submitted", "jobs_running", "jobs_with_utilization", "migrations", "console_status",
                           "telemetry_degraded"}
    assert result["jobs_submitted"] >= 3
    assert result["jobs_running"] >= 3
    assert result["migrations"] >= 1, proc.stderr[-2000:]
    assert result["console_status"] == 200
    assert "injected fatal-xid on" in proc.stderr
    # the realistic exporter mix with pod churn: no "N duplicate series", no unresolved host labels
    assert not [m for m in result["telemetry_degraded"] if "duplicate" in m or "name no Node" in m], result


def test_inject_without_a_running_demo_says_what_to_do(tmp_path: object) -> None:
    proc = subprocess.run([sys.executable, "-m", "heterojob", "demo", "inject", "fatal-xid", "n1",
                           "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "no running demo found" in proc.stderr and "heterojob demo" in proc.stderr
