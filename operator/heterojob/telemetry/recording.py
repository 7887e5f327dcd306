"""Optional recording rules for the aggregate read (`telemetry.digest`): Prometheus' rule manager evaluates the
per-pod figures and the fault flags once per interval, and the operator reads the recorded series instead of
computing them in its own queries (a few series per pod and per anomaly, not every device's).

Step of the pipeline: configuration beside `telemetry.digest` (what it reads when a source has them). The
rules are the digest's own PromQL (`pods_query`, the FAULTS of `flags_query`), so the figures are the same with or
without them; a third rule says for which window and hot threshold they were written (`digest.recorded`). The
shipped file, manifests/telemetry/heterojob-recording-rules.yaml, is `rules_file()` (`heterojob generate`
is not needed: tests/unit/test_telemetry_recording.py checks it is current).
"""

from __future__ import annotations

from typing import Any

from heterojob.telemetry import digest
from heterojob.telemetry.model import HealthPolicy

WINDOW_S = 60  # the operator's default --telemetry-window
INTERVAL = "15s"  # the operator's default --telemetry-interval: a recorded figure is at most this old


def rules_file(window_s: int = WINDOW_S, hot_celsius: float = HealthPolicy().overheat_celsius,
               interval: str = INTERVAL) -> dict[str, Any]:
    """A Prometheus rule file (`rule_files`) recording the aggregate read's figures for `window_s` and `hot_celsius`
    (the operator's --telemetry-window and --overheat-celsius; a job calling cooler devices hot is still read right:
    the operator asks that part itself)."""
    window = {digest.WINDOW_LABEL: str(window_s)}  # on every recorded series: rules for two windows stay apart
    labels = {**window, digest.HOT_LABEL: f"{hot_celsius:g}"}
    return {"groups": [{"name": "heterojob.telemetry", "interval": interval, "rules": [
        {"record": digest.PODS_RECORD, "expr": digest.pods_query(window_s), "labels": window},
        {"record": digest.FLAGS_RECORD,
         "expr": digest.flags_query(window_s, hot_celsius, only=digest.FAULTS), "labels": labels},
        {"record": digest.RULES_RECORD, "expr": "vector(1)", "labels": labels},
    ]}]}
