"""HeteroQuota: how many devices of each class a namespace may hold, per region."""

from __future__ import annotations

from pydantic import Field, field_validator

from heterojob.api.common import DNS_LABEL, Model, PrinterColumn, ResourceDef, StatusModel

WILDCARD = "*"
_NAME_OR_WILDCARD = rf"^(\*|{DNS_LABEL[1:-1]})$"


class QuotaLimit(Model):
    """At most `devices` devices of a class in a region, summed over the namespace's jobs. '*' as the class
    counts accelerators only: a CPU class (resourceName cpu) counts cores, which are not added to devices, and
    is limited only by a limit naming it."""

    device_class: str = Field(pattern=_NAME_OR_WILDCARD, max_length=63, description=(
        "an AcceleratorClass, or '*' for every accelerator class (a CPU class is counted only by a limit "
        "naming it)"))
    region: str = Field(WILDCARD, pattern=_NAME_OR_WILDCARD, max_length=63, description="a Region or '*'")
    devices: int = Field(ge=0, le=1_000_000, description="the most devices (CPU classes: cores) at once")


class HeteroQuotaSpec(Model):
    """Device limits of the namespace; every limit that covers a placement must have room for it."""

    limits: list[QuotaLimit] = Field(default_factory=list, max_length=256,
                                     description="limits per class and region ('*' for any)")

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
    """Devices of one class in one region the namespace holds."""

    device_class: str = Field(description="the AcceleratorClass")
    region: str = Field(description="the Region")
    devices: int = Field(description="devices held")


class HeteroQuotaStatus(StatusModel):
    """What the namespace holds under the limits (written by the operator)."""

    used: list[QuotaUse] = Field(default_factory=list, description="devices the namespace holds, per class and region")
    summary: str | None = Field(None, description="used/limit per limit, e.g. 'nvidia-h100/*: 8/16'")
    message: str | None = Field(None, description="why the spec is invalid, naming the field and the fix")


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
        PrinterColumn("Used/Limit", "string", ".status.summary", "devices used/limit, per class/region limit"),
        PrinterColumn("Message", "string", ".status.message", priority=1),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
    ),
)
