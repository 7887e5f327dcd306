"""A kube-scheduler stand-in for the emulated cluster: binds a pending pod to a node only when it passes the
default filters there (`scheduling`: unschedulable nodes, taints, nodeSelector and required node affinity, the
requests of cpu, memory and extended resources such as nvidia.com/gpu against allocatable minus what the pods on
the node request); otherwise it sets PodScheduled False, reason Unschedulable, with kube-scheduler's message, and
posts a FailedScheduling Event when that message changes.

As kube-scheduler does, it keeps a cache of nodes and pods (`informer`) and what the pods on each node request,
counts a pod it bound at once (assumed), retries an unschedulable pod when a node it could use changes (added,
relabelled, untainted, freed by a pod that ended or went: only those nodes are looked at again, so the cost of an
event is the unschedulable pods, not every pod), when its spec changes, and at the latest every `retry_s` (the
scheduling queue's podMaxInUnschedulablePodsDuration, 5 min). It never preempts. Stepped by hand (`step`), it
lists afresh each step; started, it watches.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import kubernetes
from kubernetes.client import ApiException

from heterojob.sim.cluster import scheduling
from heterojob.sim.cluster.informer import DictInformer
from heterojob.sim.cluster.scheduling import Diagnosis, FilterVerdict, Resources
from heterojob.sim.cluster.stepping import Stepping

log = logging.getLogger(__name__)

NodeState = tuple[dict[str, Any], Resources, int, Resources]  # the node, what its pods request, how many, allocatable


@dataclass
class Stuck:
    pod: dict[str, Any]
    requests: Resources
    diagnosis: Diagnosis
    tried: float  # the step clock of the last full attempt
    written: str = ""  # the message the pod's condition holds


def _iso_now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _filtered(node: Mapping[str, Any]) -> tuple[Any, ...]:
    """What the filters read of a node."""
    spec = node.get("spec") or {}
    return ((node.get("metadata") or {}).get("labels"), spec.get("taints"), spec.get("unschedulable"),
            (node.get("status") or {}).get("allocatable"))


def _hostname(node: Mapping[str, Any]) -> str:
    return str(((node.get("metadata") or {}).get("labels") or {}).get(scheduling.HOSTNAME) or "")


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


class KubeScheduler(Stepping):
    def __init__(self, api: kubernetes.client.ApiClient, interval: float = 0.5, retry_s: float = 300.0) -> None:
        super().__init__(scheduling.DEFAULT_SCHEDULER, interval)
        self.core = kubernetes.client.CoreV1Api(api)
        self.retry_s = retry_s
        self.node_informer = DictInformer(self.core.list_node, "nodes")
        self.pod_informer = DictInformer(self.core.list_pod_for_all_namespaces, "pods")
        self.nodes: dict[str, dict[str, Any]] = {}
        self.used: dict[str, Resources] = {}  # node -> what the pods counted there request
        self.count: dict[str, int] = {}  # node -> how many pods are counted there
        self._on: dict[str, tuple[str, Resources]] = {}  # pod uid -> (node, requests) it is counted for
        self._assumed: dict[str, str] = {}  # pod uid -> the node it was bound to, until the cache shows it
        self.pending: dict[str, dict[str, Any]] = {}  # uid -> a pod to try now (the active queue)
        self.stuck: dict[str, Stuck] = {}  # uid -> an unschedulable pod and why
        self._retold: set[str] = set()  # stuck pods whose diagnosis changed this step
        self._by_hostname: dict[str, set[str]] = {}  # label kubernetes.io/hostname -> nodes
        self._free: dict[str, Resources] = {}  # node -> its allocatable, parsed

    def start(self) -> KubeScheduler:
        self.watch()
        super().start()
        return self

    def watch(self) -> None:
        """Keep the cache by watches from now on (instead of listing every step)."""
        self.node_informer.start()
        self.pod_informer.start()

    def stop(self) -> None:
        super().stop()
        self.close()

    def close(self) -> None:
        self.node_informer.stop()
        self.pod_informer.stop()

    # -- the cache --------------------------------------------------------------------------------

    def _state(self, name: str) -> NodeState | None:
        node = self.nodes.get(name)
        return None if node is None else (node, dict(self.used.get(name, {})), self.count.get(name, 0),
                                          self._free.get(name, {}))

    def _changed(self, name: str, before: NodeState | None) -> None:
        """Node `name` went from `before` to what the cache holds now: look again at it, and only at it, for each
        unschedulable pod (a pod it now fits is tried again)."""
        after = self._state(name)
        for uid, s in list(self.stuck.items()):
            old = self._verdict(s, before)
            new = self._verdict(s, after)
            if old == new:
                continue
            if old is not None:
                s.diagnosis.count(old, -1)
            if new is not None:
                s.diagnosis.count(new)
            if new is not None and new.fits:
                self.pending[uid] = self.stuck.pop(uid).pod
            else:
                self._retold.add(uid)  # its message changes: written at the end of the step

    @staticmethod
    def _verdict(s: Stuck, state: NodeState | None) -> FilterVerdict | None:
        """None for a node that is not there."""
        return None if state is None else scheduling.verdict(s.pod, s.requests, *state)

    def _count(self, uid: str, where: tuple[str, Resources] | None) -> None:
        """Count pod `uid` on a node (None: on none), looking again at the nodes this changes."""
        was = self._on.get(uid)
        if was == where:
            return
        touched = []
        for entry, sign in ((was, -1), (where, 1)):
            if entry is None:
                continue
            node, requests = entry
            touched.append((node, self._state(node)))
            scheduling.add(self.used.setdefault(node, {}), requests, sign)
            self.count[node] = self.count.get(node, 0) + sign
        if where is None:
            self._on.pop(uid, None)
        else:
            self._on[uid] = where
        for node, before in touched:
            self._changed(node, before)

    def _pod_changed(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if old is not None and new is not None and _uid(old) != _uid(new):
            self._pod_changed(old, None)  # deleted and made again under its name
            old = None
        uid = _uid(new if new is not None else old or {})
        if new is None:
            self._assumed.pop(uid, None)
            self.pending.pop(uid, None)
            self.stuck.pop(uid, None)
            self._count(uid, None)
            return
        node = (new.get("spec") or {}).get("nodeName")
        if node:
            self._assumed.pop(uid, None)
        elif uid in self._assumed:
            return  # bound by this scheduler; the cache has not seen it yet
        self._count(uid, (str(node), scheduling.pod_requests(new)) if scheduling.counted(new) else None)
        if not scheduling.schedulable(new):
            self.pending.pop(uid, None)
            self.stuck.pop(uid, None)
            return
        stuck = self.stuck.get(uid)
        if stuck is not None and old is not None and (old.get("spec") == new.get("spec")):
            stuck.pod = new  # its own status, an annotation: nothing a filter reads
            return
        self.stuck.pop(uid, None)
        self.pending[uid] = new

    def _sync(self) -> None:
        if not self.node_informer.watching:
            self.node_informer.relist()
            self.pod_informer.relist()
        for old, new in self.node_informer.drain():
            name = str(((new or old) or {}).get("metadata", {}).get("name") or "")
            before = self._state(name)
            if old is not None:
                self._by_hostname.get(_hostname(old), set()).discard(name)
            if new is None:
                self.nodes.pop(name, None)
                self._free.pop(name, None)
            else:
                self.nodes[name] = new
                self._free[name] = scheduling.allocatable(new)
                self._by_hostname.setdefault(_hostname(new), set()).add(name)
            if before is None or new is None or _filtered(before[0]) != _filtered(new):
                self._changed(name, before)  # a heartbeat (the Ready condition's time) changes nothing here
        for old, new in self.pod_informer.drain():
            self._pod_changed(old, new)

    # -- scheduling -------------------------------------------------------------------------------

    def step(self, now: float) -> None:
        self._sync()
        for uid, s in list(self.stuck.items()):
            if now - s.tried >= self.retry_s:  # flushed from the unschedulable queue
                self.pending[uid] = self.stuck.pop(uid).pod
        queue = sorted(self.pending.values(), key=lambda p: (
            -int((p.get("spec") or {}).get("priority") or 0), (p.get("metadata") or {}).get("creationTimestamp") or ""))
        self.pending.clear()
        for pod in queue:
            self._attempt(pod, now)
        for uid in self._retold:
            if uid in self.stuck:
                self._refuse(self.stuck[uid])
        self._retold.clear()

    def _attempt(self, pod: dict[str, Any], now: float) -> None:
        """Bind `pod` to the best node that fits, else record why none does. A pod pinned to hostnames (the
        operator's required affinity) is tried on those nodes first; every node is looked at only for the message
        of a pod that fits nowhere."""
        requests = scheduling.pod_requests(pod)
        pinned = scheduling.pinned_hostnames(pod)
        if pinned is not None:
            names = sorted({n for h in pinned for n in self._by_hostname.get(h, ())})
            _, fits = scheduling.diagnose(pod, requests, self._states(names))
            if fits:
                self._bind_best(pod, requests, fits)
                return
        diagnosis, fits = scheduling.diagnose(pod, requests, self._states(self.nodes))
        uid = _uid(pod)
        if fits:
            self._bind_best(pod, requests, fits)
            return
        previous = self.stuck.get(uid)
        stuck = Stuck(pod, requests, diagnosis, now, previous.written if previous else "")
        self.stuck[uid] = stuck
        self._refuse(stuck)

    def _states(self, names: Iterable[str]) -> Iterator[NodeState]:
        for name in names:
            if (node := self.nodes.get(name)) is not None:
                yield node, self.used.get(name, {}), self.count.get(name, 0), self._free.get(name, {})

    def _bind_best(self, pod: dict[str, Any], requests: Resources, fits: list[dict[str, Any]]) -> None:
        best = max(fits, key=lambda n: (scheduling.score(requests, n, self.used.get(n["metadata"]["name"], {})),
                                        n["metadata"]["name"]))
        self._bind(pod, best["metadata"]["name"], requests)

    def _bind(self, pod: dict[str, Any], node: str, requests: Resources) -> None:
        meta = pod["metadata"]
        try:
            self.core.create_namespaced_pod_binding(
                meta["name"], meta["namespace"],
                {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": meta["name"], "uid": meta.get("uid")},
                 "target": {"apiVersion": "v1", "kind": "Node", "name": node}}, _preload_content=False)
        except ApiException as exc:
            if exc.status in (404, 409):
                return  # gone, or bound meanwhile: the cache will say
            raise
        uid = _uid(pod)
        self._assumed[uid] = node
        self._count(uid, (node, requests))

    def _refuse(self, stuck: Stuck) -> None:
        """PodScheduled False, reason Unschedulable, with the message (written only when it changes, its
        lastTransitionTime kept while it stays False), and a FailedScheduling Event."""
        text = scheduling.message(stuck.diagnosis, len(self.nodes))
        if text == stuck.written:
            return
        pod, meta = stuck.pod, stuck.pod["metadata"]
        conditions = [c for c in (pod.get("status") or {}).get("conditions") or [] if isinstance(c, dict)]
        current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if current is not None and current.get("status") == "False" and current.get("reason") == "Unschedulable" \
                and current.get("message") == text:
            stuck.written = text
            return
        since = current.get("lastTransitionTime") if current is not None and current.get("status") == "False" \
            else None
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": text,
                     "lastProbeTime": None, "lastTransitionTime": since or _iso_now()}
        try:
            self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], {"status": {"conditions": [
                *(c for c in conditions if c.get("type") != "PodScheduled"), condition]}}, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return
            raise
        stuck.written = text
        self._event(pod, text)

    def _event(self, pod: Mapping[str, Any], text: str) -> None:
        meta = pod["metadata"]
        stamp = _iso_now()
        body = {"metadata": {"name": f"{meta['name']}.{time.time_ns():x}", "namespace": meta["namespace"]},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                   "namespace": meta["namespace"], "uid": meta.get("uid")},
                "reason": "FailedScheduling", "message": text, "type": "Warning", "action": "Scheduling",
                "source": {"component": scheduling.DEFAULT_SCHEDULER},
                "reportingComponent": scheduling.DEFAULT_SCHEDULER, "reportingInstance": "",
                "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1}
        try:
            self.core.create_namespaced_event(meta["namespace"], body, _preload_content=False)
        except ApiException as exc:  # best effort, as the recorder is
            log.debug("FailedScheduling event for %s not posted: %s", meta["name"], exc.status)


