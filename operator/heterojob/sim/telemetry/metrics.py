"""How each simulated node's exporter renders its /metrics: the values a device reports (workload-driven
utilization, temperature, faults) in the shape of its exporter version (`devices.ExporterProfile`), through
prometheus_client. `ExporterFleet` (exporters.py) holds the state and serves it.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from heterojob.sim.telemetry.devices import (
    DCGM_BEFORE_3, NPU_VERSIONS, SHARED_POD, XID_TEXT, XID_WINDOW_MS, SimDevice, SimNode,
)


class NodeCollector(Collector):
    def __init__(self, fleet: ExporterMetrics, node: SimNode) -> None:
        self.fleet, self.node = fleet, node

    def collect(self) -> Iterator[Metric]:
        with self.fleet.lock:
            yield from (self.fleet._dcgm(self.node) if self.node.family == "dcgm" else self.fleet._npu(self.node))


class ExporterMetrics:
    """The rendering half of `ExporterFleet`: every node's metric families from the fleet's state."""

    lock: threading.RLock
    nodes: dict[str, SimNode]
    busy: float
    _rng: random.Random
    _registries: dict[str, CollectorRegistry]

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
                if d.off_bus:  # DCGM reads none of its fields: only the XID the exporter keeps is left
                    pass
                elif not d.uncollected:
                    if not p.mig and not no_util:  # MIG instances have no DCGM_FI_DEV_GPU_UTIL / MEM_COPY_UTIL
                        fams["util"].add_metric(values, round(util))
                        fams["mem"].add_metric(values, round(util * 0.4))
                    if (v3 or p.mig or no_util) and not v1:
                        fams["gract"].add_metric(values, round(util / 100, 6))
                if not d.off_bus:
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

        if d.off_bus:  # every reading failed (-1: dropped by validateNum); the health query still answers
            add("health", d.npu_health)
            return
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
