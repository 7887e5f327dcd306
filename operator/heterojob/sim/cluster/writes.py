"""Writes: create, update (PUT), patch (merge, JSON, strategic merge), server-side apply, `pods/binding` and `scale`,
in the order kube-apiserver keeps: the object is built, checked and admitted (rules.py) before it is stored, and stored
before any watcher hears of it (storage.py's `_emit`). `_commit` is every update's one path: the status-subresource
split, what BeforeUpdate keeps from the stored object, `generation` on a spec change, a no-op write changing nothing,
and the removal of an object whose last finalizer went. One layer of `ApiServerEmulator` (registry.py lists them)."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import aiohttp.web
import attrs

from heterojob.sim.cluster import auth, builtin, crdstatus, ipam, managedfields, patching, scale
from heterojob.sim.cluster.errors import ApiError, invalid_object
from heterojob.sim.cluster.routes import Key, ResourceKind, Route, qualified
from heterojob.sim.cluster.rules import KindRules
from heterojob.sim.cluster.timestamps import now


@attrs.define(kw_only=True)
class Writes(KindRules):
    """Create, update, patch, apply (see the module docstring)."""

    if TYPE_CHECKING:  # deletion.py's layer, above this one: a write that ends a deletion, owners and accounts
        def _remove(self, kind: ResourceKind, key: Key, last: dict[str, Any]) -> None: ...

        def _check_owners(self, kind: ResourceKind, obj: dict[str, Any]) -> None: ...

        def _default_account_later(self, namespace: str, uid: str) -> None: ...

    def _create(self, route: Route, kind: ResourceKind, data: Any, dry_run: bool = False, strict: str = "Warn"
                ) -> dict[str, Any]:
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
        obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
        if kind.status_subresource and kind.group:
            obj.pop("status", None)  # CRs with a status subresource drop status on create
        self._enforce(kind, obj, None, None, strict)
        self._check_namespace(kind, meta.get("namespace"))
        if (meta.get("namespace"), name) in self._store[kind.key]:
            raise ApiError(409, "AlreadyExists", f'{qualified(kind)} "{name}" already exists',
                           {"name": name, "group": kind.group, "kind": kind.plural})
        if kind.key == ("", "pods"):
            self._admit(kind, obj)
            obj["status"] = {"phase": "Pending", "qosClass": builtin.qos_class(obj)}
        elif kind.key == ("", "nodes"):  # the node IPAM controller and the kubelet's registration
            nodes = self._store[kind.key]
            ipam.assign_node_addresses(obj, cidrs=nodes.cidrs, ips=nodes.ips)
        elif kind.key == ("", "namespaces"):
            obj["status"] = {"phase": "Active"}  # the namespace strategy's PrepareForCreate
        elif kind.key == ("", "secrets") and not dry_run:
            auth.fill_token_secret(self.tokens, self._store.__getitem__, obj)  # the token controller
        meta.pop("deletionTimestamp", None)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=now(), generation=1)
        drop_empty(meta)
        self._track_update(kind, None, obj, None)
        if dry_run:
            return obj
        meta["resourceVersion"] = self._next_rv()
        if kind.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            obj["status"] = crdstatus.established(obj)  # served at once: names accepted, established
        self._store[kind.key][(meta.get("namespace"), name)] = obj
        self._emit(kind, None, obj)
        if kind.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._register_crd(obj)
        elif kind.key == ("", "namespaces"):
            self._default_account_later(name, meta["uid"])
        self._check_owners(kind, obj)
        return obj

    def _commit(self, kind: ResourceKind, old: dict[str, Any], new: dict[str, Any], subresource: str | None,
                dry_run: bool = False, strict: str = "Warn") -> dict[str, Any]:
        """Apply the status-subresource split, bump versions, store, notify; finalize if released."""
        if kind.status_subresource:
            if subresource == "status":
                new = {**old, "status": new.get("status")} if "status" in new else {
                    k: v for k, v in old.items() if k != "status"}
            elif subresource == "binding":
                pass  # a binding sets spec.nodeName and the PodScheduled condition
            elif "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        meta = new.setdefault("metadata", {})
        # what BeforeUpdate copies from the stored object whatever the request says
        for fixed in ("uid", "creationTimestamp", "namespace", "name", "deletionTimestamp",
                      "deletionGracePeriodSeconds"):
            if fixed in old["metadata"]:
                meta[fixed] = old["metadata"][fixed]
            else:
                meta.pop(fixed, None)
        new["apiVersion"], new["kind"] = kind.api_version, kind.kind
        drop_empty(meta)
        meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        meta["generation"] = old["metadata"].get("generation", 1)
        if subresource != "binding":
            self._enforce(kind, new, old, subresource, strict)
        self._track_update(kind, old, new, subresource)
        if dry_run:
            return new
        if new == old:
            return old  # a no-op write changes nothing, not even the resourceVersion
        if spec_of(new) != spec_of(old):
            meta["generation"] = meta["generation"] + 1
        meta["resourceVersion"] = self._next_rv()
        if kind.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            new["status"] = crdstatus.established(new, old.get("status"))
        key = (meta.get("namespace"), meta["name"])
        # ShouldDeleteDuringUpdate: the last finalizer gone from an object being deleted with no grace left
        # (a Terminating pod waits for its kubelet's grace-0 DELETE)
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and not meta.get("deletionGracePeriodSeconds"):
            self._remove(kind, key, new)
            return new
        self._store[kind.key][key] = new
        self._emit(kind, old, new)
        if kind.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            self._register_crd(new)
        if meta.get("ownerReferences") != old["metadata"].get("ownerReferences"):
            self._check_owners(kind, new)
        return new

    def _patch(self, route: Route, kind: ResourceKind, data: Any, content_type: str, dry_run: bool = False,
               strict: str = "Warn") -> dict[str, Any]:
        if content_type == patching.APPLY_PATCH:
            return self._server_side_apply(route, kind, data, dry_run, strict)
        is_cr = self.crd_version(kind.group, kind.version, kind.plural) is not None
        patching.check_type(content_type, is_cr)
        old = self._get(route, kind)
        new = self._patched(kind, old, data, content_type, is_cr)
        if not isinstance(new, dict):
            raise ApiError(422, "Invalid", "the patched object is not an object")
        wanted_rv = ((data or {}).get("metadata") or {}).get("resourceVersion") if isinstance(data, dict) else None
        if wanted_rv and wanted_rv != old["metadata"]["resourceVersion"]:
            raise self._conflict(kind, old)
        return self._commit(kind, old, copy.deepcopy(new), route.subresource, dry_run, strict)

    @staticmethod
    def _patched(kind: ResourceKind, old: dict[str, Any], data: Any, content_type: str, is_cr: bool) -> Any:
        """The patch applied to `old`, or the error kube-apiserver v1.32 answers (handlers/patch.go)."""
        patching.check_type(content_type, is_cr)
        if content_type == patching.JSON_PATCH:
            return patching.json_patch(old, data)
        if content_type == patching.STRATEGIC_MERGE_PATCH:
            return patching.strategic_merge_patch(old, data)
        return patching.merge_patch(old, data)

    def _server_side_apply(self, route: Route, kind: ResourceKind, data: Any, dry_run: bool, strict: str
                           ) -> dict[str, Any]:
        """Server-side apply, simplified: create when missing, else the applied fields merged over the object
        (lists replaced). Field ownership, managedFields and apply conflicts are not modelled."""
        if not isinstance(data, dict):
            raise ApiError(400, "BadRequest", "the apply configuration must be an object")
        if route.name is not None and (data.get("metadata") or {}).get("name") not in (None, route.name):
            raise ApiError(400, "BadRequest", "the name of the object does not match the name of the URL")
        try:
            old = self._get(route, kind)
        except ApiError as exc:
            if exc.code != 404 or route.subresource is not None:
                raise
            create_route = Route(route.group, route.version, route.plural, route.namespace, None, None)
            body = copy.deepcopy(data)
            body.setdefault("metadata", {})["name"] = route.name
            if self.crd_version(kind.group, kind.version, kind.plural) is not None:
                manager = (self._writer or ("unknown", False))[0]
                self._applied_fields = managedfields.record_apply(None, manager, kind.api_version, data, {}, body,
                                                                  now())[1]
            try:
                return self._create(create_route, kind, body, dry_run=dry_run, strict=strict)
            finally:
                self._applied_fields = None
        applied = {k: v for k, v in data.items() if k not in ("apiVersion", "kind")}
        if self.crd_version(kind.group, kind.version, kind.plural) is None:
            # built-ins: lists with a merge key (containers, env, ...) merge by it, as their listType=map does in SSA
            merged = patching.strategic_merge_patch(old, applied)
            return self._commit(kind, old, copy.deepcopy(merged), route.subresource, dry_run, strict)
        manager, force = self._writer or ("unknown", False)
        managed = old["metadata"].get("managedFields")
        if route.subresource is None:
            conflicts = [] if force else managedfields.apply_conflicts(managed, manager, applied, old)
            if conflicts:
                raise ApiError(409, "Conflict", managedfields.conflict_message(conflicts),
                               {"causes": managedfields.conflict_causes(conflicts)})
            merged, managed = managedfields.record_apply(managed, manager, kind.api_version, applied, old,
                                                         patching.merge_patch(old, applied), now())
        else:
            merged = patching.merge_patch(old, applied)
        self._applied_fields = managed  # the apply's ownership, recorded instead of an Update entry
        try:
            return self._commit(kind, old, merged, route.subresource, dry_run, strict)
        finally:
            self._applied_fields = None

    def _replace(self, route: Route, kind: ResourceKind, data: Any, dry_run: bool = False, strict: str = "Warn"
                 ) -> dict[str, Any]:
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
        return self._commit(kind, old, copy.deepcopy(data), route.subresource, dry_run, strict)

    @staticmethod
    def _conflict(kind: ResourceKind, old: dict[str, Any]) -> ApiError:
        name = old["metadata"]["name"]  # errors.NewConflict: the qualified resource (plural.group)
        return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {qualified(kind)} "{name}": the object '
                        "has been modified; please apply your changes to the latest version and try again",
                        {"name": name, "group": kind.group, "kind": kind.plural})

    def _bind(self, route: Route, kind: ResourceKind, data: Any, dry_run: bool) -> dict[str, Any]:
        """POST pods/{name}/binding: the scheduler's way to set `spec.nodeName` (once)."""
        old = self._get(route, kind)
        target = (data or {}).get("target") if isinstance(data, dict) else None
        if not isinstance(target, dict) or not target.get("name"):
            raise invalid_object("Binding", "", route.name or "", [builtin.errors.required("target.name")])
        if (old.get("spec") or {}).get("nodeName"):
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on pods/binding "{route.name}": pod '
                           f'{route.name} is already assigned to node "{old["spec"]["nodeName"]}"',
                           {"name": route.name, "kind": "pods/binding"})
        if not dry_run:
            new = copy.deepcopy(old)
            new["spec"]["nodeName"] = target["name"]
            status = new.setdefault("status", {})  # the one PodScheduled condition turns True (UpdatePodCondition)
            status["conditions"] = [c for c in status.get("conditions") or [] if not isinstance(c, dict)
                                    or c.get("type") != "PodScheduled"] + [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now()}]
            self._commit(kind, old, new, "binding")
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def _scale(self, raw: aiohttp.web.BaseRequest, route: Route, kind: ResourceKind, crd_version: dict[str, Any] | None,
               data: Any, dry_run: bool) -> tuple[dict[str, Any], int]:
        """GET/PUT/PATCH `.../scale` (see scale.py)."""
        paths = scale.paths_for(kind.key, crd_version)
        assert paths is not None
        old = self._get(route, kind)
        current = scale.to_scale(old, paths)
        if raw.method == "GET":
            return current, 200
        if raw.method == "PUT":
            wanted = data
            rv = ((data or {}).get("metadata") or {}).get("resourceVersion") if isinstance(data, dict) else None
            if rv and rv != old["metadata"]["resourceVersion"]:
                raise self._conflict(kind, old)
        elif raw.method == "PATCH":
            content_type = raw.headers.get("Content-Type", "").split(";")[0].strip()
            wanted = self._patched(kind, current, data, content_type, crd_version is not None)
        else:
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        replicas = ((wanted or {}).get("spec") or {}).get("replicas") if isinstance(wanted, dict) else None
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise invalid_object("Scale", "autoscaling", route.name or "", [builtin.errors.invalid(
                "spec.replicas", replicas, "must be greater than or equal to 0")])
        new = self._commit(kind, old, scale.with_replicas(old, paths, replicas), None, dry_run)
        return scale.to_scale(new, paths), 200


def check_patch_options(content_type: str, query: Mapping[str, str]) -> None:
    """apimachinery meta/v1/validation ValidatePatchOptions, as handlers/patch.go answers it (422 on PatchOptions):
    an apply names its field manager; only an apply may force."""
    found = []
    if content_type != patching.APPLY_PATCH:
        if "force" in query:
            found.append(builtin.errors.forbidden("force", "may not be specified for non-apply patch"))
    elif not query.get("fieldManager"):
        found.append(builtin.errors.required("fieldManager", "is required for apply patch"))
    if found:
        raise invalid_object("PatchOptions", "meta.k8s.io", "", found)


# ObjectMeta's `omitempty` collections: the server stores an object as its typed ObjectMeta (for custom resources
# too: apiextensions-apiserver schema/objectmeta Coerce round-trips it), so an empty one is not kept (`kubectl diff`
# of an object never applied client-side sends `annotations: {}`, and a real server shows no change)
_OMIT_EMPTY = ("labels", "annotations", "finalizers", "ownerReferences")


def drop_empty(meta: dict[str, Any]) -> None:
    for name in _OMIT_EMPTY:
        if name in meta and meta[name] in (None, {}, []):
            del meta[name]


def spec_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Everything that bumps `generation` when it changes: all but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}
