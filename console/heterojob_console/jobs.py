"""A job's story for the console: its phases as a timeline, its history, its Events, and the admin requests
(checkpoint, migrate, cancel a pending migration request)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import kubernetes
import pandas as pd

from heterojob.constants import ANNOTATION_CHECKPOINT_NOW, ANNOTATION_MIGRATE, GROUP, VERSION

MOVES = ("migrate", "resize", "preempt", "restart")


def _t(value: Any) -> pd.Timestamp | None:
    t = pd.to_datetime(value, utc=True, errors="coerce") if value else None
    return None if t is None or t is pd.NaT else t


def _where(text: str | None) -> str:
    return (text or "").split(" ")[0] or "?"


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


def segments(job: dict[str, Any], now: datetime | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(phases as bars: start, end, where, phase, detail; moves as points: time, where, what, detail).

    waiting from creation to the first start; running on each placement until the move that ended it;
    moving from a move until the next placement; the current placement until completion or now."""
    status = job.get("status") or {}
    end_of_all = _t(status.get("completionTime")) or pd.Timestamp(now or datetime.now(UTC))
    created = _t((job.get("metadata") or {}).get("creationTimestamp"))
    started = _t(status.get("startTime"))
    bars, points = [], []
    if created is not None:
        bars.append({"start": created, "end": started or end_of_all, "where": "queue", "phase": "waiting",
                     "detail": "waiting for room"})
    cursor = started
    history = [h for h in status.get("history") or [] if h.get("action") in MOVES and _t(h.get("time"))]
    for i, h in enumerate(history):
        when = _t(h["time"])
        if cursor is not None and when is not None:
            bars.append({"start": cursor, "end": when, "where": _where(h.get("from")), "phase": "running",
                         "detail": h.get("from") or ""})
        points.append({"time": when, "where": _where(h.get("from")), "what": h["action"],
                       "detail": f"{h.get('from') or '?'} → {h.get('to') or '(waiting)'}: {h.get('reason', '')}"[:300]})
        later = history[i + 1] if i + 1 < len(history) else None
        nxt = (_t(status.get("placement", {}).get("since")) if later is None and status.get("placement") else None)
        nxt = nxt or (_t(later["time"]) if later else None) or end_of_all
        bars.append({"start": when, "end": max(nxt, when), "where": _where(h.get("to") or h.get("from")),
                     "phase": "moving", "detail": h.get("reason", "")[:200]})
        cursor = nxt
    p = status.get("placement")
    if p and cursor is not None:
        bars.append({"start": cursor, "end": end_of_all, "where": f"{p.get('region')}/{p.get('deviceClass')}",
                     "phase": (status.get("phase") or "running").lower(), "detail": f"generation {p.get('generation')}"})
    frame = pd.DataFrame(bars, columns=["start", "end", "where", "phase", "detail"])
    frame = frame[frame["end"] >= frame["start"]]
    return frame, pd.DataFrame(points, columns=["time", "where", "what", "detail"])


def events(api: kubernetes.client.ApiClient, namespace: str, name: str) -> pd.DataFrame:
    core = kubernetes.client.CoreV1Api(api)
    items = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    rows = [{"time": e.last_timestamp or e.first_timestamp, "type": e.type, "reason": e.reason,
             "message": e.message} for e in items if e.involved_object.name == name]
    return pd.DataFrame(rows, columns=["time", "type", "reason", "message"]).sort_values("time", ascending=False)


def request(api: kubernetes.client.ApiClient, namespace: str, name: str, what: str, who: str) -> None:
    """Ask the operator for a checkpoint ("checkpoint") or a migration ("migrate") of a running job."""
    key = {"checkpoint": ANNOTATION_CHECKPOINT_NOW, "migrate": ANNOTATION_MIGRATE}[what]
    kubernetes.client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "heterojobs", name, {"metadata": {"annotations": {key: f"console: {who}"}}})


def cancel_migration(api: kubernetes.client.ApiClient, namespace: str, name: str) -> None:
    """Withdraw a migration request the operator has not acted on yet (it removes the annotation when it
    does; once the checkpoint for the move is asked, the move goes on)."""
    kubernetes.client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "heterojobs", name, {"metadata": {"annotations": {ANNOTATION_MIGRATE: None}}})
