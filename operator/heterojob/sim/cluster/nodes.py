"""Simulated Node objects with the labels and allocatable resources real nodes of each class carry."""

from __future__ import annotations

from typing import Any

from heterojob.constants import LABEL_HOSTNAME, LABEL_REGION, LABEL_ZONE
from heterojob.defaults import NODE_PROFILES


def node(name: str, region: str, device_class: str, *, zone: str | None = None, devices: int | None = None,
         ready: bool = True, unschedulable: bool = False) -> dict[str, Any]:
    profile = NODE_PROFILES[device_class]
    allocatable = {k: str(v) for k, v in profile["allocatable"].items()}
    if devices is not None:
        resource = next(k for k in profile["allocatable"] if k not in ("cpu", "memory")) \
            if device_class != "cpu" else "cpu"
        allocatable[resource] = str(devices)
    allocatable.setdefault("pods", "110")
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                **profile["labels"], LABEL_HOSTNAME: name, LABEL_REGION: region,
                LABEL_ZONE: zone or f"{region}-a", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            },
        },
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "capacity": dict(allocatable),
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                            "reason": "KubeletReady" if ready else "KubeletNotReady"}],
            "addresses": [{"type": "Hostname", "address": name}],
            # what `kubectl get nodes` shows (VERSION; OS-IMAGE etc. with -o wide); a simulated kubelet
            "nodeInfo": {"kubeletVersion": "v1.32.0-sim", "kubeProxyVersion": "", "osImage": "simulated",
                         "kernelVersion": "simulated", "containerRuntimeVersion": "simulated",
                         "operatingSystem": "linux", "architecture": "amd64", "machineID": name,
                         "systemUUID": name, "bootID": name},
        },
    }
