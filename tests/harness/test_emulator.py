"""The repaired API emulator answers like a real API server where Kopf and the client depend on it."""

from __future__ import annotations

import kubernetes
import pytest
from kubernetes.client import ApiException

from heterojob.sim.cluster.patching import strategic_merge_patch
from heterojob.sim.cluster.selectors import SelectorError, label_matcher
from tests.conftest import Cluster, eventually


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
    spec = {"replicas": {"min": 1}, "devices": [{"deviceClass": "cpu", "perReplica": 1}],
            "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}, "backoffLimit": 1}
    job = cluster.create_job("j", spec)
    assert "status" not in job and job["metadata"]["generation"] == 1
    after = cluster.custom.patch_namespaced_custom_object_status(
        "heterojob.io", "v1alpha1", "team-a", "heterojobs", "j",
        {"status": {"phase": "Running"}, "spec": {"backoffLimit": 2}})
    assert after["status"]["phase"] == "Running" and after["spec"]["backoffLimit"] == 1
    assert after["status"]["restarts"] == 0  # the schema's defaults apply to status too
    assert after["metadata"]["generation"] == 1
    after = cluster.custom.patch_namespaced_custom_object(
        "heterojob.io", "v1alpha1", "team-a", "heterojobs", "j",
        {"status": {"phase": "Failed"}, "spec": {"backoffLimit": 2}})
    assert after["status"]["phase"] == "Running" and after["metadata"]["generation"] == 2
    # A no-op write changes nothing, not even the resourceVersion.
    again = cluster.custom.patch_namespaced_custom_object(
        "heterojob.io", "v1alpha1", "team-a", "heterojobs", "j", {"spec": {"backoffLimit": 2}})
    assert again["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]


def test_a_delete_with_a_body_takes_its_options_from_the_body_alone(cluster: Cluster) -> None:
    """kube-apiserver (handlers/delete.go) decodes DeleteOptions from the body when there is one, and from the
    query only when there is none: `delete(grace_period_seconds=0, body={preconditions})` is an ordinary graceful
    delete there (the client sends the grace period in the query), so a kubelet must put it in the body."""
    cluster.seed([])
    spec = {"nodeName": "n1", "containers": [{"name": "main", "image": "busybox"}]}
    uid = cluster.core.create_namespaced_pod("team-a", {"metadata": {"name": "p"}, "spec": spec}).metadata.uid
    cluster.core.delete_namespaced_pod("p", "team-a", grace_period_seconds=0, body={"preconditions": {"uid": uid}})
    held = cluster.core.read_namespaced_pod("p", "team-a")  # the query's grace period was not read
    assert held.metadata.deletion_timestamp is not None and held.metadata.deletion_grace_period_seconds == 30
    cluster.core.delete_namespaced_pod("p", "team-a", dry_run="All", body={"gracePeriodSeconds": 0})
    with pytest.raises(ApiException) as err:  # nor its dryRun: the body's grace 0 removed the pod
        cluster.core.read_namespaced_pod("p", "team-a")
    assert err.value.status == 404
    cluster.core.create_namespaced_pod("team-a", {"metadata": {"name": "q"}, "spec": spec})
    cluster.core.delete_namespaced_pod("q", "team-a", grace_period_seconds=0)  # no body: the query counts
    assert [p.metadata.name for p in cluster.core.list_namespaced_pod("team-a").items] == []
    cluster.core.create_namespaced_config_map("team-a", {"metadata": {"name": "c"}})
    cluster.core.delete_collection_namespaced_config_map("team-a", dry_run="All", body={})  # an empty object
    assert cluster.core.list_namespaced_config_map("team-a").items == []


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


# --- what a real API server (v1.32) refuses: the list, with the real status codes and wording ------

def _job(**spec: object) -> dict:
    base = {"priority": "high", "replicas": {"min": 1}, "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
            "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}}
    return {"apiVersion": "heterojob.io/v1alpha1", "kind": "HeteroJob",
            "metadata": {"name": "j", "namespace": "team-a"}, "spec": {**base, **spec}}


def _refused(call, *args: object, **kwargs: object) -> tuple[int, dict]:
    import json

    with pytest.raises(ApiException) as err:
        call(*args, **kwargs)
    return err.value.status, json.loads(err.value.body)


def test_crd_schema_refusals_use_the_real_servers_codes_and_messages(cluster: Cluster) -> None:
    cluster.seed([])
    custom = kubernetes.client.CustomObjectsApi(cluster.api)
    create = custom.create_namespaced_custom_object
    code, body = _refused(create, "heterojob.io", "v1alpha1", "team-a", "heterojobs",
                          _job(priority="critical", replicas={"min": 0}))
    assert code == 422 and body["reason"] == "Invalid"
    assert body["message"] == (
        'HeteroJob.heterojob.io "j" is invalid: [spec.priority: Unsupported value: "critical": supported values: '
        '"urgent", "high", "medium", "low", spec.replicas.min: Invalid value: 0: spec.replicas.min in body should '
        "be greater than or equal to 1]")
    assert {c["field"] for c in body["details"]["causes"]} == {"spec.priority", "spec.replicas.min"}
    # unknown fields: pruned (default Warn: a Warning header), refused with fieldValidation=Strict
    created = create("heterojob.io", "v1alpha1", "team-a", "heterojobs", _job(colour="blue"))
    assert "colour" not in created["spec"] and created["spec"]["backoffLimit"] == 3  # pruned and defaulted
    code, body = _refused(create, "heterojob.io", "v1alpha1", "team-a", "heterojobs",
                          {**_job(colour="blue"), "metadata": {"name": "k", "namespace": "team-a"}},
                          field_validation="Strict")
    assert code == 400 and 'strict decoding error: unknown field "spec.colour"' in body["message"]
    # the status subresource is validated too
    code, body = _refused(custom.patch_namespaced_custom_object_status, "heterojob.io", "v1alpha1", "team-a",
                          "heterojobs", "j", {"status": "garbage"})
    assert code == 422 and 'status: Invalid value: "string": status in body must be of type object: "string"' \
        in body["message"]
    # server-side dry run: validated, answered, not stored
    dry = create("heterojob.io", "v1alpha1", "team-a", "heterojobs",
                 {**_job(), "metadata": {"name": "dry", "namespace": "team-a"}}, dry_run="All")
    assert dry["metadata"]["name"] == "dry"
    assert _refused(custom.get_namespaced_custom_object, "heterojob.io", "v1alpha1", "team-a", "heterojobs",
                    "dry")[0] == 404


def test_pod_validation_and_body_limit(cluster: Cluster) -> None:
    cluster.seed([])
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "Main_Container!", "image": "x"}]}}
    code, body = _refused(cluster.core.create_namespaced_pod, "team-a", pod)
    assert code == 422 and body["message"].startswith(
        'Pod "p" is invalid: spec.containers[0].name: Invalid value: "Main_Container!": a lowercase RFC 1123 '
        "label must consist of lower case alphanumeric characters or '-'")
    pod["spec"]["containers"] = [{"name": "main", "image": "x", "resources": {"limits": {"memory": "abc"}}}]
    code, body = _refused(cluster.core.create_namespaced_pod, "team-a", pod)
    assert code == 400 and body["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: quantities must match the regular expression '
        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    code, body = _refused(cluster.core.create_namespaced_pod, "team-a",
                          {"metadata": {"name": "q"}, "spec": {"containers": []}})
    assert code == 422 and "spec.containers: Required value" in body["message"]
    big = {"metadata": {"name": "big"}, "data": {"blob": "x" * (10 * 1024 * 1024)}}
    code, body = _refused(cluster.core.create_namespaced_config_map, "team-a", big)
    assert code == 413 and body["message"] == "Request entity too large: limit is 3145728"


def test_admission_refusals_switched_on_like_a_cluster(cluster: Cluster) -> None:
    cluster.seed([])
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "main", "image": "x",
                                                              "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    cluster.core.create_namespaced_pod("team-a", pod)  # nothing switched on: admitted
    cluster.core.create_namespaced_resource_quota("team-a", {"metadata": {"name": "gpus"},
                                                             "spec": {"hard": {"requests.nvidia.com/gpu": "8"}}})
    code, body = _refused(cluster.core.create_namespaced_pod, "team-a", {**pod, "metadata": {"name": "p2"}})
    assert code == 403 and body["message"] == (
        'pods "p2" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=8, '
        "used: requests.nvidia.com/gpu=8, limited: requests.nvidia.com/gpu=8")
    cluster.core.patch_namespace("team-a", {"metadata": {"labels": {"pod-security.kubernetes.io/enforce":
                                                                    "restricted"}}})
    code, body = _refused(cluster.core.create_namespaced_pod, "team-a", {**pod, "metadata": {"name": "p3"}})
    assert code == 403 and 'violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false' \
        in body["message"]
    cluster.core.patch_namespace("team-a", {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": None}}})
    cluster.core.delete_namespaced_resource_quota("gpus", "team-a")
    code, body = _refused(cluster.core.create_namespaced_pod, "team-a",
                          {**pod, "metadata": {"name": "p4"}, "spec": {**pod["spec"], "serviceAccountName": "trainer"}})
    assert code == 403 and body["message"].endswith(
        'error looking up service account team-a/trainer: serviceaccount "trainer" not found')


def test_a_new_namespaces_default_service_account_comes_a_moment_after_it(cluster: Cluster) -> None:
    """The controller-manager's ServiceAccount controller makes `default` after the namespace: a pod created at
    once is refused as a real cluster refuses it, then admitted (issue 33's transient refusal)."""
    cluster.seed([])
    cluster.core.create_namespace({"metadata": {"name": "fresh"}})
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "main", "image": "x"}]}}
    code, body = _refused(cluster.core.create_namespaced_pod, "fresh", pod)
    assert code == 403 and body["message"].endswith(
        'error looking up service account fresh/default: serviceaccount "default" not found')
    eventually(lambda: [a for a in cluster.core.list_namespaced_service_account("fresh").items
                        if a.metadata.name == "default"], timeout=5, what="the default ServiceAccount")
    cluster.core.create_namespaced_pod("fresh", pod)
    assert cluster.core.read_namespaced_service_account("default", "default")  # the system namespaces': from the start


def test_a_pod_on_a_node_is_deleted_gracefully_and_an_unbound_or_ended_one_at_once(cluster: Cluster) -> None:
    """kube-apiserver v1.32 (pkg/registry/core/pod/strategy.go, CheckGracefulDelete): deleting a pod bound to
    a node sets deletionTimestamp (now + the grace period) and deletionGracePeriodSeconds (the request's
    gracePeriodSeconds, else spec.terminationGracePeriodSeconds, 30 by default) and keeps the pod until its
    kubelet deletes it with grace 0; a pod not bound to a node, or Succeeded/Failed, goes at once; a shorter
    grace period (0: `kubectl delete --grace-period=0 --force`) ends the wait."""
    cluster.seed([])

    def pod(name: str, node: str | None = None, grace: int | None = None) -> None:
        spec: dict[str, object] = {"containers": [{"name": "main", "image": "busybox"}]}
        if node:
            spec["nodeName"] = node
        if grace is not None:
            spec["terminationGracePeriodSeconds"] = grace
        cluster.core.create_namespaced_pod("team-a", {"metadata": {"name": name}, "spec": spec})

    def names() -> list[str]:
        return sorted(p.metadata.name for p in cluster.core.list_namespaced_pod("team-a").items)

    pod("bound", "n1")
    pod("short", "n1", grace=5)
    pod("unbound")
    pod("ended", "n1")
    cluster.core.patch_namespaced_pod_status("ended", "team-a", {"status": {"phase": "Succeeded"}})
    for name in ("bound", "short", "unbound", "ended"):
        cluster.core.delete_namespaced_pod(name, "team-a")
    assert names() == ["bound", "short"]
    held = cluster.core.read_namespaced_pod("bound", "team-a")
    assert held.metadata.deletion_timestamp is not None and held.metadata.deletion_grace_period_seconds == 30
    assert cluster.core.read_namespaced_pod("short", "team-a").metadata.deletion_grace_period_seconds == 5
    cluster.core.delete_namespaced_pod("bound", "team-a")  # asked again with the same period: still there
    assert names() == ["bound", "short"]
    # a write to a Terminating pod (the SDK annotating it on SIGTERM) keeps it, and its grace period with it
    cluster.core.patch_namespaced_pod("bound", "team-a", {"metadata": {"labels": {"saving": "yes"},
                                                                       "deletionGracePeriodSeconds": 1}})
    assert names() == ["bound", "short"]
    assert cluster.core.read_namespaced_pod("bound", "team-a").metadata.deletion_grace_period_seconds == 30
    cluster.core.delete_namespaced_pod("bound", "team-a", grace_period_seconds=0)  # the kubelet's (or --force)
    assert names() == ["short"]
    # finalizers keep a pod whatever the grace period; the deadline moves to now and it goes with the last one
    pod("held", "n1")
    cluster.core.patch_namespaced_pod("held", "team-a", {"metadata": {"finalizers": ["example.com/hold"]}})
    cluster.core.delete_namespaced_pod("held", "team-a")
    cluster.core.delete_namespaced_pod("held", "team-a", grace_period_seconds=0)
    assert cluster.core.read_namespaced_pod("held", "team-a").metadata.deletion_grace_period_seconds == 0
    cluster.core.patch_namespaced_pod("held", "team-a", {"metadata": {"finalizers": None}})
    assert names() == ["short"]
    # a namespace's pods go with it (here at once: they must not outlive it and show in a namespace made again)
    cluster.core.delete_namespace("team-a")
    cluster.core.create_namespace({"metadata": {"name": "team-a"}})
    assert names() == []


def test_an_update_does_not_validate_a_top_level_field_it_leaves_as_it_was(cluster: Cluster) -> None:
    """Ratcheting (KEP-4008, on by default since v1.30), for whole top-level fields: a status write does not check
    the spec again, so an object whose spec a tightened schema now refuses still gets its status written; a write
    that changes the spec is checked in full, and the status always is. (Checking the unchanged spec of every
    status write was the emulator's largest cost in bench/admission.py's burst.)"""
    ext = kubernetes.client.ApiextensionsV1Api(cluster.api)
    custom = kubernetes.client.CustomObjectsApi(cluster.api)
    group, plural = "ratchet.example.com", "gadgets"

    def crd(maximum: int) -> dict:
        return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": f"{plural}.{group}"},
                "spec": {"group": group, "scope": "Namespaced",
                         "names": {"plural": plural, "singular": "gadget", "kind": "Gadget"},
                         "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                                       "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                           "spec": {"type": "object", "properties": {
                                               "size": {"type": "integer", "maximum": maximum}}},
                                           "status": {"type": "object", "properties": {
                                               "phase": {"type": "string"}}}}}}}]}}

    cluster.seed([])
    made = ext.create_custom_resource_definition(crd(10))
    custom.create_namespaced_custom_object(group, "v1", "team-a", plural, {
        "apiVersion": f"{group}/v1", "kind": "Gadget", "metadata": {"name": "g"}, "spec": {"size": 8}})
    ext.replace_custom_resource_definition(f"{plural}.{group}", {
        **crd(5), "metadata": {"name": f"{plural}.{group}", "resourceVersion": made.metadata.resource_version}})
    after = custom.patch_namespaced_custom_object_status(group, "v1", "team-a", plural, "g",
                                                         {"status": {"phase": "Ready"}})
    assert after["status"] == {"phase": "Ready"} and after["spec"] == {"size": 8}
    code, body = _refused(custom.patch_namespaced_custom_object_status, group, "v1", "team-a", plural, "g",
                          {"status": {"phase": 3}})
    assert code == 422 and "status.phase" in body["message"]
    code, body = _refused(custom.patch_namespaced_custom_object, group, "v1", "team-a", plural, "g",
                          {"spec": {"size": 9}})
    assert code == 422 and "spec.size" in body["message"]
    assert custom.patch_namespaced_custom_object(group, "v1", "team-a", plural, "g",
                                                 {"spec": {"size": 4}})["spec"] == {"size": 4}
