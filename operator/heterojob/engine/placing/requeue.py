"""When a move that found no room goes back to the queue (pure; the admission step acts on the answer).

A move (Migrating, Resizing) that fits nowhere it may go, not even by preempting, either waits in its phase with
its exclusions (and the room reserved for it) or ends and goes back to the queue as Pending, where only the
fleet's health filters (`placement.node_unfit`) keep it off nodes. So it goes back only when those filters keep it
off what was bad on every node it left anyway: an involuntary move off a failed device (the node kept off, or the
device withheld by its device plugin), an overheating node, a node a firing alert names, a NotReady, cordoned
(drained) or tainted node. A move off a node that is healthy to placement (kube-scheduler
found it `unschedulable` for requests placement does not model, a manual or voluntary move) would be placed there
again: it keeps waiting. And it goes back only once no room has held for `REQUEUE_AFTER_S` since the move began,
so a transient shortage (a reserved node NotReady for one heartbeat, one overheat sample) does not give its room
away.
"""

from __future__ import annotations

from collections.abc import Sequence

from heterojob.engine.capacity.fleet import Fleet
from heterojob.engine.placing.placement import node_unfit

REQUEUE_AFTER_S = 120.0  # seconds since the move began before a move that fits nowhere goes back to the queue


def guarded(fleet: Fleet, name: str) -> str | None:
    """What on node `name` placement's filters keep a waiting job off (the node gone, offering no device class,
    not Ready, cordoned, tainted or unhealthy; or its failed devices, kept off with the node or withheld by its
    device plugin), or None: nothing, a waiting job could be placed there as before."""
    node = fleet.nodes.get(name)
    if node is None:
        return "gone"
    cls = fleet.class_of(node)
    if cls is None:
        return "offers no device class"
    why = node_unfit(node, cls, fleet)
    if why is None and name in fleet.failed and fleet.failed[name].counted(node.holds(cls.resource_name)):
        why = f"failed device withheld ({fleet.failed[name].why})"
    return why


def requeue_at(exclude: Sequence[str], involuntary: bool, began: float | None, fleet: Fleet,
               after_s: float = REQUEUE_AFTER_S) -> float | None:
    """When a move that found no room goes back to the queue (at or after that time), or None: it keeps
    waiting with its exclusions. `exclude`: the nodes it left; `began`: when the move began (None unknown: at
    once)."""
    if not involuntary or not exclude or any(guarded(fleet, n) is None for n in exclude):
        return None
    return (began or 0.0) + after_s
