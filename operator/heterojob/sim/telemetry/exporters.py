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
  fell-off-bus [code=79] (a GPU reports nothing but its XID; an NPU chip nothing but its health, 0)

`DELETE /faults[?node=N[&device=D]]` (`ExporterFleet.clear`) heals them: every node, one node, or one device.

`ExporterFleet.share` gives a device to several pods at once (time-sliced GPU, vNPUs of one chip).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from prometheus_client import CollectorRegistry

from heterojob.sim.telemetry.devices import (
    DEVICE_PLUGIN_SKIPPED_XIDS, ExporterProfile, Fault, SimDevice, SimNode, npu_unknown, sim_node,
)
from heterojob.sim.telemetry.metrics import ExporterMetrics, NodeCollector


class ExporterFleet(ExporterMetrics):
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
            node = sim_node(obj, i, self._rng, (profiles or {}).get(str((obj.get("metadata") or {}).get("name"))))
            if node is not None:
                self.nodes[node.name] = node
                registry = CollectorRegistry(auto_describe=False)
                registry.register(NodeCollector(self, node))
                self._registries[node.name] = registry
        self._server: ThreadingHTTPServer | None = None

    # --- what runs where ---------------------------------------------------------------------------

    def bind(self, bindings: Mapping[str, Iterable[tuple[str, str, int]]]) -> None:
        """node -> [(namespace, pod, devices)]: the pods now holding each node's devices (others idle). As the
        kubelet's device manager allocates them: a pod keeps the devices it was given for as long as it holds them
        (one that fails under it stays its own); a new pod gets free devices its device plugin reports healthy
        (`unhealthy_devices`), lowest index first, never one reported unhealthy."""
        with self.lock:
            for name, node in self.nodes.items():
                wanted: dict[tuple[str, str], int] = {}
                for namespace, pod, count in bindings.get(name, ()):
                    wanted[(namespace, pod)] = wanted.get((namespace, pod), 0) + count
                held: dict[tuple[str, str], int] = {}
                for device in node.devices:
                    key = (device.namespace, device.pod)
                    if device.pod and held.get(key, 0) < wanted.get(key, 0):
                        held[key] = held.get(key, 0) + 1
                    else:
                        device.namespace = device.pod = ""
                free = iter([d for d in node.devices if not d.pod and _plugin_healthy(d)])
                for (namespace, pod), count in wanted.items():
                    for _ in range(count - held.get((namespace, pod), 0)):
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
        """Inject `fault` on `node` (device index `device`; exporter-down is node-wide). KeyError if the node or
        device is unknown; ValueError for a fault that is not one (naming them) or not of the node's exporter (an
        NPU's health on a GPU node, an XID on an NPU node)."""
        try:
            fault = Fault(fault)
        except ValueError:
            raise ValueError(f"unknown fault {fault!r}: one of {', '.join(f.value for f in Fault)}") from None
        with self.lock:
            sim = self._node(node)
            family = FAULT_FAMILY.get(fault)
            if family is not None and family != sim.family:
                raise ValueError(f"{fault.value} is a fault of {FAMILY_NAMES[family]} nodes; {node} has "
                                 f"{FAMILY_NAMES.get(sim.family, sim.family)} ({sim.model})")
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
                d.npu_health = npu_unknown(sim.profile.version)
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
            elif fault == Fault.FELL_OFF_BUS:
                d.off_bus = True
                if sim.family == "dcgm":
                    d.xid, d.xid_at = int(value or 79), time.time()
                else:
                    d.npu_health = 0

    def _node(self, node: str) -> SimNode:
        """The simulated node; KeyError naming the nodes that exist."""
        if node not in self.nodes:
            known = sorted(self.nodes)
            raise KeyError(f"no node {node!r} among the simulated exporters ({len(known)} accelerator nodes: "
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
                    d.uncollected, d.network, d.link, d.off_bus = False, 1, 1, False

    def unhealthy_devices(self) -> dict[str, int]:
        """node -> devices its device plugin reports Unhealthy to the kubelet (which then lowers the Node's
        allocatable): NVIDIA's k8s-device-plugin on an XID outside the application-error list it skips
        (13, 31, 43, 45, 68, 109), the Ascend device plugin on an unhealthy chip. A node whose exporter is
        down or whose device vanished from the exporter is not a device-plugin fault."""
        with self.lock:
            out: dict[str, int] = {}
            for name, sim in self.nodes.items():
                bad = sum(1 for d in sim.devices if not _plugin_healthy(d))
                if bad:
                    out[name] = bad
            return out

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
                except ValueError as exc:  # not a fault, or not one of this node's exporter: said as such
                    return self._send(400, f"{exc}\n".encode())
                except (IndexError, TypeError) as exc:
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


# the faults only one exporter family has (the others: every node's)
FAULT_FAMILY = {Fault.FATAL_XID: "dcgm", Fault.APPLICATION_XID: "dcgm", Fault.NPU_UNHEALTHY: "npu-exporter",
                Fault.NPU_UNKNOWN: "npu-exporter", Fault.NPU_NETWORK_DOWN: "npu-exporter",
                Fault.NPU_LINK_DOWN: "npu-exporter"}
FAMILY_NAMES = {"dcgm": "NVIDIA GPU (dcgm-exporter)", "npu-exporter": "Ascend NPU (npu-exporter)"}


def _plugin_healthy(device: SimDevice) -> bool:
    """Whether its device plugin reports it healthy to the kubelet: NVIDIA's k8s-device-plugin marks a GPU unhealthy
    on an XID outside the application errors it skips, the Ascend device plugin a chip whose health is 0."""
    return not ((device.xid and device.xid not in DEVICE_PLUGIN_SKIPPED_XIDS) or device.npu_health == 0)
