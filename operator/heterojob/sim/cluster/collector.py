"""What the garbage collector does with an object whose owners may be absent (pkg/controller/garbagecollector v1.32,
attemptToDeleteItem): an object created, or given ownerReferences, for an owner that is gone (a controller's create
racing its owner's deletion) is found by the graph builder, which verifies each owner by a live read -- by uid: an
object of the owner's name with another uid is not the owner -- and then keeps, unlinks or deletes the dependent.

The collector reaches such an object a little after it appears (`GC_LAG_S`): a dependent an earlier owner of the
same name left is briefly in the way of a new owner's object of that name, as on a real cluster. Dependents of an
owner deleted through the API server are collected at once (the emulator's deletion.py, `_collect_dependents`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from heterojob.sim.cluster import cascade

GC_LAG_S = 1.0  # how long after it appears the collector looks at an object with absent owners
SOLID, DANGLING, WAITING = "solid", "dangling", "waiting"  # an owner: live; absent; deleting its dependents first


@dataclass(frozen=True)
class Attempt:
    """What the collector does to the object: drop the references to `drop` (owner uids; it has a solid owner
    left), or delete it with the propagation policy `delete`."""

    drop: tuple[str, ...] = ()
    delete: str | None = None


def owner_state(ref: Mapping[str, Any], dependent_namespace: str | None,
                find: Callable[[str], Mapping[str, Any] | None], deleting_dependents: Callable[[str], bool]) -> str:
    """SOLID, DANGLING or WAITING for one ownerReference (isDangling, classifyReferences): the owner is the object
    with the reference's uid, in the dependent's namespace unless the owner is cluster-scoped (a reference across
    namespaces names nothing); WAITING when it is being deleted in the foreground."""
    uid = str(ref.get("uid") or "")
    owner = find(uid) if uid else None
    if owner is None:
        return DANGLING
    namespace = (owner.get("metadata") or {}).get("namespace")
    if namespace is not None and namespace != dependent_namespace:
        return DANGLING
    return WAITING if deleting_dependents(uid) else SOLID


def attempt(refs: Sequence[Mapping[str, Any]], states: Sequence[str], finalizers: Sequence[str],
            has_dependents: bool) -> Attempt | None:
    """attemptToDeleteItem's verdict from each reference's owner state (`states`, in `refs`' order); None: leave
    the object as it is (every owner solid, or no references)."""
    if not refs:
        return None
    solid = [r for r, s in zip(refs, states, strict=True) if s == SOLID]
    if solid:
        gone = tuple(str(r.get("uid")) for r, s in zip(refs, states, strict=True) if s != SOLID)
        return Attempt(drop=gone) if gone else None
    if WAITING in states and has_dependents:
        return Attempt(delete=cascade.FOREGROUND_POLICY)
    if cascade.ORPHAN in finalizers:  # a GC finalizer already on the object is honoured
        return Attempt(delete=cascade.ORPHAN_POLICY)
    if cascade.FOREGROUND in finalizers:
        return Attempt(delete=cascade.FOREGROUND_POLICY)
    return Attempt(delete=cascade.BACKGROUND_POLICY)
