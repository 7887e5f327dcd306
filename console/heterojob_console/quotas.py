"""Quota administration: read, validate, preview and apply HeteroQuota limits (no Streamlit here).

Apply is optimistic: the write carries the resourceVersion the admin started from, so a change made
meanwhile (by kubectl or another admin) is a QuotaConflict shown to the admin, never silently overwritten.
Every applied edit leaves an audit record on the object: who, when, old -> new.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kubernetes
from kubernetes.client import ApiException

from heterojob.api.common import FieldProblem, SpecError, parse_spec
from heterojob.api.quota import HeteroQuotaSpec
from heterojob.constants import GROUP, VERSION
from heterojob.engine.capacity import quota_usage
from heterojob.engine.capacity.fleet import Limit
from heterojob.kube import convert

AUDIT = "heterojob.io/audit"  # annotation: the last AUDIT_KEEP edits, JSON
AUDIT_KEEP = 20
COLUMNS = ["deviceClass", "region", "devices"]


@dataclass
class Quota:
    namespace: str
    name: str
    limits: list[dict[str, Any]]  # spec.limits as written (what the admin edits)
    used: list[dict[str, Any]]  # status.used as the operator last wrote it
    resource_version: str | None  # None: not created yet
    audit: list[dict[str, Any]] = field(default_factory=list)
    # what the operator enforces (kube.convert.quota_limits): the limits, or, for a spec it cannot read,
    # one limit of 0 devices for everything; `error` says why
    enforced: list[Limit] = field(default_factory=list)
    error: str | None = None
    message: str | None = None  # status.message (e.g. a limit naming an unknown class)


def _quota(obj: Mapping[str, Any]) -> Quota:
    meta = obj["metadata"]
    try:
        audit = json.loads((meta.get("annotations") or {}).get(AUDIT, "[]"))
    except ValueError:
        audit = []
    status = obj.get("status") or {}
    enforced, error = convert.quota_limits(obj)
    return Quota(meta.get("namespace", ""), meta["name"], list((obj.get("spec") or {}).get("limits") or []),
                 list(status.get("used") or []), meta.get("resourceVersion"), audit if isinstance(audit, list) else [],
                 enforced, error, status.get("message"))


def read_all(api: kubernetes.client.ApiClient, namespace: str) -> list[Quota]:
    """Every HeteroQuota of the namespace, by name (the operator applies them all), or one new one named
    after the namespace when it has none."""
    custom = kubernetes.client.CustomObjectsApi(api)
    items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "heteroquotas")["items"]
    found = sorted((_quota(o) for o in items), key=lambda q: q.name)
    return found or [Quota(namespace, namespace, [], [], None)]


def read(api: kubernetes.client.ApiClient, namespace: str, name: str) -> Quota | None:
    """One HeteroQuota, or None when it does not exist (any more)."""
    custom = kubernetes.client.CustomObjectsApi(api)
    try:
        return _quota(custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "heteroquotas", name))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def validate(rows: Sequence[Mapping[str, Any]], classes: Iterable[str], regions: Iterable[str]
             ) -> tuple[list[dict[str, Any]], list[str]]:
    """(limits, problems): every problem names the row as the editor numbers it (from 1) and the fix, in
    plain words (the operator's own spec checks too); limits only when there is none."""
    known_classes, known_regions = set(classes) | {"*"}, set(regions) | {"*"}
    problems: list[str] = []
    limits: list[dict[str, Any]] = []
    row_of: list[int] = []  # limits[k] is the editor's row row_of[k]
    first: dict[tuple[str, str], int] = {}
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
        if (cls, region) in first:
            problems.append(f"row {i}: {scope(cls, region)} is listed twice (also row {first[cls, region]}); "
                            f"keep one of the two rows")
        first.setdefault((cls, region), i)
        try:
            devices = float(raw)
            if devices != int(devices) or devices < 0:
                raise ValueError
        except (TypeError, ValueError):
            problems.append(f"row {i}: devices {raw!r} must be a whole number >= 0")
            continue
        limits.append({"deviceClass": cls, "region": region, "devices": int(devices)})
        row_of.append(i)
    if not problems:
        try:
            parse_spec(HeteroQuotaSpec, {"limits": limits})
        except SpecError as exc:
            problems += [plain(p, row_of) for p in exc.problems]
    return (limits if not problems else []), problems


def scope(device_class: str, region: str) -> str:
    """'nvidia-h100 in any region', 'any accelerator class in cn-east' ('*' counts no CPU class)."""
    return (f"{'any accelerator class' if device_class == '*' else device_class} in "
            f"{'any region' if region == '*' else region}")


def plain(problem: FieldProblem, row_of: Sequence[int]) -> str:
    """The operator's spec check, said of the editor's rows: `spec.limits[0].devices: Input should be less
    than or equal to 1000000 (got 2000000)` -> `row 1: devices must be less than or equal to 1000000 (got
    2000000)`."""
    message = re.sub(r"^(Input|List|String|Value) should ", "must ", problem.message).replace(" after validation", "")
    found = re.fullmatch(r"spec\.limits\[(\d+)\]\.?(.*)", problem.path)
    if found and int(found[1]) < len(row_of):
        field_name = f"{found[2]} " if found[2] else ""
        return f"row {row_of[int(found[1])]}: {field_name}{message}"
    whole = re.sub(r" [(]got .*[)]$", "", message).replace(" items", " rows")
    return f"the table {whole}"  # the whole table, e.g. too many rows


def as_limits(rows: Sequence[Mapping[str, Any]], quota: str = "") -> list[Limit]:
    """Validated editor rows (or spec.limits) as the operator's Limits."""
    return [Limit(str(r["deviceClass"]), str(r.get("region") or "*"), int(r["devices"]), quota) for r in rows]


def used_beside_limits(limits: Sequence[Limit], held: Mapping[tuple[str, str], int],
                       cpu: Collection[str] = frozenset()) -> list[dict[str, Any]]:
    """One row per limit: its devices, what the namespace's jobs hold under it (`held`: (class, region) ->
    devices, as the operator counts it for every HeteroQuota of the namespace; '*' matches any region and any
    class but the CPU classes in `cpu`), what is free."""
    rows = []
    for lim in limits:
        n = quota_usage.used_under(lim, held, cpu)
        rows.append({"deviceClass": lim.device_class, "region": lim.region, "limit": lim.devices, "used": n,
                     "free": lim.devices - n})
    return rows


def below_use(limits: Sequence[Limit], held: Mapping[tuple[str, str], int], cpu: Collection[str] = frozenset()
              ) -> list[str]:
    """Warnings for limits set below what the namespace already holds under them."""
    return [f"{scope(r['deviceClass'], r['region'])}: limit {r['limit']} is below the {r['used']} devices held "
            f"now; running jobs keep them, nothing new is admitted until use falls under the limit"
            for r in used_beside_limits(limits, held, cpu) if r["used"] > r["limit"]]


def describe(limits: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], int]:
    return {(str(r["deviceClass"]), str(r.get("region", "*"))): int(r["devices"]) for r in limits}


def changes(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> list[str]:
    """What an edit changes, one line per limit: 'nvidia-h100 in *: 32 -> 64', '+ ...', '- ...'."""
    a, b = describe(old), describe(new)
    out = []
    for key in sorted(set(a) | set(b)):
        label = f"{key[0]} in {key[1]}"
        if key not in a:
            out.append(f"+ {label}: {b[key]}")
        elif key not in b:
            out.append(f"- {label} (was {a[key]})")
        elif a[key] != b[key]:
            out.append(f"{label}: {a[key]} → {b[key]}")
    return out


def audit_rows(audit: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The audit annotation as a person reads it: newest first, one line per changed limit."""
    return [{"when": str(a.get("when", "")), "who": str(a.get("who", "")),
             "change": "; ".join(changes(a.get("old") or [], a.get("new") or [])) or "no change"}
            for a in reversed(list(audit))]


class QuotaConflict(Exception):
    """The quota changed since the admin started editing."""


def apply(api: kubernetes.client.ApiClient, quota: Quota, limits: list[dict[str, Any]], who: str,
          now: datetime | None = None) -> str:
    """Write `limits` if nobody changed the limits since `quota` was read; the new resourceVersion.

    A conflict is a change of spec.limits only: the operator writes status.used (and so the
    resourceVersion) all the time, which must not fail an admin's edit. The write itself is guarded by
    the resourceVersion just read, so a change between that read and the write is caught too."""
    custom = kubernetes.client.CustomObjectsApi(api)
    when = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    audit = (quota.audit + [{"who": who, "when": when, "old": quota.limits, "new": limits}])[-AUDIT_KEEP:]
    annotations = {AUDIT: json.dumps(audit, separators=(",", ":"))}
    stale = QuotaConflict(f"HeteroQuota {quota.namespace}/{quota.name}: its limits were changed by someone else since "
                          f"you opened it; reload to see their change, then edit again")
    try:
        if quota.resource_version is None:
            body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "HeteroQuota",
                    "metadata": {"name": quota.name, "namespace": quota.namespace, "annotations": annotations},
                    "spec": {"limits": limits}}
            obj = custom.create_namespaced_custom_object(GROUP, VERSION, quota.namespace, "heteroquotas", body)
        else:
            fresh = read(api, quota.namespace, quota.name)
            if fresh is None or fresh.resource_version is None or fresh.limits != quota.limits:
                raise stale
            audit = (fresh.audit + [{"who": who, "when": when, "old": fresh.limits, "new": limits}])[-AUDIT_KEEP:]
            patch = {"metadata": {"resourceVersion": fresh.resource_version,
                                  "annotations": {AUDIT: json.dumps(audit, separators=(",", ":"))}},
                     "spec": {"limits": limits}}
            obj = custom.patch_namespaced_custom_object(GROUP, VERSION, quota.namespace, "heteroquotas",
                                                        quota.name, patch)
    except ApiException as exc:
        if exc.status == 409:
            raise stale from None
        raise
    return str(obj["metadata"]["resourceVersion"])
