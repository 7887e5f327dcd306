"""What a kubelet posts to show its node is alive (v1.32: pkg/kubelet/nodelease, kubelet_node_status.go), played for
every node of the emulated cluster by the stand-in kubelet.

- The node's Lease (coordination.k8s.io/v1, namespace kube-node-lease, named for the node, owned by the Node,
  holderIdentity the node, leaseDurationSeconds 40) is created, then renewed every `renew_s` (the kubelet's
  renewInterval: a quarter of the lease duration, 10 s); `spec.renewTime` is a MicroTime.
- Node status is posted when it changes and otherwise every `report_s` (nodeStatusReportFrequency, 5 min):
  a new `lastHeartbeatTime` on the Ready condition, the rest as it stands (a node a fault made NotReady stays
  so; `nodes.set_node_lost`). A node with no Ready condition, or one the node lifecycle controller marked
  Unknown while its kubelet runs, gets Ready True (KubeletReady) at once, as a kubelet that answers again posts.
Each node has its own phase within the intervals (from its name), so thousands of nodes spread their writes
evenly; both intervals may be stretched for a large emulated fleet.
"""

from __future__ import annotations

import datetime
import logging
import zlib
from collections.abc import Collection, Mapping
from typing import Any

import kubernetes
from kubernetes.client import ApiException

from heterojob.kube.convert import ready_condition

log = logging.getLogger(__name__)

LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_S = 40  # nodeLeaseDurationSeconds
RENEW_S = 10.0  # renewInterval: 25% of the lease duration (pkg/kubelet/kubelet.go)
REPORT_S = 300.0  # nodeStatusReportFrequency


def micro_time(at: datetime.datetime | None = None) -> str:
    """metav1.MicroTime as JSON (RFC 3339 with microseconds)."""
    return (at or datetime.datetime.now(tz=datetime.UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _iso_now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _phase(name: str, period: float) -> float:
    return (zlib.crc32(name.encode()) % 1000) / 1000 * period


class Heartbeats:
    def __init__(self, core: kubernetes.client.CoreV1Api, renew_s: float = RENEW_S,
                 lease_duration_s: int = LEASE_DURATION_S, report_s: float = REPORT_S) -> None:
        self.core = core
        self.coordination = kubernetes.client.CoordinationV1Api(core.api_client)
        self.renew_s = renew_s
        self.lease_duration_s = lease_duration_s
        self.report_s = report_s
        self._lease_due: dict[str, float] = {}
        self._status_due: dict[str, float] = {}

    def beat(self, nodes: Mapping[str, dict[str, Any]], silent: Collection[str], now: float) -> None:
        """Renew the Leases and post the status heartbeats due at `now` (the step clock) for `nodes` (by name),
        but for the `silent` ones (their kubelet is down: they are due again the moment it answers)."""
        for gone in [n for n in self._lease_due if n not in nodes]:
            self._lease_due.pop(gone, None)
            self._status_due.pop(gone, None)
        for name, node in nodes.items():
            if name in silent:
                self._lease_due[name] = self._status_due[name] = now
                continue
            ready = ready_condition(node)
            if ready is None or ready.get("status") == "Unknown":
                self._post_ready(name)
                self._status_due[name] = now + self.report_s
                self._lease_due[name] = min(self._lease_due.get(name, now), now)
            if now >= self._lease_due.setdefault(name, now + _phase(name, self.renew_s)):
                self._renew(node)
                self._lease_due[name] = now + self.renew_s
            if now >= self._status_due.setdefault(name, now + _phase(name, self.report_s)):
                self._post_heartbeat(name)
                self._status_due[name] = now + self.report_s

    def _renew(self, node: Mapping[str, Any]) -> None:
        name = node["metadata"]["name"]
        spec = {"holderIdentity": name, "leaseDurationSeconds": self.lease_duration_s, "renewTime": micro_time()}
        try:
            self.coordination.patch_namespaced_lease(name, LEASE_NAMESPACE, {"spec": spec}, _preload_content=False)
            return
        except ApiException as exc:
            if exc.status != 404:
                raise
        owner = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"].get("uid")}
        try:
            self.coordination.create_namespaced_lease(LEASE_NAMESPACE, {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": LEASE_NAMESPACE, "ownerReferences": [owner]},
                "spec": spec}, _preload_content=False)
        except ApiException as exc:
            if exc.status != 409:  # made meanwhile: renewed next time
                raise

    def _post_heartbeat(self, name: str) -> None:
        """A new lastHeartbeatTime on Ready, nothing else (a strategic merge by condition type)."""
        try:
            self.core.patch_node_status(name, {"status": {"conditions": [
                {"type": "Ready", "lastHeartbeatTime": _iso_now()}]}}, _preload_content=False)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def _post_ready(self, name: str) -> None:
        now = _iso_now()
        try:
            self.core.patch_node_status(name, {"status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready "
                 "status", "lastHeartbeatTime": now, "lastTransitionTime": now}]}}, _preload_content=False)
        except ApiException as exc:
            if exc.status != 404:
                raise
