"""What the console reads, through the same API types and conversions as the operator."""

from __future__ import annotations

from dataclasses import dataclass
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


def client(kubeconfig: str | None) -> kubernetes.client.ApiClient:
    return load_client(kubeconfig)


def read_fleet(api: kubernetes.client.ApiClient) -> Fleet:
    core = kubernetes.client.CoreV1Api(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    classes = {o["metadata"]["name"]: c for o in custom.list_cluster_custom_object(
        GROUP, VERSION, "acceleratorclasses")["items"] if (c := convert.device_class(o))}
    region_objs = custom.list_cluster_custom_object(GROUP, VERSION, "regions")["items"]
    nodes = []
    for obj in api.sanitize_for_serialization(core.list_node().items):
        view = convert.node_view(obj)
        cls = next((c for c in classes.values() if view.matches(c.node_selector)
                    and view.allocatable.get(c.resource_name, 0) > 0), None)
        nodes.append({"node": view.name, "region": view.region, "class": cls.name if cls else "-",
                      "devices": view.allocatable.get(cls.resource_name, 0) if cls else 0,
                      "ready": view.ready and view.schedulable})
    jobs = []
    for obj in custom.list_cluster_custom_object(GROUP, VERSION, "heterojobs")["items"]:
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
                 pd.DataFrame(regions, columns=["region", "city", "latitude", "longitude"]))
