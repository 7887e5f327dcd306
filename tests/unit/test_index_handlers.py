"""Kopf holds no index of the operator's and watches nothing: every cache comes from the operator's own informers
(`kube.caches`), since Kopf holds every handler until all indexes have their first listing, a wait that grew far
faster than the fleet (docs/architecture.md, "Start-up"); and a HeteroJob's events come from the operator's
informer of HeteroJobs too (`Caches` on_job, `handlers._job_news`): Kopf's handling of each watch event cost about
0.6 ms of CPU on the event loop, two events per admitted job, a fifth of the operator's CPU in an admission burst.
"""

from __future__ import annotations

import asyncio
from typing import Any

from heterojob.handlers import OperatorConfig, make_registry


def test_no_kopf_index_and_no_kopf_watch() -> None:
    registry = make_registry(OperatorConfig())
    assert list(registry._indexing.get_all_handlers()) == []
    handlers = list(registry._watching.get_all_handlers())
    assert [h.id for h in handlers if not asyncio.iscoroutinefunction(h.fn)] == []  # no thread hop per event
    assert handlers == []  # and no Kopf handling of any: the operator's informers bring every event


class _Controller:
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.versions: dict[str, str] = {}

    def seen(self, key: str, body: dict[str, Any]) -> bool:
        """New when its version is newer than the last seen (Known.event's rule, reduced)."""
        v = body["metadata"]["resourceVersion"]
        new = int(v) > int(self.versions.get(key, "0"))
        self.versions[key] = max(v, self.versions.get(key, "0"), key=int)
        self.calls.append(("seen", key, v))
        return new

    def poke(self, key: str) -> None:
        self.calls.append(("poke", key))

    def forget(self, key: str, uid: str | None = None) -> None:
        self.calls.append(("forget", key, str(uid)))


def _job(name: str, rv: int) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": str(rv), "uid": f"u-{name}"}}


def test_a_jobs_events_before_the_controller_runs_are_kept_and_handed_in_then() -> None:
    """Before the controller is built and started, the last body of each job is kept (the listing's, or what
    changed since); then each is handed in as an event is: a deleted job forgotten, any other seen and passed
    unless its body is the echo of a settled write."""
    from heterojob.handlers import Runtime, _hand_over, _job_news

    runtime = Runtime(kube=None)  # type: ignore[arg-type]  # no call is made
    _job_news(runtime, None, "ns/a", _job("a", 1))
    _job_news(runtime, None, "ns/b", _job("b", 2))
    _job_news(runtime, "MODIFIED", "ns/a", _job("a", 3))
    _job_news(runtime, "DELETED", "ns/b", _job("b", 4))
    assert runtime.early_jobs == {"ns/a": ("MODIFIED", _job("a", 3)), "ns/b": ("DELETED", _job("b", 4))}
    ctl = _Controller()
    runtime.controller = ctl  # type: ignore[assignment]  # what a pass is asked, only
    _job_news(runtime, "ADDED", "ns/c", _job("c", 5))  # built, not started yet: still kept
    assert ctl.calls == [] and runtime.early_jobs is not None and "ns/c" in runtime.early_jobs
    _hand_over(runtime)  # once the controller is started
    assert runtime.early_jobs is None
    assert ctl.calls == [("seen", "ns/a", "3"), ("poke", "ns/a"), ("forget", "ns/b", "u-b"),
                         ("seen", "ns/c", "5"), ("poke", "ns/c")]
    ctl.calls.clear()
    _job_news(runtime, "MODIFIED", "ns/a", _job("a", 3))  # a repeat: seen, no pass
    _job_news(runtime, "MODIFIED", "ns/a", _job("a", 6))
    assert ctl.calls == [("seen", "ns/a", "3"), ("seen", "ns/a", "6"), ("poke", "ns/a")]


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


def test_one_jobs_trouble_at_the_hand_over_does_not_keep_the_others_events() -> None:
    from heterojob.handlers import Runtime, _hand_over, _job_news

    class Failing(_Controller):
        def seen(self, key: str, body: dict[str, Any]) -> bool:
            if key == "ns/x":
                raise RuntimeError("a bug")
            return super().seen(key, body)

    runtime = Runtime(kube=None)  # type: ignore[arg-type]  # no call is made
    for name, rv in (("x", 1), ("y", 2)):
        _job_news(runtime, None, f"ns/{name}", _job(name, rv))
    ctl = Failing()
    runtime.controller = ctl  # type: ignore[assignment]  # what a pass is asked, only
    _hand_over(runtime)
    assert ctl.calls == [("seen", "ns/y", "2"), ("poke", "ns/y")] and runtime.early_jobs is None


def test_a_standby_keeps_no_tombstone_of_a_job_deleted_before_it_leads() -> None:
    """A standby's informers run for as long as it stands by (`handlers.Standby`): a job deleted meanwhile is
    dropped, not kept as a DELETED event (the controller lists every job once it leads, so it never knew it),
    and a churning cluster does not grow the standby's memory. Once it leads, a deletion is kept again: the
    controller may have listed the job already."""
    from heterojob.handlers import Runtime, _hand_over, _job_news

    runtime = Runtime(kube=None, standing_by=True)  # type: ignore[arg-type]  # no call is made
    for i in range(100):
        _job_news(runtime, None, f"ns/gone{i}", _job(f"gone{i}", i))
        _job_news(runtime, "DELETED", f"ns/gone{i}", _job(f"gone{i}", i + 1))
    _job_news(runtime, None, "ns/a", _job("a", 1))
    assert runtime.early_jobs == {"ns/a": (None, _job("a", 1))}
    runtime.standing_by = False  # it leads: startup took the runtime
    _job_news(runtime, "DELETED", "ns/a", _job("a", 2))
    ctl = _Controller()
    runtime.controller = ctl  # type: ignore[assignment]  # what a pass is asked, only
    _hand_over(runtime)
    assert ctl.calls == [("forget", "ns/a", "u-a")]
