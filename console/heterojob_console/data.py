"""What the console reads from the Kubernetes API, and the snapshot (`snapshot.Cluster`) it makes of it: nodes,
per-node summaries of the pods, jobs, quotas and regions.

Every page reads through the poller's snapshot (`ui.cluster`, built by `watch.Watched` from a list-then-watch
cache shared by every session), so every figure on every page comes from the same objects; `read_cluster` is the
same snapshot from one paged read (tests, tools). The vocabulary (definitions in `kpis`):

- accelerators: GPUs and NPUs, the extended resources of the AcceleratorClasses (nvidia.com/gpu,
  huawei.com/Ascend910); CPU cores are counted apart, never as "devices";
- held: what the scheduled, non-terminated pods request of a node's class resource -- what
  `kubectl describe node` lists under "Allocated resources" (`kube.convert.pod_holds`, as the operator counts
  the pods it does not manage);
- a node's class and region: the operator's (`engine.capacity.fleet.Fleet.class_of`, `region_of`): "-" for a node no
  AcceleratorClass or no Region selects;
- queue: a waiting job's position in the order the operator plans the queue (`preview.queue_positions`).

Pods are kept as what the pages show of them (`pod_view`: its job, node, phase and what it holds), never whole.
With member clusters (docs/multicluster.md), nodes and pods are read from each member too (`members`:
the member column says which cluster, "manager" for the manager's own); jobs, quotas, classes and
Regions are the manager's.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import kubernetes
import pandas as pd

from heterojob.constants import GROUP, LABEL_GENERATION, LABEL_JOB, VERSION
from heterojob.engine.placing import discovery
from heterojob.engine.capacity.fleet import DeviceClass, Fleet, Node
from heterojob.kube import convert
from heterojob.kube.api import load_client

from heterojob_console import members as member_clusters
from heterojob_console import preview
from heterojob_console.snapshot import (  # noqa: F401 - re-exported: the pages' and tests' names for them
    DONE, JOB_COLUMNS, NODE_COLUMNS, POD_COLUMNS, Cluster, utilization,
)

PAGE = 500  # objects per list page (client-go's reflector pages the same): a large fleet in pieces, not one answer
PLURALS = {"AcceleratorClass": "acceleratorclasses", "Region": "regions", "HeteroJob": "heterojobs",
           "HeteroQuota": "heteroquotas"}
PodView = dict[str, Any]  # what the console keeps of a pod (`pod_view`)


def client(kubeconfig: str | None) -> kubernetes.client.ApiClient:
    return load_client(kubeconfig)


def pages(call: Callable[..., Any], *args: Any) -> list[dict[str, Any]]:
    """Every item of a list call, PAGE at a time (`limit`/`continue`), as plain JSON (10x faster than the
    client's models on large fleets)."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"limit": PAGE, **({"_continue": token} if token else {})}
        page = json.loads(call(*args, _preload_content=False, **kwargs).data)
        items += page.get("items") or []
        token = (page.get("metadata") or {}).get("continue") or None
        if not token:
            return items


def pod_view(pod: Mapping[str, Any]) -> PodView:
    """What the pages need of a pod: its job's labels, node and phase, and (bound and not finished) what it holds
    by (node, resource) and what of that a pod heterojob does not manage holds (the preview's foreign usage)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    labels = meta.get("labels") or {}
    phase = (pod.get("status") or {}).get("phase")
    node = spec.get("nodeName") or ""
    live = bool(node) and phase not in DONE
    holds = convert.pod_holds(pod) if live else {}
    return {"namespace": meta.get("namespace", ""), "name": meta.get("name", ""), "node": node, "phase": phase,
            "job": labels.get(LABEL_JOB), "generation": labels.get(LABEL_GENERATION, ""), "live": live,
            "holds": holds, "foreign": {} if LABEL_JOB in labels else holds}


def custom_lists(custom: kubernetes.client.CustomObjectsApi) -> dict[str, Callable[..., Any]]:
    """Each heterojob kind's cluster-wide list call, by kind (the plurals named here: the console's role is derived
    from these calls, tests/unit/test_manifests.py)."""
    named = (("AcceleratorClass", "acceleratorclasses"), ("Region", "regions"), ("HeteroJob", "heterojobs"),
             ("HeteroQuota", "heteroquotas"))
    return {kind: functools.partial(custom.list_cluster_custom_object, GROUP, VERSION, plural) for kind, plural in named}


def read_cluster(api: kubernetes.client.ApiClient) -> Cluster:
    """The cluster now, from one paged read of every kind (the console's pages read `watch.Watched`'s instead)."""
    core, custom = kubernetes.client.CoreV1Api(api), kubernetes.client.CustomObjectsApi(api)
    at = datetime.now(UTC)
    objs = {kind: pages(call) for kind, call in custom_lists(custom).items()}
    nodes = {o["metadata"]["name"]: convert.node_view(o) for o in pages(core.list_node)}
    pods = [pod_view(p) for p in pages(core.list_pod_for_all_namespaces)]
    return build(at, objs, nodes, pods, member_clusters.read(core, objs["Region"]))


def build(at: datetime, objs: Mapping[str, list[dict[str, Any]]], local_nodes: Mapping[str, Node],
          local_pods: Iterable[PodView], member_reads: list[member_clusters.MemberRead]) -> Cluster:
    """The snapshot from what was read: `objs` kind -> the manager's AcceleratorClass, Region, HeteroJob and
    HeteroQuota objects; its nodes (name -> the operator's view, `convert.node_view`: a node is kept as that, never
    whole) and pods (`pod_view`); each member's read."""
    class_objs, region_objs = objs.get("AcceleratorClass", []), objs.get("Region", [])
    job_objs, quota_objs = objs.get("HeteroJob", []), objs.get("HeteroQuota", [])
    classes = {o["metadata"]["name"]: c for o in class_objs if (c := convert.device_class(o))}
    regions_info = {o["metadata"]["name"]: r for o in region_objs if (r := convert.region_info(o))}
    views: dict[str, Node] = dict(local_nodes)
    node_member = dict.fromkeys(views, member_clusters.LOCAL)
    all_pods: list[tuple[str, PodView]] = [(member_clusters.LOCAL, p) for p in local_pods]
    for read in member_reads:  # node names are unique across members (the operator ignores duplicates too)
        for o in read.nodes:
            if node_member.setdefault(o["metadata"]["name"], read.region) == read.region:
                views[o["metadata"]["name"]] = convert.node_view(o)
        all_pods += [(read.region, pod_view(p)) for p in read.pods]
    away = {read.region for read in member_reads if not read.reachable}  # their nodes and pods: as last read

    layout = Fleet(nodes=views, classes=classes, regions=regions_info)  # the operator's class and region of a node
    node_class: dict[str, DeviceClass | None] = {name: layout.class_of(view) for name, view in views.items()}
    held: dict[str, int] = {}
    foreign: dict[tuple[str, str], int] = {}
    pods_by_node: dict[str, list[dict[str, str]]] = {}
    for _, pod in all_pods:
        if not pod["live"]:
            continue
        node = pod["node"]
        cls = node_class.get(node)
        n = pod["holds"].get((node, cls.resource_name), 0) if cls else 0
        held[node] = held.get(node, 0) + n
        for k, used in pod["foreign"].items():
            foreign[k] = foreign.get(k, 0) + used
        job = pod["job"]
        pods_by_node.setdefault(node, []).append({
            "pod": f"{pod['namespace']}/{pod['name']}", "job": f"{pod['namespace']}/{job}" if job else "",
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
    pods = [{"namespace": pod["namespace"], "pod": pod["name"], "job": pod["job"], "member": member,
             "node": pod["node"],
             # a pod in a member that does not answer: its phase is not known now (as kubectl shows a lost node's)
             "phase": "Unknown" if member in away else pod["phase"], "generation": pod["generation"]}
            for member, pod in all_pods if pod["job"] is not None]
    cluster = Cluster(  # its jobs table next: a waiting job's queue position is planned from the cluster
        at=at, nodes=pd.DataFrame(nodes, columns=NODE_COLUMNS), jobs=pd.DataFrame(columns=JOB_COLUMNS),
        regions=pd.DataFrame(regions, columns=["region", "city", "name", "latitude", "longitude"]),
        links=pd.DataFrame(links, columns=["a", "b", "bandwidth_gbps", "latency_ms"]), classes=classes,
        objects={"HeteroJob": job_objs, "HeteroQuota": quota_objs, "AcceleratorClass": class_objs,
                 "Region": region_objs},
        pods_by_node=pods_by_node, members=member_clusters.frame(member_reads),
        pods=pd.DataFrame(pods, columns=POD_COLUMNS), views=views, foreign=foreign)
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
    every = cluster.memo.get("moves", lambda: _moves(cluster.job_objects))
    return every[every["time"] >= since].reset_index(drop=True)


def _moves(job_objs: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Every cross-region move in the jobs' histories (once per snapshot: `moves` filters them by time)."""
    rows = []
    for o in job_objs:
        meta = o["metadata"]
        for h in (o.get("status") or {}).get("history") or []:
            if h.get("action") not in ("migrate", "resize") or not h.get("from") or not h.get("to"):
                continue
            a, b = str(h["from"]).split("/")[0], str(h["to"]).split("/")[0]
            if a != b:
                rows.append({"job": f"{meta['namespace']}/{meta['name']}", "time": h.get("time"), "from": a, "to": b,
                             "reason": h.get("reason", "")})
    frame = pd.DataFrame(rows, columns=["job", "time", "from", "to", "reason"])
    frame["time"] = pd.to_datetime(frame["time"], utc=True, errors="coerce", format="ISO8601")
    return frame.dropna(subset=["time"]).reset_index(drop=True)
