"""Kopf holds no index of the operator's: every cache comes from the operator's own informers (`kube.caches`),
since Kopf holds every handler until all indexes have their first listing, a wait that grew far faster than the
fleet (docs/architecture.md, "Start-up"); and what Kopf still watches is handled on the event loop (a plain
function would run in Kopf's thread pool, one thread hop per watch event)."""

from __future__ import annotations

import asyncio

from heterojob.handlers import OperatorConfig, make_registry


def test_no_kopf_index_and_every_watch_handler_is_a_coroutine() -> None:
    registry = make_registry(OperatorConfig())
    assert list(registry._indexing.get_all_handlers()) == []
    handlers = list(registry._watching.get_all_handlers())
    assert handlers
    assert [h.id for h in handlers if not asyncio.iscoroutinefunction(h.fn)] == []


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
