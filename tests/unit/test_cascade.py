"""cascade.py: the GC finalizers a DELETE leaves, as kube-apiserver v1.32 decides them (k8s.io/apiserver
pkg/registry/generic/registry/store.go deletionFinalizersForGarbageCollection, shouldOrphanDependents,
shouldDeleteDependents)."""

from __future__ import annotations

from heterojob.sim.cluster import cascade

KOPF = "kopf.zalando.org/KopfFinalizerMarker"


def test_the_policy_adds_its_finalizer_beside_the_objects_own() -> None:
    assert cascade.finalizers_on_delete([KOPF], "Orphan") == [KOPF, "orphan"]
    assert cascade.finalizers_on_delete([KOPF], "Foreground") == [KOPF, "foregroundDeletion"]
    assert cascade.finalizers_on_delete([], "Orphan") == ["orphan"]


def test_an_explicit_policy_replaces_the_other_gc_finalizer() -> None:
    assert cascade.finalizers_on_delete(["orphan", KOPF], "Background") == [KOPF]
    assert cascade.finalizers_on_delete(["orphan", KOPF], "Foreground") == [KOPF, "foregroundDeletion"]


def test_without_a_policy_the_objects_gc_finalizer_decides() -> None:
    assert cascade.finalizers_on_delete(["orphan", KOPF], "") == ["orphan", KOPF]  # same set: order kept
    assert cascade.finalizers_on_delete([KOPF], "") == [KOPF]


def test_the_policy_comes_from_the_options_or_the_deprecated_orphan_dependents() -> None:
    assert cascade.policy_of({"propagationPolicy": "Foreground"}, {}) == "Foreground"
    assert cascade.policy_of({}, {"propagationPolicy": "Orphan"}) == "Orphan"
    assert cascade.policy_of({"orphanDependents": True}, {}) == "Orphan"
    assert cascade.policy_of({}, {"orphanDependents": "false"}) == "Background"
    assert cascade.policy_of({}, {}) == ""
