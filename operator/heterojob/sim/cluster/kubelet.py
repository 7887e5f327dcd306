"""A stand-in kubelet for the emulated cluster: runs the operator's pods bound to its nodes, finishes them, and
heartbeats every node (`heartbeats`: the node's Lease and Ready status, as a kubelet posts them).

It never binds a pod: a scheduler does (`scheduler.KubeScheduler`; with `schedule`, the default, one runs on the same
client: on its own thread beside the kubelet's once started, else at the start of each step by hand), so a pod the
scheduler refuses stays Pending with its PodScheduled False.

A pod runs for `HETEROJOB_SIM_DURATION` seconds (env of its first container; default 120) and then
succeeds, or fails when `HETEROJOB_SIM_FAIL` is "1". A running pod gets the node's InternalIP as hostIP and its
own podIP from the node's podCIDR (`ipam`; the node's IP with hostNetwork), kept until it ends. With
`device_health`, it plays the device plugins too: a node's allocatable leaves out its Unhealthy devices. Its step is ten per second of running. With
`answer_checkpoints`, it plays the SDK: a pod asked for a checkpoint acknowledges it a moment later
(`<id>;<step>;$HETEROJOB_CHECKPOINT_DIR/<id>/;size=<bytes>;start=<unix s>;end=<unix s>`, engine.basics.acks), unless
`HETEROJOB_SIM_NO_SDK` is "1"; a pod evicted (a drain) then runs on through its grace period until it has
answered a checkpoint (`sdk.Checkpointer(checkpoint_on_eviction=True)`). A pod being deleted stops at once, or
`HETEROJOB_SIM_EXIT_SECONDS` after its deletion began (a trainer flushing on SIGTERM), at most its grace period.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import kubernetes
from kubernetes.client import ApiException

from heterojob.constants import (ANNOTATION_CHECKPOINT_ACK, ANNOTATION_CHECKPOINT_REQUEST, EVICTED_BY_EVICTION_API,
                                 LABEL_JOB)
from heterojob.kube.convert import ready_condition
from heterojob.sim.cluster import ipam
from heterojob.sim.cluster.heartbeats import LEASE_DURATION_S, RENEW_S, REPORT_S, Heartbeats
from heterojob.sim.cluster.nodes import KUBELET_STOPPED
from heterojob.sim.cluster.scheduler import KubeScheduler
from heterojob.sim.cluster.mirror import Mirror
from heterojob.sim.cluster.stepping import Stepping
from heterojob.api.times import timestamp

log = logging.getLogger(__name__)


SIM_RANK_CHECKPOINT_BYTES = 6 * 2**30  # one rank's shard of a mid-sized model with optimizer state


def _env(pod: dict[str, Any], name: str, default: str) -> str:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    for e in containers[0].get("env") or []:
        if e.get("name") == name:
            return str(e.get("value", default))
    return default


Bindings = dict[str, list[tuple[str, str, int]]]  # node -> [(namespace, pod, devices)]


def pod_devices(pod: dict[str, Any]) -> int:
    """Extended-resource devices (nvidia.com/gpu, huawei.com/Ascend910, ...) the pod's containers hold."""
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        for name, value in ((c.get("resources") or {}).get("limits") or {}).items():
            if "/" in name:
                try:
                    total += int(str(value))
                except ValueError:
                    pass
    return total


class Kubelet(Stepping):
    def __init__(self, api: kubernetes.client.ApiClient, start_delay: float = 1.0, interval: float = 0.5,
                 on_bindings: Callable[[Bindings], None] | None = None, answer_checkpoints: bool = False,
                 checkpoint_delay: float = 1.0, device_health: Callable[[], Mapping[str, int]] | None = None,
                 schedule: bool = True, heartbeats: bool = True, renew_s: float = RENEW_S,
                 lease_duration_s: int = LEASE_DURATION_S, report_s: float = REPORT_S,
                 acknowledge: Callable[[dict[str, Any], str], None] | None = None) -> None:
        """`on_bindings` hears, after every step, which running pods hold which node's devices;
        `device_health` says how many of each node's devices its device plugin reports Unhealthy (the node's
        allocatable then leaves them out, as the kubelet's device manager does; capacity keeps them);
        `schedule`: run a `KubeScheduler` first in each step (False when one runs on its own, e.g. a real
        kube-scheduler); `heartbeats`: renew each node's Lease every `renew_s` and post its Ready status every
        `report_s` (`heartbeats.Heartbeats`); `acknowledge(pod, ack)` writes a rank's checkpoint ack (default: a
        patch of the pod's annotation with this kubelet's client; the real-cluster tests pass the SDK's own
        client, with a token bound to the pod)."""
        self.scheduler = KubeScheduler(api) if schedule else None
        self.silenced: set[str] = set()  # nodes whose kubelet is down (`silence`)
        self.device_health = device_health
        self._reported: dict[str, int] = {}  # node -> unhealthy devices its allocatable leaves out now
        self.core = kubernetes.client.CoreV1Api(api)
        self.heartbeats = Heartbeats(self.core, renew_s, lease_duration_s, report_s) if heartbeats else None
        self.on_bindings = on_bindings
        self.answer_checkpoints = answer_checkpoints
        self.acknowledge = acknowledge or self._patch_ack
        self.checkpoint_delay = checkpoint_delay
        self._asked: dict[str, float] = {}  # "<pod>/<request id>" -> when first seen
        self._draining: dict[str, str] = {}  # uid of an evicted rank still running -> its ack when evicted
        self.start_delay = start_delay
        super().__init__("kubelet", interval)
        self._started: dict[str, float] = {}
        self._last_ip: dict[str, str] = {}  # node -> the address host-local reserved last
        self._ips: dict[tuple[str, str], str] = {}  # (node, pod uid) -> the address given this step
        self._used_ips: dict[str, set[str]] | None = None  # node -> its live pods' addresses, this step
        # what a list of each would answer, caught up from the watch history each step (mirror.py)
        self._nodes = Mirror(self.core.list_node)
        self._pods = Mirror(self.core.list_pod_for_all_namespaces)
        self._env_of: dict[tuple[str, str, str], str] = {}  # (pod uid, name, default) -> value (specs are immutable)
        # pods this kubelet has started: a watch-fed mirror may still show one Pending a step later (a real API
        # server's watch lags its writes), and a second start would give it a second podIP (422 Invalid)
        self._ran: set[str] = set()

    def silence(self, node: str) -> None:
        """Stop node `node`'s kubelet: no Lease renewal, no status, its pods frozen (the node lifecycle controller
        then marks the node Unknown after its grace period)."""
        self.silenced.add(node)

    def answer(self, node: str) -> None:
        """Start node `node`'s kubelet again: it renews the Lease and posts Ready at its next step."""
        self.silenced.discard(node)

    def start(self) -> Kubelet:
        """Run on its own thread; its scheduler too, on another (a step by hand runs the scheduler first)."""
        if self.scheduler is not None:
            self.scheduler.interval = self.interval
            self.scheduler.start()
        self._nodes.watch("kubelet-nodes")  # a real API server answers no watch at once (mirror.py)
        self._pods.watch("kubelet-pods")
        super().start()
        return self

    def stop(self) -> None:
        super().stop()
        self._nodes.stop()
        self._pods.stop()
        if self.scheduler is not None:
            self.scheduler.stop()

    def step(self, now: float) -> None:
        if self.scheduler is not None and not self.scheduler.running:
            self.scheduler.step(now)
        self._ips.clear()
        self._used_ips = None
        # one view of the Nodes serves the whole step (device health, silent nodes, pod addresses)
        nodes = {n["metadata"]["name"]: n for n in self._nodes.sync()}
        # a node whose kubelet is down (`silence`, or a fault: `nodes.set_node_lost`): no heartbeat, and its pods
        # neither run on, nor end, nor answer a checkpoint, nor finish a deletion, as far as the API server can tell
        silent = self.silenced | {name for name, n in nodes.items()
                                  if KUBELET_STOPPED in ((n.get("metadata") or {}).get("annotations") or {})}
        if self.heartbeats is not None:
            self.heartbeats.beat(nodes, silent, now)  # a running kubelet answers a node marked Unknown
        else:
            silent |= {name for name, n in nodes.items() if (ready_condition(n) or {}).get("status") == "Unknown"}
        if self.device_health is not None:
            self._report_health(self.device_health(), nodes)
        every = self._pods.sync()
        if len(self._env_of) > 4 * len(every) + 1000:  # forget the pods gone, now and then
            uids = {(p.get("metadata") or {}).get("uid") for p in every}
            self._env_of = {k: v for k, v in self._env_of.items() if k[0] in uids}
            self._ran = {u for u in self._ran if u in uids}
        mine = [p for p in every if LABEL_JOB in ((p.get("metadata") or {}).get("labels") or {})]
        answering = [p for p in every if (p.get("spec") or {}).get("nodeName") not in silent]
        self._finish_deletions(answering)
        items = [p for p in mine if (p.get("spec") or {}).get("nodeName") not in silent]
        if self.on_bindings is not None:
            bindings: Bindings = {}
            for pod in mine:  # what the pods hold, whether or not their node answers
                meta, spec = pod["metadata"], pod.get("spec") or {}
                if (pod.get("status") or {}).get("phase") == "Running" and spec.get("nodeName") and pod_devices(pod):
                    bindings.setdefault(spec["nodeName"], []).append(
                        (meta["namespace"], meta["name"], pod_devices(pod)))
            self.on_bindings(bindings)
        for pod in items:
            meta, status = pod["metadata"], pod.get("status") or {}
            key = f"{meta['namespace']}/{meta['name']}"
            phase = status.get("phase", "Pending")
            if meta.get("deletionTimestamp") and meta.get("uid") in self._draining and phase == "Running":
                self._answer(pod, now)  # an evicted rank's SDK saves within its grace period
                continue
            if phase in ("Succeeded", "Failed") or meta.get("deletionTimestamp"):
                self._started.pop(key, None)
                continue
            try:
                node = (pod.get("spec") or {}).get("nodeName")
                if phase == "Pending" and node and meta.get("uid") not in self._ran:  # bound: its kubelet starts it
                    first_seen = self._started.setdefault(key, now)
                    if now - first_seen >= self.start_delay:
                        containers = (pod.get("spec") or {}).get("containers") or []
                        addresses = self._addresses(pod, nodes.get(node), items)
                        self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], {"status": {
                            "phase": "Running", **addresses,
                            "containerStatuses": [{"name": c.get("name"), "ready": True, "restartCount": 0,
                                                   "image": c.get("image"), "imageID": "", "started": True,
                                                   "state": {"running": {"startedAt": _now_iso()}}}
                                                  for c in containers]}})
                        self._started[key] = now
                        self._ran.add(meta.get("uid", ""))
                elif phase == "Running":
                    if self.answer_checkpoints:
                        self._answer(pod, now)
                    duration = float(self._pod_env(pod, "HETEROJOB_SIM_DURATION", "120"))
                    if now - self._started.setdefault(key, now) >= duration:
                        failed = self._pod_env(pod, "HETEROJOB_SIM_FAIL", "0") == "1"
                        self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], {"status": {
                            "phase": "Failed" if failed else "Succeeded",
                            "containerStatuses": ended(status.get("containerStatuses") or [], failed)}})
            except ApiException as exc:
                if exc.status != 404:
                    raise

    def _finish_deletions(self, pods: list[dict[str, Any]]) -> None:
        """A pod being deleted gracefully (deletionTimestamp set) is stopped by its node's kubelet, which then
        deletes it with grace 0 and the API server removes it (kubelet status manager, v1.32). The simulated
        containers stop at once on SIGTERM, but for an evicted rank whose SDK plays (`answer_checkpoints`, the
        SDK's `checkpoint_on_eviction`): it runs on to answer a checkpoint request that comes after its
        eviction, then exits; the kubelet kills it at the end of its grace period. (`pods`: those of nodes
        whose kubelet answers; a silent node's pods stay Terminating, as on a real cluster, until it answers
        again.)"""
        alive: set[str] = set()
        for pod in pods:
            meta = pod.get("metadata") or {}
            if not meta.get("deletionTimestamp") or not (meta.get("deletionGracePeriodSeconds") or 0) > 0:
                continue
            if self._lingers(pod):
                alive.add(meta.get("uid", ""))
                continue
            if _exiting(pod):
                continue
            try:  # this pod, not one made again under its name since the list (the status manager's UID check)
                # all options in the body: a server reads the query only for a DELETE without one
                self.core.delete_namespaced_pod(meta["name"], meta["namespace"], body={
                    "gracePeriodSeconds": 0, "preconditions": {"uid": meta.get("uid")}}, _preload_content=False)
            except ApiException as exc:
                if exc.status not in (404, 409):
                    raise
        self._draining = {uid: asked for uid, asked in self._draining.items() if uid in alive}

    def _lingers(self, pod: dict[str, Any]) -> bool:
        """Whether an evicted rank's simulated SDK still runs: within its grace period, not yet having answered
        a checkpoint request since it was evicted (what `sdk.Checkpointer(checkpoint_on_eviction=True)` does)."""
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        evicted = any(isinstance(c, dict) and c.get("type") == "DisruptionTarget" and c.get("status") == "True"
                      and c.get("reason") == EVICTED_BY_EVICTION_API for c in status.get("conditions") or [])
        if (not self.answer_checkpoints or not evicted or status.get("phase") != "Running"
                or LABEL_JOB not in (meta.get("labels") or {}) or _env(pod, "HETEROJOB_SIM_NO_SDK", "0") == "1"):
            return False
        end = timestamp(meta.get("deletionTimestamp"))
        if end is None or time.time() >= end:
            return False  # SIGKILL at the end of the grace period
        ack = (meta.get("annotations") or {}).get(ANNOTATION_CHECKPOINT_ACK) or ""
        return self._draining.setdefault(meta.get("uid", ""), ack) == ack  # the SDK exits once it answered

    def _report_health(self, unhealthy: Mapping[str, int], nodes: Mapping[str, dict[str, Any]]) -> None:
        """Node status allocatable = capacity - unhealthy devices, for the nodes (`nodes`: this cluster's, by
        name) whose count changed."""
        for name in sorted(set(unhealthy) | set(self._reported)):
            count = max(0, int(unhealthy.get(name, 0)))
            if self._reported.get(name, 0) == count:
                continue
            node = nodes.get(name)
            if node is None:
                self._reported[name] = count  # another cluster's node: not this kubelet's
                continue
            capacity = (node.get("status") or {}).get("capacity") or {}
            devices = {k: v for k, v in capacity.items() if "/" in k and str(v).isdigit() and int(v) > 0}
            if devices:
                self.core.patch_node_status(name, {"status": {"allocatable": {
                    k: str(max(0, int(v) - count)) for k, v in devices.items()}}})
            self._reported[name] = count

    def _addresses(self, pod: dict[str, Any], node: Mapping[str, Any] | None, items: list[dict[str, Any]]
                   ) -> dict[str, Any]:
        """hostIP/podIP as the node's kubelet reports them (`ipam`): the node's InternalIP, and an address of
        the node's podCIDR no other live pod on that node holds (the node's IP for a hostNetwork pod).
        (`node`: the pod's Node as listed this step; None when it has none or it does not exist.)"""
        if node is None:
            return {}
        node_name = node["metadata"]["name"]
        host_ip = ipam.internal_ip(node)
        out: dict[str, Any] = {"hostIP": host_ip, "hostIPs": [{"ip": host_ip}]} if host_ip else {}
        if (pod.get("spec") or {}).get("hostNetwork"):
            if host_ip:
                out.update(podIP=host_ip, podIPs=[{"ip": host_ip}])
            return out
        if self._used_ips is None:  # once a step: each node's live pods' addresses
            self._used_ips = {}
            for p in items:
                spec = p.get("spec") or {}
                if not spec.get("hostNetwork") and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                    self._used_ips.setdefault(spec.get("nodeName"), set()).add((p.get("status") or {}).get("podIP"))
        used = self._used_ips.get(node_name, set()) | {ip for key, ip in self._ips.items() if key[0] == node_name}
        cidr = ((node.get("spec") or {}).get("podCIDRs") or [(node.get("spec") or {}).get("podCIDR")])[0]
        pod_ip = ipam.next_pod_ip(cidr, {u for u in used if u}, self._last_ip.get(node_name)) if cidr else None
        if pod_ip is None:
            log.warning("node %s has no free address in its podCIDR %s", node_name, cidr)
            return out
        self._last_ip[node_name] = pod_ip
        self._ips[(node_name, pod["metadata"]["uid"])] = pod_ip
        out.update(podIP=pod_ip, podIPs=[{"ip": pod_ip}])
        return out

    def _pod_env(self, pod: dict[str, Any], name: str, default: str) -> str:
        """`_env`, remembered per pod (a pod's spec does not change)."""
        key = ((pod.get("metadata") or {}).get("uid") or "", name, default)
        found = self._env_of.get(key)
        if found is None:
            found = self._env_of[key] = _env(pod, name, default)
        return found

    def _answer(self, pod: dict[str, Any], now: float) -> None:
        """Acknowledge a checkpoint request the way the SDK does, after `checkpoint_delay` seconds."""
        meta = pod["metadata"]
        annotations = meta.get("annotations") or {}
        wanted = annotations.get(ANNOTATION_CHECKPOINT_REQUEST)
        if not wanted or annotations.get(ANNOTATION_CHECKPOINT_ACK, "").startswith(f"{wanted};"):
            return
        if _env(pod, "HETEROJOB_SIM_NO_SDK", "0") == "1":
            return
        key = f"{meta['namespace']}/{meta['name']}/{wanted}"
        if now - self._asked.setdefault(key, now) < self.checkpoint_delay:
            return
        step = int((now - self._started.get(f"{meta['namespace']}/{meta['name']}", now)) * 10)
        where = _env(pod, "HETEROJOB_CHECKPOINT_DIR", f"s3://heterojob-demo/{meta['namespace']}")
        ack = f"{wanted};{step};{where.rstrip('/')}/{wanted}/"
        # this SDK reports the bytes each rank wrote and when it began and finished saving (unix seconds: the
        # save took from the request's first sight until now); HETEROJOB_SIM_CHECKPOINT_BYTES="" plays an older
        # SDK, which says neither
        size = _env(pod, "HETEROJOB_SIM_CHECKPOINT_BYTES", str(SIM_RANK_CHECKPOINT_BYTES))
        if size:
            end = time.time()
            ack += f";size={size};start={end - (now - self._asked[key]):.3f};end={end:.3f}"
        self.acknowledge(pod, ack)
        self._asked.pop(key, None)

    def _patch_ack(self, pod: dict[str, Any], ack: str) -> None:
        meta = pod["metadata"]
        self.core.patch_namespaced_pod(meta["name"], meta["namespace"], {"metadata": {"annotations": {
            ANNOTATION_CHECKPOINT_ACK: ack}}})


def _exiting(pod: dict[str, Any]) -> bool:
    """Whether the pod's container still runs after SIGTERM (`HETEROJOB_SIM_EXIT_SECONDS` from the start of its
    deletion, which is its deletionTimestamp less its grace period)."""
    exit_s = float(_env(pod, "HETEROJOB_SIM_EXIT_SECONDS", "0") or 0)
    meta = pod.get("metadata") or {}
    end = timestamp(meta.get("deletionTimestamp"))
    if exit_s <= 0 or end is None:
        return False
    began = end - float(meta.get("deletionGracePeriodSeconds") or 0)
    return time.time() < min(began + exit_s, end)


def ended(statuses: list[dict[str, Any]], failed: bool) -> list[dict[str, Any]]:
    """The container statuses of a pod whose containers exited (restartPolicy Never), as the kubelet writes
    them (v1.32): `state.terminated` with the exit code and reason `Completed` (0) or `Error`, the start
    kept, and neither ready nor started (`running: null` drops the old state: the patch is a strategic merge);
    kubectl then shows the pod `0/1 Completed` (or `Error`)."""
    out = []
    for c in statuses:
        started = ((c.get("state") or {}).get("running") or {}).get("startedAt")
        out.append({**c, "ready": False, "started": False, "state": {"running": None, "terminated": {
            "exitCode": 1 if failed else 0, "reason": "Error" if failed else "Completed",
            **({"startedAt": started} if started else {}), "finishedAt": _now_iso()}}})
    return out


def _now_iso() -> str:
    import datetime
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
