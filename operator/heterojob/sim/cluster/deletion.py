"""Deletion and garbage collection: DELETE of one object or a collection and `pods/eviction`, as kube-apiserver and
the controller-manager do them. A pod bound to a node is deleted gracefully (Terminating until its kubelet's grace-0
DELETE); anything else goes with its last finalizer, the garbage collector acting on its own (`orphan`,
`foregroundDeletion`: cascade.py) at once; an owner gone takes its dependents (background), an object made for absent
owners is looked at a lag later (collector.py); a namespace gone takes its contents, a new one gets its `default`
ServiceAccount a lag later. `_remove` is every removal's one path: the store, the history, the watchers, then the
controllers' follow-ups. One layer of `ApiServerEmulator` (registry.py lists them)."""

from __future__ import annotations

import asyncio
import collections
import copy
import logging
from collections.abc import Mapping
from typing import Any

import attrs

from heterojob.sim.cluster import cascade, collector, evictions
from heterojob.sim.cluster.errors import ApiError
from heterojob.sim.cluster.routes import Key, ResourceKind, Route
from heterojob.sim.cluster.timestamps import iso, now, parse_stamp
from heterojob.sim.cluster.watches import deleted_line
from heterojob.sim.cluster.writes import Writes

log = logging.getLogger(__name__)

PDB_KEY = ("policy", "poddisruptionbudgets")
# the NamespaceLifecycle admission plugin's immortal namespaces (k8s.io/apiserver pkg/admission/plugin/namespace/
# lifecycle/admission.go): deleting one is 403 `namespaces "default" is forbidden: this namespace may not be deleted`
SYSTEM_NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system")
IMMORTAL_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})


def grace_of(options: Mapping[str, Any], query: Mapping[str, str]) -> int | None:
    """DeleteOptions.gracePeriodSeconds, from the body or else (`query`: a DELETE without a body) the query; a
    negative one counts as 1 s (pkg/registry/rest/delete.go, BeforeDelete)."""
    value = options.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
    if value is None:
        return None
    try:
        return 1 if int(value) < 0 else int(value)
    except (TypeError, ValueError):
        raise ApiError(400, "BadRequest", f"gracePeriodSeconds: invalid value {value!r}: must be an integer") from None


def pod_grace_period(pod: Mapping[str, Any], asked: int | None) -> int:
    """How long a pod's deletion waits for its kubelet, as kube-apiserver v1.32 decides it
    (pkg/registry/core/pod/strategy.go, CheckGracefulDelete): the DeleteOptions' gracePeriodSeconds, else the
    pod's spec.terminationGracePeriodSeconds (defaulted to 30); 0 for a pod not bound to a node or already
    Succeeded or Failed (nobody has to stop it). 0 removes it at once."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
        return 0
    if asked is not None:
        return asked
    period = spec.get("terminationGracePeriodSeconds")
    return period if isinstance(period, int) and not isinstance(period, bool) and period >= 0 else 30


@attrs.define(kw_only=True)
class Deletion(Writes):
    """Deletion, eviction and garbage collection (see the module docstring)."""

    def _delete(self, route: Route, kind: ResourceKind, preconditions: Mapping[str, Any], policy: str,
                dry_run: bool = False, grace: int | None = None) -> dict[str, Any]:
        old = self._get(route, kind)
        if kind.key == ("", "namespaces") and route.name in IMMORTAL_NAMESPACES:
            raise ApiError(403, "Forbidden",
                           f'namespaces "{route.name}" is forbidden: this namespace may not be deleted',
                           {"name": route.name, "kind": "namespaces"})
        if preconditions.get("uid") and preconditions["uid"] != old["metadata"]["uid"]:
            raise self._conflict(kind, old)
        if preconditions.get("resourceVersion") and preconditions["resourceVersion"] != old["metadata"]["resourceVersion"]:
            raise self._conflict(kind, old)
        if dry_run:
            return old
        return self._delete_object(kind, old, policy, grace)

    def _evict(self, route: Route, kind: ResourceKind, data: Any, dry_run: bool) -> tuple[dict[str, Any], int]:
        """POST pods/{name}/eviction (see evictions.py)."""
        if not isinstance(data, dict):
            raise ApiError(400, "BadRequest", "the request body must be a JSON object")
        if (data.get("metadata") or {}).get("name") != route.name:
            raise ApiError(400, "BadRequest", "name in URL does not match name in Eviction object")
        options = data.get("deleteOptions") or {}
        dry_run = dry_run or "All" in (options.get("dryRun") or [])
        pod = self._get(route, kind)
        namespace = pod["metadata"].get("namespace")
        pdbs = list(self._store[PDB_KEY].in_namespace(namespace).values())
        pods = list(self._store[("", "pods")].in_namespace(namespace).values())
        decision = evictions.decide(pod, pdbs, pods, now())
        if decision.budget_name is not None and decision.budget_status is not None and not dry_run:
            pdb_kind = self._kind(Route("policy", "v1", "poddisruptionbudgets", None, None, None))
            old_pdb = self._store[PDB_KEY].get((namespace, decision.budget_name))
            if pdb_kind is not None and old_pdb is not None:
                self._commit(pdb_kind, old_pdb, {**copy.deepcopy(old_pdb), "status": decision.budget_status},
                             "status")
        if decision.refusal is not None:
            raise decision.refusal
        if decision.failure_status is not None:
            return decision.failure_status, 500
        if not dry_run:  # addConditionAndDeletePod: the DisruptionTarget condition, then the graceful delete
            self._commit(kind, pod, {**pod, "status": evictions.with_condition(pod, now())}, "status")
        self._delete(route, kind, options.get("preconditions") or {}, options.get("propagationPolicy") or
                     "Background", dry_run, grace_of(options, {}))
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201

    def _delete_object(self, kind: ResourceKind, old: dict[str, Any], policy: str, grace: int | None = None
                       ) -> dict[str, Any]:
        key = (old["metadata"].get("namespace"), old["metadata"]["name"])
        if kind.key != ("", "pods"):
            return self._delete_finalized(kind, key, old, policy)
        # graceful deletion: a pod on a node stays, Terminating, until its kubelet has stopped it and
        # deletes it with grace 0 (a pod on an unreachable node stays until the node answers again or is
        # deleted, or someone force-deletes it: `kubectl delete --grace-period=0 --force`); a shorter
        # grace period moves the deadline (BeforeDelete: the old deletionTimestamp - the old period + the
        # new); finalizers keep it, whatever the period, until they are gone
        period = pod_grace_period(old, grace)
        meta = old["metadata"]
        current = meta.get("deletionGracePeriodSeconds")
        if period > 0 or meta.get("finalizers"):
            if current is not None and period >= current:
                return old  # already terminating, as soon or sooner
            new = copy.deepcopy(old)
            since = parse_stamp(meta.get("deletionTimestamp"), current)
            new["metadata"]["deletionTimestamp"] = now(period) if since is None else iso(since + period)
            new["metadata"]["deletionGracePeriodSeconds"] = period
            new["metadata"]["resourceVersion"] = self._next_rv()
            self._store[kind.key][key] = new
            self._emit(kind, old, new)
            return new
        if policy == cascade.ORPHAN_POLICY:
            self._orphan_dependents(old["metadata"]["uid"])
        self._remove(kind, key, old)
        return old

    def _delete_finalized(self, kind: ResourceKind, key: Key, old: dict[str, Any], policy: str) -> dict[str, Any]:
        """A DELETE of anything but a pod, as the API server and the garbage collector do it (k8s.io/apiserver
        registry/generic/registry/store.go Delete, updateForGracefulDeletionAndFinalizers; cascade.py): with
        finalizers left the object gets deletionTimestamp and stays; the garbage collector (pkg/controller/
        garbagecollector v1.32) acts on its GC finalizer at once. `orphan` (`kubectl delete --cascade=orphan`):
        the owner's references are stripped from its dependents, then the finalizer goes. `foregroundDeletion`
        (`--cascade=foreground`, processDeletingDependentsItem): the dependents are deleted, and the finalizer goes
        once no dependent with `blockOwnerDeletion: true` is left (a Terminating pod still blocks). The object goes
        with its last finalizer (another's, e.g. kopf's, keeps it)."""
        uid = old["metadata"]["uid"]
        finalizers = cascade.finalizers_on_delete(old["metadata"].get("finalizers") or [], policy)
        if not finalizers:
            self._remove(kind, key, old)
            return old
        new = copy.deepcopy(old)
        meta = new["metadata"]
        meta["finalizers"] = finalizers
        meta.setdefault("deletionTimestamp", now())
        meta.setdefault("deletionGracePeriodSeconds", 0)
        if new != old:
            meta["resourceVersion"] = self._next_rv()
            self._store[kind.key][key] = new
            self._emit(kind, old, new)
        if cascade.FOREGROUND not in finalizers:
            self._foreground.pop(uid, None)
        if cascade.ORPHAN in finalizers:
            self._orphan_dependents(uid)
            self._drop_finalizer(uid, (kind.key, key), cascade.ORPHAN)
        elif cascade.FOREGROUND in finalizers:
            self._foreground[uid] = (kind.key, key)
            for dep_kind, dep in self._dependents(uid):
                if dep["metadata"].get("deletionTimestamp") is None or dep_kind.key == ("", "pods"):
                    self._delete_object(dep_kind, dep, cascade.BACKGROUND_POLICY)
            self._release_foreground(uid)
        return self._store[kind.key].get(key, new)

    def _remove(self, kind: ResourceKind, key: Key, last: dict[str, Any]) -> None:
        previous = self._store[kind.key].pop(key, None)
        rv = int(self._next_rv())
        old = previous if previous is not None else last
        history = self._history.setdefault(kind.key, collections.deque(maxlen=self.history_limit))
        history.append((rv, old, None))
        memo: dict[str, bytes] = {}
        for watcher in self._watchers.get(kind.key, ()):
            line = deleted_line(watcher, old, rv, memo)
            if line is not None:
                watcher.queue.put_nowait(line)
        if kind.key == ("", "namespaces"):
            self._delete_namespace_contents(key[1])
        else:
            self._sync_quotas(key[0])
        self._collect_dependents(last["metadata"]["uid"])
        for ref in last["metadata"].get("ownerReferences") or []:
            if ref.get("uid") in self._foreground:
                self._release_foreground(ref["uid"])

    def _delete_collection(self, route: Route, kind: ResourceKind, query: Mapping[str, str], policy: str,
                           dry_run: bool = False, grace: int | None = None) -> dict[str, Any]:
        listed = self._list(route, kind, query)
        for obj in [] if dry_run else listed["items"]:
            self._delete_object(kind, obj, policy, grace)
        return listed

    def _delete_namespace_contents(self, namespace: str) -> None:
        for rkey, objects in list(self._store.items()):
            kind = self._kind_by_key(rkey)
            if kind is None or not kind.namespaced:
                continue
            for name, obj in list(objects.in_namespace(namespace).items()):
                if (namespace, name) in objects:
                    # a real namespace stays Terminating until its pods are gone; this one goes at once, so
                    # its pods do too (else they would outlive it, and show in a namespace made again)
                    self._delete_object(kind, obj, "Background", 0)

    def ensure_system_namespaces(self) -> None:
        """Create the namespaces kube-apiserver v1.32 keeps (pkg/controlplane/controller/systemnamespaces:
        default, kube-system, kube-public, kube-node-lease), when namespaces are served and they are missing."""
        kind = self._kind(Route("", "v1", "namespaces", None, None, None))
        if kind is None:
            return
        for name in SYSTEM_NAMESPACES:
            if (None, name) not in self._store[kind.key]:
                made = self._create(Route("", "v1", "namespaces", None, None, None), kind,
                                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
                self._default_account(name, made["metadata"]["uid"])  # the cluster's own: there from its start

    def _default_account_later(self, namespace: str, uid: str) -> None:
        """The ServiceAccount controller (pkg/controller/serviceaccount): the namespace's `default` account, made
        `account_lag_s` after the namespace (at once when not serving: a direct call, e.g. the system namespaces)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._default_account(namespace, uid)
            return
        self._accounts_due = [d for d in self._accounts_due if not d.cancelled() and d.when() > loop.time()]
        self._accounts_due.append(loop.call_later(max(0.0, self.account_lag_s), self._default_account, namespace, uid))

    def _default_account(self, namespace: str, uid: str) -> None:
        ns = self._store[("", "namespaces")].get((None, namespace))
        kind = self._kind(Route("", "v1", "serviceaccounts", None, None, None))
        if kind is None or ns is None or ns["metadata"].get("uid") != uid or ns["metadata"].get("deletionTimestamp"):
            return  # gone (or another of the name), or being deleted: nothing is made in it
        if (namespace, "default") in self._store[kind.key]:
            return
        self._create(Route("", "v1", "serviceaccounts", namespace, None, None), kind,
                     {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default",
                                                                                   "namespace": namespace}})

    def _orphan_dependents(self, owner_uid: str) -> None:
        """garbagecollector orphanDependents: each dependent loses its references to the owner, and stays."""
        for dep_kind, dep in self._dependents(owner_uid):
            new = copy.deepcopy(dep)
            kept = [r for r in dep["metadata"].get("ownerReferences") or [] if r.get("uid") != owner_uid]
            if kept:
                new["metadata"]["ownerReferences"] = kept
            else:
                new["metadata"].pop("ownerReferences", None)
            self._commit(dep_kind, dep, new, None)

    def _dependents(self, owner_uid: str, blocking: bool = False) -> list[tuple[ResourceKind, dict[str, Any]]]:
        found = []
        for rkey, obj in self._store.dependents(owner_uid):
            refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") == owner_uid]
            if refs and (not blocking or any(r.get("blockOwnerDeletion") for r in refs)):
                dep_kind = self._kind_by_key(rkey)
                if dep_kind is not None:
                    found.append((dep_kind, obj))
        return found

    def _release_foreground(self, owner_uid: str) -> None:
        """Drop an owner's `foregroundDeletion` finalizer once no blocking dependent is left."""
        where = self._foreground.get(owner_uid)
        if where is None or self._dependents(owner_uid, blocking=True):
            return
        del self._foreground[owner_uid]
        self._drop_finalizer(owner_uid, where, cascade.FOREGROUND)

    def _drop_finalizer(self, owner_uid: str, where: tuple[tuple[str, str], Key], finalizer: str) -> None:
        """The garbage collector removing its finalizer from an owner (which goes if it was the last)."""
        owner = self._store[where[0]].get(where[1])
        kind = self._kind_by_key(where[0])
        if owner is None or kind is None or owner["metadata"]["uid"] != owner_uid:
            return
        new = copy.deepcopy(owner)
        kept = [f for f in new["metadata"].get("finalizers") or [] if f != finalizer]
        if kept:
            new["metadata"]["finalizers"] = kept
        else:
            new["metadata"].pop("finalizers", None)
        self._commit(kind, owner, new, None)

    def _collect_dependents(self, owner_uid: str) -> None:
        """The garbage collector's answer to an owner gone (pkg/controller/garbagecollector v1.32): a dependent
        left with no live owner is deleted (background); one with another live owner stays, without its
        references to the owner gone (an orphaned one has lost them already: _orphan_dependents)."""
        for rkey, obj in list(self._store.dependents(owner_uid)):
            objects = self._store[rkey]
            okey = (obj["metadata"].get("namespace"), obj["metadata"]["name"])
            refs = obj["metadata"].get("ownerReferences") or []
            kind = self._kind_by_key(rkey)
            if kind is None:
                continue
            if objects.get(okey) is not obj:  # changed or gone since (an earlier dependent's collection)
                obj = objects.get(okey)
                if obj is None or not any(r.get("uid") == owner_uid
                                          for r in obj["metadata"].get("ownerReferences") or []):
                    continue
                refs = obj["metadata"].get("ownerReferences") or []
            remaining = [r for r in refs if r.get("uid") != owner_uid and self._store.holds_uid(str(r.get("uid")))]
            if remaining:
                new = copy.deepcopy(obj)
                new["metadata"]["ownerReferences"] = remaining
                self._commit(kind, obj, new, None)
            else:
                self._delete_object(kind, obj, "Background")

    def _owner_state(self, ref: Mapping[str, Any], namespace: str | None) -> str:
        return collector.owner_state(ref, namespace, self._store.by_uid, self._foreground.__contains__)

    def _check_owners(self, kind: ResourceKind, obj: dict[str, Any]) -> None:
        """The graph builder seeing an object's ownerReferences (collector.py): one naming an owner that is absent
        (by uid) or deleting its dependents first is looked at by the collector `gc_lag_s` later."""
        meta = obj["metadata"]
        refs = meta.get("ownerReferences") or []
        if all(self._owner_state(r, meta.get("namespace")) == collector.SOLID for r in refs):
            return
        uid, where = meta["uid"], (kind.key, (meta.get("namespace"), meta["name"]))
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not serving (a direct call): the collector looks now
            self._attempt_collection(*where, uid)
            return
        earlier = self._gc_due.pop(uid, None)
        if earlier is not None:
            earlier.cancel()
        self._gc_due[uid] = loop.call_later(max(0.0, self.gc_lag_s), self._attempt_collection, *where, uid)

    def _attempt_collection(self, rkey: tuple[str, str], key: Key, uid: str) -> None:
        """attemptToDeleteItem on an object the collector was told of: its owners verified again by uid; the
        references to absent owners dropped while a live owner is left, else the object deleted."""
        self._gc_due.pop(uid, None)
        obj = self._store[rkey].get(key)
        kind = self._kind_by_key(rkey)
        if obj is None or kind is None or obj["metadata"].get("uid") != uid:
            return  # gone, or another object of the name since
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and uid not in self._foreground:
            return  # being deleted already
        refs = meta.get("ownerReferences") or []
        verdict = collector.attempt(refs, [self._owner_state(r, meta.get("namespace")) for r in refs],
                                    meta.get("finalizers") or [], next(self._store.dependents(uid), None) is not None)
        try:
            if verdict is not None and verdict.drop:
                new = copy.deepcopy(obj)
                new["metadata"]["ownerReferences"] = [r for r in refs if str(r.get("uid")) not in verdict.drop]
                self._commit(kind, obj, new, None)
            elif verdict is not None and verdict.delete is not None:
                self._delete_object(kind, obj, verdict.delete)
        except Exception:  # a timer's callback: logged, not raised into the loop
            log.exception("the garbage collector failed on %s %s", kind.plural, key)
