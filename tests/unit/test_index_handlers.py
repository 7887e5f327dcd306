"""Kopf's indexes are fed on the event loop: a plain function would be run in Kopf's thread pool, one thread hop
per indexed object per watch event (the pods' two indexes see every pod event of the cluster)."""

from __future__ import annotations

import asyncio

from heterojob.handlers import OperatorConfig, make_registry


def test_every_index_is_a_coroutine() -> None:
    handlers = list(make_registry(OperatorConfig())._indexing.get_all_handlers())
    assert {h.id for h in handlers} >= {"hj_nodes", "hj_job_pods", "hj_foreign_pods", "hj_running"}
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
