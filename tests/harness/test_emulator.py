"""The repaired API emulator answers like a real API server where Kopf and the client depend on it."""

from __future__ import annotations

import kubernetes
import pytest
from kubernetes.client import ApiException

from heterojob.sim.cluster.patching import strategic_merge_patch
from heterojob.sim.cluster.selectors import SelectorError, label_matcher
from tests.conftest import Cluster


def test_create_fills_metadata_answers_201_and_conflicts_on_duplicates(cluster: Cluster) -> None:
    cluster.seed([])
    _, status, _ = cluster.core.create_namespaced_config_map_with_http_info(
        "team-a", {"metadata": {"name": "c1"}, "data": {"a": "1"}})
    assert status == 201
    cm = cluster.core.read_namespaced_config_map("c1", "team-a")
    assert cm.metadata.namespace == "team-a" and cm.metadata.uid and cm.metadata.resource_version
    assert cm.metadata.creation_timestamp is not None
    with pytest.raises(ApiException) as err:
        cluster.core.create_namespaced_config_map("team-a", {"metadata": {"name": "c1"}})
    assert err.value.status == 409 and "AlreadyExists" in err.value.body


def test_missing_namespace_generate_name_and_invalid_names(cluster: Cluster) -> None:
    cluster.seed([])
    with pytest.raises(ApiException) as err:
        cluster.core.create_namespaced_config_map("nope", {"metadata": {"name": "c"}})
    assert err.value.status == 404
    a = cluster.core.create_namespaced_config_map("team-a", {"metadata": {"generateName": "cm-"}})
    b = cluster.core.create_namespaced_config_map("team-a", {"metadata": {"generateName": "cm-"}})
    assert a.metadata.name != b.metadata.name and a.metadata.name.startswith("cm-")
    with pytest.raises(ApiException) as err:
        cluster.core.create_namespaced_config_map("team-a", {"metadata": {"name": "Bad_Name"}})
    assert err.value.status == 422


def test_stale_resource_version_conflicts_and_put_replaces(cluster: Cluster) -> None:
    cluster.seed([])
    cm = cluster.core.create_namespaced_config_map("team-a", {"metadata": {"name": "c"}, "data": {"a": "1"}})
    old_rv = cm.metadata.resource_version
    cm.data = {"a": "2"}
    replaced = cluster.core.replace_namespaced_config_map("c", "team-a", cm)
    assert replaced.data == {"a": "2"} and replaced.metadata.resource_version != old_rv
    cm.data = {"a": "3"}
    with pytest.raises(ApiException) as err:  # cm still carries the old resourceVersion
        cluster.core.replace_namespaced_config_map("c", "team-a", cm)
    assert err.value.status == 409
    with pytest.raises(ApiException) as err:
        cluster.core.patch_namespaced_config_map("c", "team-a",
                                                 {"metadata": {"resourceVersion": old_rv}, "data": {"a": "4"}})
    assert err.value.status == 409


def test_json_patch_test_failure_is_422(cluster: Cluster) -> None:
    cluster.seed([])
    cluster.core.create_namespaced_config_map("team-a", {"metadata": {"name": "c"}})
    with pytest.raises(ApiException) as err:
        cluster.core.patch_namespaced_config_map(
            "c", "team-a", [{"op": "test", "path": "/metadata/resourceVersion", "value": "0"}])
    assert err.value.status == 422


def test_status_subresource_splits_spec_and_status_and_bumps_generation(cluster: Cluster) -> None:
    cluster.seed([])
    job = cluster.create_job("j", {"x": 1})
    assert "status" not in job and job["metadata"]["generation"] == 1
    after = cluster.custom.patch_namespaced_custom_object_status(
        "heterojob.io", "v1alpha1", "team-a", "heterojobs", "j", {"status": {"phase": "Running"}, "spec": {"x": 2}})
    assert after["status"] == {"phase": "Running"} and after["spec"] == {"x": 1}
    assert after["metadata"]["generation"] == 1
    after = cluster.custom.patch_namespaced_custom_object(
        "heterojob.io", "v1alpha1", "team-a", "heterojobs", "j", {"status": {"phase": "X"}, "spec": {"x": 2}})
    assert after["status"] == {"phase": "Running"} and after["metadata"]["generation"] == 2
    # A no-op write changes nothing, not even the resourceVersion.
    again = cluster.custom.patch_namespaced_custom_object(
        "heterojob.io", "v1alpha1", "team-a", "heterojobs", "j", {"spec": {"x": 2}})
    assert again["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]


def test_finalizers_hold_deletion_and_owner_references_collect_dependents(cluster: Cluster) -> None:
    cluster.seed([])
    owner = cluster.core.create_namespaced_config_map(
        "team-a", {"metadata": {"name": "owner", "finalizers": ["example.com/hold"]}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    cluster.core.create_namespaced_config_map("team-a", {"metadata": {"name": "dep", "ownerReferences": [ref]}})
    cluster.core.delete_namespaced_config_map("owner", "team-a")
    held = cluster.core.read_namespaced_config_map("owner", "team-a")
    assert held.metadata.deletion_timestamp is not None
    cluster.core.patch_namespaced_config_map("owner", "team-a", {"metadata": {"finalizers": None}})
    names = [c.metadata.name for c in cluster.core.list_namespaced_config_map("team-a").items]
    assert names == []


def test_watch_honours_selectors_timeout_and_resumes_from_a_resource_version(cluster: Cluster) -> None:
    cluster.seed([])
    listed = cluster.core.list_namespaced_config_map("team-a")
    cluster.core.create_namespaced_config_map("team-a", {"metadata": {"name": "a", "labels": {"k": "v"}}})
    cluster.core.create_namespaced_config_map("team-a", {"metadata": {"name": "b"}})
    cluster.core.patch_namespaced_config_map("a", "team-a", {"metadata": {"labels": {"k": "w"}}})
    watch = kubernetes.watch.Watch()
    events = [(e["type"], e["object"].metadata.name) for e in watch.stream(
        cluster.core.list_namespaced_config_map, "team-a", label_selector="k=v",
        resource_version=listed.metadata.resource_version, timeout_seconds=1)]
    # Changes after the listed version are replayed; leaving the selector reads as DELETED.
    assert events == [("ADDED", "a"), ("DELETED", "a")]


def test_label_selector_grammar() -> None:
    obj = {"metadata": {"labels": {"app": "x", "tier": "gpu"}}}
    assert label_matcher("app=x,tier in (gpu,npu),!missing")(obj)
    assert not label_matcher("app!=x")(obj)
    assert label_matcher("tier notin (cpu), app")(obj)
    with pytest.raises(SelectorError):
        label_matcher("app===x")


def test_strategic_merge_merges_containers_by_name_and_finalizers_as_a_set() -> None:
    target = {"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}]},
              "metadata": {"finalizers": ["x"]}}
    patched = strategic_merge_patch(target, {"spec": {"containers": [{"name": "b", "image": "2"}]},
                                             "metadata": {"finalizers": ["y", "x"]}})
    assert patched["spec"]["containers"] == [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}]
    assert patched["metadata"]["finalizers"] == ["x", "y"]
