"""The emulator's objects of one resource, with the indexes its request flow reads (a real API server's watch
cache keeps such indexes too): by namespace, by owner uid, by uid, and for Nodes the pod CIDRs and InternalIPs
in use. Each is kept exact on every store and removal, so what a request answers is what a scan of every object
would answer; only its cost changes (O(what it concerns), not O(every object), at 10^4-10^5 objects).

Stored objects are replaced, never changed in place (the request flow copies before it writes), so indexing an
object when it is stored is enough."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

from heterojob.sim.cluster import ipam

Key = tuple[str | None, str]  # (namespace, name)
Obj = dict[str, Any]


def _owner_uids(obj: Obj) -> set[str]:
    return {str(r.get("uid")) for r in (obj.get("metadata") or {}).get("ownerReferences") or []
            if isinstance(r, dict) and r.get("uid")}


def _node_addresses(obj: Obj) -> tuple[list[str], list[str]]:
    """(pod CIDRs, InternalIPs) a Node holds, as ipam.assign_node_addresses reads them."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    cidrs = [c for c in (spec.get("podCIDRs") or [spec.get("podCIDR")]) if c]
    ips = [str(a["address"]) for a in status.get("addresses") or []
           if isinstance(a, dict) and a.get("type") == "InternalIP" and a.get("address")][:1]
    return cidrs, ips


class Bucket(dict[Key, Obj]):
    """One resource's objects by (namespace, name), in insertion order (as a plain dict), plus its indexes."""

    def __init__(self, nodes: bool = False) -> None:
        super().__init__()
        self._nodes = nodes  # index the pod CIDRs and InternalIPs of Nodes
        self._by_namespace: dict[str | None, dict[str, Obj]] = collections.defaultdict(dict)
        self._owned: dict[str, set[Key]] = collections.defaultdict(set)  # owner uid -> dependents' keys
        self.uids: dict[str, Key] = {}
        self._seq: dict[Key, int] = {}  # when each key entered (a plain dict's order: kept when replaced)
        self._next = 0
        self.cidrs: collections.Counter[str] = collections.Counter()  # Nodes: pod CIDRs in use
        self.ips = ipam.Addresses()  # Nodes: InternalIPs in use

    # -- reads --
    def in_namespace(self, namespace: str | None) -> dict[str, Obj]:
        """name -> object of one namespace (None: cluster-scoped), in the order the bucket holds them."""
        return self._by_namespace.get(namespace) or {}

    def owned_by(self, uid: str) -> list[Obj]:
        """The objects whose ownerReferences name `uid`, in the bucket's order."""
        keys = self._owned.get(uid)
        if not keys:
            return []
        return [self[k] for k in sorted(keys, key=self._seq.__getitem__)]

    # -- writes --
    def __setitem__(self, key: Key, obj: Obj) -> None:
        old = dict.get(self, key)
        if old is not None:
            self._unindex(key, old, replaced=True)
        else:
            self._seq[key] = self._next
            self._next += 1
        super().__setitem__(key, obj)
        self._index(key, obj)

    def __delitem__(self, key: Key) -> None:
        old = self[key]
        super().__delitem__(key)
        self._unindex(key, old)
        del self._seq[key]

    def pop(self, key: Key, *default: Any) -> Any:  # type: ignore[override]  # dict.pop's overloads, one body
        if key not in self:
            if default:
                return default[0]
            raise KeyError(key)
        old = super().pop(key)
        self._unindex(key, old)
        del self._seq[key]
        return old

    def clear(self) -> None:
        super().clear()
        self._by_namespace.clear()
        self._owned.clear()
        self.uids.clear()
        self._seq.clear()
        self.cidrs.clear()
        self.ips.clear()

    def popitem(self) -> tuple[Key, Obj]:
        raise NotImplementedError("Bucket.popitem would bypass its indexes")

    def setdefault(self, key: Key, default: Obj | None = None) -> Obj:  # type: ignore[override]  # typed to the bucket's objects
        if key not in self:
            self[key] = default if default is not None else {}
        return self[key]

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, obj in dict(*args, **kwargs).items():
            self[key] = obj

    def _index(self, key: Key, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        self._by_namespace[key[0]][key[1]] = obj
        for uid in _owner_uids(obj):
            self._owned[uid].add(key)
        if meta.get("uid"):
            self.uids[str(meta["uid"])] = key
        if self._nodes:
            cidrs, ips = _node_addresses(obj)
            self.cidrs.update(cidrs)
            for ip in ips:
                self.ips.add(ip)

    def _unindex(self, key: Key, obj: Obj, replaced: bool = False) -> None:
        """Drop `obj` from the indexes; `replaced`: another object takes its key at once (and its place in the
        namespace's order, as in the bucket's)."""
        meta = obj.get("metadata") or {}
        names = self._by_namespace.get(key[0])
        if names is not None and not replaced:
            names.pop(key[1], None)
            if not names:
                del self._by_namespace[key[0]]
        for uid in _owner_uids(obj):
            keys = self._owned.get(uid)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._owned[uid]
        if meta.get("uid") and self.uids.get(str(meta["uid"])) == key:
            del self.uids[str(meta["uid"])]
        if self._nodes:
            cidrs, ips = _node_addresses(obj)
            for k in cidrs:
                self.cidrs[k] -= 1
                if self.cidrs[k] <= 0:
                    del self.cidrs[k]
            for ip in ips:
                self.ips.remove(ip)


class Store(dict[tuple[str, str], Bucket]):
    """(group, plural) -> Bucket; a missing one is made empty on first access (as a defaultdict)."""

    def __missing__(self, rkey: tuple[str, str]) -> Bucket:
        bucket = self[rkey] = Bucket(nodes=rkey == ("", "nodes"))
        return bucket

    def holds_uid(self, uid: str) -> bool:
        return any(uid in bucket.uids for bucket in self.values())

    def by_uid(self, uid: str) -> Obj | None:
        """The object whose uid is `uid`, if any."""
        for bucket in self.values():
            key = bucket.uids.get(uid)
            if key is not None:
                return dict.get(bucket, key)
        return None

    def dependents(self, owner_uid: str) -> Iterator[tuple[tuple[str, str], Obj]]:
        """(resource key, object) of every object whose ownerReferences name `owner_uid`, resource by resource
        in the store's order, each resource's in its order (what a scan of every object finds, in that order)."""
        for rkey, bucket in list(self.items()):
            for obj in bucket.owned_by(owner_uid):
                yield rkey, obj
