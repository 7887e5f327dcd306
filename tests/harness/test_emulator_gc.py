"""The emulator's garbage collector and objects made for owners already gone (sim/cluster/collector.py): a controller's
create that races its owner's deletion leaves an object whose owners are absent. kube-controller-manager's garbage
collector finds it (the graph builder verifies each owner by a live read of its uid: attemptToDeleteItem) and
deletes it, or drops the references to the absent owners while a live one is left; the emulator's collector does the
same a lag after the object appears. Before it, such an object stayed for ever (a deleted HeteroJob's Service)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from kubernetes.client import ApiException

from heterojob.sim.cluster import collector
from heterojob.sim.cluster.harness import Emulator
from tests.conftest import Cluster, eventually

pytestmark = pytest.mark.harness
NS = "team-a"


def _ref(name: str, uid: str, kind: str = "ConfigMap", api_version: str = "v1", **extra: Any) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, **extra}


def _service(name: str, *refs: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name, "ownerReferences": list(refs)},
            "spec": {"clusterIP": "None", "selector": {"app": name}}}


def _exists(read: Any, name: str) -> bool:
    try:
        read(name, NS)
        return True
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise


def test_an_object_made_for_an_owner_already_gone_is_collected_after_the_lag(cluster: Cluster) -> None:
    cluster.seed([])
    gone = str(uuid.uuid4())
    job_ref = _ref("train", gone, kind="HeteroJob", api_version="heterojob.io/v1alpha1", controller=True,
                   blockOwnerDeletion=True)
    made = time.monotonic()
    cluster.core.create_namespaced_service(NS, _service("train", job_ref))
    eventually(lambda: not _exists(cluster.core.read_namespaced_service, "train"), what="the Service collected")
    assert time.monotonic() - made >= collector.GC_LAG_S - 0.05  # not before the collector reaches it
    # one whose owner lives stays, whatever the lag
    owner = cluster.core.create_namespaced_config_map(NS, {"metadata": {"name": "owner"}})
    cluster.core.create_namespaced_service(NS, _service("kept", _ref("owner", owner.metadata.uid)))
    time.sleep(collector.GC_LAG_S + 0.5)
    assert cluster.core.read_namespaced_service("kept", NS).metadata.owner_references[0].uid == owner.metadata.uid


def test_the_owner_is_its_uid_a_new_object_of_the_name_does_not_adopt(cluster: Cluster, emulator: Emulator) -> None:
    cluster.seed([])
    emulator.gc_lag(0.2)
    first = cluster.core.create_namespaced_config_map(NS, {"metadata": {"name": "owner"}})
    cluster.core.delete_namespaced_config_map("owner", NS)
    second = cluster.core.create_namespaced_config_map(NS, {"metadata": {"name": "owner"}})
    cluster.core.create_namespaced_config_map(NS, {"metadata": {"name": "old", "ownerReferences": [
        _ref("owner", first.metadata.uid)]}})
    cluster.core.create_namespaced_config_map(NS, {"metadata": {"name": "new", "ownerReferences": [
        _ref("owner", second.metadata.uid)]}})
    eventually(lambda: not _exists(cluster.core.read_namespaced_config_map, "old"), what="the old owner's collected")
    time.sleep(0.5)
    assert _exists(cluster.core.read_namespaced_config_map, "new")
    # an owner is looked for in its dependent's namespace: the uid of an object in another one names no owner
    cluster.seed([], namespaces=("team-b",))
    cluster.core.create_namespaced_config_map("team-b", {"metadata": {"name": "elsewhere", "ownerReferences": [
        _ref("owner", second.metadata.uid)]}})
    eventually(lambda: not _exists(lambda n, _: cluster.core.read_namespaced_config_map(n, "team-b"), "elsewhere"),
               what="the reference across namespaces collected")


def test_a_live_owner_keeps_the_object_and_only_the_absent_owners_reference_goes(cluster: Cluster,
                                                                                emulator: Emulator) -> None:
    cluster.seed([])
    emulator.gc_lag(0.2)
    live = cluster.core.create_namespaced_config_map(NS, {"metadata": {"name": "live"}})
    gone = str(uuid.uuid4())
    cluster.core.create_namespaced_config_map(NS, {"metadata": {"name": "dep", "ownerReferences": [
        _ref("gone", gone), _ref("live", live.metadata.uid)]}})

    def owners() -> list[str]:
        refs = cluster.core.read_namespaced_config_map("dep", NS).metadata.owner_references or []
        return [r.uid for r in refs]

    eventually(lambda: owners() == [live.metadata.uid], what="the absent owner's reference dropped")
    cluster.core.delete_namespaced_config_map("live", NS)  # its last owner: collected with it
    assert not _exists(cluster.core.read_namespaced_config_map, "dep")


def test_a_blocking_dependent_made_while_its_owner_deletes_in_the_foreground_is_collected(
        cluster: Cluster, emulator: Emulator) -> None:
    cluster.seed([])
    emulator.gc_lag(0.2)
    owner = cluster.core.create_namespaced_config_map(NS, {"metadata": {"name": "owner"}})
    ref = _ref("owner", owner.metadata.uid, blockOwnerDeletion=True)
    cluster.core.create_namespaced_config_map(NS, {"metadata": {"name": "held", "finalizers": ["example.com/hold"],
                                                                "ownerReferences": [ref]}})
    cluster.core.delete_namespaced_config_map("owner", NS, propagation_policy="Foreground")
    assert cluster.core.read_namespaced_config_map("owner", NS).metadata.deletion_timestamp is not None
    cluster.core.create_namespaced_config_map(NS, {"metadata": {"name": "late", "ownerReferences": [ref]}})
    eventually(lambda: not _exists(cluster.core.read_namespaced_config_map, "late"), what="the late one collected")
    assert _exists(cluster.core.read_namespaced_config_map, "owner")  # still waits for `held`
    cluster.core.patch_namespaced_config_map("held", NS, {"metadata": {"finalizers": None}})
    eventually(lambda: not _exists(cluster.core.read_namespaced_config_map, "owner"), what="the owner gone")
