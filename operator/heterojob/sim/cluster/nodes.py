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


# What kube-controller-manager's node lifecycle controller (v1.32) writes when a kubelet stops posting status
# (after --node-monitor-grace-period, 40 s by default; taint-based eviction adds the NoExecute taint) or
# reports NotReady: the Ready condition, and the taints that keep new pods off (TaintNodesByCondition).
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


# A fault the emulator injects from outside (e.g. `heterojob demo inject node-unreachable`, in another process): the
# node's kubelet is down; the stand-in kubelet then neither heartbeats it nor runs or ends its pods until
# `set_node_ready` takes the annotation off. Not something a real cluster writes.
KUBELET_STOPPED = "sim.heterojob.io/kubelet-stopped"


def _iso_now() -> str:
    import datetime

    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _read(core: Any, name: str) -> dict[str, Any]:
    import json

    return json.loads(core.read_node(name, _preload_content=False).data)


def _mark(core: Any, name: str, ready: dict[str, Any], taint: str | None, stopped: bool = False) -> None:
    node = _read(core, name)
    if stopped != (KUBELET_STOPPED in ((node.get("metadata") or {}).get("annotations") or {})):
        core.patch_node(name, {"metadata": {"annotations": {KUBELET_STOPPED: "true" if stopped else None}}})
    others = [c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") != "Ready"]
    core.patch_node_status(name, {"status": {"conditions": [*others, ready]}})
    taints = [t for t in (node.get("spec") or {}).get("taints") or []
              if t.get("key") not in (UNREACHABLE_TAINT, NOT_READY_TAINT)]
    if taint is not None:
        taints += [{"key": taint, "effect": "NoSchedule", "timeAdded": ready["lastTransitionTime"]},
                   {"key": taint, "effect": "NoExecute", "timeAdded": ready["lastTransitionTime"]}]
    core.patch_node(name, {"spec": {"taints": taints or None}})


def set_node_lost(core: Any, name: str, *, reachable: bool = False) -> None:
    """Mark Node `name` as the node lifecycle controller does (`core`: a kubernetes CoreV1Api): unreachable
    (Ready Unknown, NodeStatusUnknown, taint node.kubernetes.io/unreachable; its kubelet stopped: `KUBELET_STOPPED`)
    or, with `reachable`, reporting NotReady (Ready False, taint node.kubernetes.io/not-ready; its kubelet runs on
    and keeps reporting that); both taints NoSchedule and NoExecute."""
    now = _iso_now()
    _mark(core, name, {"type": "Ready", "status": "False" if reachable else "Unknown",
                       "reason": "KubeletNotReady" if reachable else "NodeStatusUnknown",
                       "message": "container runtime is down" if reachable else "Kubelet stopped posting node status.",
                       "lastTransitionTime": now, "lastHeartbeatTime": now},
          NOT_READY_TAINT if reachable else UNREACHABLE_TAINT, stopped=not reachable)


def set_node_ready(core: Any, name: str) -> None:
    """The kubelet runs again and posts Ready: the controller takes its taints off."""
    now = _iso_now()
    _mark(core, name, {"type": "Ready", "status": "True", "reason": "KubeletReady",
                       "message": "kubelet is posting ready status", "lastTransitionTime": now,
                       "lastHeartbeatTime": now}, None)
