"""README's main command keeps working: the demo starts everything, runs jobs and serves the console."""

from __future__ import annotations

import json
import subprocess
import sys


def test_demo_smoke_runs_jobs_and_serves_the_console(tmp_path: object) -> None:
    proc = subprocess.run([sys.executable, "-m", "heterojob", "demo", "--smoke", "--smoke-seconds", "8",
                           "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(result) == {"jobs_submitted", "jobs_running", "jobs_with_utilization", "migrations", "console_status"}
    assert result["jobs_submitted"] >= 3
    assert result["jobs_running"] >= 3
    assert result["console_status"] == 200
