"""Which garbage-collection finalizers a DELETE leaves on an object, as kube-apiserver v1.32 decides it
(k8s.io/apiserver pkg/registry/generic/registry/store.go deletionFinalizersForGarbageCollection,
shouldOrphanDependents, shouldDeleteDependents), for kinds whose default policy is to delete dependents (custom
resources, the built-ins the emulator serves).

`orphan` makes the garbage collector strip the owner's references from its dependents, then drop the finalizer;
`foregroundDeletion` makes it delete the dependents and drop the finalizer once no blocking one is left. The
object goes when its last finalizer does."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

ORPHAN = "orphan"  # metav1.FinalizerOrphanDependents
FOREGROUND = "foregroundDeletion"  # metav1.FinalizerDeleteDependents
ORPHAN_POLICY, BACKGROUND_POLICY, FOREGROUND_POLICY = "Orphan", "Background", "Foreground"


def policy_of(options: Mapping[str, Any], query: Mapping[str, str]) -> str:
    """The DeleteOptions' propagation policy; the deprecated `orphanDependents` as the policy it means; "" for
    none (the object's own finalizers decide then)."""
    policy = options.get("propagationPolicy") or query.get("propagationPolicy")
    if policy:
        return str(policy)
    orphan = options.get("orphanDependents", query.get("orphanDependents"))
    if orphan is None:
        return ""
    return ORPHAN_POLICY if orphan in (True, "true") else BACKGROUND_POLICY


def finalizers_on_delete(finalizers: Sequence[str], policy: str) -> list[str]:
    """The object's finalizers after a DELETE with `policy`: both GC finalizers dropped, then the one the policy
    asks for added; with no policy, the first GC finalizer the object already has stays."""
    if policy:
        orphan, foreground = policy == ORPHAN_POLICY, policy == FOREGROUND_POLICY
    else:
        first = next((f for f in finalizers if f in (ORPHAN, FOREGROUND)), None)
        orphan, foreground = first == ORPHAN, first == FOREGROUND
    wanted = [f for f in finalizers if f not in (ORPHAN, FOREGROUND)] + [ORPHAN] * orphan + [FOREGROUND] * foreground
    return list(finalizers) if set(wanted) == set(finalizers) else wanted
