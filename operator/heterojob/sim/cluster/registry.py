"""The emulator's state and its resource registry: the layer every other one of `ApiServerEmulator` builds on.

`Registry` holds what the server keeps (the objects' store, each resource's event history and watchers, the global
resourceVersion counter, the CRDs' schemas and validators, the request log, tokens, the collector's timers) and which
resources are served: kmock's registry for discovery, plus what a CRD created through the API declares. The layers
above it, bottom to top: storage.py (reads, versions, watch fan-out), rules.py (each kind's checks and admission),
writes.py (create, update, patch, apply), deletion.py (deletion and garbage collection), serving.py (the HTTP
entry, the `/_emulator/*` test endpoints), apiserver.py (the emulator and `serve`)."""

from __future__ import annotations

import asyncio
import collections
import copy
from collections.abc import Mapping
from typing import Any

import attrs
import kmock

from heterojob.sim.cluster import auth, collector, schema
from heterojob.sim.cluster.routes import Key, ResourceKind, Route
from heterojob.sim.cluster.store import Store
from heterojob.sim.cluster.watches import Watcher

ALL_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
DEFAULT_ACCOUNT_LAG_S = 0.05  # a new namespace's `default` ServiceAccount comes this long after it (`account_lag_s`)


@attrs.define(kw_only=True)
class Registry(kmock.KubernetesEmulator):
    """What the emulator keeps and which resources it serves (see the module docstring)."""

    history_limit: int = 20000  # events kept per resource for watch resumption
    request_log_limit: int = 2000

    _kinds: dict[tuple[str, str, str], ResourceKind] = attrs.field(factory=dict, init=False)
    _store: Store = attrs.field(factory=Store, init=False)
    _history: dict[tuple[str, str], collections.deque[tuple[int, dict[str, Any] | None, dict[str, Any] | None]]] = \
        attrs.field(factory=dict, init=False)
    _watchers: dict[tuple[str, str], set[Watcher]] = attrs.field(
        factory=lambda: collections.defaultdict(set), init=False)
    _rv: int = attrs.field(default=1, init=False)
    _crd_versions: dict[tuple[str, str, str], dict[str, Any]] = attrs.field(factory=dict, init=False)
    _schemas: dict[tuple[str, str, str], dict[str, Any]] = attrs.field(factory=dict, init=False)
    _validators: dict[tuple[str, str, str], Any] = attrs.field(factory=dict, init=False)
    # (kind, top-level fields an update left unchanged) -> the validator that skips them (ratcheting)
    _ratcheted: dict[tuple[tuple[str, str, str], frozenset[str]], Any] = attrs.field(factory=dict, init=False)
    _warnings: list[str] = attrs.field(factory=list, init=False)
    registry_generation: int = attrs.field(default=0, init=False)  # bumped when what is served changes
    openapi_cache: dict[Any, tuple[bytes, str]] = attrs.field(factory=dict, init=False)
    max_body_bytes: int = 3 * 1024 * 1024  # kube-apiserver's MaxRequestBodyBytes default
    request_log: collections.deque[tuple[str, str, int, float]] = attrs.field(factory=collections.deque, init=False)
    # (client: the User-Agent's first part, method, resource, subresource) -> writes asked (any answer)
    writes: collections.Counter[tuple[str, str, str, str]] = attrs.field(factory=collections.Counter, init=False)
    _writer: tuple[str, bool] | None = attrs.field(default=None, init=False)  # (field manager, force) of a write
    _applied_fields: list[dict[str, Any]] | None = attrs.field(default=None, init=False)  # managedFields of an apply
    _foreground: dict[str, tuple[tuple[str, str], Key]] = attrs.field(factory=dict, init=False)  # owner uid -> where
    tokens: auth.Tokens = attrs.field(factory=auth.Tokens, init=False)  # service account tokens issued (auth.py)
    gc_lag_s: float = collector.GC_LAG_S  # when the collector reaches an object made for absent owners
    _gc_due: dict[str, asyncio.TimerHandle] = attrs.field(factory=dict, init=False)  # object uid -> its look
    # the controller-manager's ServiceAccount controller: a new namespace's `default` account comes this long after
    # the namespace (a pod created before it is refused: `serviceaccount "default" not found`, a real cluster's race)
    account_lag_s: float = DEFAULT_ACCOUNT_LAG_S
    _accounts_due: list[asyncio.TimerHandle] = attrs.field(factory=list, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.request_log = collections.deque(maxlen=self.request_log_limit)

    def register(self, group: str, version: str, plural: str, *, kind: str, singular: str, namespaced: bool,
                 short_names: tuple[str, ...] = (), categories: tuple[str, ...] = (),
                 subresources: tuple[str, ...] = ("status",)) -> None:
        self.resources[kmock.resource(group, version, plural)] = kmock.ResourceInfo(
            kind=kind, singular=singular, namespaced=namespaced, verbs=ALL_VERBS,
            shortnames=set(short_names), categories=set(categories), subresources=set(subresources))
        self._kinds.pop((group, version, plural), None)
        self.registry_generation += 1

    def _kind(self, route: Route) -> ResourceKind | None:
        key = (route.group, route.version, route.plural)
        found = self._kinds.get(key)
        if found is None:
            res = kmock.resource(route.group, route.version, route.plural)
            if res not in self.resources:
                return None
            info = self.resources[res]
            found = ResourceKind(route.group, route.version, route.plural, info.kind or route.plural.capitalize(),
                                 bool(info.namespaced), "status" in info.subresources)
            self._kinds[key] = found
        return found

    def _kind_by_key(self, key: tuple[str, str]) -> ResourceKind | None:
        for kind in self._kinds.values():
            if kind.key == key:
                return kind
        for res in self.resources:
            if (res.group, res.plural) == key and res.group is not None and res.version and res.plural:
                return self._kind(Route(res.group, res.version, res.plural, None, None, None))
        return None

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
            key = (spec.get("group", ""), version["name"], names["plural"])
            self._crd_versions[key] = {**copy.deepcopy(version), "names": copy.deepcopy(names),
                                       "scope": spec.get("scope"), "group": spec.get("group", "")}
            found = schema.version_schema(crd, version["name"])
            self.registry_generation += 1
            self._ratcheted.clear()
            if found is None:
                self._schemas.pop(key, None)
                self._validators.pop(key, None)
            else:
                self._schemas[key] = found
                self._validators[key] = schema.compile_schema(found)

    def load_builtins(self) -> None:
        """kmock's bundled built-in resources, less the metrics API (nothing here serves metrics)."""
        self.resources.load_bundled()
        for res in list(self.resources):
            if res.group == "metrics.k8s.io":
                del self.resources[res]
        self.registry_generation += 1

    def schema_of(self, group: str, version: str, plural: str) -> dict[str, Any] | None:
        return self._schemas.get((group, version, plural))

    def crd_version(self, group: str, version: str, plural: str) -> dict[str, Any] | None:
        return self._crd_versions.get((group, version, plural))

    def close_watches(self) -> None:
        for watchers in self._watchers.values():
            for watcher in watchers:
                watcher.queue.put_nowait(None)
