"""The emulator's garbage collector and an object made for an owner already gone: a controller's create that races
its owner's deletion (a HeteroJob deleted while the operator creates its gang's Service) leaves an object whose
every owner is absent. kube-controller-manager's garbage collector deletes it (its graph builder finds the owners
absent: attemptToDeleteItem); the emulator's did not, so a deleted job's Service could stay for ever."""

from __future__ import annotations

import uuid

import pytest
from kubernetes.client import ApiException

from tests.conftest import Cluster

pytestmark = pytest.mark.harness


def _service(name: str, owner_uid: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {
        "name": name, "ownerReferences": [{"apiVersion": "heterojob.io/v1alpha1", "kind": "HeteroJob",
                                           "name": "gone", "uid": owner_uid, "controller": True}]},
        "spec": {"clusterIP": "None", "selector": {"app": name}}}


def test_an_object_whose_owners_are_all_absent_is_collected_and_one_with_a_live_owner_stays(cluster: Cluster) -> None:
    cluster.seed([])
    cluster.core.create_namespaced_service("team-a", _service("orphan", str(uuid.uuid4())))
    with pytest.raises(ApiException) as gone:
        cluster.core.read_namespaced_service("orphan", "team-a")
    assert gone.value.status == 404
    owner = cluster.core.create_namespaced_config_map("team-a", {"metadata": {"name": "owner"}})
    cluster.core.create_namespaced_service("team-a", _service("kept", owner.metadata.uid))
    assert cluster.core.read_namespaced_service("kept", "team-a").metadata.owner_references[0].uid == owner.metadata.uid
