"""Reads and the watch fan-out, the store's side of every request: an object got or listed (selectors, pages,
Tables), the resourceVersion counter, each change recorded in its resource's bounded history and sent to the watchers
that see it (`_emit`; the resource quota controller's status follows), and watches served from that history. One layer
of `ApiServerEmulator` (registry.py lists them)."""

from __future__ import annotations

import asyncio
import collections
import copy
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp.web
import attrs

from heterojob.sim.cluster import evictions, paging, quotas, tables
from heterojob.sim.cluster.errors import ApiError
from heterojob.sim.cluster.registry import Registry
from heterojob.sim.cluster.routes import ResourceKind, Route
from heterojob.sim.cluster.selectors import (CR_FIELD_LABELS, FIELD_LABELS, Matcher, SelectorError, field_matcher,
                                             label_matcher)
from heterojob.sim.cluster.watches import Watcher, deleted_line, event_line


@attrs.define(kw_only=True)
class Storage(Registry):
    """Reads, resourceVersions and watches (see the module docstring)."""

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _emit(self, kind: ResourceKind, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        """Record a create or update and fan it out to the watchers whose filters see it."""
        rv = int(new["metadata"]["resourceVersion"])
        history = self._history.get(kind.key)
        if history is None:
            history = self._history[kind.key] = collections.deque(maxlen=self.history_limit)
        history.append((rv, old, new))
        memo: dict[str, bytes] = {}
        for watcher in self._watchers.get(kind.key, ()):
            line = event_line(watcher, old, new, memo)
            if line is not None:
                watcher.queue.put_nowait(line)
        self._sync_quotas(new["metadata"].get("namespace"))

    def _sync_quotas(self, namespace: str | None) -> None:
        """The resource quota controller: store each ResourceQuota's status of `namespace` when it changed."""
        key = ("", "resourcequotas")
        bucket = self._store.get(key)
        names = list(bucket.in_namespace(namespace)) if namespace and bucket is not None else []
        if not names:
            return
        kind = self._kind(Route("", "v1", "resourcequotas", namespace, None, None))
        if kind is None:
            return
        held = self._store.get(("", "pods"))
        pods = list(held.in_namespace(namespace).values()) if held is not None else []

        def count(resource: str) -> int:
            plural, _, group = resource.partition(".")
            found = self._store.get((group, plural))
            return len(found.in_namespace(namespace)) if found is not None else 0

        for name in names:
            old = self._store[key][(namespace, name)]
            found = quotas.status(old, pods, count)
            if old.get("status") == found:
                continue
            new = {**copy.deepcopy(old), "status": found}
            new["metadata"]["resourceVersion"] = self._next_rv()
            self._store[key][(namespace, name)] = new
            self._emit(kind, old, new)

    def _namespace_of(self, route: Route, kind: ResourceKind) -> str | None:
        return route.namespace if kind.namespaced else None

    def _not_found(self, kind: ResourceKind, name: str) -> ApiError:
        return ApiError(404, "NotFound", f'{kind.plural}{"." + kind.group if kind.group else ""} "{name}" not found',
                        {"name": name, "group": kind.group, "kind": kind.plural})

    def _get(self, route: Route, kind: ResourceKind) -> dict[str, Any]:
        assert route.name is not None
        obj = self._store[kind.key].get((self._namespace_of(route, kind), route.name))
        if obj is None:
            raise self._not_found(kind, route.name)
        return obj

    def _field_labels(self, kind: ResourceKind) -> frozenset[str] | None:
        version = self.crd_version(kind.group, kind.version, kind.plural)
        if version is not None:
            selectable = {str(f.get("jsonPath", "")).lstrip(".") for f in version.get("selectableFields") or []}
            return CR_FIELD_LABELS | selectable
        return FIELD_LABELS.get(kind.key)

    def _matcher(self, query: Mapping[str, str], kind: ResourceKind | None = None) -> Matcher:
        try:
            by_label = label_matcher(query.get("labelSelector"))
            by_field = field_matcher(query.get("fieldSelector"),
                                     self._field_labels(kind) if kind is not None else None)
        except SelectorError as exc:
            raise ApiError(400, "BadRequest", str(exc)) from None
        return lambda obj: by_label(obj) and by_field(obj)

    def _list(self, route: Route, kind: ResourceKind, query: Mapping[str, str]) -> dict[str, Any]:
        namespace = self._namespace_of(route, kind)
        matches = self._matcher(query, kind)
        page = paging.Page.of(query, self._rv)
        bucket = self._store[kind.key]
        items = [obj for obj in (bucket.values() if namespace is None else bucket.in_namespace(namespace).values())
                 if matches(obj)]
        selected = bool(query.get("labelSelector") or query.get("fieldSelector"))
        items, meta = page.cut(items, self._rv, with_remaining=not selected)
        return {"apiVersion": kind.api_version, "kind": f"{kind.kind}List", "metadata": meta, "items": items}

    def _table(self, kind: ResourceKind, items: list[dict[str, Any]], query: Mapping[str, str], meta: Mapping[str, Any],
               no_headers: bool = False) -> dict[str, Any]:
        version = self.crd_version(kind.group, kind.version, kind.plural)
        columns = (version or {}).get("additionalPrinterColumns") if version is not None else None
        return tables.table(kind.key, items, columns, query.get("includeObject") or "Metadata", dict(meta),
                            is_crd=version is not None, no_headers=no_headers)

    def _pdb_view(self, pdb: dict[str, Any]) -> dict[str, Any]:
        """A PodDisruptionBudget with the status the disruption controller would keep (see evictions.py)."""
        namespace = pdb["metadata"].get("namespace")
        pods = list(self._store[("", "pods")].in_namespace(namespace).values())
        disrupted = (pdb.get("status") or {}).get("disruptedPods")
        status = evictions.budget(pdb, pods).status(int(pdb["metadata"].get("generation") or 1), disrupted)
        return {**pdb, "status": status}

    async def _watch(self, raw: aiohttp.web.BaseRequest, route: Route, kind: ResourceKind, table: bool = False,
                     view: Callable[[Any], Any] | None = None) -> aiohttp.web.StreamResponse:
        query = raw.query
        matches = self._matcher(query, kind)
        if route.name is not None:  # the deprecated single-object watch
            by_name, name = matches, route.name
            matches = lambda obj: obj["metadata"].get("name") == name and by_name(obj)  # noqa: E731 - narrows the matcher in place
        namespace = self._namespace_of(route, kind)
        timeout = float(query.get("timeoutSeconds") or 1800)
        since = query.get("resourceVersion") or ""

        watcher = Watcher(kind, namespace, matches, convert=view)
        if table:
            watcher.table = lambda obj, headers: self._table(
                kind, [obj], query, {"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                no_headers=not headers)
        initial: list[bytes] = []
        # Everything between here and registration runs without awaiting: no change can slip in.
        if since in ("", "0") or not since.isdigit():
            for obj in self._store[kind.key].values():
                if (namespace is None or obj["metadata"].get("namespace") == namespace) and matches(obj):
                    initial.append(watcher.line("ADDED", obj))
        else:
            history = self._history.get(kind.key) or collections.deque()
            oldest = history[0][0] if history else self._rv + 1
            if int(since) < oldest - 1 and int(since) < self._rv:
                expired = ApiError(410, "Expired", f"too old resource version: {since} ({oldest - 1})").status()
                initial.append(json.dumps({"type": "ERROR", "object": expired}).encode() + b"\n")
                watcher = None  # type: ignore[assignment]  # an expired watch ends after its ERROR event
            else:
                for rv, old, new in history:
                    if rv <= int(since):
                        continue
                    if new is None:
                        line = deleted_line(watcher, old, rv) if old is not None else None
                    else:
                        line = event_line(watcher, old, new)
                    if line is not None:
                        initial.append(line)
        if watcher is not None:
            self._watchers[kind.key].add(watcher)

        response = aiohttp.web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        try:
            await response.prepare(raw)
            for line in initial:
                await response.write(line)
            if watcher is None:
                return response
            deadline = time.monotonic() + timeout
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    line_or_none = await asyncio.wait_for(watcher.queue.get(), timeout=remaining)
                except TimeoutError:
                    break
                if line_or_none is None:
                    break
                await response.write(line_or_none)
            await response.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            if watcher is not None:
                self._watchers[kind.key].discard(watcher)
        return response
