"""The canonical device model every exporter family is translated into, and its health classification.

Pure: no Prometheus client here. Missing telemetry is never a fault: a value that is absent, NaN or not
a number becomes None, and a device with no health signal at all is UNKNOWN, not FAILED.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

# docs/telemetry.md, section 1 (NVSentinel mapping, k8s-device-plugin health.go).
DEFAULT_FATAL_XIDS: frozenset[int] = frozenset(
    {46, 48, 62, 64, 74, 79, 95, 110, 119, 120, 136, 140, 143, 144, 145, 146, 147, 148, 149, 150,
     155, 156, 158, 160})
APPLICATION_XIDS: frozenset[int] = frozenset({13, 31, 43, 45, 68, 109})
ASCEND_HEALTHY, ASCEND_UNHEALTHY = 1, 0  # anything else (-1, 2147483647) is unknown


class Health(StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    FAILED = "failed"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class HealthPolicy:
    fatal_xids: frozenset[int] = DEFAULT_FATAL_XIDS
    overheat_celsius: float = 90.0


@dataclass(frozen=True)
class DeviceSample:
    device_id: str  # GPU UUID, or "<node>/npu-<id>" for Ascend (chip ids repeat across nodes)
    node: str
    family: str  # exporter family: dcgm, npu-exporter, ...
    model: str = ""
    index: str = ""
    utilization: float | None = None  # percent
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    health: Health = Health.UNKNOWN
    reason: str = ""
    last_error: str = ""
    namespace: str | None = None
    pod: str | None = None
    region: str | None = None  # joined from the Node
    device_class: str | None = None  # joined from the Node
    notes: tuple[str, ...] = field(default=())


def number(value: Any) -> float | None:
    """A Prometheus sample value ("12.5", "NaN", "+Inf", garbage) as a finite float, or None."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def classify_gpu(xid: float | None, temperature: float | None, policy: HealthPolicy) -> tuple[Health, str, str]:
    """(health, reason, last_error) of an NVIDIA GPU from its last XID and temperature."""
    code = int(xid) if xid is not None else None
    if code and code in policy.fatal_xids:
        return Health.FAILED, f"fatal XID {code}", f"XID {code}"
    last_error = f"XID {code}" if code else ""
    if temperature is not None and temperature >= policy.overheat_celsius:
        return Health.DEGRADED, f"overheat {temperature:.0f}°C >= {policy.overheat_celsius:.0f}°C", last_error
    if code is None and temperature is None:
        return Health.UNKNOWN, "no health signal", ""
    if code:
        kind = "application XID" if code in APPLICATION_XIDS else "non-fatal XID"
        return Health.HEALTHY, f"{kind} {code} (no action)", last_error
    return Health.HEALTHY, "", ""


def classify_npu(status: float | None, temperature: float | None, policy: HealthPolicy
                 ) -> tuple[Health, str, str]:
    """(health, reason, last_error) of an Ascend NPU from npu_chip_info_health_status and temperature."""
    if status is not None and int(status) == ASCEND_UNHEALTHY:
        return Health.FAILED, "NPU health status 0 (unhealthy)", "npu unhealthy"
    if temperature is not None and temperature >= policy.overheat_celsius:
        return Health.DEGRADED, f"overheat {temperature:.0f}°C >= {policy.overheat_celsius:.0f}°C", ""
    if status is None or int(status) != ASCEND_HEALTHY:
        shown = "absent" if status is None else f"{int(status)}"
        return Health.UNKNOWN, f"NPU health status {shown} (unknown)", ""
    return Health.HEALTHY, "", ""


def vanished(previous: dict[str, DeviceSample], current: list[DeviceSample]) -> list[DeviceSample]:
    """Devices seen in the previous snapshot and missing from this one.

    A device whose series vanished while its node's exporter still reports its other devices has
    fallen off the bus: FAILED. When the whole node went silent, the exporter (or Prometheus' scrape)
    is down: UNKNOWN, never a fault.
    """
    present = {s.device_id for s in current}
    reporting = {s.node for s in current}
    out = []
    for device_id, before in sorted(previous.items()):
        if device_id in present:
            continue
        if before.node in reporting:
            out.append(DeviceSample(device_id, before.node, before.family, before.model, before.index,
                                    health=Health.FAILED, reason="series vanished (device fell off the bus?)",
                                    last_error="series vanished", namespace=before.namespace, pod=before.pod))
        else:
            out.append(DeviceSample(device_id, before.node, before.family, before.model, before.index,
                                    health=Health.UNKNOWN, reason="exporter not reporting",
                                    namespace=before.namespace, pod=before.pod))
    return out
