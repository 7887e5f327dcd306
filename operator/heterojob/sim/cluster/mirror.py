"""What a simulated component (the stand-in kubelet) last saw of one resource, caught up on demand.

The first `sync` lists the resource; each later one asks the emulator for the watch events since the last
resourceVersion seen, with `timeoutSeconds=0` (the emulator then answers the events it holds and ends the
stream at once), and applies them; when that history is gone (410 Expired) it lists again. After `sync` the
mirror holds exactly what a list would answer, in the same order (a created object goes last, an updated one
keeps its place), for the cost of what changed instead of every object: a list of 20,000 pods every half
second is what kept the emulated cluster from reaching a fleet's scale.

A real kube-apiserver holds a watch with `timeoutSeconds=0` open (until its own limit, minutes), so against one the
catch-up by hand would block: `watch()` makes the mirror keep up by a watch on a thread of its own instead
(`informer.DictInformer`), and `sync` then answers what that watch has delivered, in the same order."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from heterojob.sim.cluster.informer import DictInformer

Key = tuple[str | None, str]


def _key(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return meta.get("namespace"), meta.get("name", "")


class Mirror:
    def __init__(self, list_call: Callable[..., Any]) -> None:
        """`list_call`: a kubernetes client list method (e.g. `CoreV1Api.list_pod_for_all_namespaces`)."""
        self._list = list_call
        self.objects: dict[Key, dict[str, Any]] = {}
        self._rv: str | None = None
        self.relists = 0  # full listings (the first, and one per expired history)
        self._informer: DictInformer | None = None

    def watch(self, name: str) -> Mirror:
        """Keep up by a watch on a thread of its own from now on (see the module's docstring); `stop` ends it."""
        if self._informer is None:
            self._informer = DictInformer(self._list, name).start()
        return self

    def stop(self) -> None:
        if self._informer is not None:
            self._informer.stop()
            self._informer.drain()

    def sync(self) -> list[dict[str, Any]]:
        """Catch up and return every object, in the API server's order."""
        if self._informer is not None:
            self._informer.drain()  # what changed is not kept: the store is what is asked for
            return self._informer.items()
        if self._rv is None or not self._catch_up():
            self._relist()
        return list(self.objects.values())

    def _relist(self) -> None:
        listed = json.loads(self._list(_preload_content=False).data)
        self.objects = {_key(o): o for o in listed.get("items") or []}
        self._rv = (listed.get("metadata") or {}).get("resourceVersion")
        self.relists += 1

    def _catch_up(self) -> bool:
        """Apply the events since the last resourceVersion; False when they cannot be had (then list)."""
        answer = self._list(watch=True, resource_version=self._rv, timeout_seconds=0, _preload_content=False)
        events = []
        for line in answer.data.splitlines():
            if not line.strip():
                continue
            event = json.loads(line)
            if event.get("type") == "ERROR":
                return False  # 410 Expired: the history no longer reaches back to our version
            events.append(event)
        for event in events:
            obj = event.get("object") or {}
            key = _key(obj)
            if event.get("type") == "DELETED":
                self.objects.pop(key, None)
            else:
                self.objects[key] = obj
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv:
                self._rv = rv
        return True
