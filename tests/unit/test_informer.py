"""kube/informer.py: a paged list, then a watch from the list's resourceVersion; synced only once the whole first
listing is in the store; a 410 Gone lists again and deletes what is gone; a broken watch resumes where it was."""

from __future__ import annotations

import asyncio
import json
import queue
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client import ApiException

from heterojob.kube.informer import Informer


def obj(name: str, rv: int, value: Any = None, namespace: str = "ns") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": str(rv)},
            "spec": {"value": name if value is None else value}}


def view(body: dict[str, Any]) -> Any:
    value = body["spec"]["value"]
    return None if value == "skip" else value


class Answer:
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = json.dumps(data).encode()


CLOSED = threading.Event()  # set at each test's end: every fake watch ends


def take(q: queue.Queue[Any]) -> Any:
    while not CLOSED.is_set():
        try:
            return q.get(timeout=0.02)
        except queue.Empty:
            continue
    return None


class Stream:
    """A watch answer: each line as the test hands it in; None ends the watch; an exception breaks it."""

    def __init__(self) -> None:
        self.lines: queue.Queue[Any] = queue.Queue()

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        while True:
            item = take(self.lines)
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield json.dumps(item).encode() + b"\n"

    def release_conn(self) -> None:
        pass


class Server:
    """A fake list call: `pages` answer the lists (one list of pages per listing), `watches` the watches."""

    def __init__(self, listings: list[list[tuple[list[dict[str, Any]], str]]]) -> None:
        self.listings = listings
        self.list_calls: list[dict[str, Any]] = []
        self.watch_calls: list[dict[str, Any]] = []
        self.watches: queue.Queue[Any] = queue.Queue()
        self.gate: dict[int, threading.Event] = {}  # list call number -> wait for it before answering
        self._listing = -1

    def __call__(self, **kwargs: Any) -> Any:
        if kwargs.get("watch"):
            self.watch_calls.append(kwargs)
            answer = take(self.watches) or Stream()
            if isinstance(answer, BaseException):
                raise answer
            return answer
        n = len(self.list_calls)
        self.list_calls.append(kwargs)
        if n in self.gate:
            while not self.gate[n].wait(0.02) and not CLOSED.is_set():
                pass
        if not kwargs.get("_continue"):
            self._listing += 1
        pages = self.listings[min(self._listing, len(self.listings) - 1)]
        index = int(kwargs.get("_continue") or 0)
        items, rv = pages[index]
        meta: dict[str, Any] = {"resourceVersion": rv}
        if index + 1 < len(pages):
            meta["continue"] = str(index + 1)
        return Answer({"metadata": meta, "items": items})


@pytest.fixture(autouse=True)
def closed() -> Iterator[None]:
    CLOSED.clear()
    yield
    CLOSED.set()


async def stop(informer: Informer[Any, Any]) -> None:
    CLOSED.set()
    await informer.stop()
    assert informer._thread is not None and not informer._thread.is_alive()


async def until(check: Any, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def changes_log() -> tuple[list[tuple[Any, ...]], Any]:
    seen: list[tuple[Any, ...]] = []
    return seen, lambda event, key, old, new: seen.append((event, key[1], old, new))


def test_synced_only_once_every_page_is_in_the_store_and_the_watch_continues_from_the_first_page() -> None:
    async def main() -> None:
        server = Server([[([obj("a", 5), obj("b", 5)], "10"), ([obj("c", 5)], "11"), ([obj("d", 5)], "12")]])
        server.gate[2] = threading.Event()  # the third page hangs
        seen, on_change = changes_log()
        informer = Informer("things", server, view, on_change, page_size=2).start()
        try:
            await until(lambda: len(server.list_calls) == 3)
            await asyncio.sleep(0.1)
            assert not informer.synced.is_set() and informer.store == {}  # a partial listing is never shown
            server.gate[2].set()
            await asyncio.wait_for(informer.synced.wait(), 5)
            assert informer.store == {("ns", n): n for n in "abcd"}
            assert [c["limit"] for c in server.list_calls] == [2, 2, 2]
            assert [c.get("_continue") for c in server.list_calls] == [None, "1", "2"]
            assert sorted(s[1] for s in seen) == list("abcd") and {s[0] for s in seen} == {None}
            server.watches.put(Stream())
            await until(lambda: server.watch_calls)
            assert server.watch_calls[0]["resource_version"] == "10"
            assert server.watch_calls[0]["allow_watch_bookmarks"] is True
        finally:
            await stop(informer)

    asyncio.run(main())


def test_watch_events_apply_in_order_and_deletes_go() -> None:
    async def main() -> None:
        server = Server([[([obj("a", 1), obj("b", 1)], "3")]])
        seen, on_change = changes_log()
        informer = Informer("things", server, view, on_change).start()
        stream = Stream()
        server.watches.put(stream)
        try:
            await asyncio.wait_for(informer.synced.wait(), 5)
            seen.clear()
            for line in ({"type": "MODIFIED", "object": obj("a", 4, "a2")},
                         {"type": "MODIFIED", "object": obj("c", 5)},  # never ADDED: kept all the same
                         {"type": "DELETED", "object": obj("b", 6)},
                         {"type": "DELETED", "object": obj("zz", 7, "skip")},  # never kept: nothing to say
                         {"type": "ADDED", "object": obj("d", 8)},
                         {"type": "MODIFIED", "object": obj("d", 9, "skip")},  # its view is gone: so is it
                         {"type": "MODIFIED", "object": obj("c", 10)},  # the same view: nothing changed
                         {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}}):
                stream.lines.put(line)
            await until(lambda: informer.resource_version == "12")
            await asyncio.sleep(0.05)
            assert informer.store == {("ns", "a"): "a2", ("ns", "c"): "c"}
            assert seen == [("MODIFIED", "a", "a", "a2"), ("MODIFIED", "c", None, "c"), ("DELETED", "b", "b", "b"),
                            ("ADDED", "d", None, "d"), ("MODIFIED", "d", "d", None)]
        finally:
            await stop(informer)

    asyncio.run(main())


@pytest.mark.parametrize("how", ["error event", "refused watch"])
def test_a_410_gone_lists_again_and_what_went_meanwhile_is_deleted(how: str) -> None:
    async def main() -> None:
        server = Server([[([obj("a", 1), obj("b", 1), obj("c", 1)], "3")],
                         [([obj("a", 1), obj("c", 20, "c2"), obj("e", 21)], "30")]])
        seen, on_change = changes_log()
        informer = Informer("things", server, view, on_change).start()
        first = Stream()
        server.watches.put(first)
        try:
            await asyncio.wait_for(informer.synced.wait(), 5)
            seen.clear()
            if how == "error event":
                first.lines.put({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                                             "message": "too old resource version: 3 (15)"}})
            else:
                first.lines.put(None)  # the watch ends; the next one is refused outright
                server.watches.put(ApiException(status=410, reason="Gone"))
            server.watches.put(Stream())
            await until(lambda: informer.lists == 2)
            assert informer.store == {("ns", "a"): "a", ("ns", "c"): "c2", ("ns", "e"): "e"}
            assert sorted(seen, key=repr) == sorted([("DELETED", "b", "b", None), (None, "c", "c", "c2"),
                                                     (None, "e", None, "e")], key=repr)  # "a" did not change
            await until(lambda: len(server.watch_calls) == (2 if how == "error event" else 3))
            assert server.watch_calls[-1]["resource_version"] == "30"
        finally:
            await stop(informer)

    asyncio.run(main())


def test_a_broken_watch_resumes_from_the_last_version_without_listing_again() -> None:
    async def main() -> None:
        server = Server([[([obj("a", 1)], "3")]])
        informer = Informer("things", server, view, retry_s=0.05).start()
        first = Stream()
        server.watches.put(first)
        try:
            await asyncio.wait_for(informer.synced.wait(), 5)
            first.lines.put({"type": "ADDED", "object": obj("b", 7)})
            first.lines.put(ConnectionResetError("peer went away"))
            second = Stream()
            server.watches.put(second)
            await until(lambda: len(server.watch_calls) == 2)
            assert server.watch_calls[1]["resource_version"] == "7"
            assert len(server.list_calls) == 1 and informer.lists == 1
            assert informer.store == {("ns", "a"): "a", ("ns", "b"): "b"}
            second.lines.put(None)
        finally:
            await stop(informer)

    asyncio.run(main())


def test_a_continue_token_that_expired_starts_the_list_over() -> None:
    async def main() -> None:
        server = Server([[([obj("a", 1)], "3"), ([obj("b", 1)], "3")], [([obj("a", 1), obj("b", 4)], "5")]])
        calls = {"n": 0}
        real = server.__call__

        def flaky(**kwargs: Any) -> Any:
            if kwargs.get("_continue") and calls["n"] == 0:
                calls["n"] += 1
                raise ApiException(status=410, reason="Expired")
            return real(**kwargs)

        informer = Informer("things", flaky, view, page_size=1).start()
        server.watches.put(Stream())
        try:
            await asyncio.wait_for(informer.synced.wait(), 5)
            assert informer.store == {("ns", "a"): "a", ("ns", "b"): "b"} and informer.lists == 1
            await until(lambda: server.watch_calls)
            assert server.watch_calls[0]["resource_version"] == "5"  # the listing that completed
        finally:
            await stop(informer)

    asyncio.run(main())


def test_relist_lists_again_at_once_and_a_failure_is_kept_until_a_list_succeeds() -> None:
    """A member back from a partition is listed afresh (`relist`), not after its stalled watch times out; the last
    refusal stays readable (`failure`) until a list answers; every list page carries the request timeout."""
    async def main() -> None:
        server = Server([[([obj("a", 1), obj("b", 1)], "3")], [([obj("a", 1)], "9")]])
        refusals = [ApiException(status=403, reason="Forbidden")]
        real = server.__call__

        def guarded(**kwargs: Any) -> Any:
            if not kwargs.get("watch") and refusals:
                raise refusals.pop()
            return real(**kwargs)

        seen, on_change = changes_log()
        informer = Informer("things", guarded, view, on_change, retry_s=0.2, request_timeout_s=2.5).start()
        first = Stream()
        server.watches.put(first)
        try:
            await until(lambda: isinstance(informer.failure, ApiException))
            assert informer.failure.status == 403 and not informer.synced.is_set()  # type: ignore[union-attr]
            await asyncio.wait_for(informer.synced.wait(), 5)
            assert informer.failure is None and informer.lists == 1
            await until(lambda: server.watch_calls)
            seen.clear()
            informer.relist()
            first.lines.put({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "4"}}})  # wakes the read
            server.watches.put(Stream())
            await until(lambda: informer.lists == 2)
            assert informer.store == {("ns", "a"): "a"} and seen == [("DELETED", "b", "b", None)]
            assert len(server.list_calls) == 2 and all(c["_request_timeout"] == 2.5 for c in server.list_calls)
            await until(lambda: len(server.watch_calls) == 2)
            assert server.watch_calls[-1]["resource_version"] == "9"
        finally:
            await stop(informer)

    asyncio.run(main())


def test_every_object_is_told_whole_in_the_servers_order_listed_ones_too() -> None:
    """`on_body`: every object a listing (event None, page by page) and a watch event brings, whole and in the
    order the server sent them, whatever its view (a HeteroJob's events reach the controller this way); the store
    keeps only views."""
    async def main() -> None:
        server = Server([[([obj("a", 1), obj("b", 1, "skip")], "3"), ([obj("c", 2)], "3")]])
        told: list[tuple[Any, ...]] = []
        informer = Informer("things", server, view, page_size=2,
                            on_body=lambda event, key, body: told.append((event, key[1], body))).start()
        stream = Stream()
        server.watches.put(stream)
        try:
            await asyncio.wait_for(informer.synced.wait(), 5)
            assert [(e, k) for e, k, _ in told] == [(None, "a"), (None, "b"), (None, "c")]
            assert told[1][2] == obj("b", 1, "skip")  # whole, though its view is not kept
            told.clear()
            lines = [{"type": "ADDED", "object": obj("d", 4)}, {"type": "MODIFIED", "object": obj("d", 5, "skip")},
                     {"type": "MODIFIED", "object": obj("a", 6)},  # the same view: told all the same
                     {"type": "DELETED", "object": obj("c", 7)},
                     {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "8"}}}]
            for line in lines:
                stream.lines.put(line)
            await until(lambda: informer.resource_version == "8")
            await asyncio.sleep(0.05)
            assert told == [(line["type"], line["object"]["metadata"]["name"], line["object"]) for line in lines[:4]]
            assert informer.store == {("ns", "a"): "a"}
        finally:
            await stop(informer)

    asyncio.run(main())


def test_an_object_deleted_while_no_watch_ran_is_told_deleted_when_the_next_listing_lacks_it() -> None:
    """client-go's DeletedFinalStateUnknown: after a 410 Gone the new listing has no DELETED event for an object
    that went meanwhile. The store dropped such an object's view, but `on_body`'s consumer (the controller, for
    a HeteroJob, whose view may be None) was never told: a deleted job stayed queued or held its room until a
    read from the API server found it gone. It is told DELETED with its last metadata."""
    async def main() -> None:
        server = Server([[([obj("a", 1), obj("b", 1, "skip")], "3")], [([obj("a", 1)], "30")]])
        told: list[tuple[Any, ...]] = []
        informer = Informer("things", server, view,
                            on_body=lambda event, key, body: told.append((event, key[1], body))).start()
        first = Stream()
        server.watches.put(first)
        try:
            await asyncio.wait_for(informer.synced.wait(), 5)
            told.clear()
            first.lines.put({"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                                         "message": "too old resource version: 3 (15)"}})
            server.watches.put(Stream())
            await until(lambda: informer.lists == 2)
            await asyncio.sleep(0.05)
            assert told[0][:2] == (None, "a")
            assert [(e, k) for e, k, _ in told[1:]] == [("DELETED", "b")]  # its view was None: told all the same
            assert told[1][2] == {"metadata": {k: v for k, v in obj("b", 1)["metadata"].items()
                                               if k in ("namespace", "name", "uid")}}
        finally:
            await stop(informer)

    asyncio.run(main())
