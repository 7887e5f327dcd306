"""Simulated Node objects with the labels and allocatable resources real nodes of each class carry."""

from __future__ import annotations

from typing import Any

from heterojob.constants import LABEL_HOSTNAME, LABEL_REGION, LABEL_ZONE
from heterojob.defaults import NODE_EXTRA_LABELS, NODE_PROFILES, NODE_SOFTWARE


def software_labels(labels: dict[str, str], software: dict[str, str]) -> dict[str, str]:
    """The labels GPU Feature Discovery (new and deprecated keys, internal/lm/nvml.go) or the Ascend device
    plugin (new and old keys) publish for these versions, plus heterojob's CANN label, over `labels`."""
    out = dict(labels)
    driver, cuda, cann = software.get("driver"), software.get("cuda"), software.get("cann")
    if "nvidia.com/gpu.product" in out:
        if driver:
            major, minor, rev = (driver.split(".") + ["", "", ""])[:3]
            out.update({"nvidia.com/cuda.driver-version.full": driver, "nvidia.com/cuda.driver-version.major": major,
                        "nvidia.com/cuda.driver-version.minor": minor, "nvidia.com/cuda.driver-version.revision": rev,
                        "nvidia.com/cuda.driver.major": major, "nvidia.com/cuda.driver.minor": minor,
                        "nvidia.com/cuda.driver.rev": rev})
        if cuda:
            major, minor = (cuda.split(".") + [""])[:2]
            out.update({"nvidia.com/cuda.runtime-version.full": cuda, "nvidia.com/cuda.runtime-version.major": major,
                        "nvidia.com/cuda.runtime-version.minor": minor, "nvidia.com/cuda.runtime.major": major,
                        "nvidia.com/cuda.runtime.minor": minor})
    elif "accelerator" in out and driver:
        out.update({"huawei.com/driver.version": driver, "huawei.com/npu.driver.version": driver})
    if cann:
        out["heterojob.io/cann.version"] = cann
    return {k: v for k, v in out.items() if v != ""}


def node(name: str, region: str, device_class: str, *, zone: str | None = None, devices: int | None = None,
         ready: bool = True, unschedulable: bool = False, stack: int = 0,
         software: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Node of a class's profile; `stack` picks one of the class's software stacks (defaults.NODE_SOFTWARE),
    `software` overrides versions (driver, cuda, cann) and `labels` adds or replaces labels."""
    profile = NODE_PROFILES[device_class]
    stacks = NODE_SOFTWARE.get(device_class) or [{}]
    node_labels = software_labels({**profile["labels"], **NODE_EXTRA_LABELS.get(device_class, {})},
                                  {**stacks[stack % len(stacks)], **(software or {})})
    node_labels.update(labels or {})
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
                **node_labels, LABEL_HOSTNAME: name, LABEL_REGION: region,
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
