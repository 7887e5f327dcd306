"""The console's shared view of the cluster: one list-then-watch cache per kind (`kube.informer.Informer`, the
operator's own: a paged LIST, `limit`/`continue`, then a WATCH from its resourceVersion; a 410 lists again), kept
by the poller (`ui.Poller`) for every session of the process. Pods are kept as `data.pod_view` (what the pages show
of them), nodes as the operator's view of each (`convert.node_view`), computed once per change, not per read.

A snapshot (`data.build`) is made from the caches only when something changed since the last one (or, while a job
waits, every REBUILD_S: queue positions depend on the time), so a quiet fleet of 100,000 devices costs nothing per
refresh; the API server is asked for what changed, never for every object again. Member clusters (`members`) are still read
whole at every refresh."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import kubernetes

from heterojob.kube.informer import Informer

from heterojob_console import members as member_clusters
from heterojob.kube import convert

from heterojob_console.data import PAGE, PLURALS, build, custom_lists, pod_view
from heterojob_console.snapshot import Cluster

SYNC_TIMEOUT_S = 60.0  # the first listing of every kind, at most (12,500 nodes are 25 pages)
REBUILD_S = 60.0  # a snapshot is made again this often even when nothing changed, while a job waits (queue order ages)


class Watched:
    """Every kind the console shows, cached from one API client: `read()` gives the snapshot now."""

    def __init__(self, api: kubernetes.client.ApiClient) -> None:
        self.api = api
        core, custom = kubernetes.client.CoreV1Api(api), kubernetes.client.CustomObjectsApi(api)
        self.core = core
        self.changes = 0  # on the loop: every change any cache took
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="heterojob-console-watch", daemon=True)

        def changed(*_: Any) -> None:
            self.changes += 1

        kinds: dict[str, tuple[Callable[..., Any], Callable[[dict[str, Any]], Any]]] = {
            "Node": (core.list_node, convert.node_view), "Pod": (core.list_pod_for_all_namespaces, pod_view),
            **{kind: (call, _whole) for kind, call in custom_lists(custom).items()}}
        self.informers: dict[str, Informer[Any, Any]] = {
            kind: Informer(f"console-{kind}", call, view, changed, page_size=PAGE) for kind, (call, view) in kinds.items()}
        self._last: tuple[int, float, Cluster] | None = None  # (changes, monotonic time, snapshot) of the last build
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    async def _start(self) -> None:
        for informer in self.informers.values():
            informer.start()

    async def _take(self) -> tuple[int, dict[str, list[Any]]]:
        """(changes so far, kind -> every cached value), once every kind is listed; the first failure otherwise."""
        deadline = time.monotonic() + SYNC_TIMEOUT_S
        while True:
            waiting = [i for i in self.informers.values() if not i.synced.is_set()]
            failed = next((i.failure for i in self.informers.values() if i.failure is not None), None)
            if failed is not None:  # the API server does not answer (now): the poller keeps the last snapshot
                raise failed
            if not waiting:
                return self.changes, {kind: list(i.store.values()) for kind, i in self.informers.items()}
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Kubernetes API did not list {', '.join(i.name for i in waiting)} in "
                                   f"{SYNC_TIMEOUT_S:.0f} s")
            await asyncio.sleep(0.02)

    def read(self) -> Cluster:
        changes, stores = asyncio.run_coroutine_threadsafe(self._take(), self._loop).result(SYNC_TIMEOUT_S + 5)
        member_reads = member_clusters.read(self.core, stores["Region"])
        at = datetime.now(UTC)
        last = self._last
        # queue positions age only while a job waits: with none waiting a quiet fleet is not built again by the clock
        aging = last is not None and bool(last[2].jobs["queue"].notna().any())
        if last is not None and not member_reads and last[0] == changes \
                and (not aging or time.monotonic() - last[1] < REBUILD_S):
            return dataclasses.replace(last[2], at=at)  # nothing changed: the same tables, read now
        nodes = {view.name: view for view in stores["Node"]}
        objs = {kind: stores[kind] for kind in PLURALS}
        cluster = build(at, objs, nodes, stores["Pod"], member_reads)
        self._last = (changes, time.monotonic(), cluster)
        return cluster

    def close(self) -> None:
        for informer in self.informers.values():
            self._loop.call_soon_threadsafe(informer.halt)
        self._loop.call_soon_threadsafe(self._loop.stop)


def _whole(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


_watched: dict[int, Watched] = {}  # id(api client) -> its caches (the poller's client: one per process and kubeconfig)
_lock = threading.Lock()


def read_cluster(api: kubernetes.client.ApiClient) -> Cluster:
    """The snapshot now from `api`'s caches, started (listed) on the first read."""
    with _lock:
        watched = _watched.get(id(api))
        if watched is None or watched.api is not api:
            watched = _watched[id(api)] = Watched(api)
    return watched.read()


def close(api: Any) -> None:
    """Stop watching through `api` (the poller going idle): the next read lists again."""
    with _lock:
        watched = _watched.pop(id(api), None)
    if watched is not None and watched.api is api:
        watched.close()
