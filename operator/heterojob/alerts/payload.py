"""Alertmanager's webhook payload (version 4; docs/telemetry.md section 6), validated.

Unknown fields are accepted (newer Alertmanagers add `notification_reason`); what we rely on is checked
and a problem names its field path, so a 400 tells the sender what to fix.

`startsAt` is kept to the millisecond: the webhook writes Go's RFC 3339 with nanoseconds, Alertmanager's API v2
(`GET /api/v2/alerts`, read back at start by `alerts.restore`) the same instant truncated to milliseconds
(go-openapi strfmt; seen with Alertmanager 0.25: `...00.123456789+08:00` vs `...00.123+08:00`), and both must
name the same firing episode.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, field_validator

ZERO_TIME = "0001-01-01T00:00:00Z"  # endsAt while an alert fires


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Alert(_Open):
    status: Literal["firing", "resolved"]
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    # Alertmanager always writes an offset; one without (another sender) could not be ordered against those
    starts_at: AwareDatetime = Field(alias="startsAt")
    ends_at: str | None = Field(None, alias="endsAt")
    generator_url: str | None = Field(None, alias="generatorURL")
    fingerprint: str = Field(min_length=1, max_length=128)

    @field_validator("starts_at")
    @classmethod
    def _milliseconds(cls, value: datetime) -> datetime:
        return value.replace(microsecond=value.microsecond // 1000 * 1000)  # truncated, as Go's formatting does

    @property
    def name(self) -> str:
        return self.labels.get("alertname", "")

    @property
    def key(self) -> tuple[str, str]:
        """One firing episode of one alert: Alertmanager re-sends it on every group interval."""
        return self.fingerprint, self.starts_at.isoformat()


class Notification(_Open):
    version: str
    group_key: str = Field(alias="groupKey")
    truncated_alerts: int = Field(0, alias="truncatedAlerts", ge=0)
    status: Literal["firing", "resolved"]
    receiver: str = ""
    group_labels: dict[str, str] = Field(default_factory=dict, alias="groupLabels")
    common_labels: dict[str, str] = Field(default_factory=dict, alias="commonLabels")
    common_annotations: dict[str, str] = Field(default_factory=dict, alias="commonAnnotations")
    external_url: str = Field("", alias="externalURL")
    alerts: list[Alert] = Field(max_length=10_000)


class PayloadError(ValueError):
    """The body can never be accepted (answer 4xx: Alertmanager does not retry those)."""


def parse(data: object) -> Notification:
    if not isinstance(data, dict):
        raise PayloadError("the body must be a JSON object (Alertmanager webhook, version 4)")
    try:
        note = Notification.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors()[:5]:
            where = ".".join(str(p) for p in err["loc"]) or "(body)"
            problems.append(f"{where}: {err['msg']}")
        raise PayloadError("; ".join(problems)) from None
    if note.version != "4":
        raise PayloadError(f"version: {note.version!r} is not supported (send Alertmanager's webhook version 4)")
    return note
