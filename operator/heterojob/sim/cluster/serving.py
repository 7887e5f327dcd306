"""The HTTP entry, the first step of every request: authentication and RBAC (auth.py), the paths that are not
resources (discovery, OpenAPI, `/version`, health, the `/_emulator/*` test endpoints), then a resource request routed
by verb and subresource to the layers below (reads and watches: storage.py; writes: writes.py; deletes and evictions:
deletion.py; access reviews: reviews.py), its body read (413 over the limit; JSON, YAML or the protobuf kinds
protobuf.py decodes), its `dryRun` and `fieldValidation` read, and every answer logged. One layer of
`ApiServerEmulator` (registry.py lists them)."""

from __future__ import annotations

import json
import logging
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp.web
import attrs
import yaml
from typing_extensions import override

from heterojob.sim.cluster import auth, cascade, collector, discovery, events, openapi, patching, protobuf, reviews, scale, tables
from heterojob.sim.cluster.deletion import PDB_KEY, Deletion, grace_of
from heterojob.sim.cluster.errors import ApiError
from heterojob.sim.cluster.routes import ResourceKind, Route, is_discovery, parse_route
from heterojob.sim.cluster.writes import check_patch_options

log = logging.getLogger(__name__)

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@attrs.define(kw_only=True)
class Serving(Deletion):
    """The HTTP entry and the routing of a request by verb (see the module docstring)."""

    @override
    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        started = time.perf_counter()
        path = raw_request.path
        route = parse_route(path)
        kind = self._kind(route) if route is not None else None
        self._warnings = []
        try:
            user = self.tokens.authenticate(self._store.__getitem__, raw_request.headers.get("Authorization"))
            served = self._serve_meta(raw_request, path)
            if served is not None:
                response: aiohttp.web.StreamResponse = served
            elif path.rstrip("/") == "/version":
                response = aiohttp.web.json_response(
                    await self._serve_server_version(None))  # type: ignore[arg-type]  # /version reads no request
            elif path.startswith("/_emulator/"):
                response = await self._serve_admin(raw_request)
            elif (health := self._health(raw_request, path)) is not None:
                response = health
            elif route is None and not is_discovery(path):
                # kube-apiserver's notfoundhandler (k8s.io/apiserver pkg/util/notfoundhandler, v1.32)
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            elif route is None:
                response = await super().__call__(raw_request)  # discovery: kmock's own
                del self._requests[:-100]  # kmock keeps every request; keep it bounded
            elif kind is None:
                raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
            else:
                auth.authorize(self._store.__getitem__, user, raw_request.method, raw_request.query, route.group,
                               route.plural, route.subresource, route.namespace, route.name)
                if kind.key == ("", "serviceaccounts") and route.subresource == "token" and raw_request.method == "POST":
                    body = await self._read_body(raw_request)
                    request = protobuf.decode(body) if body[:4] == protobuf.MAGIC else self._decode(body) if body \
                        else None
                    response = self._json(self.tokens.request(self._store.__getitem__, route.namespace or "",
                                                              route.name or "", request), 201)
                else:
                    raw_request["user"] = user
                    response = await self._serve(raw_request, route, kind)
        except ApiError as exc:
            response = aiohttp.web.json_response(exc.status(), status=exc.code)
        except aiohttp.web.HTTPRequestEntityTooLarge:
            response = self._too_large()
        except Exception as exc:  # a bug here must not look like a network failure to the client
            log.exception("emulator failure on %s %s", raw_request.method, path)
            response = aiohttp.web.json_response(
                ApiError(500, "InternalError", f"{type(exc).__name__}: {exc}",
                         {"traceback": traceback.format_exc()}).status(), status=500)
        for warning in dict.fromkeys(self._warnings):
            if not response.prepared:
                response.headers.add("Warning", '299 - ' + json.dumps(warning))
        self.request_log.append((raw_request.method, raw_request.path_qs, response.status,
                                 time.perf_counter() - started))
        if route is not None and raw_request.method in WRITE_METHODS:
            agent = raw_request.headers.get("User-Agent", "").split("/")[0][:128]
            self.writes[(agent, raw_request.method, route.plural, route.subresource or "")] += 1
        return response

    def reset(self) -> None:
        """Drop every object (not the registered resources) but the system namespaces, and the request log and
        write counts (what a test reads of them is its own); watchers see nothing (they are closed)."""
        self.close_watches()
        self.request_log.clear()
        self.writes.clear()
        self._store.clear()
        self._history.clear()
        self._foreground.clear()
        for due in self._gc_due.values():
            due.cancel()
        self._gc_due.clear()
        for due in self._accounts_due:
            due.cancel()
        self._accounts_due.clear()
        self.gc_lag_s = collector.GC_LAG_S
        self.ensure_system_namespaces()

    async def _serve_admin(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        if raw_request.path == "/_emulator/reset" and raw_request.method == "POST":
            self.reset()
            return aiohttp.web.json_response({"reset": True})
        if raw_request.path == "/_emulator/gc" and raw_request.method == "POST":
            # how long the collector takes to reach an object made for absent owners (collector.py); reset: default
            lag = (await raw_request.json()).get("lagSeconds")
            if not isinstance(lag, int | float) or lag < 0:
                raise ApiError(400, "BadRequest", "lagSeconds: a number of seconds, at least 0")
            self.gc_lag_s = float(lag)
            return aiohttp.web.json_response({"lagSeconds": self.gc_lag_s})
        if raw_request.path == "/_emulator/requests":
            return aiohttp.web.json_response([list(r) for r in self.request_log])
        if raw_request.path == "/_emulator/writes":
            return aiohttp.web.json_response([{"agent": a, "method": m, "resource": r, "subresource": sub, "count": n}
                                              for (a, m, r, sub), n in sorted(self.writes.items())])
        raise ApiError(404, "NotFound", f"no emulator endpoint {raw_request.path}")

    @staticmethod
    def _health(raw: aiohttp.web.BaseRequest, path: str) -> aiohttp.web.Response | None:
        """`/healthz`, `/livez`, `/readyz` (and their `/ping`): "ok", as k8s.io/apiserver pkg/server/healthz does."""
        parts = [p for p in path.split("/") if p]
        if raw.method != "GET" or not parts or parts[0] not in ("healthz", "livez", "readyz") or len(parts) > 2:
            return None
        if len(parts) == 2 and parts[1] not in ("ping", "log", "etcd", "poststarthook"):
            return aiohttp.web.Response(status=404, text="404 page not found\n", content_type="text/plain")
        if "verbose" in raw.query and len(parts) == 1:
            text = f"[+]ping ok\n[+]log ok\n[+]etcd ok\n{parts[0]} check passed\n"
        else:
            text = "ok"
        return aiohttp.web.Response(status=200, text=text, content_type="text/plain",
                                    headers={"X-Content-Type-Options": "nosniff"})

    def _too_large(self) -> aiohttp.web.Response:
        return self._json(ApiError(413, "RequestEntityTooLarge",
                                   f"Request entity too large: limit is {self.max_body_bytes}").status(), 413)

    async def _read_body(self, raw: aiohttp.web.BaseRequest) -> bytes:
        if (raw.content_length or 0) > self.max_body_bytes:
            raise ApiError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {self.max_body_bytes}")
        chunks, size = [], 0
        while chunk := await raw.content.read(1 << 16):
            size += len(chunk)
            chunks.append(chunk)
            if size > self.max_body_bytes:
                while await raw.content.read(1 << 16):
                    pass  # drain, so the client reads the answer instead of a reset connection
                raise ApiError(413, "RequestEntityTooLarge",
                               f"Request entity too large: limit is {self.max_body_bytes}")
        return b"".join(chunks)

    def _serve_meta(self, raw: aiohttp.web.BaseRequest, path: str) -> aiohttp.web.StreamResponse | None:
        """Discovery lists, OpenAPI and the aggregated-discovery refusal, answered here rather than by kmock."""
        if raw.method != "GET":
            return None
        parts = [p for p in path.split("/") if p]
        if parts[:1] == ["openapi"]:
            key = (self.registry_generation, path, "protobuf" in raw.headers.get("Accept", "").split(",")[0])
            if key not in self.openapi_cache:
                if len(self.openapi_cache) > 64 or any(k[0] != key[0] for k in self.openapi_cache):
                    self.openapi_cache.clear()
                self.openapi_cache[key] = openapi.serve(self, parts[1:], raw.headers.get("Accept", ""))
            body, content_type = self.openapi_cache[key]
            return aiohttp.web.Response(body=body, status=200, headers={"Content-Type": content_type})
        if len(parts) == 2 and parts[0] == "apis" and not any(r.group == parts[1] for r in self.resources):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if parts == ["api", "v1"] or (len(parts) == 3 and parts[0] == "apis"):
            group, version = ("", "v1") if parts[0] == "api" else (parts[1], parts[2])
            listed = discovery.resource_list(self.resources, group, version)
            if listed is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return self._json(listed)
        return None

    async def _serve(self, raw: aiohttp.web.BaseRequest, route: Route,
                     kind: ResourceKind) -> aiohttp.web.StreamResponse:
        if kind.namespaced is False and route.namespace is not None:
            raise ApiError(404, "NotFound", f"{kind.plural} is not namespaced")
        method, query = raw.method, raw.query
        sub = route.subresource
        crd_version = self.crd_version(kind.group, kind.version, kind.plural)
        if crd_version is not None and sub not in (None, "status", "scale"):
            raise self._not_found(kind, route.name or "")  # apiextensions' crdHandler for any other subresource
        if sub == "scale" and (route.name is None or scale.paths_for(kind.key, crd_version) is None):
            raise self._not_found(kind, route.name or "") if crd_version is not None else ApiError(
                404, "NotFound", "the server could not find the requested resource")
        served = {"status", "scale"} | ({"binding", "log", "eviction", "exec", "attach", "portforward", "proxy"}
                                        if kind.key == ("", "pods") else {"proxy"} if kind.key == ("", "nodes")
                                        else set())
        if sub is not None and (sub.split("/")[0] not in served or route.name is None):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if sub == "status" and not kind.status_subresource:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if sub is not None and sub.split("/")[0] in ("log", "exec", "attach", "portforward", "proxy"):
            return self._no_kubelet(route, kind, sub.split("/")[0], query)
        table = tables.wanted(raw.headers.get("Accept", ""))
        view: Callable[[Any], Any] | None = None
        if kind.key == events.GROUP_KEY:  # one store, two shapes: served from the core v1 Events
            view, kind = events.convert_payload, ResourceKind("", "v1", "events", "Event", True, False)
        if method == "GET" and query.get("watch") in ("true", "1"):
            return await self._watch(raw, route, kind, table, view)
        body = await self._read_body(raw)
        if method == "GET":
            if (kind.group, kind.plural) in reviews.REVIEWS or sub == "eviction":
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                               "resource")
            if sub == "scale":
                return self._json(*self._scale(raw, route, kind, crd_version, None, False))
            if route.name is None:
                listed = self._list(route, kind, query)
                if kind.key == PDB_KEY:
                    listed = {**listed, "items": [self._pdb_view(b) for b in listed["items"]]}
                payload = self._table(kind, listed["items"], query, listed["metadata"]) if table else listed
            else:
                got = self._get(route, kind)
                if kind.key == PDB_KEY:
                    got = self._pdb_view(got)
                payload = self._table(kind, [got], query, {"resourceVersion": got["metadata"]["resourceVersion"]}
                                      ) if table else got
            return self._json(view(payload) if view is not None else payload)
        dry_run = self._dry_run(query)
        strict = self._field_validation(query)
        if "protobuf" in raw.headers.get("Content-Type", "") or body[:4] == protobuf.MAGIC:
            decoded = protobuf.decode(body)
            if decoded is not None:
                body = json.dumps(decoded).encode()
        if body[:4] == protobuf.MAGIC:
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted "
                           "media types include: application/json, application/yaml, application/json-patch+json, "
                           "application/merge-patch+json, application/apply-patch+yaml (the emulator decodes "
                           "protobuf only for Namespace, ConfigMap, Secret, ServiceAccount and ResourceQuota)")
        data = self._decode(body) if body else None
        if view is not None and isinstance(data, dict) and method in ("POST", "PUT", "PATCH"):
            data = events.to_core(data)
            if method == "PATCH":
                data.pop("apiVersion"), data.pop("kind")
        if (kind.group, kind.plural) in reviews.REVIEWS:
            if method != "POST" or route.name is not None:
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                               "resource")
            return self._json(reviews.answer(kind.group, kind.plural, kind.kind, kind.api_version, data,
                                             raw.get("user", auth.ADMIN), self._store.__getitem__), 201)
        if sub == "scale":
            return self._json(*self._scale(raw, route, kind, crd_version, data, dry_run))
        if sub == "eviction":
            if method != "POST":
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                               "resource")
            return self._json(*self._evict(route, kind, data, dry_run))
        payload, status = self._write(raw, route, kind, data, dry_run, strict, query)
        return self._json(view(payload) if view is not None else payload, status)

    def _write(self, raw: aiohttp.web.BaseRequest, route: Route, kind: ResourceKind, data: Any, dry_run: bool,
               strict: str, query: Mapping[str, str]) -> tuple[Any, int]:
        # the field manager (handlers/rest.go managerOrUserAgent): `fieldManager`, else the User-Agent's first part
        agent = raw.headers.get("User-Agent", "").split("/")[0][:128]
        name = route.name or ((data.get("metadata") or {}).get("name") if isinstance(data, dict) else None) or ""
        auth.confirm_no_escalation(self._store.__getitem__, raw.get("user", auth.ADMIN), route.group, route.plural,
                                   route.namespace, name, data)
        self._writer = (query.get("fieldManager") or agent or "unknown", query.get("force") == "true")
        try:
            return self._write_as(raw, route, kind, data, dry_run, strict, query)
        finally:
            self._writer = None

    def _write_as(self, raw: aiohttp.web.BaseRequest, route: Route, kind: ResourceKind, data: Any, dry_run: bool,
                  strict: str, query: Mapping[str, str]) -> tuple[Any, int]:
        method, sub = raw.method, route.subresource
        if method == "POST" and sub == "binding":
            return self._bind(route, kind, data, dry_run), 201
        if method == "POST" and route.name is None:
            return self._create(route, kind, data, dry_run=dry_run, strict=strict), 201
        if method == "PATCH" and route.name is not None:
            content_type = raw.headers.get("Content-Type", "").split(";")[0].strip()
            check_patch_options(content_type, query)
            # an apply that creates the object answers 201 Created (handlers/patch.go, wasCreated)
            created = content_type == patching.APPLY_PATCH and \
                (route.namespace if kind.namespaced else None, route.name) not in self._store[kind.key]
            return self._patch(route, kind, data, content_type, dry_run, strict), 201 if created else 200
        if method == "PUT" and route.name is not None:
            return self._replace(route, kind, data, dry_run, strict), 200
        if method == "DELETE":
            # DeleteOptions come from the body when there is one, else from the query, never both
            # (handlers/delete.go DeleteResource/DeleteCollection: the query is decoded only for an empty body)
            options = data if isinstance(data, dict) else {}
            source: Mapping[str, str] = query if data is None else {}
            policy = cascade.policy_of(options, source)
            dry_run = (dry_run if data is None else False) or "All" in (options.get("dryRun") or [])
            grace = grace_of(options, source)
            if route.name is None:
                return self._delete_collection(route, kind, query, policy, dry_run, grace), 200
            return self._delete(route, kind, options.get("preconditions") or {}, policy, dry_run, grace), 200
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {raw.path}")

    @staticmethod
    def _dry_run(query: Mapping[str, str]) -> bool:
        values = query.getall("dryRun", []) if hasattr(query, "getall") else [query.get("dryRun")]
        values = [v for v in values if v is not None]
        for value in values:
            if value != "All":
                raise ApiError(400, "BadRequest", f"Invalid dry run value: {value}")  # only "All" exists
        return bool(values)

    @staticmethod
    def _field_validation(query: Mapping[str, str]) -> str:
        value = query.get("fieldValidation") or "Warn"  # the default since v1.27 (v1.32: Warn)
        if value not in ("Ignore", "Warn", "Strict"):
            raise ApiError(400, "BadRequest", f"fieldValidation parameter unsupported: {value}")
        return value

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
