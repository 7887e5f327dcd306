"""Taint-based eviction in the emulated cluster, as Kubernetes v1.32 does it, on an injected clock:

- kube-apiserver's DefaultTolerationSeconds admission plugin
  (plugin/pkg/admission/defaulttolerationseconds/admission.go) gives every pod, on create and update, the
  tolerations node.kubernetes.io/not-ready and node.kubernetes.io/unreachable (Exists, NoExecute, 300 s) unless
  one of its own already covers the key (or has none) for NoExecute (or no effect); a pod's existing
  tolerations cannot be changed but for tolerationSeconds (pkg/apis/core/validation, validateOnlyAddedTolerations);
- kube-controller-manager's taint-eviction controller (pkg/controller/tainteviction/taint_eviction.go) deletes
  a pod on a node with a NoExecute taint it does not tolerate at once, one it tolerates after the least
  tolerationSeconds of the tolerations used (counted from when it saw the taint), never when none has
  tolerationSeconds; the taint's removal cancels. The deletion is graceful: on a silent node the pod stays
  Terminating, with the condition DisruptionTarget (DeletionByTaintManager).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests
from kubernetes.client import ApiException

from heterojob.sim.cluster.harness import Emulator
from heterojob.sim.cluster.nodes import NOT_READY_TAINT, UNREACHABLE_TAINT, node, set_node_lost, set_node_ready
from heterojob.sim.cluster.tainteviction import TaintEviction
from tests.conftest import Cluster

pytestmark = pytest.mark.harness

DEFAULTS = [{"key": NOT_READY_TAINT, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
T0 = 1000.0  # the controller's clock in these tests: any monotonic seconds


def make_pod(cluster: Cluster, name: str, node_name: str | None = "h100-a",
             tolerations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}
    if node_name:
        spec["nodeName"] = node_name
    if tolerations is not None:
        spec["tolerations"] = tolerations
    cluster.core.create_namespaced_pod("team-a", {"metadata": {"name": name}, "spec": spec})
    return read(cluster, name)


def read(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.api.sanitize_for_serialization(cluster.core.read_namespaced_pod(name, "team-a"))


def refusal(exc: pytest.ExceptionInfo[ApiException]) -> tuple[int, str]:
    return exc.value.status, json.loads(exc.value.body)["message"]


def terminating(cluster: Cluster) -> set[str]:
    return {p.metadata.name for p in cluster.core.list_namespaced_pod("team-a").items
            if p.metadata.deletion_timestamp is not None}


@pytest.fixture
def lost_node(cluster: Cluster) -> Cluster:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("h100-b", "cn-east", "nvidia-h100")])
    return cluster


def test_pods_get_the_default_tolerations_once_and_keep_them_across_updates(lost_node: Cluster) -> None:
    cluster = lost_node
    assert make_pod(cluster, "plain", None)["spec"]["tolerations"] == DEFAULTS
    own = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
           {"key": UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]
    assert make_pod(cluster, "own", None, own)["spec"]["tolerations"] == [own[0], own[1], DEFAULTS[0]]
    everything = [{"operator": "Exists"}]  # an empty key and effect tolerates every taint: nothing added
    assert make_pod(cluster, "all", None, everything)["spec"]["tolerations"] == everything
    # a replace without the defaults gets them again (the plugin runs on update too), so it is no change
    pod = read(cluster, "plain")
    pod["spec"].pop("tolerations")
    pod["metadata"]["labels"] = {"replaced": "yes"}
    cluster.core.replace_namespaced_pod("plain", "team-a", pod)
    assert read(cluster, "plain")["spec"]["tolerations"] == DEFAULTS
    # tolerationSeconds may change and tolerations may be added; an existing one may not change otherwise
    cluster.core.patch_namespaced_pod("own", "team-a", {"spec": {"tolerations": [
        own[0], {**own[1], "tolerationSeconds": 10}, DEFAULTS[0], {"key": "x", "operator": "Exists"}]}})
    with pytest.raises(ApiException) as refused:
        cluster.core.patch_namespaced_pod("own", "team-a", {"spec": {"tolerations": DEFAULTS}})
    assert refusal(refused) == (422, 'Pod "own" is invalid: spec.tolerations: Forbidden: existing toleration can '
                                     "not be modified except its tolerationSeconds")


def test_malformed_tolerations_are_refused_as_a_real_server_refuses_them(lost_node: Cluster,
                                                                        emulator: Emulator) -> None:
    cluster = lost_node
    cases = [([{"operator": "Equal", "value": "x"}], "spec.tolerations[0].operator: Invalid value: \"Equal\": "
              'operator must be Exists when `key` is empty, which means "match all values and all keys"'),
             ([{"key": "a", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}],
              "spec.tolerations[0].effect: Invalid value: \"NoSchedule\": effect must be 'NoExecute' when "
              "`tolerationSeconds` is set"),
             ([{"key": "a", "operator": "Within"}], 'spec.tolerations[0].operator: Unsupported value: "Within": '
              'supported values: "Equal", "Exists"'),
             ([{"key": "a", "operator": "Exists", "effect": "Never"}], 'spec.tolerations[0].effect: Unsupported '
              'value: "Never": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"')]
    for i, (tolerations, message) in enumerate(cases):
        with pytest.raises(ApiException) as refused:
            make_pod(cluster, f"bad-{i}", None, tolerations)
        assert refusal(refused) == (422, f'Pod "bad-{i}" is invalid: {message}')
    # (the kubernetes client refuses this body itself: sent as kubectl would send it)
    typed = {"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": "300"}
    answer = requests.post(f"{emulator.url}/api/v1/namespaces/team-a/pods", timeout=10, json={
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "typed"},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], "tolerations": [typed]}})
    assert (answer.status_code, answer.json()["message"]) == (
        400, 'Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal string into Go struct field '
        "Toleration.spec.tolerations.tolerationSeconds of type int64")


def test_a_pod_on_an_unreachable_node_is_evicted_300_s_after_the_taint_and_stays_terminating(
        lost_node: Cluster) -> None:
    cluster = lost_node
    make_pod(cluster, "default")
    make_pod(cluster, "elsewhere", "h100-b")
    make_pod(cluster, "impatient", tolerations=[{"key": UNREACHABLE_TAINT, "operator": "Exists",
                                                 "effect": "NoExecute", "tolerationSeconds": 0}])
    make_pod(cluster, "forever", tolerations=[{"key": UNREACHABLE_TAINT, "operator": "Exists",
                                               "effect": "NoExecute"}])
    controller = TaintEviction(cluster.api)
    controller.step(T0)
    assert not terminating(cluster)  # no NoExecute taint yet
    set_node_lost(cluster.core, "h100-a")
    controller.step(T0 + 1)
    assert terminating(cluster) == {"impatient"}  # tolerationSeconds 0: at once
    controller.step(T0 + 300)
    assert terminating(cluster) == {"impatient"}
    controller.step(T0 + 301)
    assert terminating(cluster) == {"impatient", "default"}  # "forever" has no tolerationSeconds: it stays
    evicted = read(cluster, "default")
    assert evicted["metadata"]["deletionGracePeriodSeconds"] == 30  # an ordinary graceful delete
    assert {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
            "message": "Taint manager: deleting due to NoExecute taint"}.items() <= next(
        c for c in evicted["status"]["conditions"] if c["type"] == "DisruptionTarget").items()
    events = [e for e in cluster.core.list_namespaced_event("team-a").items if e.reason == "TaintManagerEviction"]
    assert sorted(e.message for e in events) == ["Marking for deletion Pod team-a/default",
                                                  "Marking for deletion Pod team-a/impatient"]
    assert {e.source.component for e in events} == {"taint-eviction-controller"}
    controller.step(T0 + 400)  # nobody finishes the deletion on a silent node: still Terminating, asked once
    assert terminating(cluster) == {"impatient", "default"}
    assert len([e for e in cluster.core.list_namespaced_event("team-a").items
                if e.reason == "TaintManagerEviction"]) == 2


def test_a_pod_that_tolerates_no_noexecute_taint_goes_at_once(lost_node: Cluster) -> None:
    cluster = lost_node
    make_pod(cluster, "mine", tolerations=[{"operator": "Exists", "effect": "NoSchedule"}, DEFAULTS[0]])
    set_node_lost(cluster.core, "h100-a")
    cluster.core.patch_node("h100-a", {"spec": {"taints": [
        *cluster.api.sanitize_for_serialization(cluster.core.read_node("h100-a").spec.taints),
        {"key": "maintenance", "effect": "NoExecute"}]}})
    TaintEviction(cluster.api).step(T0)
    assert terminating(cluster) == {"mine"}


def test_the_taint_removed_before_the_deadline_cancels_the_eviction(lost_node: Cluster) -> None:
    cluster = lost_node
    make_pod(cluster, "survivor")
    controller = TaintEviction(cluster.api)
    set_node_lost(cluster.core, "h100-a")
    controller.step(T0)
    controller.step(T0 + 200)
    set_node_ready(cluster.core, "h100-a")  # the kubelet answers again: the taints go
    controller.step(T0 + 250)
    controller.step(T0 + 600)
    assert not terminating(cluster)
    events = [e.message for e in cluster.core.list_namespaced_event("team-a").items
              if e.reason == "TaintManagerEviction"]
    assert events == ["Cancelling deletion of Pod team-a/survivor"]
    set_node_lost(cluster.core, "h100-a")  # lost again: the 300 s start again from now
    controller.step(T0 + 700)
    controller.step(T0 + 999)
    assert not terminating(cluster)
    controller.step(T0 + 1000)
    assert terminating(cluster) == {"survivor"}
