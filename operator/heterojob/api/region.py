"""Region: a place where part of the fleet runs, with where it is on the map and how it links to others."""

from __future__ import annotations

from pydantic import AnyHttpUrl, Field

from heterojob.api.common import DNS_LABEL, Model, PrinterColumn, ResourceDef, StatusModel


class Location(Model):
    city: str = Field(min_length=1, max_length=100)
    latitude: float = Field(ge=-90, le=90)
    longitude: float = Field(ge=-180, le=180)


class RegionLink(Model):
    region: str = Field(pattern=DNS_LABEL, max_length=63)
    bandwidth_gbps: float = Field(gt=0, le=100000)
    latency_ms: float = Field(ge=0, le=10000)


class RegionSpec(Model):
    display_name: str | None = Field(None, max_length=100)
    location: Location
    node_selector: dict[str, str] | None = Field(
        None, description="labels of this region's nodes; defaults to topology.kubernetes.io/region=<name>")
    prometheus_url: AnyHttpUrl | None = Field(None, alias="prometheusURL")
    links: list[RegionLink] = Field(default_factory=list, max_length=64)


class RegionStatus(StatusModel):
    nodes: int | None = None
    devices: int | None = None


Region = ResourceDef(
    kind="Region",
    plural="regions",
    singular="region",
    namespaced=False,
    spec=RegionSpec,
    status=RegionStatus,
    short_names=("hjr",),
    description="A region of the fleet: location for the map, node selector, optional Prometheus, links.",
    printer_columns=(
        PrinterColumn("City", "string", ".spec.location.city"),
        PrinterColumn("Latitude", "number", ".spec.location.latitude", priority=1),
        PrinterColumn("Longitude", "number", ".spec.location.longitude", priority=1),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
    ),
)
