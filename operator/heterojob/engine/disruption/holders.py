"""Who holds room now, as every planner reads it: a running job's devices (and its admitted size when it grew), a
moving job's reservation, a waiting job's own reserved room. Built by the state layer (`state.cache`) and the replay;
read by preemption, the pool, the queue policy and the admission plan."""

from __future__ import annotations

from dataclasses import dataclass

from heterojob.engine.capacity.fleet import Allocation
from heterojob.engine.placing.placement import Request


@dataclass(frozen=True)
class Holder:
    """A job that holds devices now, as the planner needs it."""

    job: str
    priority: int
    since: float  # when its current placement started (unix seconds)
    allocation: Allocation
    base: Request | None = None  # its admitted size when it grew beyond it (the rest is lent room)
    yielding_to: str | None = None  # already asked to give its room to this waiting job
    disrupted: bool = False  # checkpointing, migrating or resizing now
    reserved: Allocation | None = None  # room also held for its move (its destination)
    waiting: bool = False  # it waits in the queue: `allocation` is room reserved for itself, not devices

    @property
    def footprint(self) -> list[Allocation]:
        return [a for a in (self.allocation, self.reserved) if a is not None]
