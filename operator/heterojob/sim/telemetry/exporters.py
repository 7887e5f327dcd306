"""Simulated dcgm-exporter and npu-exporter for a whole fleet, with workload-driven values and faults.

One HTTP server stands in for every node's exporter: Prometheus scrapes `/nodes/<node>/metrics` once per
node (a target per node, as with a DaemonSet), and each answer is rendered by prometheus_client in the
shape a real exporter version emits (an `ExporterProfile` per node; the versions, their label sets and
values are those of tests/fixtures/exporters and docs/telemetry.md): dcgm-exporter 2.x/3.x/4.x/HEAD with
`Hostname` or `hostname` (the Node's name, or the exporter pod's when NODE_NAME is unset), with or without
--use-old-namespace, MIG instances, XID err_code labels, DCGM_EXP_XID_ERRORS_COUNT, 2.2.9-2.4.1 without
DCGM_FI_DEV_GPU_UTIL, 1.x's `dcgm_*` names, 4.x --kubernetes-virtual-gpus (a time-sliced GPU's series per pod);
npu-exporter 2021 to 2026 label sets with explicit timestamps and their "not collected" values, 310P DDR
memory, vNPU chips listed per pod, the chip's network health and RoCE link (2024+ / 2026); any exporter's
series carrying their own `instance`, as a federating Prometheus passes them on (`exported_instance`).
`targets()` says how each node is scraped (relabelled `node` label or not, ServiceMonitor target labels).
`realistic_mix` is the demo's blend; the older shapes are `ExporterProfile` settings of their own.

A device bound to a pod reports high utilization and that pod's labels; an idle one reports zero. Faults are
injected over HTTP (`POST /faults`) or in process (`ExporterFleet.inject`):

  fatal-xid [code=79] (sticky: the exporter repeats the last XID until it restarts, i.e. `clear`)
  application-xid [code=13]   overheat [celsius=95]   npu-unhealthy   npu-unknown
  uncollected (the exporter cannot read the device: -1 / 4294967295 on npu-exporter, no series on DCGM)
  vanish (the device's series disappear)   exporter-down (the node's scrape answers 503)
  straggle [factor=0.2] (utilization scaled down)
  npu-network-down (npu_chip_info_network_status 0)   npu-link-down (npu_chip_info_link_status 0, hccn_tool "DOWN")

`DELETE /faults[?node=N[&device=D]]` (`ExporterFleet.clear`) heals them: every node, one node, or one device.

`ExporterFleet.share` gives a device to several pods at once (time-sliced GPU, vNPUs of one chip).
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

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


def _exporter_family(device_class: str) -> str:
    return str(ACCELERATOR_CLASSES.get(device_class, {}).get("exporter", "none"))


class _NodeCollector(Collector):
    def __init__(self, fleet: ExporterFleet, node: SimNode) -> None:
        self.fleet, self.node = fleet, node

    def collect(self) -> Iterator[Metric]:
        with self.fleet.lock:
            yield from (self.fleet._dcgm(self.node) if self.node.family == "dcgm" else self.fleet._npu(self.node))


class ExporterFleet:
    """Every node's exporter of a simulated fleet: build it from Node objects, serve it, inject faults."""

    def __init__(self, nodes: Iterable[Mapping[str, Any]], *, seed: int = 0, busy_utilization: float = 92.0,
                 profiles: Mapping[str, ExporterProfile] | None = None) -> None:
        """`profiles`: node name -> how its exporter looks (default: the newest versions, NODE_NAME set,
        relabelled node, no ServiceMonitor; dcgm nodes alternate 4.5.3-4.8.2 `Hostname` and HEAD `hostname`)."""
        self.lock = threading.RLock()
        self.nodes: dict[str, SimNode] = {}
        self._rng = random.Random(seed)
        self.busy = busy_utilization
        self._registries: dict[str, CollectorRegistry] = {}
        for i, obj in enumerate(nodes):
            node = _sim_node(obj, i, self._rng, (profiles or {}).get(str((obj.get("metadata") or {}).get("name"))))
            if node is not None:
                self.nodes[node.name] = node
                registry = CollectorRegistry(auto_describe=False)
                registry.register(_NodeCollector(self, node))
                self._registries[node.name] = registry
        self._server: ThreadingHTTPServer | None = None

    # --- what runs where ---------------------------------------------------------------------------

    def bind(self, bindings: Mapping[str, Iterable[tuple[str, str, int]]]) -> None:
        """node -> [(namespace, pod, devices)]: the pods now holding each node's devices (others idle)."""
        with self.lock:
            for name, node in self.nodes.items():
                free = iter(node.devices)
                for device in node.devices:
                    device.namespace = device.pod = ""
                for namespace, pod, count in bindings.get(name, ()):
                    for _ in range(count):
                        device = next(free, None)
                        if device is not None:
                            device.namespace, device.pod = namespace, pod

    def share(self, node: str, device: int, pods: Iterable[tuple[str, str]]) -> None:
        """Device `device` of `node` serves all of `pods` at once (a time-sliced GPU, a chip split into vNPUs);
        an empty list ends the sharing. KeyError for an unknown node or device."""
        with self.lock:
            devices = self.nodes[node].devices
            if not 0 <= device < len(devices):
                raise KeyError(f"node {node!r} has devices 0-{len(devices) - 1}, not {device}")
            devices[device].sharers = list(pods)

    # --- faults --------------------------------------------------------------------------------------

    def inject(self, fault: Fault | str, node: str, device: int | None = 0, value: float | None = None) -> None:
        """Inject `fault` on `node` (device index `device`; exporter-down is node-wide). KeyError if unknown."""
        fault = Fault(fault)
        with self.lock:
            sim = self._node(node)
            if fault == Fault.EXPORTER_DOWN:
                sim.down = True
                return
            index = device or 0
            if not 0 <= index < len(sim.devices):
                raise KeyError(f"node {node!r} has devices 0-{len(sim.devices) - 1}, not {index}")
            d = sim.devices[index]
            if fault == Fault.FATAL_XID:
                d.xid, d.xid_at = int(value or 79), time.time()
            elif fault == Fault.APPLICATION_XID:
                d.xid, d.xid_at = int(value or 13), time.time()
            elif fault == Fault.OVERHEAT:
                d.celsius = float(value or 95.0)
            elif fault == Fault.NPU_UNHEALTHY:
                d.npu_health = 0
            elif fault == Fault.NPU_UNKNOWN:
                d.npu_health = _npu_unknown(sim.profile.version)
            elif fault == Fault.VANISH:
                d.vanished = True
            elif fault == Fault.UNCOLLECTED:
                d.uncollected = True
            elif fault == Fault.STRAGGLE:
                d.factor = float(value if value is not None else 0.2)
            elif fault == Fault.NPU_NETWORK_DOWN:
                d.network = 0
            elif fault == Fault.NPU_LINK_DOWN:
                d.link = 0

    def _node(self, node: str) -> SimNode:
        """The simulated node; KeyError naming the nodes that exist."""
        if node not in self.nodes:
            known = sorted(self.nodes)
            raise KeyError(f"no node {node!r} in the simulated fleet ({len(known)} nodes: "
                           f"{', '.join(known[:4])}{', ...' if len(known) > 4 else ''})")
        return self.nodes[node]

    def clear(self, node: str | None = None, device: int | None = None) -> None:
        """Undo every fault: on all nodes, on one `node` (its exporter up again too), or on one `device` of it
        (its exporter's state untouched). A cleared XID is what an exporter restart does: the last value is 0.
        KeyError for an unknown node or device."""
        with self.lock:
            for sim in ([self._node(node)] if node is not None else list(self.nodes.values())):
                devices = sim.devices
                if device is not None:
                    if not 0 <= device < len(sim.devices):
                        raise KeyError(f"node {sim.name!r} has devices 0-{len(sim.devices) - 1}, not {device}")
                    devices = [sim.devices[device]]
                else:
                    sim.down = False
                for d in devices:
                    d.xid, d.celsius, d.npu_health, d.vanished, d.factor = 0, None, 1, False, 1.0
                    d.uncollected, d.network, d.link = False, 1, 1

    def unhealthy_devices(self) -> dict[str, int]:
        """node -> devices its device plugin reports Unhealthy to the kubelet (which then lowers the Node's
        allocatable): NVIDIA's k8s-device-plugin on an XID outside the application-error list it skips
        (13, 31, 43, 45, 68, 109), the Ascend device plugin on an unhealthy chip. A node whose exporter is
        down or whose device vanished from the exporter is not a device-plugin fault."""
        with self.lock:
            out: dict[str, int] = {}
            for name, sim in self.nodes.items():
                bad = sum(1 for d in sim.devices
                          if (d.xid and d.xid not in DEVICE_PLUGIN_SKIPPED_XIDS) or d.npu_health == 0)
                if bad:
                    out[name] = bad
            return out

    # --- values --------------------------------------------------------------------------------------

    def _utilization(self, d: SimDevice) -> float:
        if not d.pod and not d.sharers:
            return 0.0
        return max(0.0, min(100.0, (self.busy + self._rng.uniform(-4, 4)) * d.factor))

    @staticmethod
    def _temperature(d: SimDevice, util: float) -> float:
        return d.celsius if d.celsius is not None else round(38 + util * 0.3, 1)

    def _dcgm(self, node: SimNode) -> Iterator[Metric]:
        p = node.profile
        v3 = p.version not in DCGM_BEFORE_3  # 3.x and later: pci_bus_id, driver label, XID err_code, PROF fields
        v1 = p.version == "1.x"  # gpu-monitoring-tools 1.0.0: dcgm_<field>{gpu, uuid} + pod_name/pod_namespace
        no_util = p.version == "2.2.9-2.4.1"  # GPU_UTIL commented out; the chart's dcp CSV: GR_ENGINE_ACTIVE only
        host = node.name if p.node_name_set else node.exporter_pod
        gpu_labels = ["gpu", "uuid" if p.old_namespace or v1 else "UUID", *(["pci_bus_id"] if v3 else []),
                      *(["device", "modelName"] if not v1 else []), *(["GPU_I_PROFILE", "GPU_I_ID"] if p.mig else []),
                      *([node.hostname_label] if not v1 else []), *(["DCGM_FI_DRIVER_VERSION"] if v3 else [])]
        pod_labels = ["container_name", "pod_namespace", "pod_name"] if p.old_namespace or v1 else \
            ["container", "namespace", "pod"]
        labels = [*gpu_labels, *pod_labels, *(["vgpu"] if p.vgpu else []), *(["instance"] if p.federated else [])]
        legacy = {"DCGM_FI_DEV_GPU_UTIL": "dcgm_gpu_utilization",
                  "DCGM_FI_DEV_MEM_COPY_UTIL": "dcgm_mem_copy_utilization",
                  "DCGM_FI_DEV_FB_USED": "dcgm_fb_used", "DCGM_FI_DEV_FB_FREE": "dcgm_fb_free",
                  "DCGM_FI_DEV_GPU_TEMP": "dcgm_gpu_temp", "DCGM_FI_DEV_POWER_USAGE": "dcgm_power_usage",
                  "DCGM_FI_DEV_XID_ERRORS": "dcgm_xid_errors"}

        def fam(name: str, text: str, extra: tuple[str, ...] = ()) -> GaugeMetricFamily:
            return GaugeMetricFamily(legacy.get(name, name) if v1 else name, text, labels=[*labels, *extra])

        fams = {
            "util": fam("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
            "mem": fam("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %)."),
            "used": fam("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
            "free": fam("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
            "reserved": fam("DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB)."),
            "temp": fam("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."),
            "power": fam("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
            "xid": fam("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.",
                       ("err_code", "err_msg") if v3 else ()),
            "gract": fam("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active."),
            "count": fam("DCGM_EXP_XID_ERRORS_COUNT",
                         "Count of XID Errors within user-specified time window (see xid-count-window-size param).",
                         ("window_size_in_ms", "xid")),
        }
        per_gpu = max(1, p.mig)
        reserved = 527.0 if v3 else 0.0
        for d in node.devices:
            if d.vanished:
                continue
            util = self._utilization(d)
            gpu, instance = divmod(d.index, per_gpu)
            memory = d.memory_mib / per_gpu if p.mig else d.memory_mib - reserved
            used = round(memory * 0.85) if d.pod or d.sharers else 0
            ident = [str(gpu), d.uuid, *([f"00000000:{0x18 + gpu:02X}:00.0"] if v3 else []),
                     *([f"nvidia{gpu}", node.model] if not v1 else []),
                     *([f"{per_gpu}g.{int(memory // 1024)}gb", str(instance + 1)] if p.mig else []),
                     *([host] if not v1 else []), *([node.driver] if v3 else [])]
            # --kubernetes-virtual-gpus repeats a shared GPU's series per pod, `vgpu` naming the replica
            pods = [(ns, pod, str(k)) for k, (ns, pod) in enumerate(d.sharers)] if d.sharers and p.vgpu else \
                [(d.namespace, d.pod, "")]
            for namespace, pod, vgpu in pods:
                values = [*ident, "trainer" if pod else "", namespace, pod, *([vgpu] if p.vgpu else []),
                          *([f"{node.name}:9400"] if p.federated else [])]
                if not d.uncollected:
                    if not p.mig and not no_util:  # MIG instances have no DCGM_FI_DEV_GPU_UTIL / MEM_COPY_UTIL
                        fams["util"].add_metric(values, round(util))
                        fams["mem"].add_metric(values, round(util * 0.4))
                    if (v3 or p.mig or no_util) and not v1:
                        fams["gract"].add_metric(values, round(util / 100, 6))
                fams["used"].add_metric(values, used)
                fams["free"].add_metric(values, memory - used)
                if v3 and not p.mig:
                    fams["reserved"].add_metric(values, reserved)
                fams["temp"].add_metric(values, self._temperature(d, util))
                fams["power"].add_metric(values, round(70 + util * 6.3, 1))
                code = XID_TEXT.get(d.xid, "Unknown Error")
                fams["xid"].add_metric([*values, *((str(d.xid), code) if v3 else ())], d.xid)
                if p.xid_count and d.xid:
                    recent = 1 if time.time() - d.xid_at < XID_WINDOW_MS / 1000 else 0
                    fams["count"].add_metric([*values, str(XID_WINDOW_MS), str(d.xid)], recent)
        yield from (f for f in fams.values() if f.samples)

    def _npu(self, node: SimNode) -> Iterator[Metric]:
        version = node.profile.version or NPU_VERSIONS[-1]
        stamp = time.time() if node.profile.timestamps else None
        chip = {"2021": ["id"], "2023": ["id", "model_name", "vdie_id", "pcie_bus_info"]}.get(
            version, ["id", "model_name", "vdie_id", "pcie_bus_info", "namespace", "pod_name", "container_name"])
        container = ["id", "model_name", "vdie_id", "pcie_bus_info", "namespace", "pod_name", "container_name"]
        by_pod = "pod_name" in chip  # 2024+: a chip split into vNPUs is listed once per vNPU's pod
        own = [f"{node.name}:8082"] if node.profile.federated else []  # the exporter's own `instance`
        chip, container, fields = [*chip, *(["instance"] if own else [])], \
            [*container, *(["instance"] if own else [])], len(chip)
        ddr = node.profile.ddr
        failed = -1 if version in ("2021", "2024", "2026") else 4294967295  # a utilization that could not be read
        fams = {
            "util": GaugeMetricFamily("npu_chip_info_utilization", "the ai core utilization", labels=chip),
            "used": GaugeMetricFamily("npu_chip_info_hbm_used_memory", "the npu hbm used memory", labels=chip),
            "total": GaugeMetricFamily("npu_chip_info_hbm_total_memory", "the npu hbm total memory", labels=chip),
            "health": GaugeMetricFamily("npu_chip_info_health_status", "the npu health status", labels=chip),
            "temp": GaugeMetricFamily("npu_chip_info_temperature", "the npu temperature", labels=chip),
            "power": GaugeMetricFamily("npu_chip_info_power", "the npu power", labels=chip),
            "ctr": GaugeMetricFamily("container_npu_utilization",
                                     "the npu ai core utilization in container, unit is '%'", labels=container),
            # DdrCollector (310, 310P; also 910A): MB
            "ddr_used": GaugeMetricFamily("npu_chip_info_used_memory", "the npu used memory", labels=chip),
            "ddr_total": GaugeMetricFamily("npu_chip_info_total_memory", "the npu total memory", labels=chip),
            # training cards only (collector_for_npu.go setNetHealthStatus; the network group's hccn_tool -link)
            "network": GaugeMetricFamily("npu_chip_info_network_status", "the npu network health status",
                                         labels=chip),
            "link": GaugeMetricFamily("npu_chip_info_link_status", "the npu link status", labels=chip),
        }
        for d in node.devices:
            if d.vanished:
                continue
            util = self._utilization(d)
            namespace, pod = (SHARED_POD, SHARED_POD) if d.shared and version == "2026" else (d.namespace, d.pod)
            ident = [str(d.index), node.model, f"{d.uuid[4:40]}", f"0000:{0xc1 + d.index:02x}:00.0"]
            # a chip split into vNPUs is listed once per vNPU's pod (mind-cluster GetChipListWithVNPU)
            for namespace, pod in (d.sharers if d.sharers and by_pod else [(namespace, pod)]):
                workload = [namespace, pod, ("trainer" if pod != SHARED_POD else SHARED_POD) if pod else ""]
                self._npu_chip(fams, d, util, [*[*ident, *workload][:fields], *own], [*ident, *workload, *own],
                               version, failed, stamp, ddr)
        yield from (f for f in fams.values() if f.samples)
        nums = GaugeMetricFamily("machine_npu_nums", "Amount of npu installed on the machine.")
        nums.add_metric([], len(node.devices))
        yield nums

    def _npu_chip(self, fams: dict[str, GaugeMetricFamily], d: SimDevice, util: float, values: list[str],
                  ctr: list[str], version: str, failed: int, stamp: float | None, ddr: bool) -> None:
        """One chip's npu-exporter series (one listing of it: a vNPU chip is listed per pod)."""
        def add(key: str, value: float, labels: list[str] = values) -> None:
            fams[key].add_metric(labels, value, timestamp=stamp)

        busy = bool(d.pod or d.sharers)
        add("util", failed if d.uncollected else round(util))
        add("ddr_used" if ddr else "used", round(d.memory_mib * 0.8) if busy else 0)
        add("ddr_total" if ddr else "total", d.memory_mib)
        add("health", d.npu_health)
        add("temp", -1 if d.uncollected else self._temperature(d, util))
        add("power", round(90 + util * 2.9, 1))
        if not ddr and version in ("2024", "2026"):  # network health: **unverified** before 2024
            add("network", d.network)
        if not ddr and version == "2026":  # link status (hccn_tool -link): checked at mind-cluster 2026-08
            add("link", d.link)
        if version == "2023" and d.pod:  # the 2023 exporters map pods only here
            add("ctr", failed if d.uncollected else round(util), ctr)

    def render(self, node: str) -> bytes | None:
        """The node's /metrics body, or None when its exporter is down (KeyError when unknown)."""
        if self.nodes[node].down:
            return None
        return generate_latest(self._registries[node])

    # --- HTTP ----------------------------------------------------------------------------------------

    def serve(self, host: str = "127.0.0.1", port: int = 0) -> tuple[str, int]:
        fleet = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:
                pass

            def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
                path = urlparse(self.path).path.strip("/").split("/")
                if len(path) == 3 and path[0] == "nodes" and path[2] == "metrics":
                    try:
                        body = fleet.render(path[1])
                    except KeyError:
                        return self._send(404, b"no such node\n")
                    if body is None:
                        return self._send(503, b"exporter down (injected)\n")
                    return self._send(200, body, "text/plain; version=0.0.4; charset=utf-8")
                if path == ["faults"]:
                    return self._send(200, json.dumps(fleet.faults()).encode(), "application/json")
                if path == ["targets"]:
                    return self._send(200, json.dumps(fleet.targets()).encode(), "application/json")
                self._send(404, b"not found\n")

            def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
                if urlparse(self.path).path.strip("/") != "faults":
                    return self._send(404, b"not found\n")
                kinds = ", ".join(f.value for f in Fault)
                usage = f"send {{kind: {kinds}; node; device?; value?}}"
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                    kind, node = body["kind"], body["node"]
                except (ValueError, KeyError, TypeError) as exc:
                    return self._send(400, f"bad fault {exc!r}: {usage}\n".encode())
                try:
                    fleet.inject(kind, node, body.get("device", 0), body.get("value"))
                except KeyError as exc:  # an unknown node or device: say which, and what exists
                    return self._send(404, f"{exc.args[0]}\n".encode())
                except (ValueError, IndexError, TypeError) as exc:
                    return self._send(400, f"bad fault {exc!r}: {usage}\n".encode())
                self._send(200, b"ok\n")

            def do_DELETE(self) -> None:  # noqa: N802 - the name http.server calls
                url = urlparse(self.path)
                if url.path.strip("/") != "faults":
                    return self._send(404, b"not found\n")
                query = parse_qs(url.query)
                node = (query.get("node") or [None])[0]
                device = (query.get("device") or [None])[0]
                try:
                    fleet.clear(node, int(device) if device is not None else None)
                except KeyError as exc:  # an unknown node or device: say which
                    return self._send(404, f"{exc.args[0]}\n".encode())
                except ValueError:
                    return self._send(400, f"bad device {device!r}: a device index, e.g. 0\n".encode())
                self._send(200, b"ok\n")

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a scraper that hung up early (timeout, shutdown) is not our problem

        self._server = Server((host, port), Handler)
        threading.Thread(target=self._server.serve_forever, name="sim-exporters", daemon=True).start()
        return self._server.server_address[0], self._server.server_address[1]

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def targets(self) -> list[dict[str, Any]]:
        """One scrape target per node: what a Prometheus config needs (sim/telemetry/prometheus.config): the
        relabelled `node` label or none, and a ServiceMonitor's target labels naming the exporter pod."""
        out: list[dict[str, Any]] = []
        for n in self.nodes.values():
            target: dict[str, Any] = {"node": n.name, "family": n.family, "region": n.region,
                                      "path": f"/nodes/{n.name}/metrics", "relabel_node": n.profile.relabel_node}
            if n.profile.service_monitor:
                namespace = "gpu-operator" if n.family == "dcgm" else "npu-exporter"
                container = "nvidia-dcgm-exporter" if n.family == "dcgm" else "npu-exporter"
                target["labels"] = {"namespace": namespace, "pod": n.exporter_pod, "container": container,
                                    "service": container, "endpoint": "metrics"}
            out.append(target)
        return out

    def faults(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        with self.lock:
            for n in self.nodes.values():
                if n.down:
                    out.append({"node": n.name, "kind": Fault.EXPORTER_DOWN.value})
                for d in n.devices:
                    active = {Fault.FATAL_XID: bool(d.xid), Fault.OVERHEAT: d.celsius is not None,
                              Fault.NPU_UNHEALTHY: d.npu_health != 1, Fault.VANISH: d.vanished,
                              Fault.UNCOLLECTED: d.uncollected, Fault.STRAGGLE: d.factor != 1.0,
                              Fault.NPU_NETWORK_DOWN: d.network != 1, Fault.NPU_LINK_DOWN: d.link != 1}
                    out += [{"node": n.name, "device": d.index, "kind": k.value} for k, on in active.items() if on]
        return out


def _npu_unknown(version: str) -> int:
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


def _sim_node(obj: Mapping[str, Any], i: int, rng: random.Random, profile: ExporterProfile | None = None
              ) -> SimNode | None:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    allocatable = (obj.get("status") or {}).get("allocatable") or {}
    for name, cls in ACCELERATOR_CLASSES.items():
        family = _exporter_family(name)
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
