"""One member cluster's Nodes, and heterojob's pods and Services there, each kept by an informer of its own
(`kube.informer`: a paged LIST, then a WATCH from its resourceVersion; a 410 Gone lists again, a broken watch resumes,
failures are retried backed off), as the views the manager reads: each Node's `Node`, each job's pods
(`ownpods.kept`), and the job each Service belongs to. A pod's change reaches its job at once (`on_pods`), except the
echo of the operator's own create (`ownpods.OwnPods.seen`); a change of the nodes reaches the planner (`on_nodes`,
once per turn of the event loop). While nothing changes, nothing is listed or sent (docs/multicluster.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client import ApiException

from heterojob.constants import LABEL_JOB
from heterojob.engine.capacity.fleet import Node
from heterojob.kube import convert
from heterojob.kube.informer import Informer
from heterojob.kube.member_client import MemberKube
from heterojob.kube.ownpods import kept

PodView = tuple[str, dict[str, Any]]  # (job name, `kept(pod)`)


def _pod_view(body: dict[str, Any]) -> PodView | None:
    job = ((body.get("metadata") or {}).get("labels") or {}).get(LABEL_JOB)
    return (str(job), kept(body)) if job else None


def _service_job(body: dict[str, Any]) -> str | None:
    meta = body.get("metadata") or {}
    job = (meta.get("labels") or {}).get(LABEL_JOB)
    return f"{meta.get('namespace')}/{job}" if job else None


class MemberWatch:
    """The informers of one member (nodes, heterojob's pods, heterojob's Services) and what they keep."""

    def __init__(self, region: str, kube: MemberKube, on_pods: Callable[[set[str]], None],
                 on_nodes: Callable[[], None], request_timeout_s: float, *, watch_timeout_s: int = 300,
                 retry_s: float = 1.0, previous: MemberWatch | None = None) -> None:
        """`previous`: the watch of the member's last client (a rotated kubeconfig): what it kept is kept until the
        new listing replaces it, so the member's nodes do not vanish from the planner meanwhile."""
        self.kube = kube
        self.on_pods = on_pods
        self.on_nodes = on_nodes
        self.nodes: dict[str, Node] = dict(previous.nodes) if previous else {}
        self.job_pods: dict[str, dict[str, Mapping[str, Any]]] = \
            {k: dict(v) for k, v in previous.job_pods.items()} if previous else {}  # job key -> pod -> view
        self._nodes_told = False
        self.nodes_version = 0  # bumped by every change of `nodes`
        self._owners: tuple[int, dict[str, list[tuple[str, str]]]] | None = None  # (objects_version, owners())
        self.objects_version = 0  # bumped by every change of a pod or a Service
        core = kube.core
        selected = {"label_selector": LABEL_JOB}
        common: dict[str, Any] = {"watch_timeout_s": watch_timeout_s, "retry_s": retry_s,
                                  "request_timeout_s": request_timeout_s,
                                  "quiet": lambda: not kube.answering}  # its condition says it: no warning a retry
        self.node_informer: Informer[Any, Node] = Informer(f"{region}/nodes", core.list_node, convert.node_view,
                                                           self._node_changed, **common)
        self.pod_informer: Informer[Any, PodView] = Informer(
            f"{region}/pods", core.list_pod_for_all_namespaces, _pod_view, self._pod_changed, list_kwargs=selected,
            **common)
        self.service_informer: Informer[Any, str] = Informer(
            f"{region}/services", core.list_service_for_all_namespaces, _service_job, self._service_changed,
            list_kwargs=selected,
            **common)
        self.informers: tuple[Informer[Any, Any], ...] = (self.node_informer, self.pod_informer, self.service_informer)
        if previous is not None:
            self.node_informer.store = dict(previous.node_informer.store)
            self.pod_informer.store = dict(previous.pod_informer.store)
            self.service_informer.store = dict(previous.service_informer.store)

    # --- start, stop, freshness -----------------------------------------------------------------------------

    def start(self) -> MemberWatch:
        for informer in self.informers:
            informer.start()
        return self

    def halt(self) -> None:
        """Stop without waiting for the threads (they end on their own: a blocked read is woken)."""
        for informer in self.informers:
            informer.halt()

    async def stop(self) -> None:
        await asyncio.gather(*(informer.stop() for informer in self.informers))

    def synced(self) -> bool:
        return all(informer.synced.is_set() for informer in self.informers)

    async def fresh(self, timeout: float, relist: bool) -> bool:
        """Wait (at most `timeout`) until every informer holds a listing made from now on when `relist` (a member
        back from a partition: a watch may have stalled on a connection that died), else its first listing."""
        targets = [informer.lists + 1 if relist else 1 for informer in self.informers]
        if relist:
            for informer in self.informers:
                informer.relist()
        deadline = time.monotonic() + timeout
        while any(i.lists < t for i, t in zip(self.informers, targets, strict=True)):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    def failure(self) -> ApiException | None:
        """A refusal the informers met on their last try (401, 403): the member's credentials or RBAC."""
        for informer in self.informers:
            if isinstance(informer.failure, ApiException) and informer.failure.status in (401, 403):
                return informer.failure
        return None

    # --- what the manager reads -------------------------------------------------------------------------------

    def pod_count(self) -> int:
        return sum(len(pods) for pods in self.job_pods.values())

    def owners(self) -> dict[str, list[tuple[str, str]]]:
        """job key -> its objects here, ("Pod", name) and ("Service", name); pods already being deleted left out
        (built again only after a pod or a Service changed: it is asked at every probe)."""
        if self._owners is not None and self._owners[0] == self.objects_version:
            return self._owners[1]
        out: dict[str, list[tuple[str, str]]] = {}
        for key, pods in self.job_pods.items():
            for name, view in pods.items():
                if not (view.get("metadata") or {}).get("deletionTimestamp"):
                    out.setdefault(key, []).append(("Pod", name))
        for (_, name), key in list(self.service_informer.store.items()):
            out.setdefault(key, []).append(("Service", name))
        self._owners = (self.objects_version, out)
        return out

    # --- the informers' callbacks (on the event loop) ---------------------------------------------------------

    def _node_changed(self, event: str | None, key: tuple[str, str], old: Node | None, new: Node | None) -> None:
        if event == "DELETED" or new is None:
            self.nodes.pop(key[1], None)
        else:
            self.nodes[key[1]] = new
        self.nodes_version += 1
        if not self._nodes_told:  # a listing's hundreds of nodes: one look for the planner
            self._nodes_told = True
            asyncio.get_running_loop().call_soon(self._tell_nodes)

    def _tell_nodes(self) -> None:
        self._nodes_told = False
        self.on_nodes()

    def _service_changed(self, event: str | None, key: tuple[str, str], old: str | None, new: str | None) -> None:
        self.objects_version += 1

    def _pod_changed(self, event: str | None, key: tuple[str, str], old: PodView | None, new: PodView | None) -> None:
        self.objects_version += 1
        namespace, name = key
        gone = event == "DELETED" or new is None
        if old is not None and (gone or old[0] != new[0]):  # type: ignore[index]  # new is set when not gone
            pods = self.job_pods.get(f"{namespace}/{old[0]}")
            if pods is not None:
                pods.pop(name, None)
                if not pods:
                    del self.job_pods[f"{namespace}/{old[0]}"]
        if not gone and new is not None:
            self.job_pods.setdefault(f"{namespace}/{new[0]}", {})[name] = new[1]
        told = new if new is not None else old
        if told is None:
            return
        if self.kube.own_pods.seen(namespace, name, told[1], event):
            return  # the pod just as the operator created or annotated it: the pass that wrote it counted it
        self.on_pods({f"{namespace}/{told[0]}"})
