"""A list-then-watch cache of one kind, as client-go's reflector and informer keep one: a paged LIST, then a WATCH
from that list's resourceVersion, so nothing that changed between the two is missed; `synced` is set once the first
listing is in the store (client-go's HasSynced). A 410 Gone (the watch's resourceVersion is older than the server's
history, or a continue token expired) lists again and replaces the store: what the new listing lacks is deleted, so
nothing deleted meanwhile lingers. A watch that breaks otherwise is started again from the last resourceVersion seen.

The store keeps only each object's view (`view(body)`; None: not kept), never whole bodies. The I/O and the views
run on a thread of the informer's own; the store changes, and `on_change` is called, on the event loop, in the
order the server sent the events: consumers read the store from the loop without locks. `relist()` lists again at
once (a member cluster back from a partition: its watch may have stalled on a dead connection); `failure` is the last
list or watch error, None once a list or watch succeeds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from kubernetes.client import ApiException
from kubernetes.watch.watch import iter_resp_lines

log = logging.getLogger(__name__)
V = TypeVar("V")
K = TypeVar("K", bound=Hashable)
LISTED = None  # the event type `on_change` is given for what a listing brought (Kopf says the same)
PAGE_SIZE = 500  # client-go's default page size of a reflector's list
MAX_RETRY_S = 16.0  # the longest wait before a failed list or watch is tried again


def object_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name): namespace "" for a cluster-scoped object."""
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class Expired(Exception):
    """The server no longer holds the resourceVersion (410 Gone): list again."""


# on_change(event, key, old, view): `event` ADDED/MODIFIED/DELETED from the watch, None from a listing; `old` the
# view the store held, `view` the one the event brings (for DELETED: the object's last state; None when a listing
# found the object gone, or its view is None). Called when the stored view changed, and for every DELETED of an object
# the store held or whose last view is not None.
OnChange = Callable[[str | None, K, V | None, V | None], None]
# on_body(event, key, body): every object a watch event or a listing brings, whole (ADDED/MODIFIED/DELETED, None from
# a listing), on the event loop in the server's order; the store still keeps only views. An object told before that a
# new listing lacks (deleted while no watch ran: client-go's DeletedFinalStateUnknown) is told DELETED with its last
# metadata (namespace, name, uid) as its body
OnBody = Callable[[str | None, K, dict[str, Any]], None]


class Informer(Generic[K, V]):
    def __init__(self, name: str, list_call: Callable[..., Any], view: Callable[[dict[str, Any]], V | None],
                 on_change: OnChange[K, V] | None = None, *, key: Callable[[Mapping[str, Any]], K] = object_key,  # type: ignore[assignment]  # K is (namespace, name) unless a key function says otherwise
                 list_kwargs: Mapping[str, Any] | None = None, page_size: int = PAGE_SIZE,
                 watch_timeout_s: int = 300, retry_s: float = 1.0, request_timeout_s: float | None = None,
                 quiet: Callable[[], bool] = lambda: False, on_body: OnBody[K] | None = None) -> None:
        """`list_call`: the client's list method (e.g. `CoreV1Api.list_node`, or a `functools.partial` of
        `CustomObjectsApi.list_cluster_custom_object` with group, version and plural), called with
        `_preload_content=False` and `list_kwargs` (e.g. a `label_selector`). `request_timeout_s`: each list page's
        bound and the watch's connect timeout (None: the client's, none for a list). `quiet()`: a failure is expected
        now (a member cluster known not to answer, which its condition says): logged at debug level. `on_body`: told
        every object whole as it comes (a listing's page by page, before the listing replaces the store)."""
        self.name = name
        self.list_call = list_call
        self.view = view
        self.on_change = on_change
        self.on_body = on_body
        self._told_of: dict[K, dict[str, Any]] = {}  # what on_body was told of and not told gone: its last metadata
        self.key = key
        self.list_kwargs = dict(list_kwargs or {})
        self.page_size = page_size
        self.watch_timeout_s = watch_timeout_s
        self.retry_s = retry_s
        self.request_timeout_s = request_timeout_s
        self.quiet = quiet
        self.failure: Exception | None = None  # the last list or watch error; None once one succeeds (thread side)
        self.store: dict[K, V] = {}  # read on the event loop only
        self.synced = asyncio.Event()  # the first listing is in the store
        self.lists = 0  # listings applied (the first, then one per 410 Gone or broken list)
        self.resource_version = ""  # the last one seen (thread side)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()  # ends a retry's wait: stop, or relist
        self._relist = False
        self._thread: threading.Thread | None = None
        self._response: Any = None

    # --- the event loop's side ---------------------------------------------------------------------------------

    def start(self) -> Informer[K, V]:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()
        return self

    def halt(self) -> None:
        """Stop without waiting for the thread (it ends on its own; a blocked watch read is woken)."""
        self._stop.set()
        self._interrupt()

    async def stop(self) -> None:
        self.halt()
        thread = self._thread
        if thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, thread.join, 5.0)

    def relist(self) -> None:
        """List again now (the store is replaced as on a 410 Gone), ending the watch or a retry's wait."""
        self._relist = True
        self._interrupt()

    def _interrupt(self) -> None:
        self._wake.set()
        response = self._response
        sock = getattr(getattr(response, "connection", None), "sock", None)
        if sock is not None:  # wakes the read the watch blocks in
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # already closed
                pass

    def values(self) -> Iterator[V]:
        return iter(list(self.store.values()))

    def replace(self, listed: Mapping[K, V]) -> None:
        """A complete listing: the store becomes `listed`; what it held that `listed` lacks is deleted."""
        store = self.store
        for key in [k for k in store if k not in listed]:
            self._changed("DELETED", key, store.pop(key), None)
        for key, view in listed.items():
            old = store.get(key)
            if old != view:
                store[key] = view
                self._changed(LISTED, key, old, view)
        self.lists += 1
        self.synced.set()

    def apply(self, event: str, key: K, view: V | None) -> None:
        """One watch event (ADDED, MODIFIED, DELETED) with the view of the object it carries."""
        store = self.store
        old = store.get(key)
        if event == "DELETED" or view is None:
            store.pop(key, None)
            if old is not None or (event == "DELETED" and view is not None):
                self._changed(event, key, old, view if event == "DELETED" else None)
            return
        if old != view:
            store[key] = view
            self._changed(event, key, old, view)

    def _event(self, event: str, key: K, view: V | None, body: dict[str, Any]) -> None:
        """A watch event: the store's change (`apply`), then the body to `on_body`."""
        self.apply(event, key, view)
        self._told(event, key, body)

    def _bodies(self, listed: list[tuple[K, dict[str, Any]]]) -> None:
        for key, body in listed:
            self._told(LISTED, key, body)

    def _listed(self, keys: set[K]) -> None:
        """A listing ended with `keys`: what on_body knew of and the listing lacks was deleted unseen."""
        for key in [k for k in self._told_of if k not in keys]:
            self._told("DELETED", key, {"metadata": self._told_of[key]})

    def _told(self, event: str | None, key: K, body: dict[str, Any]) -> None:
        if self.on_body is None:
            return
        if event == "DELETED":
            self._told_of.pop(key, None)
        else:
            meta = body.get("metadata") or {}
            self._told_of[key] = {k: meta[k] for k in ("namespace", "name", "uid") if k in meta}
        try:
            self.on_body(event, key, body)
        except Exception:  # noqa: BLE001 - a consumer's bug must not stop the cache: logged, the next event goes on
            log.exception("%s: handling %s of %s failed", self.name, event or "a listing", key)

    def _changed(self, event: str | None, key: K, old: V | None, view: V | None) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change(event, key, old, view)
        except Exception:  # noqa: BLE001 - a consumer's bug must not stop the cache: logged, the next event goes on
            log.exception("%s: handling %s of %s failed", self.name, event or "a listing", key)

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        """Run `fn(*args)` on the event loop, after everything posted before it."""
        loop = self._loop
        if loop is None or loop.is_closed():
            self._stop.set()
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop closed meanwhile
            self._stop.set()

    # --- the thread's side -------------------------------------------------------------------------------------

    def _run(self) -> None:
        listed = False
        delay = self.retry_s
        while not self._stop.is_set():
            try:
                if self._relist:
                    self._relist, listed = False, False
                self._wake.clear()
                if not listed:
                    items, self.resource_version = self._list()
                    self.failure = None  # before the listing is handed over: once synced, no failure is left
                    self._post(self.replace, items)
                    listed = True
                self._watch()
                delay = self.retry_s
            except Expired as exc:
                log.info("%s: %s; listing again", self.name, exc)
                listed = False
            except Exception as exc:  # noqa: BLE001 - a broken list or watch is tried again, as a reflector does
                if self._stop.is_set():
                    return
                if self._relist:  # interrupted on purpose: no wait, no warning
                    continue
                self.failure = exc
                why = f"{exc.status} {exc.reason}" if isinstance(exc, ApiException) else f"{type(exc).__name__}: {exc}"
                log.log(logging.DEBUG if self.quiet() else logging.WARNING, "%s %s failed (%s); again in %.0f s",
                        self.name, "watch" if listed else "list", why, delay)
                self._wake.wait(delay)
                delay = min(delay * 2, MAX_RETRY_S)  # backed off, as client-go's reflector is

    def _list(self) -> tuple[dict[K, V], str]:
        """Every object's view, page by page (`limit`/`continue`), and the resourceVersion of the first page (the
        snapshot the pages come from; the watch continues from it)."""
        items: dict[K, V] = {}
        listed: set[K] = set()  # every key the listing brings (to on_body: its view may be None)
        token: str | None = None
        version = ""
        while True:
            kwargs: dict[str, Any] = dict(self.list_kwargs)
            if self.page_size > 0:
                kwargs["limit"] = self.page_size
            if token:
                kwargs["_continue"] = token
            if self.request_timeout_s is not None:
                kwargs["_request_timeout"] = self.request_timeout_s
            try:
                answer = self.list_call(_preload_content=False, **kwargs)
            except ApiException as exc:
                if exc.status == 410:  # the continue token expired: the list starts over
                    raise Expired(f"list continue token expired: {exc.reason}") from None
                raise
            page = json.loads(answer.data)
            meta = page.get("metadata") or {}
            if not token:
                version = str(meta.get("resourceVersion") or "")
            bodies: list[tuple[K, dict[str, Any]]] = []
            for obj in page.get("items") or []:
                key = self.key(obj)
                view = self.view(obj)
                if view is not None:
                    items[key] = view
                if self.on_body is not None:
                    bodies.append((key, obj))
                    listed.add(key)
            if bodies:
                self._post(self._bodies, bodies)
            del page
            token = meta.get("continue") or None
            if not token or self._stop.is_set():
                if self.on_body is not None and not token:
                    self._post(self._listed, listed)
                return items, version

    def _watch(self) -> None:
        """One watch from the last resourceVersion until the server ends it; raises Expired on a 410."""
        if self._relist:
            return
        try:
            self._response = self.list_call(
                watch=True, resource_version=self.resource_version, allow_watch_bookmarks=True,
                timeout_seconds=self.watch_timeout_s, _preload_content=False,
                _request_timeout=(self.request_timeout_s or 30, self.watch_timeout_s + 30), **self.list_kwargs)
        except ApiException as exc:
            if exc.status == 410:
                raise Expired(f"resourceVersion {self.resource_version} is gone: {exc.reason}") from None
            raise
        self.failure = None
        try:
            for line in iter_resp_lines(self._response):
                if self._stop.is_set() or self._relist:
                    return
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if int(obj.get("code") or 0) == 410:
                        raise Expired(obj.get("message") or "too old resource version")
                    raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
                version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    if self.on_body is None:
                        self._post(self.apply, kind, self.key(obj), self.view(obj))
                    else:
                        self._post(self._event, kind, self.key(obj), self.view(obj), obj)
                if version:  # BOOKMARK events carry only this
                    self.resource_version = version
        finally:
            response, self._response = self._response, None
            if response is not None:
                response.release_conn()
