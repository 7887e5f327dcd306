"""A job's story for the console: its history as a timeline, its Events, and the admin requests."""

from __future__ import annotations

from typing import Any

import kubernetes
import pandas as pd

from heterojob.constants import ANNOTATION_CHECKPOINT_NOW, ANNOTATION_MIGRATE, GROUP, VERSION


def timeline(job: dict[str, Any]) -> pd.DataFrame:
    """One row per thing that happened: admission, checkpoints, migrations, resizes, preemptions, restarts."""
    status = job.get("status") or {}
    rows = []
    if status.get("startTime"):
        rows.append({"time": status["startTime"], "what": "admitted", "detail": ""})
    for h in status.get("history") or []:
        rows.append({"time": h.get("time"), "what": h.get("action"),
                     "detail": " → ".join(x for x in (h.get("from"), h.get("to")) if x) + (
                         f" ({h['reason']})" if h.get("reason") else "")})
    last = (status.get("checkpoint") or {}).get("last")
    if last and last.get("time"):
        rows.append({"time": last["time"], "what": "checkpoint", "detail": f"step {last.get('step')} at {last.get('uri')}"})
    if status.get("completionTime"):
        rows.append({"time": status["completionTime"], "what": (status.get("phase") or "").lower(), "detail": ""})
    frame = pd.DataFrame(rows, columns=["time", "what", "detail"])
    frame["time"] = pd.to_datetime(frame["time"], utc=True, errors="coerce")
    return frame.dropna(subset=["time"]).sort_values("time").reset_index(drop=True)


def events(api: kubernetes.client.ApiClient, namespace: str, name: str) -> pd.DataFrame:
    core = kubernetes.client.CoreV1Api(api)
    items = [e for e in core.list_namespaced_event(namespace).items if e.involved_object.name == name]
    rows = [{"time": e.last_timestamp or e.first_timestamp, "type": e.type, "reason": e.reason,
             "message": e.message} for e in items]
    return pd.DataFrame(rows, columns=["time", "type", "reason", "message"]).sort_values("time", ascending=False)


def request(api: kubernetes.client.ApiClient, namespace: str, name: str, what: str, who: str) -> None:
    """Ask the operator for a checkpoint ("checkpoint") or a migration ("migrate") of a running job."""
    key = {"checkpoint": ANNOTATION_CHECKPOINT_NOW, "migrate": ANNOTATION_MIGRATE}[what]
    kubernetes.client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "heterojobs", name, {"metadata": {"annotations": {key: f"console: {who}"}}})
