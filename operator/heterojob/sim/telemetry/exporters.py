"""Simulated dcgm-exporter and npu-exporter for a whole fleet, with workload-driven values and faults.

One HTTP server stands in for every node's exporter: Prometheus scrapes `/nodes/<node>/metrics` once per
node (a target per node, as with a DaemonSet), and each answer is rendered by prometheus_client in the
real exporter's metric and label names (docs/telemetry.md). A device bound to a pod reports
high utilization and that pod's labels; an idle one reports zero. Faults are injected over HTTP
(`POST /faults`) or in process (`ExporterFleet.inject`):

  fatal-xid [code=79]   application-xid [code=13]   overheat [celsius=95]   npu-unhealthy   npu-unknown
  vanish (the device's series disappear)   exporter-down (the node's scrape answers 503)
  straggle [factor=0.2] (utilization scaled down)
"""

from __future__ import annotations

import json
import random
import threading
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

ASCEND_UNKNOWN = 2147483647  # what npu-exporter emits for an unknown health status
DCGM_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "DCGM_FI_DRIVER_VERSION",
               "container", "namespace", "pod")
NPU_LABELS = ("id", "model_name", "vdie_id", "pcie_bus_info", "namespace", "pod_name", "container_name")


class Fault(StrEnum):
    FATAL_XID = "fatal-xid"
    APPLICATION_XID = "application-xid"
    OVERHEAT = "overheat"
    NPU_UNHEALTHY = "npu-unhealthy"
    NPU_UNKNOWN = "npu-unknown"
    VANISH = "vanish"
    EXPORTER_DOWN = "exporter-down"
    STRAGGLE = "straggle"


@dataclass
class SimDevice:
    index: int
    uuid: str
    memory_mib: float
    namespace: str = ""
    pod: str = ""
    xid: int = 0
    celsius: float | None = None  # forced temperature (overheat)
    npu_health: int = 1
    vanished: bool = False
    factor: float = 1.0  # utilization multiplier (straggle)


@dataclass
class SimNode:
    name: str
    region: str
    device_class: str
    family: str  # dcgm | npu-exporter
    model: str
    driver: str
    hostname_label: str = "Hostname"  # dcgm-exporter <= 4.5.3-4.8.2; "hostname" after
    devices: list[SimDevice] = field(default_factory=list)
    down: bool = False


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

    def __init__(self, nodes: Iterable[Mapping[str, Any]], *, seed: int = 0, busy_utilization: float = 92.0) -> None:
        self.lock = threading.RLock()
        self.nodes: dict[str, SimNode] = {}
        self._rng = random.Random(seed)
        self.busy = busy_utilization
        self._registries: dict[str, CollectorRegistry] = {}
        for i, obj in enumerate(nodes):
            node = _sim_node(obj, i, self._rng)
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

    # --- faults --------------------------------------------------------------------------------------

    def inject(self, fault: Fault | str, node: str, device: int | None = 0, value: float | None = None) -> None:
        """Inject `fault` on `node` (device index `device`; exporter-down is node-wide). KeyError if unknown."""
        fault = Fault(fault)
        with self.lock:
            sim = self.nodes[node]
            if fault == Fault.EXPORTER_DOWN:
                sim.down = True
                return
            d = sim.devices[device or 0]
            if fault == Fault.FATAL_XID:
                d.xid = int(value or 79)
            elif fault == Fault.APPLICATION_XID:
                d.xid = int(value or 13)
            elif fault == Fault.OVERHEAT:
                d.celsius = float(value or 95.0)
            elif fault == Fault.NPU_UNHEALTHY:
                d.npu_health = 0
            elif fault == Fault.NPU_UNKNOWN:
                d.npu_health = ASCEND_UNKNOWN
            elif fault == Fault.VANISH:
                d.vanished = True
            elif fault == Fault.STRAGGLE:
                d.factor = float(value if value is not None else 0.2)

    def clear(self, node: str | None = None) -> None:
        """Undo every fault (on one node, or on all)."""
        with self.lock:
            for sim in ([self.nodes[node]] if node else self.nodes.values()):
                sim.down = False
                for d in sim.devices:
                    d.xid, d.celsius, d.npu_health, d.vanished, d.factor = 0, None, 1, False, 1.0

    # --- values --------------------------------------------------------------------------------------

    def _utilization(self, d: SimDevice) -> float:
        if not d.pod:
            return 0.0
        return max(0.0, min(100.0, (self.busy + self._rng.uniform(-4, 4)) * d.factor))

    @staticmethod
    def _temperature(d: SimDevice, util: float) -> float:
        return d.celsius if d.celsius is not None else round(38 + util * 0.3, 1)

    def _dcgm(self, node: SimNode) -> Iterator[Metric]:
        labels = [*DCGM_LABELS, node.hostname_label]
        fams = {
            "util": GaugeMetricFamily("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", labels=labels),
            "mem": GaugeMetricFamily("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", labels=labels),
            "used": GaugeMetricFamily("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", labels=labels),
            "free": GaugeMetricFamily("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", labels=labels),
            "temp": GaugeMetricFamily("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", labels=labels),
            "power": GaugeMetricFamily("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", labels=labels),
            "xid": GaugeMetricFamily("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.",
                                     labels=labels),
        }
        for d in node.devices:
            if d.vanished:
                continue
            util = self._utilization(d)
            used = round(d.memory_mib * 0.85) if d.pod else 0
            values = [str(d.index), d.uuid, f"00000000:{0x18 + d.index:02X}:00.0", f"nvidia{d.index}", node.model,
                      node.driver, "trainer" if d.pod else "", d.namespace, d.pod, node.name]
            fams["util"].add_metric(values, round(util))
            fams["mem"].add_metric(values, round(util * 0.4))
            fams["used"].add_metric(values, used)
            fams["free"].add_metric(values, d.memory_mib - used)
            fams["temp"].add_metric(values, self._temperature(d, util))
            fams["power"].add_metric(values, round(70 + util * 6.3, 1))
            fams["xid"].add_metric(values, d.xid)
        yield from fams.values()

    def _npu(self, node: SimNode) -> Iterator[Metric]:
        labels = list(NPU_LABELS)
        fams = {
            "util": GaugeMetricFamily("npu_chip_info_utilization", "the ai core utilization", labels=labels),
            "used": GaugeMetricFamily("npu_chip_info_hbm_used_memory", "the npu hbm used memory", labels=labels),
            "total": GaugeMetricFamily("npu_chip_info_hbm_total_memory", "the npu hbm total memory", labels=labels),
            "health": GaugeMetricFamily("npu_chip_info_health_status", "the npu health status", labels=labels),
            "temp": GaugeMetricFamily("npu_chip_info_temperature", "the npu temperature", labels=labels),
            "power": GaugeMetricFamily("npu_chip_info_power", "the npu power", labels=labels),
        }
        for d in node.devices:
            if d.vanished:
                continue
            util = self._utilization(d)
            values = [str(d.index), node.model, "0", f"0000:{0xc1 + d.index:02x}:00.0", d.namespace, d.pod,
                      "trainer" if d.pod else ""]
            fams["util"].add_metric(values, round(util))
            fams["used"].add_metric(values, round(d.memory_mib * 0.8) if d.pod else 0)
            fams["total"].add_metric(values, d.memory_mib)
            fams["health"].add_metric(values, d.npu_health)
            fams["temp"].add_metric(values, self._temperature(d, util))
            fams["power"].add_metric(values, round(90 + util * 2.9, 1))
        yield from fams.values()
        nums = GaugeMetricFamily("machine_npu_nums", "Amount of npu installed on the machine.")
        nums.add_metric([], len(node.devices))
        yield nums

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

            def do_GET(self) -> None:  # noqa: N802
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

            def do_POST(self) -> None:  # noqa: N802
                if urlparse(self.path).path.strip("/") != "faults":
                    return self._send(404, b"not found\n")
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                    fleet.inject(body["kind"], body["node"], body.get("device", 0), body.get("value"))
                except (ValueError, KeyError, IndexError, TypeError) as exc:
                    kinds = ", ".join(f.value for f in Fault)
                    return self._send(400, f"bad fault {exc!r}: send {{kind: {kinds}; node; device?; "
                                           f"value?}}\n".encode())
                self._send(200, b"ok\n")

            def do_DELETE(self) -> None:  # noqa: N802
                url = urlparse(self.path)
                if url.path.strip("/") != "faults":
                    return self._send(404, b"not found\n")
                node = (parse_qs(url.query).get("node") or [None])[0]
                try:
                    fleet.clear(node)
                except KeyError:
                    return self._send(404, b"no such node\n")
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

    def targets(self) -> list[dict[str, str]]:
        """One scrape target per node: what a Prometheus config needs."""
        return [{"node": n.name, "family": n.family, "region": n.region, "path": f"/nodes/{n.name}/metrics"}
                for n in self.nodes.values()]

    def faults(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        with self.lock:
            for n in self.nodes.values():
                if n.down:
                    out.append({"node": n.name, "kind": Fault.EXPORTER_DOWN.value})
                for d in n.devices:
                    active = {Fault.FATAL_XID: bool(d.xid), Fault.OVERHEAT: d.celsius is not None,
                              Fault.NPU_UNHEALTHY: d.npu_health != 1, Fault.VANISH: d.vanished,
                              Fault.STRAGGLE: d.factor != 1.0}
                    out += [{"node": n.name, "device": d.index, "kind": k.value} for k, on in active.items() if on]
        return out


def _sim_node(obj: Mapping[str, Any], i: int, rng: random.Random) -> SimNode | None:
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
            hostname_label="Hostname" if i % 2 == 0 else "hostname")
        node.devices = [SimDevice(k, f"GPU-{uuid.UUID(int=rng.getrandbits(128))}", memory) for k in range(count)]
        return node
    return None
