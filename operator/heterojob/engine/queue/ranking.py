"""What `engine.queue.policy.prepare` can carry from one pass to the next without changing what it decides. Pure.

Step of the pipeline: none of its own; `prepare` (and `admission.plan_with_policy`) take a `Memo` that the
caller keeps between passes (the trace replay keeps one per replay; the operator may keep one per
process). Everything in it is a cache keyed by the identity of immutable inputs (a node, a holder, a
request) and by the values the result depends on, so a pass with a memo returns exactly what a pass
without one returns; a memo only saves rebuilding equal objects:
- a node's device class (`Fleet.class_of`), per node object and the classes' definitions; the last fleet's
  free and total devices per class, per its nodes, devices used and classes (compared by value);
- a running job's `Holder` at its effective priority, per holder object and priority;
- a waiting job's `Request` at its effective priority, chosen classes and the priority it preempts with
  (and the jobs it may preempt besides), per request object, classes and those;
- what `prepare` reads of a waiting job (its devices and speed per class, its expected remaining work),
  per request object, `Facts` object, the fleet's classes and the completed work's version;
- a running job's effective priority, per holder object, the `Facts` object it was read from, the queue
  settings and `Knowledge.displace_by_level`, with the span of time over which it is known not to change
  (`Steady`): a holder's rank only falls as its attained service grows (or its promotion ends), and a
  waiting job's rank only rises once (when it starves), so a rank computed at both ends of a span is the
  rank everywhere inside it; the same for a waiting job's rank, per request object and `Facts` object.
  The last pass's holders, facts and ranks are kept whole: a pass with equal holders and facts recomputes
  only the ranks whose span has ended.
A `Facts` object (and its mappings) must not be changed in place once passed in (a changed fact is a new
`Facts`, as the replay and `controller.knowledge` build them).
Entries no pass has used for a while are dropped once a table holds more than `Memo.keep` entries, so a
memo stays bounded. Each entry keeps its key object alive, so an object's id cannot be reused while it is
cached.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace

from typing import TYPE_CHECKING

from heterojob.engine.disruption.holders import Holder
from heterojob.engine.capacity.fleet import DeviceClass, Fleet, Node
from heterojob.engine.placing.placement import Alternative, Request

if TYPE_CHECKING:  # `engine.queue.policy` imports this module: its types are named here only for the checker
    from heterojob.engine.queue.completion import Residual
    from heterojob.engine.queue.facts import Facts
    from heterojob.engine.basics.queueing import QueueSettings

Signature = tuple[object, ...]
RequestKey = tuple[tuple[str, ...] | None, int | None, frozenset[str]]  # classes; preempts; also_preempts
Row = tuple[str, float, float, float, float, int, bool]  # class, since, work_s, rel there, max(rel, 1e-9), kept
# what `policy.prepare` read of a waiting job: the request, its facts, the fleet's classes, the completed work
# and its version; then its expected remaining work, devices needed and relative speed per class
Read = tuple[Request, "Facts", tuple[str, ...], "Residual", int, float, dict[str, int], dict[str, float]]


@dataclass(frozen=True)
class Steady:
    """A rank known to hold from `lo` to `hi` (both checked), computed from the objects in `inputs`."""

    inputs: tuple[object, ...]  # compared by identity (a flag as True or False)
    lo: float
    hi: float
    rank: int
    ranked: Holder | None = None  # a holder's copy at `rank`
    row: Row | None = None  # what else the caller read of the same inputs (`engine.queue.policy`)


@dataclass
class Memo:
    classes: dict[int, tuple[Node, Signature, DeviceClass | None]] = field(default_factory=dict)
    holders: dict[int, tuple[Holder, int, Holder]] = field(default_factory=dict)
    requests: dict[tuple[int, RequestKey], tuple[Request, int, RequestKey, Request]] = \
        field(default_factory=dict)
    held: dict[int, Steady] = field(default_factory=dict)  # per holder: its rank while running
    waiting: dict[int, Steady] = field(default_factory=dict)  # per request: its rank while waiting
    _seen_holders: dict[int, tuple[Holder, int, Holder]] = field(default_factory=dict)
    _seen_requests: dict[tuple[int, RequestKey], tuple[Request, int, RequestKey, Request]] = \
        field(default_factory=dict)
    _seen_held: dict[int, Steady] = field(default_factory=dict)
    _seen_waiting: dict[int, Steady] = field(default_factory=dict)
    # per request: what `prepare` reads of it and its facts but the fleet's room (`engine.queue.policy`)
    reads: dict[int, Read] = field(default_factory=dict)
    _seen_reads: dict[int, Read] = field(default_factory=dict)
    # the last pass's holders and facts, as given, and what was read of them, with the span it holds over
    last_held: tuple[tuple[Holder, ...], list[Facts], QueueSettings, bool, float, float, list[Holder], list[Row],
                     list[Steady]] | None = None
    # the last fleet's nodes and devices used (copies), the classes' signature, and its free and total devices
    # per class (`policy.devices_by_class`)
    devices: tuple[dict[str, Node], dict[tuple[str, str], int], Signature, dict[str, int], dict[str, int]] | None = \
        None

    keep: int = 4096  # entries per table past which those no pass used since the last such cut are dropped

    def end_pass(self) -> None:
        """Forget, once a table holds more than `keep` entries, what no pass used since the last time (bounded
        by `keep` plus the holders and requests passes used meanwhile)."""
        if len(self.holders) > self.keep:
            self.holders, self._seen_holders = self._seen_holders, {}
        if len(self.requests) > self.keep:
            self.requests, self._seen_requests = self._seen_requests, {}
        if len(self.held) > self.keep:
            self.held, self._seen_held = self._seen_held, {}
        if len(self.waiting) > self.keep:
            self.waiting, self._seen_waiting = self._seen_waiting, {}
        if len(self.reads) > self.keep:
            self.reads, self._seen_reads = self._seen_reads, {}
        if len(self.classes) > 100_000:
            self.classes.clear()


def steady(table: dict[int, Steady], seen: dict[int, Steady], key: object, inputs: tuple[object, ...], now: float,
           rank_at: Callable[[float], int], change_at: Callable[[float], float]) -> Steady:
    """The entry of `table` for `key` that covers `now` and was computed from the same `inputs` (the first
    element is `key` itself), or a new one. `rank_at(t)` must be monotone in t; `change_at(now)` is the
    earliest time after `now` at which it may change (a guess: the span is only kept when `rank_at` gives
    the same rank at its end, so a rounding either side of the guess never stretches it past a change)."""
    known = table.get(id(key))
    if known is not None and known.lo <= now <= known.hi and _same(known.inputs, inputs):
        seen[id(key)] = known
        return known
    rank = rank_at(now)
    hi = change_at(now)  # inf: it cannot change (the caller knows why)
    if now < hi < math.inf:
        hi = max(now, hi - max(1e-3, abs(hi) * 1e-12))  # a little before the change, then checked
        if hi != now and rank_at(hi) != rank:
            hi = now
    elif hi < now:
        hi = now
    out = Steady(inputs, now, hi, rank)
    seen[id(key)] = table[id(key)] = out
    return out


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


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
    out = at_priority(h, rank)
    if memo is not None:
        memo.holders[id(h)] = memo._seen_holders[id(h)] = (h, rank, out)
    return out


_HOLDER_FIELDS = tuple(f.name for f in fields(Holder))


def at_priority(h: Holder, rank: int) -> Holder:
    """`dataclasses.replace(h, priority=rank)`, made directly (a pass makes one per running job; a `Holder` has
    no `__post_init__` and caches nothing in its `__dict__`, which its test checks)."""
    if h.priority == rank:
        return h
    out: Holder = object.__new__(Holder)
    mine, theirs = out.__dict__, h.__dict__
    for name in _HOLDER_FIELDS:
        mine[name] = theirs[name]
    mine["priority"] = rank
    return out


def ranked_request(request: Request, rank: int, classes: Sequence[str] | None, memo: Memo | None,
                   preempts: int | None = None, also: frozenset[str] = frozenset()) -> Request:
    """`request` at effective priority `rank` (preempting with `preempts` when lower, and `also` those
    jobs), its alternatives those of `classes` in that order (None: unchanged)."""
    preempts = preempts if preempts is not None and preempts < rank else None
    also = also if preempts is not None else frozenset()
    key: RequestKey = (tuple(classes) if classes is not None else None, preempts, also)
    entry = (id(request), key)
    if memo is not None:  # an entry per request object, classes (None: all, as listed) and preemption bounds
        known = memo.requests.get(entry)
        if known is not None and known[0] is request and known[1] == rank and known[2] == key:
            memo._seen_requests[entry] = known
            return known[3]
    if classes is None:
        out = replace(request, priority=rank, preempts=preempts, also_preempts=also)
    else:
        by_class: Mapping[str, Alternative] = {a.device_class: a for a in request.alternatives}
        out = replace(request, priority=rank, preempts=preempts, also_preempts=also,
                      alternatives=[by_class[c] for c in classes])
    if memo is not None:
        memo.requests[entry] = memo._seen_requests[entry] = (request, rank, key, out)
    return out
