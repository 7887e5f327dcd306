"""What `engine.policy.prepare` can carry from one pass to the next without changing what it decides. Pure.

Step of the pipeline: none of its own; `prepare` (and `admission.plan_with_policy`) take a `Memo` that the
caller keeps between passes (the trace replay keeps one per replay; the operator may keep one per
process). Everything in it is a cache keyed by the identity of immutable inputs (a node, a holder, a
request) and by the values the result depends on, so a pass with a memo returns exactly what a pass
without one returns; a memo only saves rebuilding equal objects:
- a node's device class (`Fleet.class_of`), per node object and the classes' definitions;
- a running job's `Holder` at its effective priority, per holder object and priority;
- a waiting job's `Request` at its effective priority, chosen classes and the priority it preempts with,
  per request object.
Entries of objects a pass no longer passes in are dropped at its end, so a memo holds about one pass's
objects. Each entry keeps its key object alive, so an object's id cannot be reused while it is cached.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from heterojob.engine.admission import Holder
from heterojob.engine.fleet import DeviceClass, Fleet, Node
from heterojob.engine.placement import Alternative, Request

Signature = tuple[object, ...]
RequestKey = tuple[tuple[str, ...] | None, int | None, frozenset[str]]  # classes; preempts; also_preempts


@dataclass
class Memo:
    classes: dict[int, tuple[Node, Signature, DeviceClass | None]] = field(default_factory=dict)
    holders: dict[int, tuple[Holder, int, Holder]] = field(default_factory=dict)
    requests: dict[int, tuple[Request, int, RequestKey, Request]] = field(default_factory=dict)
    _seen_holders: dict[int, tuple[Holder, int, Holder]] = field(default_factory=dict)
    _seen_requests: dict[int, tuple[Request, int, RequestKey, Request]] = field(default_factory=dict)

    def end_pass(self) -> None:
        """Forget what this pass did not use (bounded by one pass's holders and requests)."""
        self.holders, self._seen_holders = self._seen_holders, {}
        self.requests, self._seen_requests = self._seen_requests, {}
        if len(self.classes) > 100_000:
            self.classes.clear()


def signature(fleet: Fleet) -> Signature:
    """What `Fleet.class_of` reads of the classes."""
    return tuple((c.name, c.resource_name, tuple(sorted(c.node_selector.items()))) for c in fleet.classes.values())


def class_of(fleet: Fleet, node: Node, sig: Signature, memo: Memo) -> DeviceClass | None:
    known = memo.classes.get(id(node))
    if known is not None and known[0] is node and known[1] == sig:
        return known[2]
    cls = fleet.class_of(node)
    memo.classes[id(node)] = (node, sig, cls)
    return cls


def ranked_holder(h: Holder, rank: int, memo: Memo | None) -> Holder:
    """`h` at effective priority `rank`, every other field as it was (a move's reserved room and a waiting
    job's own room stay theirs: make before break holds under any queue policy)."""
    if memo is not None:
        known = memo.holders.get(id(h))
        if known is not None and known[0] is h and known[1] == rank:
            memo._seen_holders[id(h)] = known
            return known[2]
    out = replace(h, priority=rank)
    if memo is not None:
        memo._seen_holders[id(h)] = (h, rank, out)
    return out


def ranked_request(request: Request, rank: int, classes: Sequence[str] | None, memo: Memo | None,
                   preempts: int | None = None, also: frozenset[str] = frozenset()) -> Request:
    """`request` at effective priority `rank` (preempting with `preempts` when lower, and `also` those
    jobs), its alternatives those of `classes` in that order (None: unchanged)."""
    preempts = preempts if preempts is not None and preempts < rank else None
    also = also if preempts is not None else frozenset()
    key = (tuple(classes) if classes is not None else None, preempts, also)
    if memo is not None:
        known = memo.requests.get(id(request))
        if known is not None and known[0] is request and known[1] == rank and known[2] == key:
            memo._seen_requests[id(request)] = known
            return known[3]
    if classes is None:
        out = replace(request, priority=rank, preempts=preempts, also_preempts=also)
    else:
        by_class: Mapping[str, Alternative] = {a.device_class: a for a in request.alternatives}
        out = replace(request, priority=rank, preempts=preempts, also_preempts=also,
                      alternatives=[by_class[c] for c in key[0]])
    if memo is not None:
        memo._seen_requests[id(request)] = (request, rank, key, out)
    return out
