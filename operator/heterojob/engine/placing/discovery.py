"""Compute discovery (pure): what a Node's labels and extended resources say about its accelerators.

Step of the pipeline: `kube.convert.node_view` calls `node_software` (per-node facts for placement's
software filter); `controller.discovery` calls `devices`, `proposals` and `observed_software` to write
the discovery report and each AcceleratorClass's observed software range.

What real clusters publish (names checked against each project's own code; docs/telemetry.md section 4):
- NVIDIA GPU Feature Discovery (NVIDIA/k8s-device-plugin internal/lm/nvml.go, docs/gpu-feature-discovery):
  `nvidia.com/gpu.product` (NVML name, spaces as dashes, `-SHARED` when time-sliced; under the MIG
  `single` strategy the MIG profile is appended, e.g. `A100-SXM4-40GB-MIG-1g.5gb`), `nvidia.com/gpu.memory`
  (MiB), `nvidia.com/gpu.count`, `nvidia.com/cuda.driver-version.full` (`550.54.15`) and
  `nvidia.com/cuda.runtime-version.full` (`12.4`), with the deprecated `nvidia.com/cuda.driver.major|minor|rev`
  and `nvidia.com/cuda.runtime.major|minor` still written; `nvidia.com/mig.strategy` (none|single|mixed),
  and under `mixed` `nvidia.com/mig-<profile>.count|memory` with the resource `nvidia.com/mig-<profile>`.
- Ascend device plugin (Ascend/mind-cluster, 2026): `huawei.com/npu.chip.name`, `huawei.com/npu.chip.memory`,
  `huawei.com/npu.server.type`, `huawei.com/npu.driver.version`, which replace (dual-written for now) the
  older `node.kubernetes.io/npu.chip.name`, `mind-cluster/npu-chip-memory` (`64G`), `servertype`
  (`Ascend910B-20`), `huawei.com/driver.version`; `accelerator=huawei-Ascend910|310|310P|npu`; resources
  `huawei.com/Ascend910` (910, 910B, 910A3), `huawei.com/Ascend310`, `huawei.com/Ascend310P`, `huawei.com/npu`.
  The plugin publishes no CANN version (CANN lives in images and on hosts): heterojob reads
  `heterojob.io/cann.version`, which an admin or an NFD feature file sets.
- Node Feature Discovery (kubernetes-sigs/node-feature-discovery source/custom/static_features.go):
  `feature.node.kubernetes.io/rdma.capable=true` (a Mellanox, PCI vendor 15b3, device is present) and
  `feature.node.kubernetes.io/rdma.available=true` (ib_uverbs and rdma_ucm are loaded); older releases
  named them `custom-rdma.capable` / `custom-rdma.enabled`. PCI: `pci-<class>_<vendor>.present` by default
  (`pci-0207_15b3.present`: a Mellanox InfiniBand controller), `pci-<vendor>.present` when configured so.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from heterojob.engine.basics import versions
from heterojob.engine.capacity.fleet import DeviceClass, Node

SOFTWARE = ("driver", "cuda", "cann")

# NVIDIA GPU Feature Discovery
GPU_PRODUCT = "nvidia.com/gpu.product"
GPU_MEMORY = "nvidia.com/gpu.memory"
GPU_COUNT = "nvidia.com/gpu.count"
GPU_FAMILY = "nvidia.com/gpu.family"
MIG_STRATEGY = "nvidia.com/mig.strategy"
CUDA_DRIVER = "nvidia.com/cuda.driver-version.full"
CUDA_RUNTIME = "nvidia.com/cuda.runtime-version.full"
CUDA_DRIVER_OLD = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev")
CUDA_RUNTIME_OLD = ("nvidia.com/cuda.runtime.major", "nvidia.com/cuda.runtime.minor")
NVIDIA_GPU = "nvidia.com/gpu"
_MIG_MIXED_COUNT = re.compile(r"^nvidia\.com/(mig-[0-9a-z.+]+)\.count$")

# Ascend device plugin: the new key first, then the deprecated one
NPU_CHIP = ("huawei.com/npu.chip.name", "node.kubernetes.io/npu.chip.name")
NPU_MEMORY = ("huawei.com/npu.chip.memory", "mind-cluster/npu-chip-memory")
NPU_SERVER_TYPE = ("huawei.com/npu.server.type", "servertype")
NPU_DRIVER = ("huawei.com/npu.driver.version", "huawei.com/driver.version")
ACCELERATOR = "accelerator"
ASCEND_RESOURCES = ("huawei.com/Ascend910", "huawei.com/Ascend310P", "huawei.com/Ascend310", "huawei.com/npu")
CANN_VERSION = "heterojob.io/cann.version"  # heterojob's own: no upstream component publishes it

# AMD GPU operator's node labeller (unverified beyond the resource and device-id)
AMD_GPU = "amd.com/gpu"
AMD_PRODUCT = ("amd.com/gpu.product-name", "amd.com/gpu.device-id")
AMD_DRIVER = "amd.com/gpu.driver-version"

# Node Feature Discovery network features: feature -> labels that say so (any of them "true")
NFD = "feature.node.kubernetes.io/"
NETWORK_FEATURES: dict[str, tuple[str, ...]] = {
    "rdma": (NFD + "rdma.available", NFD + "custom-rdma.enabled"),
    "rdma-capable": (NFD + "rdma.capable", NFD + "custom-rdma.capable"),
    "infiniband": (NFD + "pci-0207_15b3.present",),
    "mellanox": (NFD + "pci-15b3.present", NFD + "pci-0200_15b3.present", NFD + "pci-0207_15b3.present"),
    "sriov": (NFD + "network-sriov.capable",),
}

PROPOSED_ANNOTATION = "heterojob.io/proposed-by"


def _first(labels: Mapping[str, str], keys: Iterable[str]) -> tuple[str, str] | None:
    for key in keys:
        value = str(labels.get(key, "")).strip()
        if value:
            return key, value
    return None


def _joined(labels: Mapping[str, str], keys: Iterable[str]) -> str | None:
    parts = [str(labels.get(k, "")).strip() for k in keys]
    if not parts[0]:
        return None
    return ".".join(p for p in parts if p)


def node_software(labels: Mapping[str, str]) -> dict[str, str]:
    """driver / cuda / cann versions a node's labels publish (only those present)."""
    out: dict[str, str] = {}
    driver = str(labels.get(CUDA_DRIVER, "")).strip() or _joined(labels, CUDA_DRIVER_OLD)
    cuda = str(labels.get(CUDA_RUNTIME, "")).strip() or _joined(labels, CUDA_RUNTIME_OLD)
    if not driver:
        found = _first(labels, NPU_DRIVER) or _first(labels, (AMD_DRIVER,))
        driver = found[1] if found else None
    cann = str(labels.get(CANN_VERSION, "")).strip() or None
    for name, value in (("driver", driver), ("cuda", cuda), ("cann", cann)):
        if value:
            out[name] = value
    return out


def network_features(labels: Mapping[str, str]) -> list[str]:
    """Network features NFD labels announce: rdma (usable), rdma-capable, infiniband, mellanox, sriov."""
    return [f for f, keys in NETWORK_FEATURES.items() if any(str(labels.get(k, "")).lower() == "true" for k in keys)]


def _mib(value: str | None) -> int | None:
    """GFD's MiB integer, or the Ascend plugin's `64G` (GiB)."""
    if not value:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([GgMm]i?[Bb]?)?\s*", value)
    if not m:
        return None
    number, unit = float(m.group(1)), (m.group(2) or "M").upper()
    return int(number * 1024) if unit.startswith("G") else int(number)


@dataclass(frozen=True)
class Device:
    """One kind of accelerator on one node, as its labels and allocatable say."""

    node: str
    vendor: str  # nvidia, huawei, amd
    model: str  # e.g. NVIDIA-H100-80GB-HBM3, 910B3
    resource: str
    count: int
    node_selector: Mapping[str, str]  # the labels that single this model out (a class's nodeSelector)
    memory_mib: int | None = None
    software: Mapping[str, str] = field(default_factory=dict)
    network: tuple[str, ...] = ()
    shared: bool = False  # GFD's -SHARED suffix: time-sliced replicas, not whole devices
    mig: str = ""  # MIG profile (single or mixed strategy), else ""
    server_type: str = ""

    @property
    def exporter(self) -> str:
        return {"nvidia": "dcgm", "huawei": "npu-exporter", "amd": "amd-device-metrics"}.get(self.vendor, "none")


def devices(node: Node) -> list[Device]:
    """Every accelerator kind a node offers (an extended resource with devices > 0 and a model label)."""
    labels, alloc = node.labels, node.allocatable
    software = node_software(labels)
    network = tuple(network_features(labels))
    out: list[Device] = []
    product = str(labels.get(GPU_PRODUCT, "")).strip()
    if product and alloc.get(NVIDIA_GPU, 0) > 0:
        shared = product.endswith("-SHARED")
        model = product[: -len("-SHARED")] if shared else product
        mig = model.split("-MIG-", 1)[1] if "-MIG-" in model else ""
        count = _int(labels.get(GPU_COUNT)) or alloc[NVIDIA_GPU]
        out.append(Device(node.name, "nvidia", model, NVIDIA_GPU, count, {GPU_PRODUCT: product},
                          _mib(labels.get(GPU_MEMORY)), software, network, shared, mig))
    if product and labels.get(MIG_STRATEGY) == "mixed":
        for key in sorted(labels):
            m = _MIG_MIXED_COUNT.match(key)
            resource = f"nvidia.com/{m.group(1)}" if m else ""
            if m and alloc.get(resource, 0) > 0:
                profile = m.group(1)[len("mig-"):]
                out.append(Device(node.name, "nvidia", f"{product}-MIG-{profile}", resource, alloc[resource],
                                  {GPU_PRODUCT: product}, _mib(labels.get(f"nvidia.com/{m.group(1)}.memory")),
                                  software, network, False, profile))
    npu = next((r for r in ASCEND_RESOURCES if alloc.get(r, 0) > 0), None)
    if npu is not None:
        chip = _first(labels, NPU_CHIP)
        accel = str(labels.get(ACCELERATOR, "")).strip()
        model = chip[1] if chip else (accel.removeprefix("huawei-") or npu.split("/", 1)[1])
        selector = {ACCELERATOR: accel} if accel else {}
        if chip:
            selector[chip[0]] = chip[1]
        memory = _first(labels, NPU_MEMORY)
        server = _first(labels, NPU_SERVER_TYPE)
        out.append(Device(node.name, "huawei", model, npu, alloc[npu], selector,
                          _mib(memory[1]) if memory else None, software, network,
                          server_type=server[1] if server else ""))
    if alloc.get(AMD_GPU, 0) > 0:
        found = _first(labels, AMD_PRODUCT)
        if found:
            out.append(Device(node.name, "amd", found[1], AMD_GPU, alloc[AMD_GPU], {found[0]: found[1]},
                              None, software, network))
    return out


def _int(value: Any) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def covered(device: Device, node: Node, classes: Iterable[DeviceClass]) -> DeviceClass | None:
    """The class that already describes this device on this node (its selector and resource), if any."""
    for cls in classes:
        if cls.resource_name == device.resource and node.matches(cls.node_selector):
            return cls
    return None


# --- proposals ------------------------------------------------------------------------------------------

def class_name(device: Device) -> str:
    """A DNS-label class name for a model: NVIDIA-B200 -> nvidia-b200, 910B3 -> ascend-910b3."""
    slug = re.sub(r"[^a-z0-9]+", "-", device.model.lower()).strip("-")
    prefix = {"nvidia": "nvidia", "huawei": "ascend", "amd": "amd"}.get(device.vendor, device.vendor)
    if not slug.startswith(prefix):
        slug = f"{prefix}-{slug}"
    return slug[:63].rstrip("-") or prefix


@dataclass(frozen=True)
class Range:
    """Oldest and newest version of one piece of software across some nodes; `nodes` carried one."""

    oldest: str
    newest: str
    nodes: int

    def as_status(self) -> dict[str, Any]:
        return {"oldest": self.oldest, "newest": self.newest, "nodes": self.nodes}


def software_range(stacks: Iterable[Mapping[str, str]]) -> dict[str, Range]:
    """Per software name, the oldest and newest version (CANN-aware order); unreadable versions are skipped.
    Each distinct version text is parsed once (a fleet's nodes share a few stacks)."""
    texts: dict[str, Counter[str]] = defaultdict(Counter)
    for stack in stacks:
        for name, text in stack.items():
            texts[name][text] += 1
    out: dict[str, Range] = {}
    for name, counts in sorted(texts.items()):
        vs: list[tuple[Version, str]] = []
        carried = 0
        for text, n in counts.items():
            try:
                vs.append((versions.parse_version(text), text))
            except InvalidVersion:
                continue
            carried += n
        if vs:
            out[name] = Range(min(vs)[1], max(vs)[1], carried)
    return out


def reads(node: Node | None) -> tuple[object, ...] | None:
    """What `observed` and `proposals` read of a node (None: no node); its health, taints and cordon are not."""
    return None if node is None else (node.name, dict(node.labels), dict(node.allocatable), dict(node.software))


@dataclass(frozen=True)
class Proposal:
    """An AcceleratorClass heterojob proposes for a model no class describes."""

    name: str
    spec: dict[str, Any]
    nodes: tuple[str, ...]
    devices: int
    software: Mapping[str, Range]

    def manifest(self, api_version: str) -> dict[str, Any]:
        return {"apiVersion": api_version, "kind": "AcceleratorClass",
                "metadata": {"name": self.name, "annotations": {PROPOSED_ANNOTATION: "heterojob discovery"}},
                "spec": self.spec}

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.spec.get("displayName", ""), "nodes": len(self.nodes),
                "devices": self.devices, "software": {k: v.as_status() for k, v in self.software.items()},
                "nodeNames": list(self.nodes[:20])}


def proposals(nodes: Iterable[Node], classes: Mapping[str, DeviceClass]) -> list[Proposal]:
    """One proposed AcceleratorClass per device model that no class covers.

    The spec names the vendor, resource, the labels that single the model out, its memory and exporter;
    `software` holds the oldest version seen on its nodes (per-node checks use each node's own labels).
    `throughput` is a placeholder (0.5) that an admin should set; a name already taken gets a suffix.
    """
    groups: dict[tuple[str, str, tuple[tuple[str, str], ...]], list[Device]] = defaultdict(list)
    for node in nodes:
        for device in devices(node):
            if covered(device, node, classes.values()) is None:
                groups[(device.vendor, device.resource, tuple(sorted(device.node_selector.items())))].append(device)
    out: list[Proposal] = []
    taken = set(classes)
    for (vendor, resource, selector), found in sorted(groups.items()):
        first = found[0]
        name = class_name(first)
        base, n = name, 2
        while name in taken:
            name, n = f"{base[:60]}-{n}", n + 1
        taken.add(name)
        ranges = software_range(d.software for d in found)
        spec: dict[str, Any] = {"vendor": vendor, "displayName": first.model.replace("-", " "),
                                "resourceName": resource, "nodeSelector": dict(selector),
                                "exporter": first.exporter, "throughput": 0.5}
        memories = [d.memory_mib for d in found if d.memory_mib]
        if memories:
            spec["memoryGiB"] = round(min(memories) / 1024, 1)
        oldest = {k: r.oldest for k, r in ranges.items() if k in SOFTWARE}
        if oldest:
            spec["software"] = oldest
        out.append(Proposal(name, spec, tuple(sorted(d.node for d in found)), sum(d.count for d in found), ranges))
    return out


@dataclass(frozen=True)
class Observed:
    """What the fleet has of one AcceleratorClass: nodes, devices and the software range on them."""

    nodes: int
    devices: int
    software: Mapping[str, Range]

    def as_status(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "devices": self.devices,
                "software": {k: v.as_status() for k, v in self.software.items()}}


def observed(nodes: Iterable[Node], classes: Mapping[str, DeviceClass]) -> dict[str, Observed]:
    """Per class: its nodes (selector matches, the resource is there), devices, and observed software range."""
    members: dict[str, list[Node]] = {name: [] for name in classes}
    for node in nodes:
        for cls in classes.values():
            if node.allocatable.get(cls.resource_name, 0) > 0 and node.matches(cls.node_selector):
                members[cls.name].append(node)
    return {name: Observed(len(ns), sum(n.allocatable.get(classes[name].resource_name, 0) for n in ns),
                           software_range(n.software for n in ns))
            for name, ns in members.items()}
