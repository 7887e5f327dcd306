"""The shipped recording rules file is `telemetry.recording.rules_file()` as it is now, and Prometheus' own checker
accepts it (promtool, when installed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from heterojob.telemetry import digest
from heterojob.telemetry.recording import rules_file

SHIPPED = Path(__file__).resolve().parents[2] / "manifests" / "telemetry" / "heterojob-recording-rules.yaml"


def test_the_shipped_rules_are_the_generated_ones() -> None:
    assert yaml.safe_load(SHIPPED.read_text()) == rules_file()
    records = [r["record"] for g in rules_file()["groups"] for r in g["rules"]]
    assert records == [digest.PODS_RECORD, digest.FLAGS_RECORD, digest.RULES_RECORD]
    info = rules_file(30, 85.0)["groups"][0]["rules"][2]["labels"]
    assert digest.recorded([{"metric": info, "value": [0, "1"]}]) == digest.Recorded(30, 85.0)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_accepts_the_shipped_rules() -> None:
    done = subprocess.run(["promtool", "check", "rules", str(SHIPPED)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
