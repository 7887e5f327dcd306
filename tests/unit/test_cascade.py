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


def test_the_collector_keeps_unlinks_or_deletes_by_its_owners_states() -> None:
    """collector.attempt, as attemptToDeleteItem decides from classifyReferences' solid, dangling and waiting."""
    from heterojob.sim.cluster import collector
    from heterojob.sim.cluster.collector import DANGLING, SOLID, WAITING, Attempt

    a, b = {"uid": "a"}, {"uid": "b"}
    assert collector.attempt([], [], [], False) is None
    assert collector.attempt([a, b], [SOLID, SOLID], [], False) is None
    assert collector.attempt([a, b], [DANGLING, SOLID], [], False) == Attempt(drop=("a",))
    assert collector.attempt([a, b], [WAITING, SOLID], [], True) == Attempt(drop=("a",))
    assert collector.attempt([a, b], [DANGLING, DANGLING], [], False) == Attempt(delete="Background")
    assert collector.attempt([a], [WAITING], [], True) == Attempt(delete="Foreground")
    assert collector.attempt([a], [WAITING], [], False) == Attempt(delete="Background")
    assert collector.attempt([a], [DANGLING], [KOPF, "orphan"], False) == Attempt(delete="Orphan")
    assert collector.attempt([a], [DANGLING], ["foregroundDeletion"], False) == Attempt(delete="Foreground")


def test_an_owner_is_its_uid_in_the_dependents_namespace_unless_cluster_scoped() -> None:
    from heterojob.sim.cluster import collector

    objects = {"cm": {"metadata": {"namespace": "a", "uid": "cm"}}, "node": {"metadata": {"uid": "node"}}}
    state = lambda uid, ns, deleting=False: collector.owner_state(  # noqa: E731 - a one-line probe
        {"uid": uid, "name": "whatever"}, ns, objects.get, lambda _: deleting)
    assert state("cm", "a") == collector.SOLID
    assert state("cm", "b") == collector.DANGLING  # the uid of an object in another namespace names no owner
    assert state("node", "b") == collector.SOLID  # a cluster-scoped owner serves every namespace
    assert state("gone", "a") == collector.DANGLING
    assert state("cm", "a", deleting=True) == collector.WAITING
