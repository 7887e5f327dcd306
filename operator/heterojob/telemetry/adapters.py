"""One adapter per exporter family: the fleet-wide PromQL it needs, and how its results become samples.

An adapter asks a fixed set of fleet-wide queries whatever the number of jobs or devices: one per
windowed role (avg_over_time / min_over_time, so one noisy scrape does not trigger anything) and one
for all its instant roles together (`{__name__=~"A|B"}`, split again by metric name). Results are
Prometheus instant vectors: `[{"metric": {labels}, "value": [ts, "str"]}, ...]`. AMD, Cambricon and Hygon
plug in as further `Adapter` subclasses (metric names in shared/reference/telemetry.md, section 3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from heterojob.telemetry.model import DeviceSample, HealthPolicy, classify_gpu, classify_npu, number

Vector = Sequence[Mapping[str, Any]]


@dataclass
class ParseReport:
    """What was wrong with the data, for the TelemetryDegraded condition (never an action)."""

    missing_labels: int = 0
    duplicates: int = 0
    bad_values: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def degraded(self) -> bool:
        return bool(self.missing_labels or self.duplicates or self.bad_values)


INSTANT = "instant"  # the query name under which an adapter's instant roles come back together


class Adapter:
    family: ClassVar[str]
    # role -> (metric, window function or "" for the instant value)
    metrics: ClassVar[dict[str, tuple[str, str]]]

    def queries(self, window_s: int) -> dict[str, str]:
        """Query name -> PromQL: one per windowed role, plus one for every instant role."""
        out = {}
        instant = []
        for role, (metric, fn) in self.metrics.items():
            if fn:
                out[role] = f"{fn}({metric}[{window_s}s])"
            else:
                instant.append(metric)
        if instant:
            out[INSTANT] = f'{{__name__=~"{"|".join(instant)}"}}'
        return out

    def split(self, results: Mapping[str, Vector]) -> dict[str, Vector]:
        """Results by query name -> results by role (the instant query is split by metric name)."""
        out: dict[str, list[Mapping[str, Any]]] = {role: list(v or ()) for role, v in results.items()
                                                   if role != INSTANT}
        role_of = {metric: role for role, (metric, fn) in self.metrics.items() if not fn}
        for series in results.get(INSTANT) or ():
            role = role_of.get((series.get("metric") or {}).get("__name__", ""))
            if role is not None:
                out.setdefault(role, []).append(series)
        return out

    def key(self, labels: Mapping[str, str]) -> tuple[str, str] | None:
        """(device id, node) of a series, or None when the labels do not identify a device."""
        raise NotImplementedError

    def sample(self, device_id: str, node: str, labels: Mapping[str, str], values: Mapping[str, float | None],
               policy: HealthPolicy) -> DeviceSample:
        raise NotImplementedError

    def parse(self, results: Mapping[str, Vector], policy: HealthPolicy, report: ParseReport | None = None
              ) -> list[DeviceSample]:
        report = report if report is not None else ParseReport()
        results = self.split(results)
        labels_of: dict[str, Mapping[str, str]] = {}
        node_of: dict[str, str] = {}
        values: dict[str, dict[str, float | None]] = {}
        for role, vector in results.items():
            seen: set[str] = set()
            for series in vector or ():
                labels = series.get("metric") or {}
                key = self.key(labels)
                if key is None:
                    report.missing_labels += 1
                    continue
                device, node = key
                if device in seen:
                    report.duplicates += 1
                    continue
                seen.add(device)
                raw = (series.get("value") or [None, None])[1]
                value = number(raw)
                if value is None and raw is not None:
                    report.bad_values += 1
                labels_of.setdefault(device, labels)
                node_of.setdefault(device, node)
                values.setdefault(device, {})[role] = value
        return [self.sample(d, node_of[d], labels_of[d], values[d], policy) for d in sorted(values)]


def _first(labels: Mapping[str, str], *names: str) -> str:
    for name in names:
        value = labels.get(name)
        if value:
            return value
    return ""


def node_of_series(labels: Mapping[str, str]) -> str:
    """The node of a series: an explicit label, else the scrape target's host."""
    node = _first(labels, "Hostname", "hostname", "node", "kubernetes_node", "node_name")
    if not node and labels.get("instance"):
        node = labels["instance"].rsplit(":", 1)[0]
    return node


class DcgmAdapter(Adapter):
    """NVIDIA dcgm-exporter. `Hostname` became `hostname` after 4.5.3-4.8.2: both are read."""

    family = "dcgm"
    metrics = {
        "util": ("DCGM_FI_DEV_GPU_UTIL", "avg_over_time"),
        "temp": ("DCGM_FI_DEV_GPU_TEMP", "min_over_time"),  # held for the window: hysteresis on overheat
        "fb_used": ("DCGM_FI_DEV_FB_USED", ""),
        "fb_free": ("DCGM_FI_DEV_FB_FREE", ""),
        "power": ("DCGM_FI_DEV_POWER_USAGE", ""),
        "xid": ("DCGM_FI_DEV_XID_ERRORS", ""),  # the code of the last XID, not a count
    }

    def key(self, labels: Mapping[str, str]) -> tuple[str, str] | None:
        node = node_of_series(labels)
        uuid = _first(labels, "UUID", "uuid")
        if not uuid:
            gpu = labels.get("gpu")
            uuid = f"{node}/gpu-{gpu}" if node and gpu is not None else ""
        return (uuid, node) if uuid and node else None

    def sample(self, device_id: str, node: str, labels: Mapping[str, str], values: Mapping[str, float | None],
               policy: HealthPolicy) -> DeviceSample:
        used, free = values.get("fb_used"), values.get("fb_free")
        health, reason, error = classify_gpu(values.get("xid"), values.get("temp"), policy)
        return DeviceSample(
            device_id=device_id, node=node, family=self.family, model=labels.get("modelName", ""),
            index=labels.get("gpu", ""), utilization=values.get("util"), memory_used_mib=used,
            memory_total_mib=(used + free) if used is not None and free is not None else None,
            temperature_c=values.get("temp"), power_w=values.get("power"),
            health=health, reason=reason, last_error=error,
            namespace=_first(labels, "namespace", "pod_namespace") or None,
            pod=_first(labels, "pod", "pod_name") or None,
        )


class AscendAdapter(Adapter):
    """Huawei Ascend npu-exporter. Health 1 healthy, 0 unhealthy, anything else (2147483647) unknown."""

    family = "npu-exporter"
    metrics = {
        "util": ("npu_chip_info_utilization", "avg_over_time"),
        "temp": ("npu_chip_info_temperature", "min_over_time"),
        "health": ("npu_chip_info_health_status", "min_over_time"),  # one 0 in the window: unhealthy
        "hbm_used": ("npu_chip_info_hbm_used_memory", ""),
        "hbm_total": ("npu_chip_info_hbm_total_memory", ""),
        "power": ("npu_chip_info_power", ""),
    }

    def key(self, labels: Mapping[str, str]) -> tuple[str, str] | None:
        node = node_of_series(labels)
        chip = labels.get("id")
        return (f"{node}/npu-{chip}", node) if node and chip is not None and chip != "" else None

    def sample(self, device_id: str, node: str, labels: Mapping[str, str], values: Mapping[str, float | None],
               policy: HealthPolicy) -> DeviceSample:
        health, reason, error = classify_npu(values.get("health"), values.get("temp"), policy)
        return DeviceSample(
            device_id=device_id, node=node, family=self.family, model=labels.get("model_name", ""),
            index=labels.get("id", ""), utilization=values.get("util"), memory_used_mib=values.get("hbm_used"),
            memory_total_mib=values.get("hbm_total"), temperature_c=values.get("temp"),
            power_w=values.get("power"), health=health, reason=reason, last_error=error,
            namespace=labels.get("namespace") or None, pod=labels.get("pod_name") or None,
        )


ADAPTERS: dict[str, Adapter] = {a.family: a for a in (DcgmAdapter(), AscendAdapter())}
