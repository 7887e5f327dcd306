"""A HeteroJob's spec parsed once per version of it: every pass of a job reads its spec, and parsing it (the
pod template's schema check above all) cost about 7% of the operator's CPU with 5,000 jobs waiting.

`job_spec` keeps, per job (uid), the spec dict it last parsed and the result (the model, or the SpecError's
problems); a job whose spec dict is equal gets the same frozen model back, an edited one replaces it. At most
`KEPT` jobs are kept, the least recently read forgotten first."""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from heterojob.api.common import FieldProblem, SpecError, parse_spec
from heterojob.api.job import HeteroJobSpec

KEPT = 50_000

_lock = threading.Lock()
_known: OrderedDict[Any, tuple[Any, HeteroJobSpec | list[FieldProblem]]] = OrderedDict()


def job_spec(job: Mapping[str, Any]) -> HeteroJobSpec:
    """`parse_spec(HeteroJobSpec, job["spec"])`, memoized per job while its spec is unchanged; raises SpecError."""
    data = job.get("spec")
    meta = job.get("metadata") or {}
    key = meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"
    with _lock:
        known = _known.get(key)
        if known is not None:
            _known.move_to_end(key)
    if known is not None and known[0] == data:
        if isinstance(known[1], HeteroJobSpec):
            return known[1]
        raise SpecError(list(known[1]))
    result: HeteroJobSpec | list[FieldProblem]
    try:
        result = parse_spec(HeteroJobSpec, data)
    except SpecError as exc:
        result = list(exc.problems)
    with _lock:
        _known[key] = (copy.deepcopy(data), result)  # the caller's dict may be changed in place later
        while len(_known) > KEPT:
            _known.popitem(last=False)
    if isinstance(result, HeteroJobSpec):
        return result
    raise SpecError(list(result))

