"""A Kubernetes API server emulator for the test harness and the demo: kmock's KubernetesEmulator, repaired.

kmock 0.8 (by Kopf's author) serves API discovery well but stores objects as plain JSON without the
semantics that Kopf and the `kubernetes` client rely on (see docs/emulator.md). This subclass
keeps kmock's HTTP server, discovery and resource registry, and serves every resource request from its
own store with these real API server semantics:

- `resourceVersion` (one global counter), `uid`, `creationTimestamp`, `generation` (bumped on spec
  changes), `metadata.namespace` from the URL; 201 on create; 409 `AlreadyExists` and 409 `Conflict` on
  a stale `resourceVersion` (merge patch, PUT, delete preconditions); 422 for a failed JSON-patch `test`;
  `generateName`; PUT (replace); `GET /version/`; `/api/v1/namespaces[/name]`; namespaced writes into a
  missing namespace answer 404; DNS-subdomain names.
- the status subresource: writes to the object ignore `status`, writes to `/status` change only status.
- merge, JSON and strategic-merge patches (see `patching.py` for what strategic merge leaves out).
- finalizers and `deletionTimestamp`; deleting a namespace deletes what is in it; owner-reference
  garbage collection (background; an object is collected when all its owners are gone).
- watches: `labelSelector`, `fieldSelector`, `timeoutSeconds`, resume from a `resourceVersion` (410
  `Expired` when it is older than the bounded event history), ADDED/DELETED when an object enters or
  leaves a selector.
- a CustomResourceDefinition created through the API registers its resource for discovery.
- bounded memory: one version per object, a bounded event history and request log.

Still different from a real API server (tests must not rely on these):
- no schema validation of objects (CRD OpenAPI schemas are not enforced) and no admission webhooks;
- no server-side apply (415), no `$patch` directives in strategic merge patches;
- foreground deletion behaves like background; pods are deleted at once (no kubelet grace period);
- no authentication or RBAC; no bookmarks; list pagination (`limit`/`continue`) is ignored;
- field selectors work on any dotted field path (a real server allows only a few per resource).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import copy
import datetime
import json
import logging
import re
import signal
import sys
import time
import traceback
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import kmock
import yaml
from typing_extensions import override

from heterojob.sim.cluster import patching
from heterojob.sim.cluster.selectors import Matcher, SelectorError, field_matcher, label_matcher

log = logging.getLogger(__name__)

SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
ALL_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, dict(details or {})

    def status(self) -> dict[str, Any]:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "details": self.details, "code": self.code}


@dataclass(frozen=True)
class Route:
    group: str
    version: str
    plural: str
    namespace: str | None
    name: str | None
    subresource: str | None


def parse_route(path: str) -> Route | None:
    """Resource URLs only (`/api/v1/...`, `/apis/g/v/...` with a plural); None for discovery paths."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 3 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else None
    sub = "/".join(rest[2:]) or None
    return Route(group, version, plural, namespace, name, sub)


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    status_subresource: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)


@dataclass(eq=False)
class Watcher:
    kind: Kind
    namespace: str | None
    matches: Matcher
    queue: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)


Key = tuple[str | None, str]  # (namespace, name)


@attrs.define(kw_only=True)
class ApiServerEmulator(kmock.KubernetesEmulator):
    """See the module docstring. Use `resources.load_bundled()` and create CRDs, or `register()`."""

    history_limit: int = 20000  # events kept per resource for watch resumption
    request_log_limit: int = 2000

    _kinds: dict[tuple[str, str, str], Kind] = attrs.field(factory=dict, init=False)
    _store: dict[tuple[str, str], dict[Key, dict[str, Any]]] = attrs.field(
        factory=lambda: collections.defaultdict(dict), init=False)
    _history: dict[tuple[str, str], collections.deque[tuple[int, dict[str, Any] | None, dict[str, Any] | None]]] = \
        attrs.field(factory=dict, init=False)
    _watchers: dict[tuple[str, str], set[Watcher]] = attrs.field(
        factory=lambda: collections.defaultdict(set), init=False)
    _rv: int = attrs.field(default=1, init=False)
    request_log: collections.deque[tuple[str, str, int, float]] = attrs.field(factory=collections.deque, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.request_log = collections.deque(maxlen=self.request_log_limit)

    # --- registry ----------------------------------------------------------------------------------

    def register(self, group: str, version: str, plural: str, *, kind: str, singular: str, namespaced: bool,
                 short_names: tuple[str, ...] = (), categories: tuple[str, ...] = (),
                 subresources: tuple[str, ...] = ("status",)) -> None:
        self.resources[kmock.resource(group, version, plural)] = kmock.ResourceInfo(
            kind=kind, singular=singular, namespaced=namespaced, verbs=ALL_VERBS,
            shortnames=set(short_names), categories=set(categories), subresources=set(subresources))
        self._kinds.pop((group, version, plural), None)

    def _kind(self, route: Route) -> Kind | None:
        key = (route.group, route.version, route.plural)
        found = self._kinds.get(key)
        if found is None:
            res = kmock.resource(route.group, route.version, route.plural)
            if res not in self.resources:
                return None
            info = self.resources[res]
            found = Kind(route.group, route.version, route.plural,
                         info.kind or route.plural.capitalize(), bool(info.namespaced), "status" in info.subresources)
            self._kinds[key] = found
        return found

    def _register_crd(self, crd: Mapping[str, Any]) -> None:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        for version in spec.get("versions") or []:
            if not version.get("served", True):
                continue
            self.register(
                spec.get("group", ""), version["name"], names["plural"], kind=names.get("kind", ""),
                singular=names.get("singular", ""), namespaced=spec.get("scope") == "Namespaced",
                short_names=tuple(names.get("shortNames") or ()), categories=tuple(names.get("categories") or ()),
                subresources=tuple((version.get("subresources") or {}).keys()))

    # --- state, for tests ------------------------------------------------------------

    def reset(self) -> None:
        """Drop every object (not the registered resources); watchers see nothing (they are closed)."""
        self.close_watches()
        self._store.clear()
        self._history.clear()

    def close_watches(self) -> None:
        for watchers in self._watchers.values():
            for watcher in watchers:
                watcher.queue.put_nowait(None)

    # --- HTTP entry --------------------------------------------------------------------------------

    @override
    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        started = time.perf_counter()
        path = raw_request.path
        route = parse_route(path)
        kind = self._kind(route) if route is not None else None
        try:
            if path.rstrip("/") == "/version":
                response: aiohttp.web.StreamResponse = aiohttp.web.json_response(
                    await self._serve_server_version(None))  # type: ignore[arg-type]
            elif path.startswith("/_emulator/"):
                response = await self._serve_admin(raw_request)
            elif route is None:
                response = await super().__call__(raw_request)  # discovery: kmock's own
                del self._requests[:-100]  # kmock keeps every request; keep it bounded
            elif kind is None:
                raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
            else:
                response = await self._serve(raw_request, route, kind)
        except ApiError as exc:
            response = aiohttp.web.json_response(exc.status(), status=exc.code)
        except Exception as exc:  # a bug here must not look like a network failure to the client
            log.exception("emulator failure on %s %s", raw_request.method, path)
            response = aiohttp.web.json_response(
                ApiError(500, "InternalError", f"{type(exc).__name__}: {exc}",
                         {"traceback": traceback.format_exc()}).status(), status=500)
        self.request_log.append((raw_request.method, raw_request.path_qs, response.status,
                                 time.perf_counter() - started))
        return response

    async def _serve_admin(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        if raw_request.path == "/_emulator/reset" and raw_request.method == "POST":
            self.reset()
            return aiohttp.web.json_response({"reset": True})
        if raw_request.path == "/_emulator/requests":
            return aiohttp.web.json_response([list(r) for r in self.request_log])
        raise ApiError(404, "NotFound", f"no emulator endpoint {raw_request.path}")

    async def _serve(self, raw: aiohttp.web.BaseRequest, route: Route, kind: Kind) -> aiohttp.web.StreamResponse:
        if kind.namespaced is False and route.namespace is not None:
            raise ApiError(404, "NotFound", f"{kind.plural} is not namespaced")
        method, query = raw.method, raw.query
        if method == "GET" and query.get("watch") in ("true", "1"):
            return await self._watch(raw, route, kind)
        body = await raw.read()
        if method == "GET":
            if route.name is None:
                return self._json(self._list(route, kind, query))
            return self._json(self._get(route, kind))
        data = self._decode(body) if body else None
        if method == "POST" and route.name is None:
            return self._json(self._create(route, kind, data, dry_run="dryRun" in query), 201)
        if method == "PATCH" and route.name is not None:
            content_type = raw.headers.get("Content-Type", "").split(";")[0].strip()
            return self._json(self._patch(route, kind, data, content_type))
        if method == "PUT" and route.name is not None:
            return self._json(self._replace(route, kind, data))
        if method == "DELETE":
            options = data if isinstance(data, dict) else {}
            policy = options.get("propagationPolicy") or query.get("propagationPolicy") or "Background"
            if route.name is None:
                return self._json(self._delete_collection(route, kind, query, policy))
            return self._json(self._delete(route, kind, options.get("preconditions") or {}, policy))
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {raw.path}")

    @staticmethod
    def _decode(body: bytes) -> Any:
        try:
            return json.loads(body)
        except ValueError:
            try:
                return yaml.safe_load(body)
            except yaml.YAMLError as exc:
                raise ApiError(400, "BadRequest", f"the request body is neither JSON nor YAML: {exc}") from None

    @staticmethod
    def _json(payload: Any, status: int = 200) -> aiohttp.web.Response:
        return aiohttp.web.Response(body=json.dumps(payload).encode(), status=status,
                                    content_type="application/json")

    # --- reads ------------------------------------------------------------------------------------

    def _namespace_of(self, route: Route, kind: Kind) -> str | None:
        return route.namespace if kind.namespaced else None

    def _not_found(self, kind: Kind, name: str) -> ApiError:
        return ApiError(404, "NotFound", f'{kind.plural}{"." + kind.group if kind.group else ""} "{name}" not found',
                        {"name": name, "group": kind.group, "kind": kind.plural})

    def _get(self, route: Route, kind: Kind) -> dict[str, Any]:
        assert route.name is not None
        obj = self._store[kind.key].get((self._namespace_of(route, kind), route.name))
        if obj is None:
            raise self._not_found(kind, route.name)
        return obj

    def _matcher(self, query: Mapping[str, str]) -> Matcher:
        try:
            by_label = label_matcher(query.get("labelSelector"))
            by_field = field_matcher(query.get("fieldSelector"))
        except SelectorError as exc:
            raise ApiError(400, "BadRequest", str(exc)) from None
        return lambda obj: by_label(obj) and by_field(obj)

    def _list(self, route: Route, kind: Kind, query: Mapping[str, str]) -> dict[str, Any]:
        namespace = self._namespace_of(route, kind)
        matches = self._matcher(query)
        items = [obj for (ns, _), obj in self._store[kind.key].items()
                 if (namespace is None or ns == namespace) and matches(obj)]
        return {"apiVersion": kind.api_version, "kind": f"{kind.kind}List",
                "metadata": {"resourceVersion": str(self._rv)}, "items": items}

    # --- writes -----------------------------------------------------------------------------------

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _emit(self, kind: Kind, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        """Record a create or update and fan it out to the watchers whose filters see it."""
        rv = int(new["metadata"]["resourceVersion"])
        history = self._history.get(kind.key)
        if history is None:
            history = self._history[kind.key] = collections.deque(maxlen=self.history_limit)
        history.append((rv, old, new))
        for watcher in self._watchers.get(kind.key, ()):
            line = self._event_line(watcher, old, new)
            if line is not None:
                watcher.queue.put_nowait(line)

    @staticmethod
    def _event_line(watcher: Watcher, old: dict[str, Any] | None, new: dict[str, Any]) -> bytes | None:
        """ADDED/MODIFIED for a create or update, or DELETED when it leaves the watcher's selector."""
        if watcher.namespace is not None and new["metadata"].get("namespace") != watcher.namespace:
            return None
        was = old is not None and watcher.matches(old)
        now = watcher.matches(new)
        if not (was or now):
            return None
        etype = "MODIFIED" if was and now else "ADDED" if now else "DELETED"
        return json.dumps({"type": etype, "object": new}).encode() + b"\n"

    def _check_namespace(self, kind: Kind, namespace: str | None) -> None:
        if not kind.namespaced:
            return
        if not namespace:
            raise ApiError(400, "BadRequest", "a namespaced object needs a namespace")
        namespaces = self._store.get(("", "namespaces"))
        ns = namespaces.get((None, namespace)) if namespaces is not None else None
        if ns is None:
            raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found',
                           {"name": namespace, "kind": "namespaces"})
        if ns["metadata"].get("deletionTimestamp"):
            raise ApiError(403, "Forbidden", f"namespace {namespace} is being terminated")

    def _create(self, route: Route, kind: Kind, data: Any, dry_run: bool = False) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise ApiError(400, "BadRequest", "the request body must be a JSON object")
        obj = copy.deepcopy(data)
        meta = obj.setdefault("metadata", {})
        namespace = self._namespace_of(route, kind)
        if kind.namespaced:
            if meta.get("namespace") not in (None, namespace):
                raise ApiError(400, "BadRequest", "the namespace of the object does not match the namespace of the URL")
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise ApiError(422, "Invalid", "metadata.name: Required value: name or generateName is required")
            for _ in range(16):
                candidate = f"{prefix}{uuid.uuid4().hex[:5]}"
                if (namespace, candidate) not in self._store[kind.key]:
                    meta["name"] = candidate
                    break
        name = meta["name"]
        if len(name) > 253 or not SUBDOMAIN.match(name):
            raise ApiError(422, "Invalid", f'{kind.kind} "{name}" is invalid: metadata.name: Invalid value: '
                           f'"{name}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric '
                           "characters, '-' or '.', and must start and end with an alphanumeric character")
        self._check_namespace(kind, meta.get("namespace"))
        if (meta.get("namespace"), name) in self._store[kind.key]:
            raise ApiError(409, "AlreadyExists", f'{kind.plural} "{name}" already exists',
                           {"name": name, "kind": kind.plural})
        obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
        if kind.status_subresource and kind.group:
            obj.pop("status", None)  # CRs with a status subresource drop status on create
        if kind.key == ("", "pods"):
            obj["status"] = {"phase": "Pending", **({"qosClass": "BestEffort"})}
        meta.pop("deletionTimestamp", None)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
        if dry_run:
            return obj
        meta["resourceVersion"] = self._next_rv()
        self._store[kind.key][(meta.get("namespace"), name)] = obj
        self._emit(kind, None, obj)
        if kind.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._register_crd(obj)
        return obj

    def _commit(self, kind: Kind, old: dict[str, Any], new: dict[str, Any], subresource: str | None
                ) -> dict[str, Any]:
        """Apply the status-subresource split, bump versions, store, notify; finalize if released."""
        if kind.status_subresource:
            if subresource == "status":
                new = {**old, "status": new.get("status")} if "status" in new else {
                    k: v for k, v in old.items() if k != "status"}
            elif "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        meta = new.setdefault("metadata", {})
        for fixed in ("uid", "creationTimestamp", "namespace", "name", "deletionTimestamp"):
            if fixed in old["metadata"]:
                meta[fixed] = old["metadata"][fixed]
            else:
                meta.pop(fixed, None)
        new["apiVersion"], new["kind"] = kind.api_version, kind.kind
        meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        meta["generation"] = old["metadata"].get("generation", 1)
        if new == old:
            return old  # a no-op write changes nothing, not even the resourceVersion
        if _spec_of(new) != _spec_of(old):
            meta["generation"] = meta["generation"] + 1
        meta["resourceVersion"] = self._next_rv()
        key = (meta.get("namespace"), meta["name"])
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._remove(kind, key, new)
            return new
        self._store[kind.key][key] = new
        self._emit(kind, old, new)
        return new

    def _patch(self, route: Route, kind: Kind, data: Any, content_type: str) -> dict[str, Any]:
        old = self._get(route, kind)
        if content_type == patching.APPLY_PATCH:
            raise ApiError(415, "UnsupportedMediaType", "server-side apply is not supported by the emulator")
        try:
            if content_type == patching.JSON_PATCH:
                new = patching.json_patch(old, data)
            elif content_type == patching.STRATEGIC_MERGE_PATCH:
                new = patching.strategic_merge_patch(old, data)
            elif content_type in (patching.MERGE_PATCH, "application/json", ""):
                new = patching.merge_patch(old, data)
            else:
                raise ApiError(415, "UnsupportedMediaType", f"unsupported patch type {content_type!r}")
        except patching.PatchTestFailed as exc:
            raise ApiError(422, "Invalid", f"the JSON patch test failed: {exc}") from None
        except ValueError as exc:
            raise ApiError(422, "Invalid", str(exc)) from None
        if not isinstance(new, dict):
            raise ApiError(422, "Invalid", "the patched object is not an object")
        wanted_rv = ((data or {}).get("metadata") or {}).get("resourceVersion") if isinstance(data, dict) else None
        if wanted_rv and wanted_rv != old["metadata"]["resourceVersion"]:
            raise self._conflict(kind, old)
        return self._commit(kind, old, copy.deepcopy(new), route.subresource)

    def _replace(self, route: Route, kind: Kind, data: Any) -> dict[str, Any]:
        old = self._get(route, kind)
        if not isinstance(data, dict):
            raise ApiError(400, "BadRequest", "the request body must be a JSON object")
        wanted_rv = (data.get("metadata") or {}).get("resourceVersion")
        if not wanted_rv:
            raise ApiError(422, "Invalid", f'{kind.kind} "{route.name}" is invalid: metadata.resourceVersion: '
                           "Invalid value: 0x0: must be specified for an update")
        if wanted_rv != old["metadata"]["resourceVersion"]:
            raise self._conflict(kind, old)
        if (data.get("metadata") or {}).get("name") not in (None, route.name):
            raise ApiError(400, "BadRequest", "the name of the object does not match the name of the URL")
        return self._commit(kind, old, copy.deepcopy(data), route.subresource)

    @staticmethod
    def _conflict(kind: Kind, old: dict[str, Any]) -> ApiError:
        name = old["metadata"]["name"]
        return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {kind.plural} "{name}": the object '
                        "has been modified; please apply your changes to the latest version and try again",
                        {"name": name, "kind": kind.plural})

    def _delete(self, route: Route, kind: Kind, preconditions: Mapping[str, Any], policy: str) -> dict[str, Any]:
        old = self._get(route, kind)
        if preconditions.get("uid") and preconditions["uid"] != old["metadata"]["uid"]:
            raise self._conflict(kind, old)
        if preconditions.get("resourceVersion") and preconditions["resourceVersion"] != old["metadata"]["resourceVersion"]:
            raise self._conflict(kind, old)
        return self._delete_object(kind, old, policy)

    def _delete_object(self, kind: Kind, old: dict[str, Any], policy: str) -> dict[str, Any]:
        key = (old["metadata"].get("namespace"), old["metadata"]["name"])
        if old["metadata"].get("finalizers"):
            if old["metadata"].get("deletionTimestamp"):
                return old
            new = copy.deepcopy(old)
            new["metadata"]["deletionTimestamp"] = _now()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            new["metadata"]["resourceVersion"] = self._next_rv()
            self._store[kind.key][key] = new
            self._emit(kind, old, new)
            return new
        self._remove(kind, key, old, orphan=(policy == "Orphan"))
        return old

    def _remove(self, kind: Kind, key: Key, last: dict[str, Any], orphan: bool = False) -> None:
        previous = self._store[kind.key].pop(key, None)
        rv = int(self._next_rv())
        old = previous if previous is not None else last
        history = self._history.setdefault(kind.key, collections.deque(maxlen=self.history_limit))
        history.append((rv, old, None))
        for watcher in self._watchers.get(kind.key, ()):
            line = self._deleted_line(watcher, old, rv)
            if line is not None:
                watcher.queue.put_nowait(line)
        if kind.key == ("", "namespaces"):
            self._delete_namespace_contents(key[1])
        if not orphan:
            self._collect_dependents(last["metadata"]["uid"])

    @staticmethod
    def _deleted_line(watcher: Watcher, old: dict[str, Any], rv: int) -> bytes | None:
        if watcher.namespace is not None and old["metadata"].get("namespace") != watcher.namespace:
            return None
        if not watcher.matches(old):
            return None
        final = {**old, "metadata": {**old["metadata"], "resourceVersion": str(rv)}}
        return json.dumps({"type": "DELETED", "object": final}).encode() + b"\n"

    def _kind_by_key(self, key: tuple[str, str]) -> Kind | None:
        for kind in self._kinds.values():
            if kind.key == key:
                return kind
        for res in self.resources:
            if (res.group, res.plural) == key and res.group is not None and res.version and res.plural:
                return self._kind(Route(res.group, res.version, res.plural, None, None, None))
        return None

    def _collect_dependents(self, owner_uid: str) -> None:
        live_uids = None
        for rkey, objects in list(self._store.items()):
            for okey, obj in list(objects.items()):
                refs = obj["metadata"].get("ownerReferences") or []
                if not any(r.get("uid") == owner_uid for r in refs):
                    continue
                kind = self._kind_by_key(rkey)
                if kind is None:
                    continue
                if live_uids is None:
                    live_uids = {o["metadata"]["uid"] for objs in self._store.values() for o in objs.values()}
                remaining = [r for r in refs if r.get("uid") != owner_uid and r.get("uid") in live_uids]
                if remaining:
                    new = copy.deepcopy(obj)
                    new["metadata"]["ownerReferences"] = remaining
                    self._commit(kind, obj, new, None)
                elif okey in objects:
                    self._delete_object(kind, obj, "Background")

    def _delete_namespace_contents(self, namespace: str) -> None:
        for rkey, objects in list(self._store.items()):
            kind = self._kind_by_key(rkey)
            if kind is None or not kind.namespaced:
                continue
            for okey, obj in list(objects.items()):
                if okey[0] == namespace and okey in objects:
                    self._delete_object(kind, obj, "Background")

    def _delete_collection(self, route: Route, kind: Kind, query: Mapping[str, str], policy: str
                           ) -> dict[str, Any]:
        listed = self._list(route, kind, query)
        for obj in listed["items"]:
            self._delete_object(kind, obj, policy)
        return listed

    # --- watches ----------------------------------------------------------------------------------

    async def _watch(self, raw: aiohttp.web.BaseRequest, route: Route, kind: Kind) -> aiohttp.web.StreamResponse:
        query = raw.query
        matches = self._matcher(query)
        if route.name is not None:  # the deprecated single-object watch
            by_name, name = matches, route.name
            matches = lambda obj: obj["metadata"].get("name") == name and by_name(obj)  # noqa: E731
        namespace = self._namespace_of(route, kind)
        timeout = float(query.get("timeoutSeconds") or 1800)
        since = query.get("resourceVersion") or ""

        watcher = Watcher(kind, namespace, matches)
        initial: list[bytes] = []
        # Everything between here and registration runs without awaiting: no change can slip in.
        if since in ("", "0") or not since.isdigit():
            for obj in self._store[kind.key].values():
                if (namespace is None or obj["metadata"].get("namespace") == namespace) and matches(obj):
                    initial.append(json.dumps({"type": "ADDED", "object": obj}).encode() + b"\n")
        else:
            history = self._history.get(kind.key) or collections.deque()
            oldest = history[0][0] if history else self._rv + 1
            if int(since) < oldest - 1 and int(since) < self._rv:
                expired = ApiError(410, "Expired", f"too old resource version: {since} ({oldest - 1})").status()
                initial.append(json.dumps({"type": "ERROR", "object": expired}).encode() + b"\n")
                watcher = None  # type: ignore[assignment]
            else:
                for rv, old, new in history:
                    if rv <= int(since):
                        continue
                    if new is None:
                        line = self._deleted_line(watcher, old, rv) if old is not None else None
                    else:
                        line = self._event_line(watcher, old, new)
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


def _spec_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Everything that bumps `generation` when it changes: all but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def kubeconfig(server: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "heterojob-emulator",
        "clusters": [{"name": "heterojob-emulator", "cluster": {"server": server}}],
        "users": [{"name": "heterojob-emulator", "user": {"token": "emulator"}}],
        "contexts": [{"name": "heterojob-emulator",
                      "context": {"cluster": "heterojob-emulator", "user": "heterojob-emulator"}}],
    }


async def serve(host: str, port: int, kubeconfig_path: Path | None, crd_dir: Path | None,
                ready: asyncio.Event | None = None, stop: asyncio.Event | None = None) -> None:
    emulator = ApiServerEmulator()
    emulator.resources.load_bundled()
    for path in sorted(crd_dir.glob("*.yaml")) if crd_dir else ():
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                emulator._register_crd(doc)
    stop = stop or asyncio.Event()
    async with emulator, kmock.Server(emulator, host=host, port=port or None) as server:
        url = f"http://{host}:{server.port}"
        if kubeconfig_path:
            kubeconfig_path.write_text(yaml.safe_dump(kubeconfig(url)))
        print(f"READY {url}", flush=True)
        if ready is not None:
            ready.set()
        await stop.wait()
        emulator.close_watches()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m heterojob.sim.cluster.apiserver",
                                     description="Serve the Kubernetes API emulator on a loopback port.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--kubeconfig", type=Path, help="write a kubeconfig pointing at the emulator here")
    parser.add_argument("--crds", type=Path, help="register the CRDs in this directory at start")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(args.host, args.port, args.kubeconfig, args.crds, stop=stop)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
