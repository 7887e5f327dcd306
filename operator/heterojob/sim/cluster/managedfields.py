"""Field ownership (`metadata.managedFields`) for custom resources, the subset of kube-apiserver v1.32's field
manager (k8s.io/apimachinery pkg/util/managedfields, structured-merge-diff v4) that server-side apply needs.

Modelled: who owns which field, per manager identity (manager, operation: `Apply` or `Update`); an update (create,
PUT, merge/JSON patch) takes the fields whose values it changed from their other owners; an apply that would change
a field another manager owns is refused with the real 409 (`Apply failed with 1 conflict: conflict with "kubectl"
using heterojob.io/v1alpha1: .spec.priority`, internal/conflict.go) unless forced (`force=true`, `kubectl apply
--server-side --force-conflicts`), which takes the field over; an applier's field it no longer applies, and nobody
else owns, is removed from the object. Fields are the object's leaves outside `metadata`, `status`, `apiVersion` and
`kind`, plus each label and annotation; every list is one field (a CRD's lists are atomic unless the schema says
`x-kubernetes-list-type`, which heterojob's CRDs do not). Not modelled: status-subresource entries, sets and maps
inside lists (`k:`/`v:` elements), the `.` marker of a map owned as a whole.

A write may set managedFields itself (`sent`, below): kubectl does, when `apply --server-side` takes over what
`kubectl apply` owned (a JSON patch moving the `kubectl-client-side-apply` entries to `kubectl`/`Apply`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Path = tuple[str, ...]
_SKIPPED = ("apiVersion", "kind", "metadata", "status")
_MISSING = object()


@dataclass(frozen=True)
class FieldConflict:
    manager: str
    operation: str
    api_version: str
    path: Path

    def who(self) -> str:
        """internal/conflict.go printManager: an Update manager names its API version."""
        return f'"{self.manager}"' + (f" using {self.api_version}" if self.operation == "Update" else "")


def leaves(obj: Mapping[str, Any]) -> dict[Path, Any]:
    """The fields a manager can own, with their values."""
    found: dict[Path, Any] = {}

    def walk(value: Any, at: Path) -> None:
        if isinstance(value, Mapping) and value:
            for key, child in value.items():
                walk(child, (*at, str(key)))
        else:
            found[at] = value

    for key, value in obj.items():
        if key not in _SKIPPED:
            walk(value, (key,))
    meta = obj.get("metadata") or {}
    for section in ("labels", "annotations"):
        for key, value in (meta.get(section) or {}).items():
            found[("metadata", section, key)] = value
    return found


def path_string(path: Path) -> str:
    """fieldpath.Path.String(): `.spec.priority`."""
    return "".join(f".{part}" for part in path)


def fields_v1(paths: Iterable[Path]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return tree


def owned(entry: Mapping[str, Any]) -> set[Path]:
    """The leaves a FieldsV1 tree names (an element of a list, `k:`/`v:`/`i:`, counts as its list)."""
    found: set[Path] = set()

    def walk(node: Any, at: Path) -> None:
        children = {k: v for k, v in node.items() if k.startswith("f:")} if isinstance(node, Mapping) else {}
        if not children or any(not k.startswith(("f:", ".")) for k in node):
            if at:
                found.add(at)
        for key, child in children.items():
            walk(child, (*at, key[2:]))

    walk(entry.get("fieldsV1") or {}, ())
    return found


def _overlaps(a: Path, b: Path) -> bool:
    return a[:len(b)] == b or b[:len(a)] == a


def _entry(manager: str, operation: str, api_version: str, paths: set[Path], now: str) -> dict[str, Any]:
    return {"manager": manager, "operation": operation, "apiVersion": api_version, "time": now,
            "fieldsType": "FieldsV1", "fieldsV1": fields_v1(paths)}


def _rebuild(entries: list[dict[str, Any]], sets: list[set[Path]]) -> list[dict[str, Any]]:
    """Entries with their new field sets; an entry left owning nothing is dropped, as the field manager does."""
    kept = []
    for entry, paths in zip(entries, sets, strict=True):
        if not paths:
            continue
        if paths != owned(entry):
            entry = {**entry, "fieldsV1": fields_v1(paths)}
        kept.append(entry)
    return kept


def sent(sent_fields: Any, live: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The ownership a non-apply write starts from, as v1.32's field manager decides it (k8s.io/apimachinery
    pkg/util/managedfields/internal/fieldmanager.go decodeLiveOrNew, isResetManagedFields): an empty list, or one
    empty entry, resets it; any other decodable list replaces the stored one (its entries owning nothing dropped, as
    the updater drops empty managers); anything else (absent, not decodable) keeps the stored one. The write's own
    update is then recorded on top."""
    if sent_fields == [] or sent_fields == [{}]:
        return []
    if not isinstance(sent_fields, list) or not sent_fields or not all(_decodable(e) for e in sent_fields):
        return list(live or [])
    return [copy.deepcopy(e) for e in sent_fields if owned(e)]


def _decodable(entry: Any) -> bool:
    """internal/managedfields.go decodeManagedFieldsEntrySet: a FieldsV1 entry whose set is an object."""
    return (isinstance(entry, dict) and entry.get("fieldsType") == "FieldsV1"
            and isinstance(entry.get("fieldsV1", {}), dict) and entry.get("operation") in ("Apply", "Update"))


def record_update(managed: list[dict[str, Any]] | None, manager: str, api_version: str, old: Mapping[str, Any] | None,
                  new: Mapping[str, Any], now: str) -> list[dict[str, Any]]:
    """The managedFields after a non-apply write by `manager`: it owns every field whose value it changed (all of
    them on create); the other owners lose those."""
    before, after = leaves(old or {}), leaves(new)
    changed = {p for p, v in after.items() if p not in before or before[p] != v}
    gone = {p for p in before if p not in after}
    entries = [e for e in copy.deepcopy(managed or []) if isinstance(e, dict)]
    mine = next((i for i, e in enumerate(entries)
                 if e.get("manager") == manager and e.get("operation") == "Update" and not e.get("subresource")), None)
    sets = [{p for p in owned(e) if p in after and not any(_overlaps(p, c) for c in changed)} for e in entries]
    if not changed and not gone:
        return entries
    if mine is None:
        if not changed:
            return _rebuild(entries, sets)
        entries.append(_entry(manager, "Update", api_version, set(), now))
        sets.append(set())
        mine = len(entries) - 1
    sets[mine] |= changed
    if changed:
        entries[mine] = {**entries[mine], "apiVersion": api_version, "time": now}
    return _rebuild(entries, sets)


def apply_conflicts(managed: list[dict[str, Any]] | None, manager: str, applied: Mapping[str, Any],
                    live: Mapping[str, Any]) -> list[FieldConflict]:
    """The fields `applied` would change that another manager identity owns."""
    current, wanted = leaves(live), leaves(applied)
    found = []
    for entry in managed or []:
        if not isinstance(entry, dict) or (entry.get("manager") == manager and entry.get("operation") == "Apply"):
            continue
        theirs = owned(entry)
        for path, value in wanted.items():
            if current.get(path, _MISSING) == value:
                continue
            for owned_path in theirs:
                if _overlaps(path, owned_path):
                    found.append(FieldConflict(str(entry.get("manager")), str(entry.get("operation")),
                                               str(entry.get("apiVersion", "")), owned_path))
    return sorted(set(found), key=lambda c: (c.manager, c.operation, c.path))


def conflict_message(conflicts: list[FieldConflict]) -> str:
    """internal/conflict.go getConflictMessage."""
    if len(conflicts) == 1:
        return f"Apply failed with 1 conflict: conflict with {conflicts[0].who()}: {path_string(conflicts[0].path)}"
    lines: list[str] = []
    for who in dict.fromkeys(c.who() for c in conflicts):
        lines.append(f"conflicts with {who}:")
        lines += [f"- {path_string(c.path)}" for c in conflicts if c.who() == who]
    return f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)


def conflict_causes(conflicts: list[FieldConflict]) -> list[dict[str, str]]:
    return [{"type": "FieldManagerConflict", "message": f"conflict with {c.who()}", "field": path_string(c.path)}
            for c in conflicts]


def record_apply(managed: list[dict[str, Any]] | None, manager: str, api_version: str, applied: Mapping[str, Any],
                 live: Mapping[str, Any], merged: dict[str, Any], now: str
                 ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """After an apply that may go ahead (no conflicts, or forced): the object without the fields this manager
    applied before, no longer applies, and nobody else owns; and the managedFields, in which the manager owns what
    it applied and the others lose what it changed."""
    wanted = leaves(applied)
    entries = [e for e in copy.deepcopy(managed or []) if isinstance(e, dict)]
    mine = next((i for i, e in enumerate(entries)
                 if e.get("manager") == manager and e.get("operation") == "Apply"), None)
    before = leaves(live)
    previously = owned(entries[mine]) if mine is not None else set()
    others = set().union(*(owned(e) for i, e in enumerate(entries) if i != mine)) if entries else set()
    result = copy.deepcopy(merged)
    for path in previously - set(wanted) - others:
        _remove(result, path)
    after = leaves(result)
    changed = {p for p, v in wanted.items() if before.get(p, _MISSING) != v}
    sets = [{p for p in owned(e) if p in after and not any(_overlaps(p, c) for c in changed)}
            if i != mine else set() for i, e in enumerate(entries)]
    if mine is None:
        entries.append(_entry(manager, "Apply", api_version, set(), now))
        sets.append(set())
        mine = len(entries) - 1
    sets[mine] = set(wanted)
    if set(wanted) != previously:
        entries[mine] = {**entries[mine], "apiVersion": api_version, "time": now}
    return result, _rebuild(entries, sets)


def _remove(obj: dict[str, Any], path: Path) -> None:
    node: Any = obj
    for part in path[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(path[-1], None)
