"""Region: a place where part of the fleet runs, with where it is on the map and how it links to others."""

from __future__ import annotations

from pydantic import AnyHttpUrl, Field

from heterojob.api.common import DNS_LABEL, Model, PrinterColumn, ResourceDef, StatusModel


class Location(Model):
    """Where the region is on the map."""

    city: str = Field(min_length=1, max_length=100, description="a city near the data centre")
    latitude: float = Field(ge=-90, le=90, description="degrees north")
    longitude: float = Field(ge=-180, le=180, description="degrees east")


class RegionLink(Model):
    """The network between this region and another."""

    region: str = Field(pattern=DNS_LABEL, max_length=63, description="the other Region")
    bandwidth_gbps: float = Field(gt=0, le=100000, description="bandwidth, Gbit/s")
    latency_ms: float = Field(ge=0, le=10000, description="round-trip latency, ms")


class SecretKeyRef(Model):
    """A key of a Secret in the manager cluster."""

    namespace: str = Field("heterojob-members", pattern=DNS_LABEL, max_length=63,
                           description="the Secret's namespace (the operator may read Secrets only in "
                                       "heterojob-members)")
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=253, description="the Secret")
    key: str = Field("kubeconfig", pattern=r"^[-._a-zA-Z0-9]+$", max_length=253,
                     description="the key holding the kubeconfig")


class MemberCluster(Model):
    """The member cluster that runs this region's pods (docs/multicluster.md)."""

    secret_ref: SecretKeyRef = Field(description="the Secret holding the member's kubeconfig")
    loss_timeout_seconds: int | None = Field(
        None, ge=10, le=86400,
        description="unreachable this long: its jobs are re-placed elsewhere; default: the operator's")


class RegionSpec(Model):
    """Where the region is, which nodes belong to it and where its telemetry is."""

    display_name: str | None = Field(None, max_length=100, description="name shown in the console")
    location: Location = Field(description="where it is on the map")
    node_selector: dict[str, str] | None = Field(
        None, description="labels of this region's nodes; defaults to topology.kubernetes.io/region=<name>")
    prometheus_url: AnyHttpUrl | None = Field(None, alias="prometheusURL",
                                              description="this region's Prometheus; default: the operator's")
    links: list[RegionLink] = Field(default_factory=list, max_length=64, description="links to other regions")
    cluster: MemberCluster | None = Field(
        None, description="a member cluster runs this region's pods; unset: the operator's own cluster")


class RegionCondition(StatusModel):
    """A Kubernetes-style condition."""

    type: str = Field(description="MemberReachable")
    status: str = Field(description="True, False or Unknown")
    reason: str = Field("", description="a CamelCase reason (Reachable, SecretNotFound, Unreachable, ...)")
    message: str = Field("", description="what is wrong and how to fix it; never the kubeconfig")
    last_transition_time: str | None = Field(None, description="when status last changed")


class RegionStatus(StatusModel):
    """What the fleet has in this region."""

    nodes: int | None = Field(None, description="nodes in the region")
    devices: int | None = Field(None, description="accelerators in the region")
    conditions: list[RegionCondition] = Field(default_factory=list,
                                              description="MemberReachable for a member cluster's region")
    last_contact: str | None = Field(None, description="when the member cluster last answered")


Region = ResourceDef(
    kind="Region",
    plural="regions",
    singular="region",
    namespaced=False,
    spec=RegionSpec,
    status=RegionStatus,
    short_names=("hjr",),
    description="A region of the fleet: location for the map, node selector, optional Prometheus, links, "
                "optional member cluster.",
    printer_columns=(
        PrinterColumn("City", "string", ".spec.location.city"),
        PrinterColumn("Member Contact", "date", ".status.lastContact", priority=1),
        PrinterColumn("Latitude", "number", ".spec.location.latitude", priority=1),
        PrinterColumn("Longitude", "number", ".spec.location.longitude", priority=1),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
    ),
)
