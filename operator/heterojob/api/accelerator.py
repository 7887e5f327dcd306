"""AcceleratorClass: one kind of device the fleet offers, how to find it and what software it runs."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, Field

from heterojob.api.common import Model, PrinterColumn, ResourceDef, StatusModel
from heterojob.api.names import LABEL_KEY, LABEL_KEY_MAX, label_key_problem


def _resource_name(name: str) -> str:
    """A resource name is a qualified name, as kube-apiserver checks it (lengths included)."""
    if problem := label_key_problem(name):
        raise ValueError(f"not a resource name: {problem}")
    return name


class Vendor(StrEnum):
    """Who makes the device: nvidia, huawei, amd, cambricon, hygon or cpu."""

    NVIDIA = "nvidia"
    HUAWEI = "huawei"
    AMD = "amd"
    CAMBRICON = "cambricon"
    HYGON = "hygon"
    CPU = "cpu"


class ExporterFamily(StrEnum):
    """Which exporter reports this class's devices (docs/telemetry.md)."""

    DCGM = "dcgm"
    NPU_EXPORTER = "npu-exporter"
    AMD = "amd-device-metrics"
    CAMBRICON = "mlu-exporter"
    HYGON = "dcu-exporter"
    NONE = "none"


class SoftwareStack(Model):
    """Software versions the class's nodes run (jobs' `requires` are compared with these)."""

    driver: str | None = Field(None, description="driver version, e.g. 550.54.15")
    cuda: str | None = Field(None, description="CUDA runtime version, e.g. 12.4")
    cann: str | None = Field(None, description="CANN version, e.g. 8.0.RC3")


class AcceleratorClassSpec(Model):
    """How to find this class's devices and what they run."""

    vendor: Vendor = Field(description="nvidia, huawei, amd, cambricon, hygon or cpu")
    resource_name: Annotated[str, AfterValidator(_resource_name)] = Field(
        min_length=1, max_length=LABEL_KEY_MAX, pattern=f"^{LABEL_KEY}$",
        description="extended resource, e.g. nvidia.com/gpu or huawei.com/Ascend910; 'cpu' counts cores",
    )
    node_selector: dict[str, str] = Field(default_factory=dict, description="labels a node of this class carries")
    exporter: ExporterFamily = Field(ExporterFamily.NONE, description="the exporter reporting this class's devices")
    throughput: float = Field(1.0, gt=0, le=1000, description="relative training throughput (H100 = 1.0)")
    memory_gib: float | None = Field(None, gt=0, le=4096, alias="memoryGiB", description="device memory, GiB")
    software: SoftwareStack = Field(default_factory=SoftwareStack, description="driver, CUDA and CANN versions")
    display_name: str | None = Field(None, description="name shown in the console, e.g. NVIDIA H100 80GB")


class VersionRange(StatusModel):
    """The oldest and newest version of one piece of software across the class's nodes."""

    oldest: str = Field(description="oldest version a node of the class publishes")
    newest: str = Field(description="newest version a node of the class publishes")
    nodes: int = Field(description="nodes that publish a version")


class ObservedSoftware(StatusModel):
    """Software versions read from the class's nodes' labels (GPU Feature Discovery, the Ascend device plugin)."""

    driver: VersionRange | None = Field(None, description="driver versions on its nodes")
    cuda: VersionRange | None = Field(None, description="CUDA runtime versions on its nodes")
    cann: VersionRange | None = Field(None, description="CANN versions on its nodes (label heterojob.io/cann.version)")


class AcceleratorClassStatus(StatusModel):
    """What the fleet has of this class (written by the operator's discovery step)."""

    devices: int | None = Field(None, description="devices of this class")
    nodes: int | None = Field(None, description="nodes of this class")
    software: ObservedSoftware | None = Field(None, description="observed software range across its nodes")


AcceleratorClass = ResourceDef(
    kind="AcceleratorClass",
    plural="acceleratorclasses",
    singular="acceleratorclass",
    namespaced=False,
    spec=AcceleratorClassSpec,
    status=AcceleratorClassStatus,
    short_names=("acc",),
    description="A kind of accelerator in the fleet: vendor, extended resource, node labels, software stack.",
    printer_columns=(
        PrinterColumn("Vendor", "string", ".spec.vendor"),
        PrinterColumn("Resource", "string", ".spec.resourceName"),
        PrinterColumn("Throughput", "number", ".spec.throughput"),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp"),
    ),
)
