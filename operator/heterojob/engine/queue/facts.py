"""What the operator knows of one job, as the queue policy reads it: its attained service, relative speed per class
(measured, or estimated), work done and turns. Built by `state.knowledge` and the replay's knowledge."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from heterojob.engine.basics import queueing


@dataclass(frozen=True)
class Facts:
    """What the operator knows of one job."""

    service: queueing.Service = queueing.Service()  # attained service before its current run; last wait
    rel: Mapping[str, float] = field(default_factory=dict)  # relative speed per class (1.0: its fastest)
    work_s: float = 0.0  # reference seconds trained before its current run
    measured: frozenset[str] = frozenset()  # classes where `rel` is its own measurement, not the sheet's
    turns: int = 0  # times it was preempted (status.scheduling.preemptions): `QueueSettings.max_turns`
    # classes whose speed the fleet's estimate is sure of (`engine.queue.estimates.SURE`): trusted like a
    # measurement (not probed); the others, when `measured` is not empty, are explored
    sure: frozenset[str] = frozenset()
