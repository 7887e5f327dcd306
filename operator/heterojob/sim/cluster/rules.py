"""Each kind's rules, the checks a write passes before it is stored: pruning, defaulting and validation (a CRD's
schema, with ratcheting; ObjectMeta and the built-in kinds as kube-apiserver v1.32 validates them: builtin.py),
admission of pods (PodSecurity, ResourceQuota, ServiceAccount: admission.py), the namespace a namespaced object goes
into, field ownership after a write (managedfields.py), and a pod's log/exec/attach/portforward/proxy checks. One layer
of `ApiServerEmulator` (registry.py lists them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp.web
import attrs

from heterojob.sim.cluster import admission, builtin, managedfields, schema
from heterojob.sim.cluster.errors import ApiError, invalid_object
from heterojob.sim.cluster.routes import ResourceKind, Route
from heterojob.sim.cluster.storage import Storage
from heterojob.sim.cluster.timestamps import now


@attrs.define(kw_only=True)
class KindRules(Storage):
    """What a write must pass, kind by kind (see the module docstring)."""

    def _enforce(self, kind: ResourceKind, obj: dict[str, Any], old: dict[str, Any] | None, subresource: str | None,
                 strict: str = "Warn") -> None:
        """Prune/default/validate `obj` (in place) as the real server does on create and update; raise 422/400."""
        meta = obj.get("metadata") or {}
        name = meta.get("name") or meta.get("generateName") or ""
        found = builtin.validate_metadata(meta, name_rule=builtin.name_rule(kind.key))
        crd_schema = self._schemas.get((kind.group, kind.version, kind.plural))
        if crd_schema is not None:
            unknown = schema.prune_and_default(obj, crd_schema, builtin.resolver() or schema.no_refs)
            if unknown and strict == "Strict":
                raise ApiError(400, "BadRequest", f'{kind.kind} in version "{kind.version}" cannot be handled as a '
                               f"{kind.kind}: strict decoding error: "
                               + ", ".join(f'unknown field "{u}"' for u in unknown))
            if strict == "Warn":
                self._warnings.extend(f'unknown field "{u}"' for u in unknown)
            found += schema.validate(obj, crd_schema, self._validator(kind, obj, old))
        elif not kind.group or kind.group.endswith(".k8s.io") or "." not in kind.group:
            resolve = builtin.resolver()
            definition = builtin.definition_of(kind.group, kind.version, kind.kind) if resolve else None
            if resolve is not None and definition is not None:
                unknown = schema.prune_and_default(obj, definition, resolve, defaults=False)
                if unknown and strict == "Strict":
                    raise ApiError(400, "BadRequest", f'{kind.kind} in version "{kind.version}" cannot be handled as '
                                   f"a {kind.kind}: strict decoding error: "
                                   + ", ".join(f'unknown field "{u}"' for u in unknown))
                if strict == "Warn":
                    self._warnings.extend(f'unknown field "{u}"' for u in unknown)
            if kind.key == ("", "pods") and old is None:
                builtin.default_pod(obj)
            if kind.key == ("", "pods") and subresource is None and isinstance(obj.get("spec"), dict):
                # mutating admission (DefaultTolerationSeconds), on create and update, before validation
                obj["spec"]["tolerations"] = admission.default_tolerations(obj["spec"].get("tolerations"))
            found += builtin.validate(kind.key, obj, kind.kind, kind.api_version)
            if kind.key == ("", "pods") and old is not None and subresource is None:
                found += builtin.validate_pod_update(old, obj)
        if found:
            raise invalid_object(kind.kind, kind.group, name, found)

    def _validator(self, kind: ResourceKind, obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> Any:
        """The CRD's validator, less the top-level fields an update leaves as they were (ratcheting)."""
        key = (kind.group, kind.version, kind.plural)
        same = frozenset(k for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")
                         and old is not None and k in old and old[k] == v)
        if not same or key not in self._schemas:
            return self._validators.get(key)
        found = self._ratcheted.get((key, same))
        if found is None:
            found = self._ratcheted[(key, same)] = schema.compile_schema(self._schemas[key], same)
        return found

    def _admit(self, kind: ResourceKind, obj: dict[str, Any]) -> None:
        """Admission on create: PodSecurity, ResourceQuota and ServiceAccount for pods (see admission.py)."""
        if kind.key != ("", "pods"):
            return
        namespace = obj["metadata"].get("namespace") or ""
        name = obj["metadata"].get("name") or ""
        ns = self._store[("", "namespaces")].get((None, namespace))
        accounts = list(self._store[("", "serviceaccounts")].in_namespace(namespace))
        quotas = list(self._store[("", "resourcequotas")].in_namespace(namespace).values())
        checks = (lambda: admission.pod_security(obj, ns), lambda: admission.service_account(obj, namespace, accounts),
                  lambda: admission.resource_quota(
                      obj, quotas, list(self._store[("", "pods")].in_namespace(namespace).values()))
                  if quotas else None)
        for check in checks:
            why = check()
            if why:
                raise ApiError(403, "Forbidden", f'pods "{name}" is forbidden: {why}',
                               {"name": name, "kind": "pods"})

    def _check_namespace(self, kind: ResourceKind, namespace: str | None) -> None:
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

    def _track_update(self, kind: ResourceKind, old: dict[str, Any] | None, new: dict[str, Any], subresource: str | None
                      ) -> None:
        """managedFields after a write (managedfields.py): custom resources only; those the client sends are
        honoured as the real field manager does (managedfields.sent), except on a subresource; a write from
        inside the emulator (the garbage collector) or to a subresource changes no owner."""
        meta = new["metadata"]
        kept = (old or {}).get("metadata", {}).get("managedFields")
        wanted = meta.pop("managedFields", None)
        if self.crd_version(kind.group, kind.version, kind.plural) is None:
            return
        if subresource is None and self._writer is not None:
            kept = managedfields.sent(wanted, kept)
        if self._applied_fields is not None:
            kept = self._applied_fields
        elif self._writer is not None and subresource is None:
            kept = managedfields.record_update(kept, self._writer[0], kind.api_version, old, new, now())
        if kept:
            meta["managedFields"] = kept

    def _no_kubelet(self, route: Route, kind: ResourceKind, sub: str, query: Mapping[str, str]) -> aiohttp.web.Response:
        """log, exec, attach, portforward, proxy: kube-apiserver checks the pod (pkg/registry/core/pod/strategy.go
        LogLocation / streamLocation, v1.32), then dials the node's kubelet. The emulator's nodes run no kubelet, so
        after the same checks it answers as the API server does when that dial fails (the proxy's "error dialing
        backend", 500)."""
        obj = self._get(route, kind)
        name = route.name
        if kind.key == ("", "pods"):
            spec = obj.get("spec") or {}
            containers = [str(c.get("name")) for c in spec.get("containers") or []]
            init = [str(c.get("name")) for c in spec.get("initContainers") or []]
            container = query.get("container") or ""
            if sub in ("log", "exec", "attach"):  # validateContainer
                if not container and len(containers) != 1:
                    message = f"a container name must be specified for pod {name}"
                    if containers:
                        message += f", choose one of: [{' '.join(containers)}]"
                        if init:
                            message += f" or one of the init containers: [{' '.join(init)}]"
                    raise ApiError(400, "BadRequest", message)
                if container and container not in containers + init:
                    raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
            node = spec.get("nodeName")
            if not node:
                if sub == "log":  # LogLocation: no host, no location: an empty log
                    return aiohttp.web.Response(status=200, body=b"", content_type="text/plain")
                raise ApiError(400, "BadRequest", f"pod {name} does not have a host assigned")
            if (None, node) not in self._store[("", "nodes")]:
                raise ApiError(404, "NotFound", f'nodes "{node}" not found', {"name": node, "kind": "nodes"})
        else:
            node = name
        what = "logs" if sub == "log" else sub
        raise ApiError(500, "", f"error dialing backend: dial tcp: node {node} runs no kubelet to serve {what} "
                       "(the heterojob API emulator simulates pods; no containers run)")
