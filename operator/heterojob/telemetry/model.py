"""The canonical device model every exporter family is translated into, and its health classification.

Pure: no Prometheus client here. Missing telemetry is never a fault: a value that is absent, NaN or not
a number becomes None, and a device with no health signal at all is UNKNOWN, not FAILED.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
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


# npu-exporter's "not collected" values (docs/telemetry.md): -1 (RetError), 2147483647 (MaxInt32, unknown
# health since 2025), 4294967295 (MaxUint32, UnRetError). None of them is a reading.
ASCEND_SENTINELS: frozenset[float] = frozenset({-1.0, 2147483647.0, 4294967295.0})
# npu-exporter >= 2024 puts this in namespace/pod_name/container_name when one chip serves several pods.
SHARED_POD = "not_displayed_for_multi_pod"


@dataclass(frozen=True)
class HealthPolicy:
    fatal_xids: frozenset[int] = DEFAULT_FATAL_XIDS
    overheat_celsius: float = 90.0
    # DCGM_FI_DEV_XID_ERRORS keeps the last XID until the exporter restarts: a fatal XID fails the GPU for
    # this long after heterojob first saw it, then (no newer XID) the GPU counts as recovered. Not used
    # when DCGM_EXP_XID_ERRORS_COUNT is enabled: that metric forgets by itself.
    xid_hold_s: float = 600.0


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
    xid: int | None = None  # DCGM_FI_DEV_XID_ERRORS: the code of the last XID (0 none)
    xid_since: float | None = None  # when heterojob first saw this XID value (unix s)
    xid_counts: tuple[tuple[int, float], ...] = ()  # DCGM_EXP_XID_ERRORS_COUNT (xid, count) when enabled
    observed_at: float | None = None  # the query's evaluation time (unix s)
    shared: bool = False  # one chip serving several pods (npu-exporter not_displayed_for_multi_pod)
    # why the chip's network cannot carry a collective ("" none or unknown): a fault for multi-replica jobs only
    network_fault: str = ""


def number(value: Any) -> float | None:
    """A Prometheus sample value ("12.5", "NaN", "+Inf", garbage) as a finite float, or None."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def classify_gpu(xid: float | None, temperature: float | None, policy: HealthPolicy,
                 xid_age_s: float | None = None, xid_counts: tuple[tuple[int, float], ...] = (),
                 live: bool = True) -> tuple[Health, str, str]:
    """(health, reason, last_error) of an NVIDIA GPU from its last XID and temperature.

    `xid_age_s`: how long the same last XID has been seen; past `policy.xid_hold_s` a fatal one is taken
    as recovered (the exporter never clears it). `xid_counts`: DCGM_EXP_XID_ERRORS_COUNT per XID over its
    window; when given it decides instead of the sticky last value. `live`: the GPU reports some reading
    (utilization, temperature, memory or power). Without one, only its XID series is left: a fatal XID then
    fails it however old (it never came back: fell off the bus), anything else says nothing (UNKNOWN).
    """
    if not live:
        return _xid_only(xid, policy, xid_counts)
    code = int(xid) if xid is not None else None
    if xid_counts:
        recent = sorted(c for c, n in xid_counts if n and n > 0)
        fatal = [c for c in recent if c in policy.fatal_xids]
        if fatal:
            return Health.FAILED, f"fatal XID {fatal[-1]} (DCGM_EXP_XID_ERRORS_COUNT)", f"XID {fatal[-1]}"
        if not recent:
            last_error = f"XID {code}" if code else ""
            if temperature is not None and temperature >= policy.overheat_celsius:
                return Health.DEGRADED, f"overheat {temperature:.0f}°C >= {policy.overheat_celsius:.0f}°C", last_error
            return Health.HEALTHY, (f"no XID in DCGM_EXP_XID_ERRORS_COUNT's window (last XID {code})" if code
                                    else ""), last_error
        code = recent[-1]
    elif code and code in policy.fatal_xids:
        if xid_age_s is None or xid_age_s < policy.xid_hold_s:
            return Health.FAILED, f"fatal XID {code}", f"XID {code}"
        last_error = f"XID {code}"
        if temperature is not None and temperature >= policy.overheat_celsius:
            return Health.DEGRADED, f"overheat {temperature:.0f}°C >= {policy.overheat_celsius:.0f}°C", last_error
        return (Health.HEALTHY, f"recovered: last XID {code} is {xid_age_s:.0f}s old, no newer XID", last_error)
    last_error = f"XID {code}" if code else ""
    if temperature is not None and temperature >= policy.overheat_celsius:
        return Health.DEGRADED, f"overheat {temperature:.0f}°C >= {policy.overheat_celsius:.0f}°C", last_error
    if code is None and temperature is None:
        return Health.UNKNOWN, "no health signal", ""
    if code:
        kind = "application XID" if code in APPLICATION_XIDS else "non-fatal XID"
        return Health.HEALTHY, f"{kind} {code} (no action)", last_error
    return Health.HEALTHY, "", ""


def _xid_only(xid: float | None, policy: HealthPolicy, xid_counts: tuple[tuple[int, float], ...]
              ) -> tuple[Health, str, str]:
    """A GPU with nothing but its XID series (no utilization, temperature, memory or power)."""
    recent = sorted(c for c, n in xid_counts if n and n > 0)
    fatal = [c for c in recent if c in policy.fatal_xids]
    if fatal:
        return (Health.FAILED, f"fatal XID {fatal[-1]} (DCGM_EXP_XID_ERRORS_COUNT); no other series",
                f"XID {fatal[-1]}")
    code = int(xid) if xid is not None else (recent[-1] if recent else None)
    if code and code in policy.fatal_xids:
        return (Health.FAILED, f"fatal XID {code}; no other series (the GPU reports nothing else: fell off the bus?)",
                f"XID {code}")
    return Health.UNKNOWN, f"no reading, only its XID series (last XID {code or 0}: no fault)", \
        f"XID {code}" if code else ""


def classify_npu(status: float | None, temperature: float | None, policy: HealthPolicy
                 ) -> tuple[Health, str, str]:
    """(health, reason, last_error) of an Ascend NPU from npu_chip_info_health_status and temperature.

    `status` is the window's max_over_time: 0 only when the chip said unhealthy in every sample of the
    window, so the single 0 older exporters emit on a failed query is not a fault."""
    if status is not None and int(status) == ASCEND_UNHEALTHY:
        return Health.FAILED, "NPU health status 0 (unhealthy)", "npu unhealthy"
    if temperature is not None and temperature >= policy.overheat_celsius:
        return Health.DEGRADED, f"overheat {temperature:.0f}°C >= {policy.overheat_celsius:.0f}°C", ""
    if status is None or int(status) != ASCEND_HEALTHY:
        shown = "absent" if status is None else f"{int(status)}"
        return Health.UNKNOWN, f"NPU health status {shown} (unknown)", ""
    return Health.HEALTHY, "", ""


def classify_npu_network(network: float | None, link: float | None) -> str:
    """Why an Ascend chip's own network is down, or "" (up, or nothing says).

    `network` is npu_chip_info_network_status, `link` npu_chip_info_link_status, each the window's max: 0 only
    when every sample said so. npu-exporter (mind-cluster 2026-08, collector_for_npu.go getNetworkHealthy and
    collector_for_network.go getLinkStatusCode): network 1 when the driver's network health code is 0 (success)
    or 6 (init), 0 for any other code; link 1 for `hccn_tool -i <chip> -link -g` "UP", 0 for anything else
    ("DOWN"); 2147483647 when the query failed (unknown, as is anything else here)."""
    out = []
    if network is not None and int(network) == ASCEND_UNHEALTHY:
        out.append("NPU network health status 0 (unhealthy)")
    if link is not None and int(link) == ASCEND_UNHEALTHY:
        out.append("NPU link status 0 (down)")
    return "; ".join(out)


def settle_xid(sample: DeviceSample, before: DeviceSample | None, policy: HealthPolicy) -> DeviceSample:
    """A GPU sample with its last XID dated by the previous snapshot, health classified again with that age.

    The exporter repeats the last XID until it restarts, so the age is how long heterojob has seen this same
    value (from the first cycle that saw it; after an operator restart the clock starts again). A changed
    value is a new XID, and its own age starts now.
    """
    if sample.family != "dcgm" or not sample.xid or sample.xid_counts:
        return sample
    since = sample.observed_at
    if before is not None and before.xid == sample.xid and before.xid_since is not None:
        since = before.xid_since
    age = sample.observed_at - since if sample.observed_at is not None and since is not None else None
    health, reason, error = classify_gpu(sample.xid, sample.temperature_c, policy, age, live=live(sample))
    return replace(sample, xid_since=since, health=health, reason=reason, last_error=error)


def live(sample: DeviceSample) -> bool:
    """Whether a device reports any reading (utilization, memory, temperature, power), not only fault series."""
    return any(v is not None for v in (sample.utilization, sample.memory_used_mib, sample.temperature_c,
                                       sample.power_w))


def vanished(previous: dict[str, DeviceSample], current: list[DeviceSample]) -> list[DeviceSample]:
    """Devices seen in the previous snapshot and missing from this one.

    A device whose series vanished while its node's exporter still reports its other devices has
    fallen off the bus: FAILED. When the whole node went silent, the exporter (or Prometheus' scrape)
    is down: UNKNOWN, never a fault.
    """
    present = {s.device_id for s in current}
    reporting = {s.node for s in current}
    out = []
    for device_id, before in sorted(item for item in previous.items() if item[0] not in present):
        if before.node in reporting:
            out.append(DeviceSample(device_id, before.node, before.family, before.model, before.index,
                                    health=Health.FAILED, reason="series vanished (device fell off the bus?)",
                                    last_error="series vanished", namespace=before.namespace, pod=before.pod))
        else:
            out.append(DeviceSample(device_id, before.node, before.family, before.model, before.index,
                                    health=Health.UNKNOWN, reason="exporter not reporting",
                                    namespace=before.namespace, pod=before.pod))
    return out
