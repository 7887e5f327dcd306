"""One adapter per exporter family: the fleet-wide PromQL it needs, and how its results become samples.

An adapter asks a fixed set of fleet-wide queries whatever the number of jobs or devices: one per
windowed role (avg_over_time / min_over_time, so one noisy scrape does not trigger anything) and one
for all its instant roles together (`{__name__=~"A|B"}`, split again by metric name). Results are
Prometheus instant vectors: `[{"metric": {labels}, "value": [ts, "str"]}, ...]`. AMD, Cambricon and Hygon
plug in as further `Adapter` subclasses (metric names in docs/telemetry.md, section 3).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from heterojob.telemetry.model import DeviceSample, HealthPolicy, classify_gpu, classify_npu, number

Vector = Sequence[Mapping[str, Any]]
Where = tuple[str | None, str | None]  # (region, device class) of a node


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
NODE_LABELS = ("Hostname", "hostname", "node", "kubernetes_node", "node_name", "instance")


class Adapter:
    family: ClassVar[str]
    # role -> (metric, window function or "" for the instant value)
    metrics: ClassVar[dict[str, tuple[str, str]]]
    # The role whose answer keeps every label (node, model, pod, namespace); the others keep only
    # `key_labels`, enough to name the device: on a large fleet this cuts what Prometheus encodes
    # and we decode by four fifths.
    identity: ClassVar[str] = "util"
    key_labels: ClassVar[tuple[str, ...]]
    identity_labels: ClassVar[tuple[str, ...]]  # what `sample` reads: the rest is dropped by Prometheus

    def queries(self, window_s: int) -> dict[str, str]:
        """Query name -> PromQL: one per windowed role, plus one for every instant role."""
        out = {}
        instant = []
        keys = ", ".join(self.key_labels)
        for role, (metric, fn) in self.metrics.items():
            if not fn:
                instant.append(metric)
            elif role == self.identity:
                out[role] = f"max by ({', '.join(self.identity_labels)}) ({fn}({metric}[{window_s}s]))"
            else:
                out[role] = f"max by ({keys}) ({fn}({metric}[{window_s}s]))"
        if instant:
            out[INSTANT] = f'max by (__name__, {keys}) ({{__name__=~"{"|".join(instant)}"}})'
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

    def device_id(self, labels: Mapping[str, str]) -> str | None:
        """The device a series is about, or None when its labels do not say."""
        raise NotImplementedError

    def sample(self, device_id: str, node: str, labels: Mapping[str, str], values: Mapping[str, float | None],
               policy: HealthPolicy, where: Where = (None, None)) -> DeviceSample:
        """The canonical sample; `where` is (region, device class) joined from the Node."""
        raise NotImplementedError

    def parse(self, results: Mapping[str, Vector], policy: HealthPolicy, report: ParseReport | None = None,
              where: Callable[[str], Where] | None = None) -> list[DeviceSample]:
        report = report if report is not None else ParseReport()
        results = self.split(results)
        labels_of: dict[str, Mapping[str, str]] = {}
        node_of: dict[str, str] = {}
        values: dict[str, dict[str, float | None]] = {}
        ordered = sorted(results.items(), key=lambda item: item[0] != self.identity)  # full labels first
        for role, vector in ordered:
            seen: set[str] = set()
            for series in vector or ():
                labels = series.get("metric") or {}
                device = self.device_id(labels)
                if device is None:
                    report.missing_labels += 1
                    continue
                if device in seen:
                    report.duplicates += 1
                    continue
                seen.add(device)
                raw = (series.get("value") or [None, None])[1]
                value = number(raw)
                if value is None and raw is not None:
                    report.bad_values += 1
                labels_of.setdefault(device, labels)
                if device not in node_of and (node := node_of_series(labels)):
                    node_of[device] = node
                values.setdefault(device, {})[role] = value
        nameless = [d for d in values if d not in node_of]
        report.missing_labels += len(nameless)  # no node label in any of its series: cannot place it
        locate = where or (lambda _node: (None, None))
        return [self.sample(d, node_of[d], labels_of[d], values[d], policy, locate(node_of[d]))
                for d in sorted(values) if d in node_of]


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
    key_labels = ("UUID", "uuid")  # dcgm-exporter always sets one of them
    identity_labels = (*key_labels, "gpu", "modelName", *NODE_LABELS, "namespace", "pod", "pod_namespace",
                       "pod_name")
    metrics = {
        "util": ("DCGM_FI_DEV_GPU_UTIL", "avg_over_time"),
        "temp": ("DCGM_FI_DEV_GPU_TEMP", "min_over_time"),  # held for the window: hysteresis on overheat
        "fb_used": ("DCGM_FI_DEV_FB_USED", ""),
        "fb_free": ("DCGM_FI_DEV_FB_FREE", ""),
        "power": ("DCGM_FI_DEV_POWER_USAGE", ""),
        "xid": ("DCGM_FI_DEV_XID_ERRORS", ""),  # the code of the last XID, not a count
    }

    def device_id(self, labels: Mapping[str, str]) -> str | None:
        return _first(labels, "UUID", "uuid") or None

    def sample(self, device_id: str, node: str, labels: Mapping[str, str], values: Mapping[str, float | None],
               policy: HealthPolicy, where: Where = (None, None)) -> DeviceSample:
        used, free = values.get("fb_used"), values.get("fb_free")
        health, reason, error = classify_gpu(values.get("xid"), values.get("temp"), policy)
        return DeviceSample(
            device_id=device_id, node=node, family=self.family, model=labels.get("modelName", ""),
            index=labels.get("gpu", ""), utilization=values.get("util"), memory_used_mib=used,
            memory_total_mib=(used + free) if used is not None and free is not None else None,
            temperature_c=values.get("temp"), power_w=values.get("power"),
            health=health, reason=reason, last_error=error,
            namespace=_first(labels, "namespace", "pod_namespace") or None,
            pod=_first(labels, "pod", "pod_name") or None, region=where[0], device_class=where[1],
        )


class AscendAdapter(Adapter):
    """Huawei Ascend npu-exporter. Health 1 healthy, 0 unhealthy, anything else (2147483647) unknown."""

    family = "npu-exporter"
    key_labels = ("id", *NODE_LABELS)  # chip ids repeat on every node
    identity_labels = (*key_labels, "model_name", "namespace", "pod_name")
    metrics = {
        "util": ("npu_chip_info_utilization", "avg_over_time"),
        "temp": ("npu_chip_info_temperature", "min_over_time"),
        "health": ("npu_chip_info_health_status", "min_over_time"),  # one 0 in the window: unhealthy
        "hbm_used": ("npu_chip_info_hbm_used_memory", ""),
        "hbm_total": ("npu_chip_info_hbm_total_memory", ""),
        "power": ("npu_chip_info_power", ""),
    }

    def device_id(self, labels: Mapping[str, str]) -> str | None:
        node = node_of_series(labels)
        chip = labels.get("id")
        return f"{node}/npu-{chip}" if node and chip else None

    def sample(self, device_id: str, node: str, labels: Mapping[str, str], values: Mapping[str, float | None],
               policy: HealthPolicy, where: Where = (None, None)) -> DeviceSample:
        health, reason, error = classify_npu(values.get("health"), values.get("temp"), policy)
        return DeviceSample(
            device_id=device_id, node=node, family=self.family, model=labels.get("model_name", ""),
            index=labels.get("id", ""), utilization=values.get("util"), memory_used_mib=values.get("hbm_used"),
            memory_total_mib=values.get("hbm_total"), temperature_c=values.get("temp"),
            power_w=values.get("power"), health=health, reason=reason, last_error=error,
            namespace=labels.get("namespace") or None, pod=labels.get("pod_name") or None,
            region=where[0], device_class=where[1],
        )


ADAPTERS: dict[str, Adapter] = {a.family: a for a in (DcgmAdapter(), AscendAdapter())}
