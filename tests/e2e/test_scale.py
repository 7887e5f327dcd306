"""The scale benchmark in small (`bench/scale.py --quick`, shortened further): it runs end to end against the
operator as its own process, with the emulator, kubelet and prober in theirs, and prints every figure issue 35
names with sane values (the targets are the full run's, not asserted here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.scale, pytest.mark.timeout(900),
              pytest.mark.skipif(os.environ.get("HETEROJOB_SKIP_E2E") == "1", reason="HETEROJOB_SKIP_E2E=1")]
ROOT = Path(__file__).resolve().parents[2]
FIGURES = ("cycle_cpu_s_p95", "admit_free_p95_s", "fault_to_pods_p95_s", "idle_writes_per_s", "operator_rss_mb",
           "probe_p99_s", "wall_s")


def test_quick_scale_run_reports_every_figure(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "operator"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "bench.scale", "--quick", "--admit-probes", "3",
                          "--fault-probes", "2", "--idle-seconds", "10", "--probe-timeout", "45",
                          "--cycle-window-max", "15", "--workdir", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, env=env, timeout=860)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    for key in FIGURES:
        assert isinstance(result.get(key), int | float), (key, result)
    assert set(result["targets"]) == set(FIGURES) - {"wall_s"}
    assert set(result["met"]) == set(result["targets"])
    assert all(isinstance(v, bool) for v in result["met"].values())
    # the scene was the one asked for: the fleet full, the backlog waiting, the operator alive throughout
    assert result["devices"] == 2000 and result["fill_placed"] == result["fill_jobs"], result
    assert result["waiting"] >= 140 and result["operator_alive"], result
    assert result["cycle_cpu_source"] in ("metric", "window")
    # sane: figures of one run of this size, whatever the operator's speed
    assert 0 < result["admit_free_p95_s"] <= 45 and 0 < result["fault_to_pods_p95_s"] <= 45, result
    assert 0 <= result["cycle_cpu_s_p95"] < 120 and 0 <= result["idle_writes_per_s"] < 100, result
    assert 20 < result["operator_rss_mb"] < 4000, result
    assert 0 < result["probe_p99_s"] <= 5.0 and result["probe_count"] >= 30, result
    assert 0 < result["wall_s"] < 860
