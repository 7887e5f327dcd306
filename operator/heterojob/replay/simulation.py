"""What the replay's parts read of the running replay, as types: the queue sides (`fifo.Fifo`,
`scheduler.ReplayScheduler`) and the running jobs' side (`decisions.Decisions`) are handed the replay (`replay._Replay`
is a `Simulation`) and heterojob's scheduler (a `Planner`), which import them; these protocols let them name what
they read without importing those modules back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from heterojob.engine.capacity.fleet import Fleet
from heterojob.engine.disruption.holders import Holder
from heterojob.engine.placing.placement import Request
from heterojob.engine.queue import completion
from heterojob.replay.config import Config
from heterojob.replay.devices import Devices, Run
from heterojob.replay.knowledge import ReplayKnowledge
from heterojob.replay.metrics import Metrics
from heterojob.replay.traces import TraceJob


class Simulation(Protocol):
    """The running replay: its clock's events, fleet, devices, knowledge and metrics."""

    @property
    def config(self) -> Config: ...

    @property
    def policy(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    @property
    def declared(self) -> Mapping[str, float]: ...

    @property
    def base(self) -> Fleet: ...

    @property
    def devices(self) -> Devices: ...

    @property
    def known(self) -> ReplayKnowledge: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def arrived(self) -> list[TraceJob]: ...

    @property
    def freed(self) -> set[str]: ...

    def push(self, t: float, kind: str, payload: Any) -> None: ...

    def arrival(self, job: TraceJob) -> float: ...

    def shape(self, job: TraceJob) -> tuple[int, int]: ...

    def start(self, job: TraceJob, cls: str, region: str, nodes: Sequence[str], per: int, now: float,
              pause: float = 0.0) -> None: ...

    def checkpoint_and_stop(self, run: Run, now: float) -> None: ...


class Planner(Protocol):
    """heterojob's side of the replay as the running jobs' side reads it (`scheduler.ReplayScheduler` is one)."""

    @property
    def sim(self) -> Simulation: ...

    @property
    def cost(self) -> completion.MoveCost: ...

    def key(self, job: TraceJob) -> str: ...

    def request(self, job: TraceJob, replicas: int | None = None) -> Request: ...

    def top(self) -> int | None: ...

    def holder(self, r: Run) -> Holder: ...
