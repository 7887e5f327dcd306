"""The taint-eviction controller of the emulated cluster's control plane (kube-controller-manager v1.32,
pkg/controller/tainteviction/taint_eviction.go, read at kubernetes/kubernetes 003e862; the logic is the one
moved there from nodelifecycle/scheduler/taint_manager.go in v1.29).

For every pod bound to a node with NoExecute taints:
- a taint the pod does not tolerate: the pod is deleted at once;
- all tolerated: deleted `min(tolerationSeconds)` of the tolerations used after the controller first saw it so
  (its own clock, `time.Now()` there, not the taint's `timeAdded`); a toleration with tolerationSeconds <= 0
  means at once; none with tolerationSeconds: never. Once set, the time stays (a later, longer toleration does
  not extend it: kubernetes/kubernetes#102993); taints gone, or tolerated forever, cancel it.
The deletion adds the pod condition DisruptionTarget (reason DeletionByTaintManager) and is an ordinary
graceful delete: on a node whose kubelet is silent the pod then stays Terminating, as on a real cluster. An
Event `TaintManagerEviction` ("Marking for deletion Pod ns/name", "Cancelling deletion of Pod ns/name") goes
with each. Pods are keyed by UID as well (the real controller hears a deleted-and-recreated pod as two).

`plan` decides on plain data; `TaintEviction.step(now)` lists, plans and acts, on the emulator's clock.
"""

from __future__ import annotations

import datetime
import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import kubernetes
from kubernetes.client import ApiException

from heterojob.sim.cluster.stepping import Stepping

log = logging.getLogger(__name__)

CONTROLLER = "taint-eviction-controller"  # cmd/kube-controller-manager names.TaintEvictionController
PodKey = tuple[str, str, str]  # namespace, name, uid


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Toleration.ToleratesTaint (k8s.io/api core/v1, v1.32): an empty effect or key matches any; operator
    Exists matches any value, Equal (or none) the taint's value; any other operator nothing."""
    effect, key = toleration.get("effect") or "", toleration.get("key") or ""
    if effect and effect != taint.get("effect"):
        return False
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def no_execute_taints(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    taints = (node.get("spec") or {}).get("taints") or []
    return [t for t in taints if isinstance(t, dict) and t.get("effect") == "NoExecute"] \
        if isinstance(taints, list) else []


def toleration_time(tolerations: Any, taints: list[Mapping[str, Any]]) -> float | None:
    """How long a pod may stay on a node with these NoExecute `taints` (GetMatchingTolerations, then
    getMinTolerationTime): 0 when one is not tolerated or a used toleration says <= 0 s, the least
    tolerationSeconds of the used ones, None (forever) when none of them has tolerationSeconds."""
    if not taints:
        return None
    listed = [t for t in tolerations if isinstance(t, dict)] if isinstance(tolerations, list) else []
    used = []
    for taint in taints:
        match = next((t for t in listed if tolerates(t, taint)), None)
        if match is None:
            return 0.0
        used.append(match)
    seconds = [s for t in used if isinstance(s := t.get("tolerationSeconds"), int) and not isinstance(s, bool)]
    if not seconds:
        return None
    return float(max(0, min(seconds)))


@dataclass(frozen=True)
class EvictionPlan:
    due: dict[PodKey, float]  # pending evictions: pod -> when (the step clock)
    fired: frozenset[PodKey]  # deleted while these taints last: not again until cancelled
    evict: tuple[PodKey, ...]  # delete now
    cancelled: tuple[PodKey, ...]  # pending evictions dropped


def pod_key(pod: Mapping[str, Any]) -> PodKey:
    meta = pod.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(meta.get("uid") or ""))


def plan(pods: Iterable[Mapping[str, Any]], nodes: Iterable[Mapping[str, Any]], due: Mapping[PodKey, float],
         fired: frozenset[PodKey], now: float) -> EvictionPlan:
    """The controller's next move at `now`, from the pods, the nodes and what it had scheduled (`due`) and done
    (`fired`). A pod on a node without NoExecute taints (or gone), or tolerating them forever, is dropped."""
    tainted = {(n.get("metadata") or {}).get("name"): t for n in nodes if (t := no_execute_taints(n))}
    new_due: dict[PodKey, float] = {}
    kept: set[PodKey] = set()
    evict: list[PodKey] = []
    cancelled: list[PodKey] = []
    for pod in pods:
        taints = tainted.get((pod.get("spec") or {}).get("nodeName"))
        if not taints:
            continue
        key = pod_key(pod)
        if key in fired:
            kept.add(key)
            continue
        seconds = toleration_time((pod.get("spec") or {}).get("tolerations"), taints)
        if seconds is None:
            continue
        if seconds == 0 and key in due:
            cancelled.append(key)  # cancelled, then deleted at once (processPodOnNode)
        at = now if seconds == 0 else due.get(key, now + seconds)
        if at <= now:
            evict.append(key)
        else:
            new_due[key] = at
    cancelled += [k for k in due if k not in new_due and k not in evict]
    return EvictionPlan(new_due, frozenset(kept | set(evict)), tuple(evict), tuple(cancelled))


def _iso_now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class TaintEviction(Stepping):
    """The controller as a stepped component: `step(now)` lists Nodes and Pods, plans and acts; `now` is the
    emulator's clock (monotonic seconds on its thread; any clock in tests, e.g. t0 then t0 + 301)."""

    def __init__(self, api: kubernetes.client.ApiClient, interval: float = 1.0) -> None:
        super().__init__(CONTROLLER, interval)
        self.core = kubernetes.client.CoreV1Api(api)
        self.due: dict[PodKey, float] = {}
        self.fired: frozenset[PodKey] = frozenset()

    def step(self, now: float) -> None:
        nodes = json.loads(self.core.list_node(_preload_content=False).data)["items"]
        pods = json.loads(self.core.list_pod_for_all_namespaces(_preload_content=False).data)["items"]
        decided = plan(pods, nodes, self.due, self.fired, now)
        self.due, self.fired = decided.due, decided.fired
        by_key = {pod_key(p): p for p in pods}
        for key in decided.cancelled:
            self._event(key, f"Cancelling deletion of Pod {key[0]}/{key[1]}")
        failed: set[PodKey] = set()
        for key in decided.evict:
            try:
                self._evict(by_key[key])
            except ApiException as exc:
                if exc.status in (404, 409):
                    continue  # gone, or another pod under its name since the list
                log.warning("taint eviction of %s/%s failed (%s): again next step", key[0], key[1], exc.status)
                failed.add(key)
        self.fired = self.fired - failed

    def _evict(self, pod: Mapping[str, Any]) -> None:
        """addConditionAndDeletePod: the DisruptionTarget condition, then an ordinary (graceful) delete."""
        meta = pod["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        self._event(pod_key(pod), f"Marking for deletion Pod {namespace}/{name}")
        condition = {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
                     "message": "Taint manager: deleting due to NoExecute taint"}
        conditions = [c for c in (pod.get("status") or {}).get("conditions") or [] if isinstance(c, dict)]
        current = next((c for c in conditions if c.get("type") == "DisruptionTarget"), None)
        if current is None or any(current.get(k) != v for k, v in condition.items()):
            conditions = [c for c in conditions if c.get("type") != "DisruptionTarget"]
            self.core.patch_namespaced_pod_status(name, namespace, {"status": {"conditions": [
                *conditions, {**condition, "lastTransitionTime": _iso_now()}]}})
        self.core.delete_namespaced_pod(name, namespace, body={"preconditions": {"uid": meta.get("uid")}},
                                        _preload_content=False)

    def _event(self, key: PodKey, message: str) -> None:
        """What the controller's event recorder posts (type Normal, reason TaintManagerEviction)."""
        namespace, name, _ = key
        stamp = _iso_now()  # named as client-go's recorder names events: <object>.<unix nanoseconds, hex>
        body = {"metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": namespace},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": namespace},
                "reason": "TaintManagerEviction", "message": message, "type": "Normal",
                "source": {"component": CONTROLLER}, "reportingComponent": CONTROLLER, "reportingInstance": "",
                "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1}
        try:
            self.core.create_namespaced_event(namespace, body, _preload_content=False)
        except ApiException as exc:  # an event is best effort, as in client-go's recorder
            log.debug("event for %s/%s not posted: %s", namespace, name, exc.status)
