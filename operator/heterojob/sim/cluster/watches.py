"""A watch's listener and the lines it is sent: the last step of every write (storage.py's `_emit`, deletion.py's
`_remove`) fans the change out to the watchers whose namespace and selectors see it, as kube-apiserver's watch cache
does (ADDED/DELETED when an object enters or leaves a selector)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from heterojob.sim.cluster.routes import ResourceKind
from heterojob.sim.cluster.selectors import Matcher


@dataclass(eq=False)
class Watcher:
    kind: ResourceKind
    namespace: str | None
    matches: Matcher
    queue: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)
    table: Callable[[dict[str, Any], bool], dict[str, Any]] | None = None  # object, with headers -> Table
    convert: Callable[[Any], Any] | None = None  # the events.k8s.io view
    headers_sent: bool = False

    def line(self, etype: str, obj: dict[str, Any], memo: dict[str, bytes] | None = None) -> bytes:
        """One watch event's line; `memo` (etype -> line of this one object) shares the encoding between the
        watchers that show the object as it is (no Table, no view)."""
        if memo is not None and self.table is None and self.convert is None:
            found = memo.get(etype)
            if found is None:
                found = memo[etype] = json.dumps({"type": etype, "object": obj}).encode() + b"\n"
            return found
        shown: Any = obj
        if self.table is not None and etype != "ERROR":
            shown = self.table(obj, not self.headers_sent)
            self.headers_sent = True
        if self.convert is not None:
            shown = self.convert(shown)
        return json.dumps({"type": etype, "object": shown}).encode() + b"\n"



def event_line(watcher: Watcher, old: dict[str, Any] | None, new: dict[str, Any],
               memo: dict[str, bytes] | None = None) -> bytes | None:
    """ADDED/MODIFIED for a create or update, or DELETED when it leaves the watcher's selector."""
    if watcher.namespace is not None and new["metadata"].get("namespace") != watcher.namespace:
        return None
    was = old is not None and watcher.matches(old)
    now = watcher.matches(new)
    if not (was or now):
        return None
    etype = "MODIFIED" if was and now else "ADDED" if now else "DELETED"
    return watcher.line(etype, new, memo)


def deleted_line(watcher: Watcher, old: dict[str, Any], rv: int, memo: dict[str, bytes] | None = None
                 ) -> bytes | None:
    if watcher.namespace is not None and old["metadata"].get("namespace") != watcher.namespace:
        return None
    if not watcher.matches(old):
        return None
    final = {**old, "metadata": {**old["metadata"], "resourceVersion": str(rv)}}
    return watcher.line("DELETED", final, memo)
