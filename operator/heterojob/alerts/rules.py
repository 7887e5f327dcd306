"""The alert rules heterojob ships, in one place: rendered to a plain Prometheus rules file and to a
PrometheusRule (prometheus-operator) by `heterojob generate`. Metric and label names are the exporters'
(docs/telemetry.md). Each alert keeps the device, node and pod labels the receiver maps to
jobs, and `heterojob_action` says what to do (the operator's --alert-action table can override it)."""

from __future__ import annotations

from typing import Any

from heterojob.telemetry.model import DEFAULT_FATAL_XIDS

GROUP = "heterojob.devices"


XID_FRESH = "10m"  # DCGM_FI_DEV_XID_ERRORS keeps its last value until the exporter restarts (docs/telemetry.md)


def fatal_xid_expr() -> str:
    """The last XID is one of the fatal set (application XIDs such as 13 are not: they are the job's bug) and
    was not already fatal XID_FRESH ago. The gauge is sticky (it keeps the last XID until the exporter
    restarts), so without that the alert would never resolve once the GPU was reset and kept running. Since
    dcgm-exporter 3.3.6 a new XID is a new series (its err_code/err_msg labels), so "changed" is "absent or
    not fatal then", not `changes()`."""
    def fatal(offset: str = "") -> str:
        return " or ".join(f"DCGM_FI_DEV_XID_ERRORS{offset} == {code}" for code in sorted(DEFAULT_FATAL_XIDS))
    return f"({fatal()}) unless ({fatal(f' offset {XID_FRESH}')})"


def rules(durations: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Alerting rules; `durations` overrides their `for:` (the end-to-end test runs in seconds)."""
    d = {"xid": "0s", "npu": "30s", "overheat": "2m", "vanished": "2m", "exporter": "5m", "idle": "30m",
         **(durations or {})}
    # the relabelled node first, then the exporter's Hostname/hostname (not concatenated: "g0g0")
    node = ("{{ with $labels.node }}{{ . }}{{ else }}{{ with $labels.Hostname }}{{ . }}{{ else }}"
            "{{ $labels.hostname }}{{ end }}{{ end }}")
    return [
        {"alert": "HeteroJobGPUFatalXID", "expr": fatal_xid_expr(), "for": d["xid"],
         "labels": {"severity": "critical"},
         "annotations": {"summary": f"GPU {{{{ $labels.UUID }}}} on {node}: fatal XID {{{{ $value }}}}",
                         "heterojob_action": "migrate-now"}},
        {"alert": "HeteroJobNPUUnhealthy", "expr": "npu_chip_info_health_status == 0", "for": d["npu"],
         "labels": {"severity": "critical"},
         "annotations": {"summary": f"Ascend NPU {{{{ $labels.id }}}} on {node} unhealthy",
                         "heterojob_action": "migrate-now"}},
        {"alert": "HeteroJobGPUOverheat", "expr": "DCGM_FI_DEV_GPU_TEMP > 90 or npu_chip_info_temperature > 90",
         "for": d["overheat"], "labels": {"severity": "warning"},
         "annotations": {"summary": f"device on {node} at {{{{ $value }}}}°C", "heterojob_action": "migrate"}},
        {"alert": "HeteroJobDeviceVanished",
         "expr": "(count by (node) (DCGM_FI_DEV_GPU_UTIL offset 10m) > count by (node) (DCGM_FI_DEV_GPU_UTIL)) "
                 "and on (node) up == 1",
         "for": d["vanished"], "labels": {"severity": "critical"},
         "annotations": {"summary": "{{ $labels.node }}: a GPU's series vanished while its exporter answers",
                         "heterojob_action": "migrate-now"}},
        {"alert": "HeteroJobExporterDown", "expr": 'up{job=~"dcgm-exporter|npu-exporter"} == 0',
         "for": d["exporter"], "labels": {"severity": "warning"},
         "annotations": {"summary": "{{ $labels.node }}: exporter down (telemetry missing, not a fault)",
                         "heterojob_action": "ignore"}},
        {"alert": "HeteroJobLowUtilization",
         "expr": 'avg by (namespace, pod) (avg_over_time(DCGM_FI_DEV_GPU_UTIL{pod!=""}[30m])) < 10',
         "for": d["idle"], "labels": {"severity": "info"},
         "annotations": {"summary": "{{ $labels.namespace }}/{{ $labels.pod }} under 10% for 30 minutes",
                         "heterojob_action": "ignore"}},
    ]


def rules_file(durations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"groups": [{"name": GROUP, "rules": rules(durations)}]}


def prometheus_rule() -> dict[str, Any]:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "heterojob", "namespace": "heterojob-system",
                         "labels": {"app.kubernetes.io/name": "heterojob"}},
            "spec": rules_file()}


def alertmanager_receiver(url: str = "http://heterojob-operator.heterojob-system.svc:8080/alerts",
                          token_file: str = "/etc/alertmanager/secrets/heterojob/token") -> dict[str, Any]:
    """The receiver and route to add to alertmanager.yml (the token from a mounted Secret)."""
    return {
        "route": {"routes": [{"receiver": "heterojob", "matchers": ['alertname=~"HeteroJob.*"'],
                              "group_by": ["alertname", "node", "Hostname", "hostname"], "group_wait": "10s",
                              "group_interval": "1m", "repeat_interval": "4h", "continue": True}]},
        "receivers": [{"name": "heterojob", "webhook_configs": [{
            "url": url, "send_resolved": True, "max_alerts": 200,
            "http_config": {"authorization": {"type": "Bearer", "credentials_file": token_file}}}]}],
    }
