"""What the console reads, through the same API types and conversions as the operator."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import kubernetes
import pandas as pd

from heterojob.constants import GROUP, VERSION
from heterojob.kube import convert
from heterojob.kube.api import load_client


@dataclass
class Fleet:
    nodes: pd.DataFrame  # one row per node: name, region, class, devices, ready
    jobs: pd.DataFrame  # one row per job
    regions: pd.DataFrame  # name, city, latitude, longitude
    classes: list[str] = field(default_factory=list)
    quota_namespaces: list[str] = field(default_factory=list)
    job_objects: list[dict[str, Any]] = field(default_factory=list)
    quota_used: int = 0  # devices, over every HeteroQuota's status.used
    quota_limit: int = 0  # devices, over every HeteroQuota's limits

    def allocated(self) -> pd.DataFrame:
        """region -> devices held by placed jobs, and their devices-weighted average utilization."""
        rows = []
        for obj in self.job_objects:
            status = obj.get("status") or {}
            p = status.get("placement")
            if not p or status.get("phase") in ("Succeeded", "Failed"):
                continue
            devices = int(p.get("replicas", 0)) * int(p.get("perReplica", 0))
            util = (status.get("utilization") or {}).get("average")
            rows.append({"region": p.get("region"), "allocated": devices,
                         "util_x_devices": util * devices if util is not None else None,
                         "measured": devices if util is not None else 0})
        frame = pd.DataFrame(rows, columns=["region", "allocated", "util_x_devices", "measured"])
        out = frame.groupby("region", as_index=False).sum(min_count=1)
        out["utilization"] = out["util_x_devices"] / out["measured"].where(out["measured"] > 0)
        return out[["region", "allocated", "utilization"]]

    def waiting(self, namespace: str) -> list[dict[str, Any]]:
        """The namespace's jobs waiting for room, as the quota preview needs them."""
        out = []
        for obj in self.job_objects:
            status, spec = obj.get("status") or {}, obj.get("spec") or {}
            if obj["metadata"]["namespace"] != namespace or status.get("placement"):
                continue
            if status.get("phase") not in (None, "Pending", "Preempted"):
                continue
            replicas = spec.get("replicas") or {}
            count = replicas.get("initial") or replicas.get("max") or replicas.get("min") or 1
            out.append({"name": obj["metadata"]["name"], "replicas": count,
                        "devices": [{"deviceClass": d.get("deviceClass"), "perReplica": d.get("perReplica", 1)}
                                    for d in spec.get("devices") or []],
                        "region": ((spec.get("regions") or {}).get("allowed") or ["*"])[0]})
        return out

    def held(self, namespace: str) -> dict[tuple[str, str], int]:
        """(class, region) -> devices the namespace's placed jobs hold."""
        out: dict[tuple[str, str], int] = {}
        for obj in self.job_objects:
            p = (obj.get("status") or {}).get("placement")
            if obj["metadata"]["namespace"] != namespace or not p:
                continue
            key = (p.get("deviceClass", ""), p.get("region", ""))
            out[key] = out.get(key, 0) + int(p.get("replicas", 0)) * int(p.get("perReplica", 0))
        return out


def client(kubeconfig: str | None) -> kubernetes.client.ApiClient:
    return load_client(kubeconfig)


def read_fleet(api: kubernetes.client.ApiClient) -> Fleet:
    core = kubernetes.client.CoreV1Api(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    classes = {o["metadata"]["name"]: c for o in custom.list_cluster_custom_object(
        GROUP, VERSION, "acceleratorclasses")["items"] if (c := convert.device_class(o))}
    region_objs = custom.list_cluster_custom_object(GROUP, VERSION, "regions")["items"]
    nodes = []
    for obj in json.loads(core.list_node(_preload_content=False).data).get("items", []):  # raw: fast
        view = convert.node_view(obj)
        cls = next((c for c in classes.values() if view.matches(c.node_selector)
                    and view.allocatable.get(c.resource_name, 0) > 0), None)
        nodes.append({"node": view.name, "region": view.region, "class": cls.name if cls else "-",
                      "devices": view.allocatable.get(cls.resource_name, 0) if cls else 0,
                      "ready": view.ready and view.schedulable})
    jobs = []
    job_objects = custom.list_cluster_custom_object(GROUP, VERSION, "heterojobs")["items"]
    quota_objects = custom.list_cluster_custom_object(GROUP, VERSION, "heteroquotas")["items"]
    quota_namespaces = sorted({o["metadata"]["namespace"] for o in quota_objects})
    quota_limit = sum(int(l.get("devices", 0)) for o in quota_objects for l in (o.get("spec") or {}).get("limits") or [])
    quota_used = sum(int(u.get("devices", 0)) for o in quota_objects for u in (o.get("status") or {}).get("used") or [])
    for obj in job_objects:
        status: dict[str, Any] = obj.get("status") or {}
        placement = status.get("placement") or {}
        jobs.append({
            "namespace": obj["metadata"]["namespace"], "name": obj["metadata"]["name"],
            "priority": (obj.get("spec") or {}).get("priority", "medium"),
            "phase": status.get("phase") or "New", "class": placement.get("deviceClass"),
            "region": placement.get("region"), "replicas": placement.get("replicas"),
            "restarts": status.get("restarts", 0), "message": status.get("message", ""),
            "created": obj["metadata"].get("creationTimestamp"),
        })
    regions = [{"region": o["metadata"]["name"], "city": o["spec"]["location"]["city"],
                "latitude": o["spec"]["location"]["latitude"], "longitude": o["spec"]["location"]["longitude"]}
               for o in region_objs if (o.get("spec") or {}).get("location")]
    return Fleet(pd.DataFrame(nodes, columns=["node", "region", "class", "devices", "ready"]),
                 pd.DataFrame(jobs, columns=["namespace", "name", "priority", "phase", "class", "region",
                                             "replicas", "restarts", "message", "created"]),
                 pd.DataFrame(regions, columns=["region", "city", "latitude", "longitude"]),
                 classes=sorted(classes), quota_namespaces=quota_namespaces, job_objects=job_objects,
                 quota_used=quota_used, quota_limit=quota_limit)
