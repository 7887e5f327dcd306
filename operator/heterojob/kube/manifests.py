"""The pods and headless Service of one placement, built as plain dicts (pure; no API calls)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from heterojob.api.job import HeteroJobSpec, TemplateOverride
from heterojob.constants import (
    ANNOTATION_NODE, API_VERSION, LABEL_DEVICE_CLASS, LABEL_GENERATION, LABEL_HOSTNAME, LABEL_JOB,
    LABEL_MANAGED_BY, LABEL_RANK, MANAGED_BY, MASTER_PORT, METRICS_PORT_ENV, METRICS_PORT_NAME,
)
from heterojob.engine.capacity.fleet import DeviceClass, RegionInfo

PODINFO_VOLUME = "heterojob-podinfo"
PODINFO_PATH = "/etc/heterojob"  # the SDK reads `annotations` here (downward API)


def pod_name(job: str, generation: int, rank: int) -> str:
    return f"{job}-g{generation}-{rank}"


def owner_reference(job: Mapping[str, Any]) -> dict[str, Any]:
    meta = job["metadata"]
    return {
        "apiVersion": API_VERSION, "kind": "HeteroJob", "name": meta["name"], "uid": meta["uid"],
        "controller": True, "blockOwnerDeletion": True,
    }


def selector_labels(job_name: str) -> dict[str, str]:
    return {LABEL_JOB: job_name}


def service(job: Mapping[str, Any]) -> dict[str, Any]:
    meta = job["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": {**selector_labels(meta["name"]), LABEL_MANAGED_BY: MANAGED_BY},
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": selector_labels(meta["name"]),
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": MASTER_PORT, "targetPort": MASTER_PORT}],
        },
    }


def _merge_env(env: list[dict[str, Any]], extra: Mapping[str, str]) -> list[dict[str, Any]]:
    kept = [e for e in env if e.get("name") not in extra]
    return kept + [{"name": k, "value": v} for k, v in extra.items()]


def _metrics_port(container: Mapping[str, Any]) -> dict[str, str]:
    """The SDK's step metric port: the container's port named METRICS_PORT_NAME, if it declares one (the
    opt-in; the shipped PodMonitor scrapes that port name); else nothing, and the SDK serves nothing."""
    for port in container.get("ports") or []:
        if isinstance(port, Mapping) and port.get("name") == METRICS_PORT_NAME and port.get("containerPort"):
            return {METRICS_PORT_ENV: str(port["containerPort"])}
    return {}


def _apply_override(container: dict[str, Any], override: TemplateOverride | None) -> None:
    if override is None:
        return
    if override.image:
        container["image"] = override.image
    if override.command is not None:
        container["command"] = list(override.command)
    if override.args is not None:
        container["args"] = list(override.args)
    if override.env:
        container["env"] = _merge_env(container.get("env") or [], {e.name: e.value for e in override.env})


def pod(
    job: Mapping[str, Any],
    spec: HeteroJobSpec,
    *,
    cls: DeviceClass,
    region: RegionInfo,
    alternative_index: int,
    node: str,
    node_hostname: str,
    rank: int,
    world_size: int,
    generation: int,
    per_replica: int,
    resume_from: str | None = None,
) -> dict[str, Any]:
    meta = job["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    template = copy.deepcopy(spec.template)
    tmeta = template.get("metadata") or {}
    pspec = template["spec"]

    labels = {
        **(tmeta.get("labels") or {}),
        LABEL_JOB: name, LABEL_GENERATION: str(generation), LABEL_RANK: str(rank),
        LABEL_DEVICE_CLASS: cls.name, LABEL_MANAGED_BY: MANAGED_BY,
    }
    annotations = {**(tmeta.get("annotations") or {}), ANNOTATION_NODE: node}

    pspec["restartPolicy"] = "Never"  # restarts are the gang's, not the container's
    pspec["hostname"] = f"{name}-{rank}"
    pspec["subdomain"] = name
    pspec["nodeSelector"] = {**(pspec.get("nodeSelector") or {}), **cls.node_selector, **region.node_selector}
    affinity = pspec.setdefault("affinity", {})
    affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": LABEL_HOSTNAME, "operator": "In", "values": [node_hostname]}]},
    ]}}
    if cls.resource_name != "cpu":
        tolerations = pspec.setdefault("tolerations", [])
        tolerations.append({"key": cls.resource_name, "operator": "Exists", "effect": "NoSchedule"})
    volumes = pspec.setdefault("volumes", [])
    volumes.append({"name": PODINFO_VOLUME, "downwardAPI": {"items": [
        {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
    ]}})

    env = {
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "MASTER_ADDR": f"{name}-0.{name}.{namespace}.svc",
        "MASTER_PORT": str(MASTER_PORT),
        "HETEROJOB_JOB": name,
        "HETEROJOB_POD_NAME": pod_name(name, generation, rank),
        "HETEROJOB_NAMESPACE": namespace,
        "HETEROJOB_DEVICE_CLASS": cls.name,
        "HETEROJOB_REGION": region.name,
        "HETEROJOB_GENERATION": str(generation),
        "HETEROJOB_DEVICES_PER_REPLICA": str(per_replica),
        "HETEROJOB_PODINFO": PODINFO_PATH,
    }
    if spec.checkpoint.storage:
        env["HETEROJOB_CHECKPOINT_DIR"] = f"{spec.checkpoint.storage.rstrip('/')}/{name}"
    if resume_from:
        env["HETEROJOB_RESUME_FROM"] = resume_from

    for i, container in enumerate(pspec["containers"]):
        container["env"] = _merge_env(container.get("env") or [], {**env, **_metrics_port(container)})
        mounts = container.setdefault("volumeMounts", [])
        mounts.append({"name": PODINFO_VOLUME, "mountPath": PODINFO_PATH, "readOnly": True})
        if i == 0:  # the training container: devices and the per-class override
            _apply_override(container, spec.devices[alternative_index].overrides)
            resources = container.setdefault("resources", {})
            limits = resources.setdefault("limits", {})
            limits[cls.resource_name] = str(per_replica)
            if cls.resource_name == "cpu":
                resources.setdefault("requests", {})["cpu"] = str(per_replica)

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(name, generation, rank),
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(job)],
        },
        "spec": pspec,
    }
