"""What the console reads from the Kubernetes API: one snapshot of nodes, pods, jobs, quotas and regions.

Every page reads through `read_cluster` (cached for a few seconds by `pages.cluster`), so every figure on
every page comes from the same objects. The vocabulary (definitions in `kpis`):

- accelerators: GPUs and NPUs, the extended resources of the AcceleratorClasses (nvidia.com/gpu,
  huawei.com/Ascend910); CPU cores are counted apart, never as "devices";
- held: what the scheduled, non-terminated pods request of a node's class resource -- what
  `kubectl describe node` lists under "Allocated resources" (`kube.convert.pod_holds`, as the operator counts
  the pods it does not manage);
- a node's class and region: the operator's (`engine.fleet.Fleet.class_of`, `region_of`): "-" for a node no
  AcceleratorClass or no Region selects;
- queue: a waiting job's position in the order the operator plans the queue (`preview.queue_positions`).

With member clusters (docs/multicluster.md), nodes and pods are read from each member too (`members`:
the member column says which cluster, "manager" for the manager's own); jobs, quotas, classes and
Regions are the manager's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kubernetes
import pandas as pd

from heterojob.constants import GROUP, LABEL_GENERATION, LABEL_JOB, VERSION
from heterojob.engine import discovery
from heterojob.engine.fleet import DeviceClass, Fleet
from heterojob.kube import convert
from heterojob.kube.api import load_client

from heterojob_console import members as member_clusters
from heterojob_console import preview

DONE = ("Succeeded", "Failed")


def utilization(status: Mapping[str, Any]) -> float | None:
    """A job's status.utilization.average while it holds devices (a placement, not finished), else None (shown
    as none, never 0): the operator clears the figure when the placement ends (controller/status.py), so
    kubectl's Util column and the console agree, for objects a previous operator version left stale as well."""
    placement, figures = status.get("placement"), status.get("utilization")
    if not placement or status.get("phase") in DONE or not isinstance(figures, Mapping):
        return None
    average = figures.get("average")
    return float(average) if isinstance(average, (int, float)) and not isinstance(average, bool) else None
NODE_COLUMNS = ["node", "region", "class", "kind", "resource", "capacity", "declared", "held", "ready", "schedulable",
                "reason", "software", "network", "member", "unreachable"]
JOB_COLUMNS = ["namespace", "name", "priority", "phase", "class", "region", "member", "replicas", "devices",
               "utilization", "generation", "migrations", "queue", "migrate_requested", "message", "created"]
POD_COLUMNS = ["namespace", "pod", "job", "member", "node", "phase", "generation"]  # heterojob's pods, any phase


@dataclass
class Cluster:
    """The cluster at `at`: plain tables for the pages, the raw objects for the planner preview."""

    at: datetime
    nodes: pd.DataFrame  # one row per node (NODE_COLUMNS)
    jobs: pd.DataFrame  # one row per HeteroJob (JOB_COLUMNS)
    regions: pd.DataFrame  # region, city, name, latitude, longitude
    links: pd.DataFrame  # a, b, bandwidth_gbps, latency_ms (each link once)
    classes: dict[str, DeviceClass] = field(default_factory=dict)
    objects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # kind -> raw objects
    pods_by_node: dict[str, list[dict[str, str]]] = field(default_factory=dict)  # node -> [{pod, job, held}]
    members: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=member_clusters.COLUMNS))
    pods: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=POD_COLUMNS))  # heterojob's pods

    @property
    def job_objects(self) -> list[dict[str, Any]]:
        return self.objects.get("HeteroJob", [])

    def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return next((o for o in self.job_objects if o["metadata"]["namespace"] == namespace
                     and o["metadata"]["name"] == name), None)

    @property
    def namespaces(self) -> list[str]:
        found = {o["metadata"]["namespace"] for o in self.job_objects + self.objects.get("HeteroQuota", [])}
        return sorted(found)


def client(kubeconfig: str | None) -> kubernetes.client.ApiClient:
    return load_client(kubeconfig)


def _raw(call: Any, *args: Any) -> list[dict[str, Any]]:
    """A list call's items as plain JSON (10x faster than the client's models on large fleets)."""
    return list(json.loads(call(*args, _preload_content=False).data).get("items") or [])


def read_cluster(api: kubernetes.client.ApiClient) -> Cluster:
    core, custom = kubernetes.client.CoreV1Api(api), kubernetes.client.CustomObjectsApi(api)
    at = datetime.now(UTC)

    class_objs = custom.list_cluster_custom_object(GROUP, VERSION, "acceleratorclasses")["items"]
    region_objs = custom.list_cluster_custom_object(GROUP, VERSION, "regions")["items"]
    job_objs = custom.list_cluster_custom_object(GROUP, VERSION, "heterojobs")["items"]
    quota_objs = custom.list_cluster_custom_object(GROUP, VERSION, "heteroquotas")["items"]
    classes = {o["metadata"]["name"]: c for o in class_objs if (c := convert.device_class(o))}
    regions_info = {o["metadata"]["name"]: r for o in region_objs if (r := convert.region_info(o))}
    node_objs = _raw(core.list_node)
    all_pods = [(member_clusters.LOCAL, p) for p in _raw(core.list_pod_for_all_namespaces)]
    node_member = {o["metadata"]["name"]: member_clusters.LOCAL for o in node_objs}
    member_reads = member_clusters.read(core, region_objs)
    for read in member_reads:  # node names are unique across members (the operator ignores duplicates too)
        node_objs += [o for o in read.nodes if node_member.setdefault(o["metadata"]["name"], read.region)
                      == read.region]
        all_pods += [(read.region, p) for p in read.pods]
    away = {read.region for read in member_reads if not read.reachable}  # their nodes and pods: as last read
    pod_objs = [p for _, p in all_pods
                if (p.get("spec") or {}).get("nodeName") and (p.get("status") or {}).get("phase") not in DONE]

    views = {o["metadata"]["name"]: convert.node_view(o) for o in node_objs}
    layout = Fleet(nodes=views, classes=classes, regions=regions_info)  # the operator's class and region of a node
    node_class: dict[str, DeviceClass | None] = {name: layout.class_of(view) for name, view in views.items()}
    held: dict[str, int] = {}
    pods_by_node: dict[str, list[dict[str, str]]] = {}
    for pod in pod_objs:
        node = pod["spec"]["nodeName"]
        cls = node_class.get(node)
        n = convert.pod_holds(pod).get((node, cls.resource_name), 0) if cls else 0
        held[node] = held.get(node, 0) + n
        meta = pod["metadata"]
        job = (meta.get("labels") or {}).get(LABEL_JOB, "")
        pods_by_node.setdefault(node, []).append({
            "pod": f"{meta['namespace']}/{meta['name']}", "job": f"{meta['namespace']}/{job}" if job else "",
            "held": str(n)})

    nodes = []
    for name, view in views.items():
        cls = node_class[name]
        member = node_member.get(name, member_clusters.LOCAL)
        unreachable = member in away  # its member does not answer: not ready (the operator sees it so too)
        nodes.append({"node": name, "region": layout.region_of(view) or "-", "class": cls.name if cls else "-",
                      "kind": ("cpu" if cls.resource_name == "cpu" else "accelerator") if cls else "-",
                      "resource": cls.resource_name if cls else "",
                      "capacity": view.allocatable.get(cls.resource_name, 0) if cls else 0,
                      # status.capacity: every device, a failed one too (allocatable leaves out what its plugin
                      # reports unhealthy), what the exporters' devices are counted against
                      "declared": max(view.capacity.get(cls.resource_name, 0), view.allocatable.get(cls.resource_name, 0))
                      if cls else 0,
                      "held": held.get(name, 0), "ready": view.ready and not unreachable,
                      "schedulable": view.schedulable,
                      "reason": f"member cluster {member} unreachable" if unreachable else view.reason,
                      # what placement checks a job's `requires` against, from the node's own labels
                      "software": ", ".join(f"{k} {v}" for k, v in sorted(view.software.items())),
                      "network": ", ".join(discovery.network_features(view.labels)),
                      "member": member, "unreachable": unreachable})

    regions = [{"region": o["metadata"]["name"], "city": o["spec"]["location"].get("city", o["metadata"]["name"]),
                "name": o["spec"].get("displayName") or o["metadata"]["name"],
                "latitude": float(o["spec"]["location"]["latitude"]),
                "longitude": float(o["spec"]["location"]["longitude"])}
               for o in region_objs if ((o.get("spec") or {}).get("location") or {}).get("latitude") is not None]
    seen: set[tuple[str, str]] = set()
    links = []
    for o in region_objs:
        a = o["metadata"]["name"]
        for link in (o.get("spec") or {}).get("links") or []:
            b = link.get("region")
            pair = (min(a, b), max(a, b))
            if not b or pair in seen:
                continue
            seen.add(pair)
            links.append({"a": a, "b": b, "bandwidth_gbps": link.get("bandwidthGbps"),
                          "latency_ms": link.get("latencyMs")})
    pods = [{"namespace": meta["namespace"], "pod": meta["name"], "job": labels[LABEL_JOB], "member": member,
             "node": (pod.get("spec") or {}).get("nodeName") or "",
             # a pod in a member that does not answer: its phase is not known now (as kubectl shows a lost node's)
             "phase": "Unknown" if member in away else (pod.get("status") or {}).get("phase"),
             "generation": labels.get(LABEL_GENERATION, "")}
            for member, pod in all_pods
            if LABEL_JOB in (labels := ((meta := pod["metadata"]).get("labels") or {}))]
    cluster = Cluster(  # its jobs table next: a waiting job's queue position is planned from the cluster
        at=at, nodes=pd.DataFrame(nodes, columns=NODE_COLUMNS), jobs=pd.DataFrame(columns=JOB_COLUMNS),
        regions=pd.DataFrame(regions, columns=["region", "city", "name", "latitude", "longitude"]),
        links=pd.DataFrame(links, columns=["a", "b", "bandwidth_gbps", "latency_ms"]), classes=classes,
        objects={"HeteroJob": job_objs, "HeteroQuota": quota_objs, "AcceleratorClass": class_objs,
                 "Region": region_objs, "Node": node_objs, "Pod": pod_objs},
        pods_by_node=pods_by_node, members=member_clusters.frame(member_reads),
        pods=pd.DataFrame(pods, columns=POD_COLUMNS))
    queue = preview.queue_positions(cluster, at.timestamp())
    jobs = []
    for obj in job_objs:
        meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
        p = status.get("placement") or {}
        live = bool(p) and status.get("phase") not in DONE
        key = f"{meta['namespace']}/{meta['name']}"
        jobs.append({
            "namespace": meta["namespace"], "name": meta["name"], "priority": spec.get("priority", "medium"),
            "phase": status.get("phase") or "New", "class": p.get("deviceClass"), "region": p.get("region"),
            "member": (p.get("cluster") or member_clusters.LOCAL) if p else None,
            "replicas": p.get("replicas"),
            "devices": int(p.get("replicas", 0)) * int(p.get("perReplica", 0)) if live else 0,
            "utilization": utilization(status),
            "generation": p.get("generation") or status.get("lastGeneration") or None,
            "migrations": sum(1 for h in status.get("history") or [] if h.get("action") == "migrate"),
            "queue": queue.get(key),
            "migrate_requested": ((meta.get("annotations") or {}).get("heterojob.io/migrate") or ""),
            "message": status.get("message") or "", "created": meta.get("creationTimestamp"),
        })
    frame = pd.DataFrame(jobs, columns=JOB_COLUMNS)
    frame["created"] = pd.to_datetime(frame["created"], utc=True, errors="coerce")
    cluster.jobs = frame
    return cluster


def moves(cluster: Cluster, since: datetime) -> pd.DataFrame:
    """Cross-region moves since `since`: one row per history entry (job, time, from, to regions)."""
    rows = []
    for o in cluster.job_objects:
        meta = o["metadata"]
        for h in (o.get("status") or {}).get("history") or []:
            if h.get("action") not in ("migrate", "resize") or not h.get("from") or not h.get("to"):
                continue
            a, b = str(h["from"]).split("/")[0], str(h["to"]).split("/")[0]
            when = pd.to_datetime(h.get("time"), utc=True, errors="coerce")
            if a != b and when is not pd.NaT and when >= since:
                rows.append({"job": f"{meta['namespace']}/{meta['name']}", "time": when, "from": a, "to": b,
                             "reason": h.get("reason", "")})
    return pd.DataFrame(rows, columns=["job", "time", "from", "to", "reason"])
