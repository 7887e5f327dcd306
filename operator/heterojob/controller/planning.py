"""What admission (`controller.scheduler`) and moves (`controller.moves`) share. Wiring only; no step of the
pipeline and no decisions of its own.

Both plan against the same fleet under one lock (a move's destination is planned and reserved under the lock
placements take), with the same planner settings, device classes and transfer costs, and both act through the
same status writer, cache and checkpoint step. `Controller` builds one `Planning` and passes it to both, so
neither takes the other's parts one by one and neither depends on the other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from heterojob.controller.checkpoints import Checkpoints
from heterojob.controller.status import StatusWriter
from heterojob.engine.queue import admission as planner
from heterojob.engine.capacity import transfer
from heterojob.engine.capacity.fleet import DeviceClass, Fleet
from heterojob.kube.api import Kube
from heterojob.metrics import OperatorMetrics
from heterojob.state.cache import Cache


@dataclass(frozen=True)
class Planning:
    kube: Kube
    writer: StatusWriter
    cache: Cache
    checkpoints: Checkpoints
    metrics: OperatorMetrics
    # the fleet with every job's holdings counted as used, but those of the jobs named (a move leaves its own)
    fleet: Callable[[Iterable[str]], Fleet]
    settings: planner.AdmissionSettings
    classes: Callable[[], Mapping[str, DeviceClass]] = dict
    transfer: transfer.TransferSettings = transfer.TransferSettings()  # what a move between regions is assumed to cost
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # placements and move reservations plan under it
    # `fleet` as of now, built when called (`Cache.fleet_later`: the scheduler builds it in its cycle's thread);
    # None: `fleet`, built at once
    fleet_later: Callable[[Iterable[str]], Callable[[], Fleet]] | None = None
