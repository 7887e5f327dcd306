"""The node lifecycle controller of the emulated cluster's control plane (kube-controller-manager v1.32,
pkg/controller/nodelifecycle: monitorNodeHealth, tryUpdateNodeHealth, and the taints of TaintNodesByCondition and
taint-based eviction).

Every `interval` (--node-monitor-period, 5 s) it looks at each Node's Ready condition and its Lease in
kube-node-lease. The grace period runs on the controller's own clock from when it last saw something new (its
probeTimestamp: a new lastHeartbeatTime on Ready, or a new Lease renewTime), not from those stamps. A node with
nothing new for `grace_s` (--node-monitor-grace-period, 50 s since v1.32) is marked Ready Unknown (reason
NodeStatusUnknown, "Kubelet stopped posting node status.", its last heartbeat kept) with an Event NodeNotReady.
Its taints follow Ready: Unknown -> node.kubernetes.io/unreachable, False -> node.kubernetes.io/not-ready, True ->
neither; each NoSchedule and NoExecute. Not emulated: the other node conditions (the emulated nodes report only
Ready), zone states and rate-limited evictions (the taint-eviction controller, `tainteviction`, does the evicting).
"""

from __future__ import annotations

import datetime
import functools
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kubernetes
from kubernetes.client import ApiException

from heterojob.kube.convert import ready_condition
from heterojob.sim.cluster.heartbeats import LEASE_NAMESPACE
from heterojob.sim.cluster.informer import DictInformer
from heterojob.sim.cluster.nodes import NOT_READY_TAINT, UNREACHABLE_TAINT
from heterojob.sim.cluster.stepping import Stepping

log = logging.getLogger(__name__)

CONTROLLER = "node-controller"
MONITOR_PERIOD_S = 5.0
GRACE_S = 50.0


@dataclass(frozen=True)
class NodeHealthData:
    probe: float  # the controller's clock when it last saw something new
    heartbeat: str  # the Ready condition's lastHeartbeatTime then
    renew: str  # the Lease's renewTime then


def _iso_now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def wanted_taint(ready: Mapping[str, Any] | None) -> str | None:
    status = (ready or {}).get("status")
    return UNREACHABLE_TAINT if status == "Unknown" else NOT_READY_TAINT if status == "False" else None


class NodeLifecycle(Stepping):
    def __init__(self, api: kubernetes.client.ApiClient, interval: float = MONITOR_PERIOD_S,
                 grace_s: float = GRACE_S) -> None:
        super().__init__(CONTROLLER, interval)
        self.core = kubernetes.client.CoreV1Api(api)
        self.coordination = kubernetes.client.CoordinationV1Api(api)
        self.grace_s = grace_s
        self.health: dict[str, NodeHealthData] = {}
        self.nodes = DictInformer(self.core.list_node, "nodes")
        self.leases = DictInformer(functools.partial(self.coordination.list_namespaced_lease, LEASE_NAMESPACE),
                                   "leases")

    def start(self) -> NodeLifecycle:
        """Watch Nodes and Leases from now on (a step by hand lists them afresh)."""
        self.nodes.start()
        self.leases.start()
        super().start()
        return self

    def stop(self) -> None:
        super().stop()
        self.nodes.stop()
        self.leases.stop()

    def step(self, now: float) -> None:
        for informer in (self.nodes, self.leases):
            if not informer.watching:
                informer.relist()
            informer.drain()  # the controller reads the whole cache each period, as monitorNodeHealth does
        nodes = self.nodes.items()
        renewed = {(lease.get("metadata") or {}).get("name"): str((lease.get("spec") or {}).get("renewTime") or "")
                   for lease in self.leases.items()}
        names = set()
        for node in nodes:
            name = node["metadata"]["name"]
            names.add(name)
            ready = ready_condition(node)
            heartbeat = str((ready or {}).get("lastHeartbeatTime") or "")
            seen = self.health.get(name)
            if seen is None or seen.heartbeat != heartbeat or seen.renew != renewed.get(name, ""):
                seen = self.health[name] = NodeHealthData(now, heartbeat, renewed.get(name, ""))
            try:
                if now - seen.probe > self.grace_s and (ready or {}).get("status") != "Unknown":
                    ready = self._mark_unknown(node, ready)
                self._sync_taints(node, ready)
            except ApiException as exc:
                if exc.status != 404:  # gone since the list
                    log.warning("node %s not updated (%s): again next step", name, exc.status)
        for gone in set(self.health) - names:
            del self.health[gone]

    def _mark_unknown(self, node: Mapping[str, Any], ready: Mapping[str, Any] | None) -> dict[str, Any]:
        name = node["metadata"]["name"]
        condition = {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                     "message": "Kubelet stopped posting node status.", "lastTransitionTime": _iso_now(),
                     "lastHeartbeatTime": (ready or {}).get("lastHeartbeatTime")}
        self.core.patch_node_status(name, {"status": {"conditions": [condition]}}, _preload_content=False)
        self._event(node)
        return condition

    def _sync_taints(self, node: Mapping[str, Any], ready: Mapping[str, Any] | None) -> None:
        taints = [t for t in (node.get("spec") or {}).get("taints") or [] if isinstance(t, dict)]
        mine = {(t.get("key"), t.get("effect")) for t in taints if t.get("key") in (UNREACHABLE_TAINT, NOT_READY_TAINT)}
        taint = wanted_taint(ready)
        want = {(taint, "NoSchedule"), (taint, "NoExecute")} if taint else set()
        if mine == want:
            return
        kept = [t for t in taints if t.get("key") not in (UNREACHABLE_TAINT, NOT_READY_TAINT)]
        stamp = _iso_now()
        kept += [{"key": key, "effect": effect, "timeAdded": stamp} for key, effect in sorted(want)]
        self.core.patch_node(node["metadata"]["name"], {"spec": {"taints": kept or None}}, _preload_content=False)

    def _event(self, node: Mapping[str, Any]) -> None:
        """What the controller's recorder posts on the Node (Normal NodeNotReady)."""
        name = node["metadata"]["name"]
        stamp = _iso_now()
        body = {"metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": "default"},
                "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": name,
                                   "uid": node["metadata"].get("uid")},
                "reason": "NodeNotReady", "message": f"Node {name} status is now: NodeNotReady", "type": "Normal",
                "source": {"component": CONTROLLER}, "reportingComponent": CONTROLLER, "reportingInstance": "",
                "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1}
        try:
            self.core.create_namespaced_event("default", body, _preload_content=False)
        except ApiException as exc:
            log.debug("event for node %s not posted: %s", name, exc.status)
