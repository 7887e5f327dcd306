"""Quota administration: read, validate, preview and apply HeteroQuota limits (no Streamlit here).

Apply is optimistic: the write carries the resourceVersion the admin started from, so a change made
meanwhile (by kubectl or another admin) is a Conflict shown to the admin, never silently overwritten.
Every applied edit leaves an audit record on the object: who, when, old -> new.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kubernetes
from kubernetes.client import ApiException

from heterojob.api.common import SpecError, parse_spec
from heterojob.api.quota import HeteroQuotaSpec
from heterojob.constants import GROUP, VERSION
from heterojob.engine.fleet import Limit, quota_room

AUDIT = "heterojob.io/audit"  # annotation: the last AUDIT_KEEP edits, JSON
AUDIT_KEEP = 20
COLUMNS = ["deviceClass", "region", "devices"]


@dataclass
class Quota:
    namespace: str
    name: str
    limits: list[dict[str, Any]]
    used: list[dict[str, Any]]
    resource_version: str | None  # None: not created yet
    audit: list[dict[str, Any]] = field(default_factory=list)


def read(api: kubernetes.client.ApiClient, namespace: str) -> Quota:
    """The namespace's HeteroQuota (the one named after the namespace, else the first), or a new one."""
    custom = kubernetes.client.CustomObjectsApi(api)
    items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "heteroquotas")["items"]
    obj = next((o for o in items if o["metadata"]["name"] == namespace), items[0] if items else None)
    if obj is None:
        return Quota(namespace, namespace, [], [], None)
    meta = obj["metadata"]
    try:
        audit = json.loads((meta.get("annotations") or {}).get(AUDIT, "[]"))
    except ValueError:
        audit = []
    return Quota(namespace, meta["name"], list((obj.get("spec") or {}).get("limits") or []),
                 list((obj.get("status") or {}).get("used") or []), meta.get("resourceVersion"), audit)


def validate(rows: Sequence[Mapping[str, Any]], classes: Iterable[str], regions: Iterable[str]
             ) -> tuple[list[dict[str, Any]], list[str]]:
    """(limits, problems): every problem names the row and the fix; limits only when there is none."""
    known_classes, known_regions = set(classes) | {"*"}, set(regions) | {"*"}
    problems: list[str] = []
    limits: list[dict[str, Any]] = []
    for i, row in enumerate(rows, start=1):
        cls = str(row.get("deviceClass") or "").strip()
        region = str(row.get("region") or "*").strip() or "*"
        raw = row.get("devices")
        if not cls and raw in (None, ""):
            continue  # an empty row the editor added
        if cls not in known_classes:
            problems.append(f"row {i}: device class {cls or '(empty)'!r} is not known; use one of "
                            f"{', '.join(sorted(known_classes))}")
        if region not in known_regions:
            problems.append(f"row {i}: region {region!r} is not known; use one of {', '.join(sorted(known_regions))}")
        try:
            devices = float(raw)  # type: ignore[arg-type]
            if devices != int(devices) or devices < 0:
                raise ValueError
        except (TypeError, ValueError):
            problems.append(f"row {i}: devices {raw!r} must be a whole number >= 0")
            continue
        limits.append({"deviceClass": cls, "region": region, "devices": int(devices)})
    if not problems:
        try:
            parse_spec(HeteroQuotaSpec, {"limits": limits})
        except SpecError as exc:
            problems.append(str(exc))
    return (limits if not problems else []), problems


@dataclass(frozen=True)
class Effect:
    job: str
    wants: str  # e.g. "16 x nvidia-h100 in any region"
    before: str  # why it waits now ("" = quota has room)
    after: str


def preview(namespace: str, old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]],
            waiting: Sequence[Mapping[str, Any]], held: Mapping[tuple[str, str], int]) -> list[Effect]:
    """Waiting jobs whose quota verdict the change flips (admitted now, or blocked now)."""
    def limits(rows: Sequence[Mapping[str, Any]]) -> list[Limit]:
        return [Limit(r["deviceClass"], r.get("region", "*"), int(r["devices"]), namespace) for r in rows]

    before, after = limits(old), limits(new)
    out = []
    for job in waiting:
        for alt in job.get("devices") or []:
            need = int(alt["perReplica"]) * int(job["replicas"])
            region = job.get("region") or "*"
            a = quota_room(before, held, alt["deviceClass"], region, need) or ""
            b = quota_room(after, held, alt["deviceClass"], region, need) or ""
            if bool(a) != bool(b):
                out.append(Effect(job["name"], f"{need} x {alt['deviceClass']}", a, b))
                break
    return out


class Conflict(Exception):
    """The quota changed since the admin started editing."""


def apply(api: kubernetes.client.ApiClient, quota: Quota, limits: list[dict[str, Any]], who: str,
          now: datetime | None = None) -> str:
    """Write `limits` if the object is still at `quota.resource_version`; the new resourceVersion."""
    custom = kubernetes.client.CustomObjectsApi(api)
    when = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    audit = (quota.audit + [{"who": who, "when": when, "old": quota.limits, "new": limits}])[-AUDIT_KEEP:]
    annotations = {AUDIT: json.dumps(audit, separators=(",", ":"))}
    try:
        if quota.resource_version is None:
            body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "HeteroQuota",
                    "metadata": {"name": quota.name, "namespace": quota.namespace, "annotations": annotations},
                    "spec": {"limits": limits}}
            obj = custom.create_namespaced_custom_object(GROUP, VERSION, quota.namespace, "heteroquotas", body)
        else:
            patch = {"metadata": {"resourceVersion": quota.resource_version, "annotations": annotations},
                     "spec": {"limits": limits}}
            obj = custom.patch_namespaced_custom_object(GROUP, VERSION, quota.namespace, "heteroquotas",
                                                        quota.name, patch)
    except ApiException as exc:
        if exc.status == 409:
            raise Conflict(f"HeteroQuota {quota.namespace}/{quota.name} was changed by someone else since you "
                           f"opened it; reload to see their change, then edit again") from None
        raise
    return str(obj["metadata"]["resourceVersion"])
