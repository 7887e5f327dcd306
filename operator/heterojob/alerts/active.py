"""Alertmanager's list of active alerts (API v2, `GET /api/v2/alerts`), validated and turned into the alerts
its webhook would send (pure).

Shape (api/v2/openapi.yaml, `gettableAlerts`; checked against Alertmanager 0.25.0, Debian's package): a JSON
array of `{labels, annotations, startsAt, endsAt, updatedAt, fingerprint, receivers: [{name}],
status: {state: unprocessed|active|suppressed, silencedBy: [], inhibitedBy: []}, generatorURL?}`; newer
versions add `status.mutedBy` (time intervals). Unlike the webhook there is no firing/resolved `status`
(the API lists no alert whose `endsAt` has passed: all are firing), `endsAt` is the time Alertmanager would
resolve it (not the webhook's zero time while firing), times are in milliseconds and an empty `generatorURL`
is left out. The same label set has the same `fingerprint` in both.

An alert silenced, inhibited or muted is one the webhook does not send: skipped (the query asks Alertmanager
to leave those out already; an older or newer one may not). An entry that is not a valid alert is skipped
with its index and the field at fault; the others are still taken.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import AwareDatetime, Field, ValidationError

from heterojob.alerts.payload import ZERO_TIME, Alert, _Open

# what the operator asks for: firing alerts the webhook would deliver
QUERY = {"active": "true", "silenced": "false", "inhibited": "false"}
PATH = "/api/v2/alerts"


class _State(_Open):
    state: Literal["unprocessed", "active", "suppressed"]
    silenced_by: list[str] = Field(default_factory=list, alias="silencedBy")
    inhibited_by: list[str] = Field(default_factory=list, alias="inhibitedBy")
    muted_by: list[str] = Field(default_factory=list, alias="mutedBy")


class ActiveAlert(_Open):
    """One `gettableAlert`; fields the operator does not use (updatedAt, receivers) are not checked."""

    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    starts_at: AwareDatetime = Field(alias="startsAt")
    fingerprint: str = Field(min_length=1, max_length=128)
    status: _State
    generator_url: str | None = Field(None, alias="generatorURL")


@dataclass(frozen=True)
class Skipped:
    index: int
    fingerprint: str  # "" when the entry has none
    reason: str
    suppressed: bool = False  # a valid alert the webhook would not send (silenced, inhibited, muted)

    def __str__(self) -> str:
        return f"[{self.index}]" + (f" ({self.fingerprint})" if self.fingerprint else "") + f": {self.reason}"


class ActiveError(ValueError):
    """The answer as a whole is not Alertmanager's list of alerts."""


def _suppressed(status: _State) -> str | None:
    for why, ids in (("silenced by", status.silenced_by), ("inhibited by", status.inhibited_by),
                     ("muted by", status.muted_by)):
        if ids:
            return f"{why} {', '.join(ids[:3])}: the webhook does not send it"
    if status.state == "suppressed":
        return "suppressed: the webhook does not send it"
    return None


def firing(data: object) -> tuple[list[Alert], list[Skipped]]:
    """The alerts the webhook would send for `data` (the decoded answer), and what was skipped and why."""
    if not isinstance(data, list):
        raise ActiveError(f"expected a JSON array of alerts (Alertmanager API v2 {PATH}), got "
                          f"{type(data).__name__}")
    alerts: list[Alert] = []
    skipped: list[Skipped] = []
    for i, entry in enumerate(data):
        fingerprint = entry.get("fingerprint") if isinstance(entry, dict) else None
        fingerprint = fingerprint if isinstance(fingerprint, str) else ""
        try:
            active = ActiveAlert.model_validate(entry)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "(entry)"
            skipped.append(Skipped(i, fingerprint[:128], f"{where}: {err['msg']}"))
            continue
        why = _suppressed(active.status)
        if why is not None:
            skipped.append(Skipped(i, active.fingerprint, why, suppressed=True))
            continue
        alerts.append(Alert(status="firing", labels=active.labels, annotations=active.annotations,
                            starts_at=active.starts_at, ends_at=ZERO_TIME, generator_url=active.generator_url or "",
                            fingerprint=active.fingerprint))
    return alerts, skipped
