"""The chaos benchmark in small (20 events): it runs end to end against the real operator process and the
API emulator, prints the JSON the issue names, and every invariant holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(150),
              pytest.mark.skipif(os.environ.get("HETEROJOB_SKIP_E2E") == "1", reason="HETEROJOB_SKIP_E2E=1")]
ROOT = Path(__file__).resolve().parents[2]
KEYS = {"events", "stranded", "left_on_failed_device_s_max", "partial_gangs", "lost_requests", "ledger_mismatches",
        "hot_loops", "wall_s"}


def test_twenty_chaos_events_break_no_invariant(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "operator"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-m", "bench.chaos", "--events", "20", "--seed", "3",
                          "--workdir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, env=env, timeout=140)
    assert out.stdout.strip(), out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert KEYS <= set(result), result
    violations = [line for line in out.stderr.splitlines() if line.startswith("VIOLATION")]
    assert result["events"] == 20, result
    counts = {k: result[k] for k in ("stranded", "partial_gangs", "lost_requests", "ledger_mismatches", "hot_loops")}
    if any(counts.values()) or result["left_on_failed_device_s_max"] > 30:
        pytest.fail(f"{counts}, left_on_failed_device_s_max={result['left_on_failed_device_s_max']}:\n"
                    + "\n".join(violations), pytrace=False)
    assert result["allocation_start"] >= 0.9, result
    assert out.returncode == 0, out.stderr[-3000:]
