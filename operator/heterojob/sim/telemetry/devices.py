"""The simulated accelerators and how their exporters look: the exporter versions and deployment shapes a node
can have (`ExporterProfile`), the faults that can be injected, the devices and nodes, and the demo's mix of
deployments (`realistic_mix`). The versions, label sets and values are those of tests/fixtures/exporters and
docs/telemetry.md; `metrics.py` renders them, `exporters.py` serves them.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from heterojob.defaults import ACCELERATOR_CLASSES

ASCEND_UNKNOWN = 2147483647  # what npu-exporter (2025+) emits for an unknown health status
XID_WINDOW_MS = 300000  # dcgm-exporter's default --xid-count-window-size
SHARED_POD = "not_displayed_for_multi_pod"
DCGM_VERSIONS = ("2.4.6-2.6.10", "3.3.9-3.6.1", "4.5.3-4.8.2", "head", "2.2.9-2.4.1", "1.x")
# before 3.x: no pci_bus_id, driver label, XID err_code; (1.x: no model, no host label at all)
DCGM_BEFORE_3 = frozenset({"2.4.6-2.6.10", "2.2.9-2.4.1", "1.x"})
NPU_VERSIONS = ("2021", "2023", "2024", "2026")
XID_TEXT = {0: "No Error", 13: "Graphics Engine Exception", 31: "GPU memory page fault", 43: "GPU stopped processing",
            48: "Double Bit ECC Error", 79: "GPU has fallen off the bus"}


@dataclass(frozen=True)
class ExporterProfile:
    """How one node's exporter is built and scraped (what differs between real deployments)."""

    version: str = ""  # one of DCGM_VERSIONS / NPU_VERSIONS; "" = the newest of the family
    node_name_set: bool = True  # dcgm: NODE_NAME set (Helm chart), so Hostname is the Node; else the pod's name
    old_namespace: bool = False  # dcgm --use-old-namespace: uuid, pod_name/pod_namespace/container_name
    mig: int = 0  # dcgm: GPU instances per GPU (0 = MIG off); each allocatable device is one instance
    xid_count: bool = False  # dcgm: DCGM_EXP_XID_ERRORS_COUNT enabled (custom counters CSV)
    timestamps: bool = True  # npu-exporter stamps every sample (no staleness markers in Prometheus)
    service_monitor: bool = False  # scraped with honorLabels: false and the exporter pod's target labels
    relabel_node: bool = True  # the scrape config relabels __meta_kubernetes_pod_node_name into `node`
    vgpu: bool = False  # dcgm 4.1.1-4.0.3+ --kubernetes-virtual-gpus: a shared GPU's series repeated per pod
    ddr: bool = False  # npu: an Ascend 310/310P chip, DDR memory (npu_chip_info_used/total_memory), no HBM or RoCE
    # the exporter's own `instance` on every series: what a global Prometheus federating the regional one sees
    # (honor_labels: false renames it `exported_instance`); the host is the Node's name, as a pod's DNS would be
    federated: bool = False


DEVICE_PLUGIN_SKIPPED_XIDS = frozenset({13, 31, 43, 45, 68, 109})  # k8s-device-plugin: application errors


class Fault(StrEnum):
    FATAL_XID = "fatal-xid"
    APPLICATION_XID = "application-xid"
    OVERHEAT = "overheat"
    NPU_UNHEALTHY = "npu-unhealthy"
    NPU_UNKNOWN = "npu-unknown"
    UNCOLLECTED = "uncollected"
    VANISH = "vanish"
    EXPORTER_DOWN = "exporter-down"
    STRAGGLE = "straggle"
    NPU_NETWORK_DOWN = "npu-network-down"
    NPU_LINK_DOWN = "npu-link-down"
    # the device cannot be read at all: a GPU leaves nothing but its XID (79), as dcgm-exporter skips blank
    # fields; an Ascend chip nothing but its health (0), as npu-exporter drops -1 / 4294967295 values
    FELL_OFF_BUS = "fell-off-bus"


@dataclass
class SimDevice:
    index: int
    uuid: str
    memory_mib: float
    namespace: str = ""
    pod: str = ""
    xid: int = 0
    xid_at: float = 0.0  # when the last XID happened (for DCGM_EXP_XID_ERRORS_COUNT)
    celsius: float | None = None  # forced temperature (overheat)
    npu_health: int = 1
    vanished: bool = False
    uncollected: bool = False
    factor: float = 1.0  # utilization multiplier (straggle)
    shared: bool = False  # npu: one chip soft-split between pods
    sharers: list[tuple[str, str]] = field(default_factory=list)  # (namespace, pod) using it at once (`share`)
    network: int = 1  # npu_chip_info_network_status
    link: int = 1  # npu_chip_info_link_status
    off_bus: bool = False  # fell off the bus: nothing but its fault series


@dataclass
class SimNode:
    name: str
    region: str
    device_class: str
    family: str  # dcgm | npu-exporter
    model: str
    driver: str
    profile: ExporterProfile = field(default_factory=ExporterProfile)
    devices: list[SimDevice] = field(default_factory=list)
    down: bool = False

    @property
    def hostname_label(self) -> str:
        """dcgm-exporter's `Hostname`, renamed `hostname` after tag 4.5.3-4.8.2."""
        return "hostname" if self.profile.version == "head" else "Hostname"

    @property
    def exporter_pod(self) -> str:
        """The name of this node's exporter pod (a DaemonSet pod: a stable suffix per node)."""
        digest = uuid.uuid5(uuid.NAMESPACE_DNS, self.name).bytes[:5]
        suffix = "".join("bcdfghjklmnpqrstvwxz2456789"[b % 27] for b in digest)
        return f"nvidia-dcgm-exporter-{suffix}" if self.family == "dcgm" else f"npu-exporter-{suffix}"


def exporter_family(device_class: str) -> str:
    return str(ACCELERATOR_CLASSES.get(device_class, {}).get("exporter", "none"))


def npu_unknown(version: str) -> int:
    """What npu-exporter says for a health it could not read: 0 before 2024, -1 in 2024, 2147483647 after."""
    return {"2021": 0, "2023": 0, "2024": -1}.get(version, ASCEND_UNKNOWN)


def realistic_mix(nodes: Iterable[Mapping[str, Any]]) -> dict[str, ExporterProfile]:
    """The demo's blend of deployments, as a fleet that grew over the years looks (deterministic per node).

    dcgm-exporter: 2.x without NODE_NAME behind a ServiceMonitor (Hostname is the exporter pod, pods arrive
    as exported_pod), 3.x from the Helm chart scraped without relabelling (Hostname only), 4.x with
    --use-old-namespace, HEAD (`hostname`) with DCGM_EXP_XID_ERRORS_COUNT. npu-exporter 2023/2024/2026, all
    with timestamps, some behind a ServiceMonitor. MIG stays off: the demo's jobs ask whole GPUs.
    """
    out = {}
    for i, obj in enumerate(nodes):
        name = str(obj["metadata"]["name"])
        k = i % 4
        if any(cls.get("exporter") == "dcgm" and all(obj["metadata"].get("labels", {}).get(a) == b
                                                      for a, b in (cls.get("nodeSelector") or {}).items())
               for cls in ACCELERATOR_CLASSES.values()):
            out[name] = (ExporterProfile(DCGM_VERSIONS[0], node_name_set=False, service_monitor=True),
                         ExporterProfile(DCGM_VERSIONS[1], relabel_node=False),
                         ExporterProfile(DCGM_VERSIONS[2], old_namespace=True),
                         ExporterProfile("head", xid_count=True, node_name_set=False))[k]
        else:  # no 2021 exporter: it maps no pods at all, so jobs there would have no telemetry (tests cover it)
            out[name] = ExporterProfile(("2023", "2024", "2026", "2026")[k], service_monitor=k % 2 == 1)
    return out


def sim_node(obj: Mapping[str, Any], i: int, rng: random.Random, profile: ExporterProfile | None = None
              ) -> SimNode | None:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    allocatable = (obj.get("status") or {}).get("allocatable") or {}
    for name, cls in ACCELERATOR_CLASSES.items():
        family = exporter_family(name)
        selector = cls.get("nodeSelector") or {}
        if family == "none" or not all(labels.get(k) == v for k, v in selector.items()):
            continue
        count = int(str(allocatable.get(cls["resourceName"], "0")) or 0)
        memory = float(cls.get("memoryGiB", 0)) * 1024
        chip = labels.get("node.kubernetes.io/npu.chip.name", "910B3")
        node = SimNode(
            name=meta["name"], region=labels.get("topology.kubernetes.io/region", ""), device_class=name,
            family=family, model=cls["displayName"] if family == "dcgm" else f"Ascend{chip}",
            driver=str((cls.get("software") or {}).get("driver", "")),
            profile=profile or ExporterProfile(
                ("4.5.3-4.8.2" if i % 2 == 0 else "head") if family == "dcgm" else NPU_VERSIONS[-1]))
        per_gpu = max(1, node.profile.mig)
        parents = [f"GPU-{uuid.UUID(int=rng.getrandbits(128))}" for _ in range(-(-count // per_gpu))]
        node.devices = [SimDevice(k, parents[k // per_gpu], memory) for k in range(count)]
        return node
    return None
