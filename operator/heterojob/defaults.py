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

# name -> Region spec: eleven sites of a national compute network (China's "East Data, West Computing"
# hubs and the two largest eastern cities), with their real coordinates. Links are the backbone between
# them: bandwidth in Gbit/s and round-trip latency in ms as long-haul fibre gives it (about 1 ms per
# 100 km of route, plus switching).
_SITES: dict[str, tuple[str, str, float, float]] = {
    "cn-north": ("Beijing", "Beijing", 39.90, 116.41),
    "cn-east": ("Shanghai", "Shanghai", 31.23, 121.47),
    "cn-zhangjiakou": ("Zhangjiakou", "Zhangjiakou (Beijing-Tianjin-Hebei hub)", 40.77, 114.88),
    "cn-hohhot": ("Hohhot", "Hohhot (Inner Mongolia hub)", 40.84, 111.75),
    "cn-wuhu": ("Wuhu", "Wuhu (Yangtze River Delta hub)", 31.35, 118.43),
    "cn-shaoguan": ("Shaoguan", "Shaoguan (Guangdong-Hong Kong-Macao hub)", 24.81, 113.60),
    "cn-chengdu": ("Chengdu", "Chengdu (Chengdu-Chongqing hub)", 30.57, 104.07),
    "cn-chongqing": ("Chongqing", "Chongqing (Chengdu-Chongqing hub)", 29.56, 106.55),
    "cn-guiyang": ("Guiyang", "Gui'an (Guizhou hub)", 26.65, 106.63),
    "cn-qingyang": ("Qingyang", "Qingyang (Gansu hub)", 35.71, 107.64),
    "cn-zhongwei": ("Zhongwei", "Zhongwei (Ningxia hub)", 37.51, 105.19),
}
# (a, b, bandwidth Gbit/s, latency ms): each link is listed on both of its ends
_LINKS: list[tuple[str, str, float, float]] = [
    ("cn-north", "cn-east", 400, 28), ("cn-north", "cn-zhangjiakou", 800, 4), ("cn-north", "cn-hohhot", 200, 10),
    ("cn-north", "cn-qingyang", 100, 22), ("cn-east", "cn-wuhu", 800, 6), ("cn-east", "cn-shaoguan", 200, 24),
    ("cn-east", "cn-chengdu", 200, 36), ("cn-wuhu", "cn-chengdu", 100, 30), ("cn-shaoguan", "cn-guiyang", 200, 16),
    ("cn-chengdu", "cn-chongqing", 400, 5), ("cn-chongqing", "cn-guiyang", 200, 8),
    ("cn-chengdu", "cn-qingyang", 100, 14), ("cn-qingyang", "cn-zhongwei", 100, 8),
    ("cn-zhongwei", "cn-hohhot", 100, 14), ("cn-zhangjiakou", "cn-hohhot", 200, 7),
]


def _region_spec(name: str) -> dict[str, Any]:
    city, display, lat, lon = _SITES[name]
    links = [{"region": b if a == name else a, "bandwidthGbps": bw, "latencyMs": ms}
             for a, b, bw, ms in _LINKS if name in (a, b)]
    return {"displayName": display, "location": {"city": city, "latitude": lat, "longitude": lon}, "links": links}


REGIONS: dict[str, dict[str, Any]] = {name: _region_spec(name) for name in _SITES}

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
