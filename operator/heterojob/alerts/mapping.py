"""Which running jobs an alert is about, and what it asks for (pure).

Labels are read the way exporters and rules spell them (docs/telemetry.md): the workload pod
(`exported_namespace` + `exported_pod`, else `namespace` + `pod` or `pod_name`) when it is one of ours, else the node (`Hostname`, `hostname`, `node`, `instance` host),
else the device (`UUID`/`uuid`, resolved to its node through the telemetry snapshot). The action comes
from the alert's `heterojob_action` annotation, else from the alertname table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

MIGRATE = "migrate"  # checkpoint, then move off the named node(s)
MIGRATE_NOW = "migrate-now"  # the device is gone: restore from the last checkpoint, do not wait
CHECKPOINT = "checkpoint"  # save now, stay put
IGNORE = "ignore"
ACTIONS = (MIGRATE, MIGRATE_NOW, CHECKPOINT, IGNORE)

# the rules shipped in manifests/ (alertname -> action); `--alert-action NAME=ACTION` adds or overrides
DEFAULT_TABLE: dict[str, str] = {
    "HeteroJobGPUFatalXID": MIGRATE_NOW,
    "HeteroJobNPUUnhealthy": MIGRATE_NOW,
    "HeteroJobDeviceVanished": MIGRATE_NOW,
    "HeteroJobExporterDown": IGNORE,  # missing telemetry is never a fault
    "HeteroJobGPUOverheat": MIGRATE,
    "HeteroJobLowUtilization": IGNORE,  # resize handles it from the job's own telemetry
}

_POD = re.compile(r"^(?P<job>[a-z0-9]([-a-z0-9]*[a-z0-9])?)-g(?P<generation>\d+)-(?P<rank>\d+)$")


@dataclass(frozen=True)
class Placed:
    """A running job as the mapping needs it."""

    namespace: str
    name: str
    generation: int
    nodes: tuple[str, ...]  # by rank

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Hit:
    job: str  # namespace/name
    nodes: tuple[str, ...]  # the nodes the alert is about (to leave)


def action_for(labels: Mapping[str, str], annotations: Mapping[str, str], table: Mapping[str, str]) -> str | None:
    wanted = (annotations.get("heterojob_action") or "").strip().lower()
    if wanted in ACTIONS:
        return wanted
    return table.get(labels.get("alertname", ""))


def node_of(labels: Mapping[str, str]) -> str:
    for name in ("Hostname", "hostname", "node", "kubernetes_node", "node_name"):
        if labels.get(name):
            return labels[name]
    instance = labels.get("instance", "")
    return instance.rsplit(":", 1)[0] if instance else ""


def _workload_pod(labels: Mapping[str, str]) -> tuple[str, str]:
    """The workload pod an alert names: `exported_namespace`/`exported_pod` first (scraped through a
    ServiceMonitor with honorLabels false, `namespace`/`pod` are the exporter's own: docs/telemetry.md)."""
    namespace = labels.get("exported_namespace") or ""
    pod = labels.get("exported_pod") or labels.get("exported_pod_name") or ""
    if namespace and pod:
        return namespace, pod
    return (labels.get("namespace") or labels.get("pod_namespace") or "",
            labels.get("pod") or labels.get("pod_name") or "")


def jobs_for(labels: Mapping[str, str], running: Mapping[str, Placed],
             device_nodes: Mapping[str, str] | None = None) -> list[Hit]:
    """The running jobs an alert names, each with the nodes concerned; [] when it names none of ours.

    A pod that is not one of ours (e.g. the exporter's own pod, `gpu-operator/nvidia-dcgm-exporter-x7k2p`)
    does not end the search: the alert falls back to its node, then its device. A pod that is ours but of
    an older placement generation is about a gang that is gone: it names nothing.
    """
    namespace, pod = _workload_pod(labels)
    m = _POD.match(pod) if namespace and pod else None
    if m is not None and f"{namespace}/{m['job']}" in running:
        job = running[f"{namespace}/{m['job']}"]
        rank = int(m["rank"])
        if job.generation != int(m["generation"]) or rank >= len(job.nodes):
            return []
        return [Hit(job.key, (node_of(labels) or job.nodes[rank],))]
    node = node_of(labels)
    if not node:
        uuid = labels.get("UUID") or labels.get("uuid") or ""
        node = (device_nodes or {}).get(uuid, "")
    if not node:
        return []
    return [Hit(job.key, (node,)) for job in sorted(running.values(), key=lambda j: j.key) if node in job.nodes]
