"""The Grafana dashboard for the operator's own metrics and the fleet's utilization (generated to
manifests/grafana/heterojob-dashboard.json by `heterojob generate`; import it in Grafana)."""

from __future__ import annotations

from typing import Any

from heterojob.alerts.rules import fatal_xid_expr
from heterojob.telemetry.labels import NODE_LABEL, with_node_label


def per_gpu(expr: str) -> str:
    """One series per GPU (by UUID, `uuid` with --use-old-namespace), however many exporters report it."""
    return f'max by (UUID, GPU_I_ID) (label_replace({expr}, "UUID", "$1", "uuid", "(.+)"))'


def per_npu(expr: str) -> str:
    """One series per NPU (by its node and chip id), however many exporters report it."""
    return f"max by (id, {NODE_LABEL}) ({with_node_label(expr)})"


PANELS: list[tuple[str, str, str]] = [  # (title, PromQL, unit)
    ("GPU utilization by node", "avg by (node) (DCGM_FI_DEV_GPU_UTIL)", "percent"),
    ("NPU utilization by node", "avg by (node) (npu_chip_info_utilization)", "percent"),
    ("Devices with a fatal XID", f"count({per_gpu(fatal_xid_expr())}) or vector(0)", "short"),
    ("NPUs unhealthy", f"count({per_npu('npu_chip_info_health_status == 0')}) or vector(0)", "short"),
    ("Alerts received /s", "sum by (status) (rate(heterojob_alerts_received_total[5m]))", "ops"),
    ("Alerts de-duplicated and unmatched /s",
     "rate(heterojob_alerts_deduplicated_total[5m]) or rate(heterojob_alerts_unmatched_total[5m])", "ops"),
    ("Webhook requests refused /s", "sum by (code) (rate(heterojob_alert_requests_rejected_total[5m]))", "ops"),
    ("Migrations and resizes by trigger (1h)", "sum by (action, trigger) (increase(heterojob_migrations_total[1h]))",
     "short"),
    ("Preemptions (1h)", "increase(heterojob_preemptions_total[1h])", "short"),
    ("Reconcile time p95", "histogram_quantile(0.95, sum by (le) (rate(heterojob_decision_seconds_bucket[5m])))",
     "s"),
    ("Alert queue", "heterojob_alert_queue_length", "short"),
]


def dashboard() -> dict[str, Any]:
    panels = []
    for i, (title, expr, unit) in enumerate(PANELS):
        panels.append({
            "id": i + 1, "title": title, "type": "timeseries", "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "targets": [{"refId": "A", "expr": expr, "legendFormat": "__auto"}],
        })
    return {
        "title": "heterojob", "uid": "heterojob", "schemaVersion": 39, "version": 1, "editable": True,
        "time": {"from": "now-6h", "to": "now"}, "refresh": "30s", "tags": ["heterojob", "gpu", "npu"],
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus"}]},
        "panels": panels,
    }
