"""A small LIST-then-WATCH cache of one kind (client-go's reflector and store, on plain dicts), for the emulated
cluster's control-plane stand-ins: what changed since the last look, not the whole cluster every step.

`relist()` lists afresh and records the difference with what it held (what a component stepped by hand does each
step); `start()` lists once, then a thread watches from that resourceVersion (bookmarks on), relisting after a
410 Gone or a broken watch. `drain()` hands over the changes since the last drain, one per object: (what it was
at the last drain or None, what it is now or None)."""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

from kubernetes.watch.watch import iter_resp_lines

log = logging.getLogger(__name__)

Key = tuple[str, str]  # namespace ("" for cluster-scoped kinds), name
Change = tuple[dict[str, Any] | None, dict[str, Any] | None]


def key_of(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class DictInformer:
    def __init__(self, list_call: Callable[..., Any], name: str, watch_timeout_s: int = 60) -> None:
        """`list_call`: the client's list method (e.g. `CoreV1Api.list_node`), called with `_preload_content=False`."""
        self.list_call = list_call
        self.name = name
        self.watch_timeout_s = watch_timeout_s
        self._store: dict[Key, dict[str, Any]] = {}
        self._changes: dict[Key, Change] = {}
        self._lock = threading.Lock()
        self._rv = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: Any = None

    @property
    def watching(self) -> bool:
        return self._thread is not None

    def get(self, key: Key) -> dict[str, Any] | None:
        with self._lock:
            return self._store.get(key)

    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._store.values())

    def _record(self, key: Key, new: dict[str, Any] | None) -> None:
        """Store `new` (None: gone) under `key` and note the change (the lock is held)."""
        old = self._store.get(key)
        if new is None:
            self._store.pop(key, None)
        else:
            self._store[key] = new
        first = self._changes[key][0] if key in self._changes else old
        if first is None and new is None:
            self._changes.pop(key, None)  # came and went between two drains
        else:
            self._changes[key] = (first, new)

    def relist(self) -> None:
        listed = json.loads(self.list_call(_preload_content=False).data)
        items = {key_of(o): o for o in listed.get("items") or []}
        with self._lock:
            for key in [k for k in self._store if k not in items]:
                self._record(key, None)
            for key, obj in items.items():
                old = self._store.get(key)
                if old is None or (old.get("metadata") or {}).get("resourceVersion") != \
                        (obj.get("metadata") or {}).get("resourceVersion"):
                    self._record(key, obj)
            self._rv = str((listed.get("metadata") or {}).get("resourceVersion") or "")

    def drain(self) -> list[Change]:
        with self._lock:
            changes, self._changes = list(self._changes.values()), {}
        return changes

    def start(self) -> DictInformer:
        self.relist()
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        response = self._response
        sock = getattr(getattr(response, "connection", None), "sock", None)
        if sock is not None:  # wakes the read the watch blocks in (closing the response would wait for it)
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # already closed
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if not self._watch():
                    self.relist()
            except Exception as exc:  # noqa: BLE001 - a broken watch is listed again, as a reflector does
                if self._stop.is_set():
                    return
                log.debug("%s watch broke (%s): listing again", self.name, exc)
                self._stop.wait(0.5)
                try:
                    self.relist()
                except Exception as again:  # noqa: BLE001 - the server is away: try later
                    log.debug("%s list failed: %s", self.name, again)

    def _watch(self) -> bool:
        """One watch from the last resourceVersion until it ends; False when it must list again (410)."""
        self._response = self.list_call(watch=True, resource_version=self._rv, allow_watch_bookmarks=True,
                                        timeout_seconds=self.watch_timeout_s, _preload_content=False)
        try:
            for line in iter_resp_lines(self._response):
                if self._stop.is_set():
                    return True
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    return int(obj.get("code") or 0) != 410
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                with self._lock:
                    if kind in ("ADDED", "MODIFIED"):
                        self._record(key_of(obj), obj)
                    elif kind == "DELETED":
                        self._record(key_of(obj), None)
                    if rv:
                        self._rv = rv
            return True
        finally:
            response, self._response = self._response, None
            response.release_conn()
