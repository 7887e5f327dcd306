"""The embedded defaults: AcceleratorClasses and Regions of a typical fleet, and what nodes of each carry.

Names, extended resources and node labels are the real ones (docs/telemetry.md). These
objects are rendered into `manifests/defaults/` by `heterojob generate`; a test fails when they drift.
"""

from __future__ import annotations

from typing import Any

from heterojob.constants import API_VERSION

# name -> AcceleratorClass spec
ACCELERATOR_CLASSES: dict[str, dict[str, Any]] = {
    "nvidia-h100": {
        "vendor": "nvidia", "displayName": "NVIDIA H100 80GB HBM3", "resourceName": "nvidia.com/gpu",
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "exporter": "dcgm", "throughput": 1.0, "memoryGiB": 80,
        "software": {"driver": "550.54.15", "cuda": "12.4"},
    },
    "nvidia-a100": {
        "vendor": "nvidia", "displayName": "NVIDIA A100 80GB SXM4", "resourceName": "nvidia.com/gpu",
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
        "exporter": "dcgm", "throughput": 0.45, "memoryGiB": 80,
        "software": {"driver": "535.161.08", "cuda": "12.2"},
    },
    "ascend-910b": {
        "vendor": "huawei", "displayName": "Huawei Ascend 910B3", "resourceName": "huawei.com/Ascend910",
        "nodeSelector": {"accelerator": "huawei-Ascend910", "node.kubernetes.io/npu.chip.name": "910B3"},
        "exporter": "npu-exporter", "throughput": 0.6, "memoryGiB": 64,
        "software": {"driver": "24.1.rc2", "cann": "8.0.RC3"},
    },
    "cpu": {
        "vendor": "cpu", "displayName": "CPU cores", "resourceName": "cpu",
        "nodeSelector": {"heterojob.io/pool": "cpu"},
        "exporter": "none", "throughput": 0.01,
    },
}

# name -> Region spec
REGIONS: dict[str, dict[str, Any]] = {
    "cn-east": {"displayName": "China East", "location": {"city": "Shanghai", "latitude": 31.23, "longitude": 121.47},
                "links": [{"region": "cn-north", "bandwidthGbps": 100, "latencyMs": 28},
                          {"region": "eu-west", "bandwidthGbps": 10, "latencyMs": 190}]},
    "cn-north": {"displayName": "China North", "location": {"city": "Beijing", "latitude": 39.90, "longitude": 116.41},
                 "links": [{"region": "cn-east", "bandwidthGbps": 100, "latencyMs": 28},
                           {"region": "eu-west", "bandwidthGbps": 10, "latencyMs": 180}]},
    "eu-west": {"displayName": "Europe West", "location": {"city": "Frankfurt", "latitude": 50.11, "longitude": 8.68},
                "links": [{"region": "cn-east", "bandwidthGbps": 10, "latencyMs": 190},
                          {"region": "cn-north", "bandwidthGbps": 10, "latencyMs": 180}]},
}

# name -> labels and allocatable of a simulated node of that class (what GPU Feature Discovery, the
# Ascend device plugin and the kubelet would report)
NODE_PROFILES: dict[str, dict[str, Any]] = {
    "nvidia-h100": {
        "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559",
                   "nvidia.com/gpu.family": "hopper", "nvidia.com/gpu.count": "8",
                   "nvidia.com/cuda.driver-version.full": "550.54.15", "nvidia.com/cuda.runtime-version.full": "12.4"},
        "allocatable": {"nvidia.com/gpu": 8, "cpu": 192, "memory": "2048Gi"},
    },
    "nvidia-a100": {
        "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.memory": "81920",
                   "nvidia.com/gpu.family": "ampere", "nvidia.com/gpu.count": "8",
                   "nvidia.com/cuda.driver-version.full": "535.161.08", "nvidia.com/cuda.runtime-version.full": "12.2"},
        "allocatable": {"nvidia.com/gpu": 8, "cpu": 128, "memory": "1024Gi"},
    },
    "ascend-910b": {
        "labels": {"accelerator": "huawei-Ascend910", "node.kubernetes.io/npu.chip.name": "910B3",
                   "huawei.com/driver.version": "24.1.rc2", "mind-cluster/npu-chip-memory": "64G"},
        "allocatable": {"huawei.com/Ascend910": 8, "cpu": 192, "memory": "1536Gi"},
    },
    "cpu": {
        "labels": {"heterojob.io/pool": "cpu"},
        "allocatable": {"cpu": 64, "memory": "256Gi"},
    },
}

# Node Feature Discovery labels the GPU nodes carry: a Mellanox (PCI vendor 15b3) InfiniBand HCA with the RDMA
# modules loaded (node-feature-discovery source/custom/static_features.go; pci-<class>_<vendor> default naming)
NFD_RDMA_LABELS: dict[str, str] = {
    "feature.node.kubernetes.io/rdma.capable": "true", "feature.node.kubernetes.io/rdma.available": "true",
    "feature.node.kubernetes.io/pci-0207_15b3.present": "true",
}
NODE_EXTRA_LABELS: dict[str, dict[str, str]] = {
    "nvidia-h100": {**NFD_RDMA_LABELS, "nvidia.com/mig.capable": "true", "nvidia.com/gpu.compute.major": "9",
                    "nvidia.com/gpu.compute.minor": "0"},
    "nvidia-a100": {**NFD_RDMA_LABELS, "nvidia.com/mig.capable": "true", "nvidia.com/gpu.compute.major": "8",
                    "nvidia.com/gpu.compute.minor": "0"},
    # mind-cluster's new keys (dual-written with the old ones), the server type, and heterojob's CANN label
    "ascend-910b": {"huawei.com/npu.chip.name": "910B3", "huawei.com/npu.chip.memory": "64G",
                    "servertype": "Ascend910B-20", "huawei.com/npu.server.type": "Ascend910B-20"},
}

# name -> software stacks its nodes run (the first is the class's declared one): a fleet mid-upgrade, so a
# class mixes driver versions; `sim.cluster.nodes.node(..., stack=i)` picks stack i (modulo)
NODE_SOFTWARE: dict[str, list[dict[str, str]]] = {
    "nvidia-h100": [{"driver": "550.54.15", "cuda": "12.4"}, {"driver": "550.107.02", "cuda": "12.4"},
                    {"driver": "560.35.03", "cuda": "12.6"}, {"driver": "535.183.06", "cuda": "12.2"}],
    "nvidia-a100": [{"driver": "535.161.08", "cuda": "12.2"}, {"driver": "550.54.15", "cuda": "12.4"}],
    "ascend-910b": [{"driver": "24.1.rc2", "cann": "8.0.RC3"}, {"driver": "24.1.0", "cann": "8.0.0"}],
}


def accelerator_class(name: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "AcceleratorClass", "metadata": {"name": name},
            "spec": ACCELERATOR_CLASSES[name]}


def region(name: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "Region", "metadata": {"name": name}, "spec": REGIONS[name]}


def all_objects() -> list[dict[str, Any]]:
    return [accelerator_class(n) for n in ACCELERATOR_CLASSES] + [region(n) for n in REGIONS]
