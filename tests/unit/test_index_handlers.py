"""Kopf holds no index of the operator's: every cache comes from the operator's own informers (`kube.caches`),
since Kopf holds every handler until all indexes have their first listing, a wait that grew far faster than the
fleet (docs/architecture.md, "Start-up"); and Kopf watches nothing: the HeteroJobs' events come from the operator's
informer too (`Caches(on_job=...)`). Kopf's multiplexer took one new object per turn of the event loop, so a burst of
created jobs reached the controller at the pace of the loop's turns (docs/architecture.md, "Start-up")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from heterojob.handlers import OperatorConfig, Runtime, _hand_over, _job_news, make_registry


def test_no_kopf_index_and_no_kopf_watch() -> None:
    registry = make_registry(OperatorConfig())
    assert list(registry._indexing.get_all_handlers()) == []
    assert list(registry._watching.get_all_handlers()) == []  # job events: the informer's `on_job`


class FakeController:
    def __init__(self, news: set[str]) -> None:
        self.news = news  # the keys `seen` says are news
        self.calls: list[tuple[str, str, Any]] = []

    def seen(self, key: str, body: Mapping[str, Any]) -> bool:
        self.calls.append(("seen", key, body["metadata"]["resourceVersion"]))
        return key in self.news

    def poke(self, key: str) -> None:
        self.calls.append(("poke", key, None))

    def forget(self, key: str, uid: str | None = None) -> None:
        self.calls.append(("forget", key, uid))


def body(rv: int, uid: str = "u") -> dict[str, Any]:
    return {"metadata": {"resourceVersion": str(rv), "uid": uid}}


def test_job_events_before_the_controller_wait_for_it_the_newest_per_job_then_come_as_they_come() -> None:
    runtime = Runtime(kube=None)  # type: ignore[arg-type]  # not called here
    _job_news(runtime, None, "ns/a", body(1))  # the first listing, before the controller is built
    _job_news(runtime, "MODIFIED", "ns/a", body(2))
    _job_news(runtime, None, "ns/b", body(1))
    _job_news(runtime, "DELETED", "ns/b", body(3, "ub"))
    _job_news(runtime, None, "ns/c", body(1))
    ctl = FakeController(news={"ns/a"})
    runtime.controller = ctl  # type: ignore[assignment]
    _hand_over(runtime, ctl)  # type: ignore[arg-type]
    assert ctl.calls == [("seen", "ns/a", "2"), ("poke", "ns/a", None), ("forget", "ns/b", "ub"),
                         ("seen", "ns/c", "1")]
    ctl.calls.clear()
    _job_news(runtime, "ADDED", "ns/d", body(5))
    _job_news(runtime, "MODIFIED", "ns/c", body(6))
    _job_news(runtime, "DELETED", "ns/e", None)  # a relisting found it gone: the uid of the body known
    assert ctl.calls == [("seen", "ns/d", "5"), ("seen", "ns/c", "6"), ("forget", "ns/e", None)]


def test_no_handler_needs_a_diff_so_no_body_is_copied_to_build_one() -> None:
    """Kopf deep-copies every watched body on every event to build the state its on.create/update/field handlers
    diff against; the operator has none of them, and keeps none (`NoDiffBase`). A handler that needs a diff
    must bring a real storage back."""
    from heterojob.handlers import NoDiffBase

    registry = make_registry(OperatorConfig())
    assert list(registry._changing.get_all_handlers()) == []
    storage = NoDiffBase()
    body = {"metadata": {"name": "x", "labels": {"a": "b"}}, "spec": {"big": list(range(100))}}
    assert storage.build(body=body) == {} and storage.fetch(body=body) is None  # type: ignore[arg-type]
