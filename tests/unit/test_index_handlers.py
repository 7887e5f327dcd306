"""Kopf's indexes are fed on the event loop: a plain function would be run in Kopf's thread pool, one thread hop
per indexed object per watch event (the pods' two indexes see every pod event of the cluster)."""

from __future__ import annotations

import asyncio

from heterojob.handlers import OperatorConfig, make_registry


def test_every_index_is_a_coroutine() -> None:
    handlers = list(make_registry(OperatorConfig())._indexing.get_all_handlers())
    assert {h.id for h in handlers} >= {"hj_nodes", "hj_job_pods", "hj_foreign_pods", "hj_running"}
    assert [h.id for h in handlers if not asyncio.iscoroutinefunction(h.fn)] == []
