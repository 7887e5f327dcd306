"""Which running jobs an alert is about, and what it asks for (pure).

Labels are read the way exporters and rules spell them (docs/telemetry.md): the workload pod
(`exported_namespace` + `exported_pod`, `pod_name`, else `namespace` + `pod`) when it is one of ours, else the
node (a relabelled node label: `exported_node`, `node`, `kubernetes_node`, `node_name`, `nodename`, ...; then
`Hostname`, `hostname`, the `exported_instance` or `instance` host, `job`: the first that names a node one of our
jobs runs on), else the device (`UUID`/`uuid`,
resolved to its node through the telemetry snapshot). The action comes
from the alert's `heterojob_action` annotation, else from the alertname table.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from heterojob.state.cache import Placed
from heterojob.telemetry.labels import HOST_LABELS, JOB_LABELS, RELABELLED_NODE_LABELS, host_of

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
class Hit:
    job: str  # namespace/name
    nodes: tuple[str, ...]  # the nodes the alert is about (to leave)


def action_for(labels: Mapping[str, str], annotations: Mapping[str, str], table: Mapping[str, str]) -> str | None:
    wanted = (annotations.get("heterojob_action") or "").strip().lower()
    if wanted in ACTIONS:
        return wanted
    return table.get(labels.get("alertname", ""))


# Where an alert's labels name a node, most trusted first (docs/telemetry.md): `exported_node` is the series' own
# `node` when the scrape target also had one (kube-state-metrics through a ServiceMonitor that relabels the
# target's node: `node` is then the scraper's); then the label relabelled from __meta_kubernetes_pod_node_name;
# then dcgm-exporter's Hostname (the exporter pod's name unless NODE_NAME is set); then the scrape target's host
# (`exported_instance`: the original target behind a federation or honor_labels false); last `job`, which
# npu-exporter's documented Prometheus job sets to the node (never taken unless it names a known node).
NODE_LABELS = (*RELABELLED_NODE_LABELS, *HOST_LABELS)
INSTANCE_LABELS = ("exported_instance", "instance")
DEVICE_LABELS = ("UUID", "uuid")


def device_of(labels: Mapping[str, str], node: str) -> str:
    """The device an alert names, as the telemetry snapshot names it (telemetry/adapters.py): a GPU's `UUID`
    (a MIG instance `<UUID>/mig-<GPU_I_ID>`), an Ascend chip `<node>/npu-<id>`; "" when it names none."""
    uuid = next((labels[n] for n in DEVICE_LABELS if labels.get(n)), "")
    if uuid:
        gi = labels.get("GPU_I_ID") or ""
        return f"{uuid}/mig-{gi}" if gi else uuid
    chip = labels.get("id") or ""
    return f"{node}/npu-{chip}" if chip and node else ""


def node_candidates(labels: Mapping[str, str]) -> list[str]:
    """Every node name an alert's labels may mean, most trusted first, without repeats."""
    found = [labels.get(name) or "" for name in NODE_LABELS]
    found += [host_of(labels.get(name) or "") for name in INSTANCE_LABELS]
    return list(dict.fromkeys(n for n in found if n))


def _job_node(labels: Mapping[str, str], known: Collection[str]) -> str:
    return next((labels[n] for n in JOB_LABELS if labels.get(n) in known), "")


def node_of(labels: Mapping[str, str], known: Collection[str] | None = None) -> str:
    """The node an alert names: its most trusted node label (`node_candidates`) that is one of the `known`
    Nodes (dcgm-exporter's Hostname may be the exporter pod's name), else its most trusted one; "" when none."""
    candidates = node_candidates(labels)
    if known is not None:
        return next((n for n in candidates if n in known), "") or _job_node(labels, known) or \
            (candidates[0] if candidates else "")
    return candidates[0] if candidates else ""


def _workload_pods(labels: Mapping[str, str]) -> list[tuple[str, str]]:
    """The (namespace, pod) pairs an alert may name as its workload, most trusted first: `exported_*` (scraped
    through a ServiceMonitor/PodMonitor with honorLabels false, `namespace`/`pod` are the exporter's own:
    docs/telemetry.md); npu-exporter's and --use-old-namespace's `pod_name`; then `namespace`/`pod`."""
    def get(name: str) -> str:
        return labels.get(name) or ""

    namespace = get("exported_namespace") or get("pod_namespace") or get("namespace")
    pairs = [(get("exported_namespace"), get("exported_pod") or get("exported_pod_name")),
             (namespace, get("pod_name")), (get("namespace") or get("pod_namespace"), get("pod"))]
    return [(ns, pod) for ns, pod in pairs if ns and pod]


def locatable(labels: Mapping[str, str]) -> bool:
    """Whether an alert names anything a job could be found by: a pod, a node or a device."""
    return bool(_workload_pods(labels) or node_candidates(labels) or any(labels.get(n) for n in DEVICE_LABELS))


def jobs_for(labels: Mapping[str, str], running: Mapping[str, Placed],
             device_nodes: Mapping[str, str] | None = None) -> list[Hit]:
    """The running jobs an alert names, each with the nodes concerned; [] when it names none of ours.

    A pod that is one of ours names its job, and the node is the one of the job's nodes its labels name, else
    the node its rank runs on (a host label that is an exporter pod's name or a pod IP names none of them,
    and a symptom about no node of the job would be ignored). A pod that is not
    one of ours (e.g. the exporter's own pod, `gpu-operator/nvidia-dcgm-exporter-x7k2p`) does not end the
    search: the alert falls back to its node labels, most trusted first, the first that names a node one of
    our jobs runs on; then its device. A pod that is ours but of an older placement generation is about a
    gang that is gone: it names nothing.
    """
    for namespace, pod in _workload_pods(labels):
        m = _POD.match(pod)
        if m is not None and f"{namespace}/{m['job']}" in running:
            job = running[f"{namespace}/{m['job']}"]
            rank = int(m["rank"])
            if job.generation != int(m["generation"]) or rank >= len(job.nodes):
                return []
            named = next((n for n in node_candidates(labels) if n in job.nodes), "")
            return [Hit(job.key, (named or job.nodes[rank],))]
    used = {node for job in running.values() for node in job.nodes}
    candidates = node_candidates(labels)
    node = next((n for n in candidates if n in used), "")
    if not node:
        uuid = next((labels[n] for n in DEVICE_LABELS if labels.get(n)), "")
        gi = labels.get("GPU_I_ID") or ""
        nodes = device_nodes or {}
        # a MIG instance is the device `<UUID>/mig-<GPU_I_ID>` in the snapshot (telemetry/adapters.py)
        node = (nodes.get(f"{uuid}/mig-{gi}", "") if uuid and gi else "") or nodes.get(uuid, "")
    if not node:
        return []
    return [Hit(job.key, (node,)) for job in sorted(running.values(), key=lambda j: j.key) if node in job.nodes]
