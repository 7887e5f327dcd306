"""Pipeline step: the periodic re-read of Alertmanager's active alerts, as a plan (pure).

Alertmanager sends a resolve once (`send_resolved`); a lost POST would leave a firing alert held for ever (a
node with a dead device, or an overheating one, kept free of new work). Every `--alertmanager-sync` seconds the
active alerts are read again (alerts/restore.py) and compared with the firing alerts the receiver holds:

- held, and its fingerprint not listed active: resolve it (a resolved notification is made from the held
  alert, `endsAt` = now), unless its firing was heard after the read began (the list may predate it) or the
  answer had an entry that could not be read with that fingerprint, or one with none at all (missing data is
  never a resolve);
- listed active and not held in that episode: take it, as the restore at start takes it.

An alert silenced or inhibited is not listed (the query leaves those out, as at start): it counts as not firing.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from heterojob.alerts.payload import Alert


@dataclass(frozen=True)
class Held:
    """A firing alert the handler took, and when (monotonic seconds)."""

    alert: Alert
    heard_at: float


@dataclass(frozen=True)
class AlertSyncPlan:
    resolve: list[Alert] = field(default_factory=list)  # resolved notifications to hand in
    take: list[Alert] = field(default_factory=list)  # active alerts not held in that episode
    kept: list[str] = field(default_factory=list)  # fingerprints not listed yet kept held (and why, in the log)


def plan(held: Mapping[str, Held], active: Sequence[Alert], unreadable: Collection[str], began: float,
         now: datetime) -> AlertSyncPlan:
    """What to resolve and take, given the held firing alerts, the alerts listed active, the fingerprints of the
    entries that could not be read ("": an entry without one), when the read began (monotonic) and the time."""
    listed = {a.fingerprint: a for a in active}
    out = AlertSyncPlan()
    blind = "" in unreadable  # an unreadable entry that names no fingerprint may be any held alert
    ends = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    for fingerprint, h in held.items():
        if fingerprint in listed:
            continue
        if blind or fingerprint in unreadable or h.heard_at >= began:
            out.kept.append(fingerprint)
            continue
        out.resolve.append(h.alert.model_copy(update={"status": "resolved", "ends_at": ends}))
    for fingerprint, alert in listed.items():
        was = held.get(fingerprint)
        if was is None or was.alert.starts_at != alert.starts_at:
            out.take.append(alert)
    return out
