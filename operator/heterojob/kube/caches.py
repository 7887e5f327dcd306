"""The operator's caches of the cluster: Nodes, AcceleratorClasses, Regions (and the member clusters they name),
pods (each job's, and the devices other pods hold), HeteroQuotas and running HeteroJobs, each kept by an informer
of its own (`kube.informer`) as the views a pass reads, never whole bodies.

`synced()` returns once every cache holds its first complete listing: until then a pass could see a job without
its pods (and create them again) or a node without the pods already on it (and overcommit it), so the controller
is built only after it (handlers.py). Kopf's `@kopf.index` offered the same guarantee, with a readiness wait per
object that grows with the cube of the objects listed (docs/architecture.md, "Start-up").
"""

from __future__ import annotations

import asyncio
import fnmatch
import functools
import logging
import re
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import kubernetes

from heterojob.constants import GROUP, LABEL_GENERATION, LABEL_JOB, VERSION
from heterojob.engine.capacity.fleet import DeviceClass, Limit, Node, RegionInfo
from heterojob.kube import convert
from heterojob.kube.informer import Informer, OnBody, OnChange, object_key
from heterojob.kube.members import MemberRef, member_ref
from heterojob.kube.ownpods import kept

log = logging.getLogger(__name__)
V = TypeVar("V")
W = TypeVar("W")
K = TypeVar("K", bound=Hashable)

PodKey = tuple[str, str]  # namespace, pod name
Usage = dict[tuple[str, str], int]  # (node, resource) -> devices


@dataclass(frozen=True)
class PodEntry:
    """What the operator keeps of a pod: a job's pod as a pass reads it (`job`, `view`), or the devices a pod
    heterojob does not manage holds (`usage`). `leaving`: what a job's pod being deleted still holds on its node
    until it is gone (kube-scheduler counts a Terminating pod: a gang placed on those devices would wait Pending
    through the grace period)."""

    job: str | None = None
    view: Mapping[str, Any] | None = None
    usage: Mapping[tuple[str, str], int] | None = None
    leaving: Mapping[tuple[str, str], int] | None = None
    generation: int = 0  # a job's pod: the placement generation its label gives (0 when unreadable)


def pod_entry(body: Mapping[str, Any]) -> PodEntry | None:
    meta = body.get("metadata") or {}
    job = (meta.get("labels") or {}).get(LABEL_JOB)
    if job is not None:
        leaving = convert.pod_holds(body) if meta.get("deletionTimestamp") else None
        generation = (meta.get("labels") or {}).get(LABEL_GENERATION)
        return PodEntry(job=str(job), view=kept(body), leaving=leaving or None,
                        generation=int(generation) if isinstance(generation, str) and generation.isdigit() else 0)
    used = convert.pod_usage(body)
    return PodEntry(usage=used) if used else None


@dataclass(frozen=True)
class RegionEntry:
    info: RegionInfo | None
    member: MemberRef | None


def region_entry(body: Mapping[str, Any]) -> RegionEntry | None:
    info, ref = convert.region_info(body), member_ref(body)
    return RegionEntry(info, ref) if info is not None or ref is not None else None


_PATTERN = re.compile(r"[*?!,]")  # a `--namespace` given as a Kopf pattern, not a name


def serves(patterns: Iterable[str], namespace: str) -> bool:
    """Whether `namespace` is served under `--namespace` patterns, read as Kopf reads them: any pattern matching;
    a pattern is comma-separated globs, `!` ones exclude, a leading exclusion implies a `*` before it, and a later
    inclusive glob takes back only what the first one matched."""
    for pattern in patterns:
        globs = [g.strip() for g in pattern.split(",")]
        if not globs or globs[0].startswith("!"):
            globs.insert(0, "*")
        first = matched = fnmatch.fnmatch(namespace, globs[0])
        for glob in globs[1:]:
            if glob.startswith("!"):
                matched = matched and not fnmatch.fnmatch(namespace, glob.lstrip("!"))
            else:
                matched = matched or (first and fnmatch.fnmatch(namespace, glob))
        if matched:
            return True
    return False


def job_key(body: Mapping[str, Any]) -> str:
    namespace, name = object_key(body)
    return f"{namespace}/{name}"


class KindStore(Generic[K, V]):
    """One kind's store: cluster-wide, or merged from one informer per served namespace."""

    def __init__(self, informers: list[Informer[K, V]]) -> None:
        self.informers = informers

    def items(self) -> dict[K, V]:
        if len(self.informers) == 1:
            return dict(self.informers[0].store)
        out: dict[K, V] = {}
        for informer in self.informers:
            out.update(informer.store)
        return out

    def names(self, pick: Callable[[V], W | None]) -> dict[str, W]:
        """{object name: pick(view)} for the views whose pick is not None (cluster-scoped kinds)."""
        out: dict[str, W] = {}
        for informer in self.informers:
            for key, view in list(informer.store.items()):
                value = pick(view)
                if value is not None:
                    out[str(key[1]) if isinstance(key, tuple) else str(key)] = value
        return out


class Caches:
    def __init__(self, client: kubernetes.client.ApiClient, running_view: Callable[[dict[str, Any]], Any | None],
                 namespaces: Iterable[str] = (), on_node: OnChange[PodKey, Node] | None = None,
                 on_fleet: Callable[[], None] | None = None,
                 on_job_pod: Callable[[str | None, str, str, str, Mapping[str, Any]], None] | None = None,
                 on_job: Callable[[str | None, str, dict[str, Any]], None] | None = None,
                 on_room: Callable[[], None] | None = None, page_size: int = 500, watch_timeout_s: int = 300) -> None:
        """`running_view`: a HeteroJob's view for the monitor (`telemetry.watched.watched_job`), None when not
        running. `namespaces`: the namespaces served (empty: all). The callbacks run on the event loop for each
        change of what a pass reads: `on_node(event, key, old, new)`; `on_fleet()` for a class, Region or quota;
        `on_job_pod(event, namespace, pod, job, view)` for each event of a job's pod (its view as the event
        carries it); `on_job(event, "namespace/name", body)` for each HeteroJob a watch event or a listing brings,
        whole (the controller's job events: the one watch of HeteroJobs, Kopf keeps none); `on_room()` when a job's
        pod that held devices is gone (its devices are free for kube-scheduler from now on)."""
        self.client = client
        core = kubernetes.client.CoreV1Api(client)
        custom = kubernetes.client.CustomObjectsApi(client)
        self.on_job_pod = on_job_pod
        self.on_fleet = on_fleet
        self.on_room = on_room
        served = tuple(dict.fromkeys(namespaces))

        list_cluster, list_namespaced = custom.list_cluster_custom_object, custom.list_namespaced_custom_object

        def custom_list(plural: str, namespace: str | None) -> Callable[..., Any]:
            if namespace is None:
                return functools.partial(list_cluster, GROUP, VERSION, plural)
            return functools.partial(list_namespaced, GROUP, VERSION, namespace, plural)

        def namespaced(name: str, lister: Callable[[str | None], Callable[..., Any]],
                       view: Callable[[dict[str, Any]], V | None], on_change: OnChange[Any, V] | None = None,
                       key: Callable[[Mapping[str, Any]], Any] = object_key,
                       on_body: OnBody[Any] | None = None) -> KindStore[Any, V]:
            if any(_PATTERN.search(ns) for ns in served):  # Kopf's globs and negations: every namespace, filtered
                def view_served(body: dict[str, Any]) -> V | None:
                    return view(body) if serves(served, object_key(body)[0]) else None

                body_served: OnBody[Any] | None = None
                if on_body is not None:
                    told = on_body

                    def body_served(event: str | None, k: Any, body: dict[str, Any]) -> None:
                        if serves(served, object_key(body)[0]):
                            told(event, k, body)
                return KindStore([Informer(name, lister(None), view_served, on_change, key=key, page_size=page_size,
                                           watch_timeout_s=watch_timeout_s, on_body=body_served)])
            return KindStore([Informer(name if ns is None else f"{name}[{ns}]", lister(ns), view, on_change, key=key,
                                       page_size=page_size, watch_timeout_s=watch_timeout_s, on_body=on_body)
                              for ns in (served or (None,))])

        def fleet_changed(*_: Any) -> None:
            if self.on_fleet is not None:
                self.on_fleet()

        self.nodes: KindStore[PodKey, Node] = KindStore([Informer(
            "nodes", core.list_node, convert.node_view, on_node, page_size=page_size, watch_timeout_s=watch_timeout_s)])
        self.classes: KindStore[PodKey, DeviceClass] = KindStore([Informer(
            "acceleratorclasses", custom_list("acceleratorclasses", None), convert.device_class, fleet_changed,
            page_size=page_size, watch_timeout_s=watch_timeout_s)])
        self.regions: KindStore[PodKey, RegionEntry] = KindStore([Informer("regions", custom_list("regions", None),
                                                                           region_entry, fleet_changed,
                                                                           page_size=page_size,
                                                                           watch_timeout_s=watch_timeout_s)])
        self._usage: Usage = {}  # what the pods heterojob does not manage hold, summed
        self._job_pods: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}  # (namespace, job) -> pod -> view
        # a job's pod being deleted -> its job and what it holds on its node
        self._leaving: dict[PodKey, tuple[str, int, Mapping[tuple[str, str], int]]] = {}
        self.pods: KindStore[PodKey, PodEntry] = namespaced(
            "pods", lambda ns: core.list_pod_for_all_namespaces if ns is None else functools.partial(
                core.list_namespaced_pod, ns), pod_entry, self._pod_changed)
        self.quotas: KindStore[PodKey, tuple[list[Limit], str | None]] = namespaced(
            "heteroquotas", lambda ns: custom_list("heteroquotas", ns), convert.quota_limits, fleet_changed)
        self.running: KindStore[str, Any] = namespaced(
            "heterojobs", lambda ns: custom_list("heterojobs", ns), running_view, key=job_key, on_body=on_job)
        self._waiting: asyncio.Future[None] | None = None  # the one wait for every cache's first listing
        self.kinds: tuple[KindStore[Any, Any], ...] = (self.nodes, self.classes, self.regions, self.pods, self.quotas,
                                                       self.running)

    # --- start, stop, synced ------------------------------------------------------------------------------------

    @property
    def informers(self) -> list[Informer[Any, Any]]:
        return [informer for kind in self.kinds for informer in kind.informers]

    def start(self) -> Caches:
        for informer in self.informers:
            informer.start()
        return self

    async def stop(self) -> None:
        await asyncio.gather(*(informer.stop() for informer in self.informers))
        if self._waiting is not None and not self._waiting.done():
            self._waiting.cancel()
        self.client.close()

    def is_synced(self) -> bool:
        return all(informer.synced.is_set() for informer in self.informers)

    async def synced(self) -> None:
        """Return once every cache holds its first complete listing (one wait shared by every caller)."""
        if self.is_synced():
            return
        if self._waiting is None:
            self._waiting = asyncio.ensure_future(self._all_synced())
        await asyncio.shield(self._waiting)

    async def _all_synced(self) -> None:
        started = time.monotonic()
        await asyncio.gather(*(informer.synced.wait() for informer in self.informers))
        log.info("caches synced in %.1f s: %s", time.monotonic() - started,
                 ", ".join(f"{i.name} {len(i.store)}" for i in self.informers))

    # --- what a pass reads --------------------------------------------------------------------------------------

    def node_views(self) -> dict[str, Node]:
        return self.nodes.names(lambda node: node)

    def class_views(self) -> dict[str, DeviceClass]:
        return self.classes.names(lambda cls: cls)

    def region_views(self) -> dict[str, RegionInfo]:
        return self.regions.names(lambda entry: entry.info)

    def member_refs(self) -> dict[str, MemberRef]:
        return self.regions.names(lambda entry: entry.member)

    def quota_objects(self) -> dict[tuple[str, str], tuple[list[Limit], str | None]]:
        return self.quotas.items()

    def running_jobs(self) -> dict[str, Any]:
        return self.running.items()

    def foreign_usage(self) -> Usage:
        """What the pods heterojob does not manage hold, by (node, resource)."""
        return dict(self._usage)

    def leaving_usage(self) -> dict[str, dict[int, Usage]]:
        """What the jobs' pods being deleted still hold, per job ("namespace/name") and placement generation, until
        they are gone (the fleet counts a deleted job's, and a live job's left gangs': `Cache.fleet_later`). Costs
        what is being deleted."""
        out: dict[str, dict[int, Usage]] = {}
        for (namespace, _), (job, generation, holds) in self._leaving.items():
            _add(out.setdefault(f"{namespace}/{job}", {}).setdefault(generation, {}), holds, 1)
        return out

    def job_pods(self, namespace: str, job: str) -> list[Mapping[str, Any]]:
        """A job's pods as the watch has them (`kube.ownpods.kept` views)."""
        return list(self._job_pods.get((namespace, job), {}).values())

    # --- keeping the pods' indexes --------------------------------------------------------------------------------

    def _pod_changed(self, event: str | None, key: PodKey, old: PodEntry | None, new: PodEntry | None) -> None:
        namespace, name = key
        gone = event == "DELETED" or new is None
        stored = None if gone else new
        if old is not None and old.usage:
            self._add_usage(old.usage, -1)
        if stored is not None and stored.usage:
            self._add_usage(stored.usage, 1)
        if old is not None and old.job is not None and (stored is None or stored.job != old.job):
            pods = self._job_pods.get((namespace, old.job))
            if pods is not None:
                pods.pop(name, None)
                if not pods:
                    del self._job_pods[(namespace, old.job)]
        if stored is not None and stored.job is not None and stored.view is not None:
            self._job_pods.setdefault((namespace, stored.job), {})[name] = stored.view
        if stored is not None and stored.leaving and stored.job is not None:
            self._leaving[key] = (stored.job, stored.generation, stored.leaving)
        elif (self._leaving.pop(key, None) is not None or (gone and old is not None and old.job is not None)) \
                and self.on_room is not None:
            self.on_room()  # a job's pod is gone (and out of `job_pods`): its devices are free for kube-scheduler too
        told = new if new is not None and new.job is not None else old
        if self.on_job_pod is not None and told is not None and told.job is not None and told.view is not None:
            self.on_job_pod(event, namespace, name, told.job, told.view)

    def _add_usage(self, usage: Mapping[tuple[str, str], int], sign: int) -> None:
        _add(self._usage, usage, sign)


def _add(into: Usage, usage: Mapping[tuple[str, str], int], sign: int) -> None:
    """Add (sign 1) or take out (-1) `usage` in a running sum, dropping what reaches 0."""
    for where, count in usage.items():
        total = into.get(where, 0) + sign * count
        if total:
            into[where] = total
        else:
            into.pop(where, None)
