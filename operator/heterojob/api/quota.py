"""HeteroQuota: how many devices of each class a namespace may hold, per region."""

from __future__ import annotations

from pydantic import Field, field_validator

from heterojob.api.common import DNS_LABEL, Model, PrinterColumn, ResourceDef, StatusModel

WILDCARD = "*"
_NAME_OR_WILDCARD = rf"^(\*|{DNS_LABEL[1:-1]})$"


class QuotaLimit(Model):
    device_class: str = Field(pattern=_NAME_OR_WILDCARD, max_length=63, description="an AcceleratorClass or '*'")
    region: str = Field(WILDCARD, pattern=_NAME_OR_WILDCARD, max_length=63, description="a Region or '*'")
    devices: int = Field(ge=0, le=1_000_000)


class HeteroQuotaSpec(Model):
    limits: list[QuotaLimit] = Field(default_factory=list, max_length=256)

    @field_validator("limits")
    @classmethod
    def _distinct(cls, limits: list[QuotaLimit]) -> list[QuotaLimit]:
        seen: set[tuple[str, str]] = set()
        for limit in limits:
            key = (limit.device_class, limit.region)
            if key in seen:
                raise ValueError(f"two limits for deviceClass={key[0]!r} region={key[1]!r}; keep one")
            seen.add(key)
        return limits


class QuotaUse(StatusModel):
    device_class: str
    region: str
    devices: int


class HeteroQuotaStatus(StatusModel):
    used: list[QuotaUse] = Field(default_factory=list)
    message: str | None = None


HeteroQuota = ResourceDef(
    kind="HeteroQuota",
    plural="heteroquotas",
    singular="heteroquota",
    namespaced=True,
    spec=HeteroQuotaSpec,
    status=HeteroQuotaStatus,
    short_names=("hq",),
    description="Device limits of a namespace per accelerator class and region ('*' for any).",
    printer_columns=(
        PrinterColumn("Limits", "string", ".spec.limits[*].devices", priority=1),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
    ),
)
