"""What a job's telemetry writes into its status: utilization and four conditions.

Pure (time is an argument). A write happens only when something a person would notice changed:
a condition, a straggler, or a utilization figure by at least `UTIL_STEP` points. Partial data becomes
`TelemetryDegraded True` only once it has lasted `SETTLE_S`: a gang's pods start and stop one by one, and the
exporters report a pod from their next scrape, so a job's first and last cycles are often partial. Until
then the condition is `Unknown` (`Settling`), never a false `True`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from heterojob.api.conditions import same, set_condition
from heterojob.telemetry.model import Health
from heterojob.telemetry.snapshot import Availability, JobTelemetry

UTIL_STEP = 1.0
SETTLE_S = 30.0
TELEMETRY_UNAVAILABLE = "TelemetryUnavailable"
TELEMETRY_DEGRADED = "TelemetryDegraded"
DEVICES_HEALTHY = "DevicesHealthy"
STRAGGLER = "Straggler"


def _seconds(since: Any, now: str) -> float:
    """Seconds from the ISO time `since` to `now`; unreadable times count as long ago (no endless settling)."""
    try:
        return (datetime.fromisoformat(now.replace("Z", "+00:00"))
                - datetime.fromisoformat(str(since).replace("Z", "+00:00"))).total_seconds()
    except ValueError:
        return float("inf")


def conditions(current: Sequence[Mapping[str, Any]], t: JobTelemetry, now: str, settle_s: float = SETTLE_S
               ) -> list[dict[str, Any]]:
    out = [dict(c) for c in current]
    unavailable = t.availability == Availability.UNAVAILABLE
    if unavailable:
        reason = "NoSeries" if t.no_series else "PrometheusUnavailable"
        out = set_condition(out, TELEMETRY_UNAVAILABLE, "True", reason,
                            f"{t.message}; no action is taken on missing data", now)
    else:
        out = set_condition(out, TELEMETRY_UNAVAILABLE, "False", "Reporting", t.message, now)
    if t.availability == Availability.DEGRADED:
        before = next((c for c in current if c.get("type") == TELEMETRY_DEGRADED), None) or {}
        if before.get("status") == "True" or (
                before.get("status") == "Unknown" and _seconds(before.get("lastTransitionTime"), now) >= settle_s):
            out = set_condition(out, TELEMETRY_DEGRADED, "True", "PartialData", t.message, now)
        else:
            out = set_condition(out, TELEMETRY_DEGRADED, "Unknown", "Settling",
                                f"{t.message} (for less than {settle_s:.0f}s: pods starting or stopping?)", now)
    else:
        out = set_condition(out, TELEMETRY_DEGRADED, "False", "Reporting" if not unavailable else "NoData", "", now)
    missing_settled = t.seen < t.expected and any(
        c.get("type") == TELEMETRY_DEGRADED and c.get("status") == "True" for c in out)
    if unavailable:
        out = set_condition(out, DEVICES_HEALTHY, "Unknown", "NoTelemetry", t.message, now)
    elif t.unhealthy:
        failed = any(d.health == Health.FAILED for _, d in t.unhealthy)
        message = "; ".join(f"rank {rank}: {d.device_id} on {d.node}: {d.reason}" for rank, d in t.unhealthy)
        out = set_condition(out, DEVICES_HEALTHY, "False", "DeviceFailed" if failed else "DeviceDegraded",
                            message, now)
    elif t.unknown or missing_settled:  # no fault seen, but not every device says it is healthy: not "healthy"
        # (a device never reported at all, e.g. of a pod placed on a node whose exporter is down, counts too,
        # once the gap has outlasted pods starting one by one: TelemetryDegraded True)
        said = []
        if t.unknown:
            reasons = sorted({d.reason or "no health signal" for _, d in t.unknown})
            said.append(f"{len(t.unknown)} of {t.seen} devices: health unknown ({'; '.join(reasons[:3])})")
        if missing_settled:
            said.append(f"{t.expected - t.seen} of {t.expected} devices not reported")
        out = set_condition(out, DEVICES_HEALTHY, "Unknown", "HealthUnknown",
                            f"{'; '.join(said)}; no action is taken on missing data", now)
    elif t.seen < t.expected and any(c.get("type") == DEVICES_HEALTHY for c in out):
        pass  # a gap still settling says nothing new about health: the condition stays as it was
    else:
        out = set_condition(out, DEVICES_HEALTHY, "True", "Healthy", f"{t.seen} devices healthy", now)
    if t.stragglers:
        out = set_condition(out, STRAGGLER, "True", "ReplicaBehind", t.straggler_message, now)
    else:
        out = set_condition(out, STRAGGLER, "False", "Even" if not unavailable else "NoData", "", now)
    return out


def utilization(t: JobTelemetry, now: str) -> dict[str, Any]:
    return {"average": t.average, "perReplica": list(t.per_replica), "stragglers": list(t.stragglers),
            "time": now}


def _moved(old: Any, new: Any) -> bool:
    if old is None or new is None:
        return old is not new
    return abs(float(old) - float(new)) >= UTIL_STEP


def patch(current_utilization: Mapping[str, Any] | None, current_conditions: Sequence[Mapping[str, Any]],
          t: JobTelemetry, now: str) -> dict[str, Any] | None:
    """The status merge patch for this cycle, or None when nothing worth a write changed."""
    out: dict[str, Any] = {}
    wanted = conditions(current_conditions, t, now)
    if not same(wanted, current_conditions):
        out["conditions"] = wanted
    # unavailable (Prometheus down, or no series for the job's pods: an exporter down since before this
    # operator started looks exactly like that): the last figures stay, stale, beside TelemetryUnavailable.
    # Missing data never wipes a figure; `controller/status.py` removes it when the job stops holding devices.
    if t.availability != Availability.UNAVAILABLE:
        old = current_utilization or {}
        new = utilization(t, now)
        old_per = list(old.get("perReplica") or [])
        if (_moved(old.get("average"), new["average"]) or len(old_per) != len(new["perReplica"])
                or any(_moved(a, b) for a, b in zip(old_per, new["perReplica"], strict=False))
                or list(old.get("stragglers") or []) != new["stragglers"]):
            out["utilization"] = new
    return out or None
