"""What moving a checkpointed job to another region costs, and whether a move pays. Pure.

Step of the pipeline: consulted by the planner's move paths in `engine.queue.relocation`: `plan_move` (a
voluntary move: only destinations whose cost the move is expected to repay) and `plan_relocation` (an
involuntary one: the cheapest transfer among the destinations that fit). Time, sizes and links are
arguments; nothing here reads a clock or the API.

The model (docs/multicluster.md, "What a move costs", with a worked example):
- the checkpoint's size: what the SDK reported with its acks (`status.checkpoint.last.sizeBytes`), else
  the job's `spec.checkpoint.sizeHint`, else an upper bound: the job's devices x their memory (the
  AcceleratorClass `memoryGiB`, `DEFAULT_MEMORY_GIB` when the class does not say);
- transfer = size / the link's bandwidth + its latency, over the Region `links` between the two regions
  (declared on either Region; the origin's own declaration first); no link: the move is refused (`NoLink`)
  unless the operator names a default link (`TransferSettings.default_link`); within a region nothing crosses;
- save and restore: the last checkpoint's measured save time (`status.checkpoint.last.saveSeconds`),
  else size / `TransferSettings.storage_gbps`; restoring is assumed to take as long as saving;
- what a voluntary move saves: the share of the job's remaining time its symptom costs (`slowdown`), the
  remaining time expected to be as long again as the job has run, at least `TransferSettings.horizon_prior_s`
  (the rule `engine.queue.completion.Residual` applies without history). A move across regions is made only
  when it saves more than save + transfer + restore; a move within the region is not weighed (nothing
  crosses a link, and one-cluster behaviour stays as it was). A manual move is the user's call: not
  weighed, but still refused without a link.
- a job with no acked checkpoint (`Move.checkpointed` false) has nothing to carry once its checkpoint
  phase is over: an involuntary re-placement then restarts from scratch anywhere at no transfer cost and
  needs no link. A voluntary move to another region weighed before the job's first ack cannot count on
  the checkpoint it is about to ask for: if none comes, the job restarts from scratch and loses its run
  since it was placed (`lost_s`), so that must be less than the saving too (`LostWorkExceedsSaving`), as
  well as the transfer if it comes. Within the region nothing is weighed, as above.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from heterojob.engine.capacity import migration

GIB = 1 << 30
DEFAULT_MEMORY_GIB = 80.0  # a device's memory when its class does not declare it (an H100's)


class SizeSource(StrEnum):
    REPORTED = "reported"  # summed from every rank's ack
    HINT = "hint"  # spec.checkpoint.sizeHint
    ESTIMATE = "estimate"  # devices x device memory: an upper bound
    NONE = "none"  # no checkpoint was acked: nothing to carry, the job restarts from scratch


@dataclass(frozen=True)
class Size:
    bytes: int
    source: SizeSource

    def describe(self) -> str:
        if self.source == SizeSource.NONE:
            return "no checkpoint"
        said = {SizeSource.REPORTED: "reported by the SDK", SizeSource.HINT: "spec.checkpoint.sizeHint",
                SizeSource.ESTIMATE: "estimated: devices x device memory"}[self.source]
        return f"{self.bytes / GIB:.1f} GiB ({said})"


def checkpoint_size(reported: int | None, hint: int | None, devices: int, memory_gib: float | None,
                    default_memory_gib: float = DEFAULT_MEMORY_GIB) -> Size:
    """The size the planner assumes for a job's checkpoint: reported, else hinted, else estimated."""
    if reported is not None and reported >= 0:
        return Size(int(reported), SizeSource.REPORTED)
    if hint is not None and hint >= 0:
        return Size(int(hint), SizeSource.HINT)
    per_device = memory_gib if memory_gib and memory_gib > 0 else default_memory_gib
    return Size(int(max(devices, 1) * per_device * GIB), SizeSource.ESTIMATE)


@dataclass(frozen=True)
class Link:
    """The network between two regions, as a Region's `links` entry declares it."""

    bandwidth_gbps: float
    latency_ms: float
    assumed: bool = False  # the operator's default link, not one a Region declares

    def seconds(self, size_bytes: int) -> float:
        return size_bytes * 8 / (self.bandwidth_gbps * 1e9) + self.latency_ms / 1000


class HasLinks(Protocol):
    """What is read of a Region: its declared links, by the other region's name (`engine.capacity.fleet.RegionInfo`)."""

    @property
    def links(self) -> Mapping[str, Link]: ...


@dataclass(frozen=True)
class TransferSettings:
    default_link: Link | None = None  # for region pairs no Region links; None: such moves are refused
    storage_gbps: float = 8.0  # save/restore throughput when no save time was measured (1 GB/s)
    horizon_prior_s: float = 3600.0  # a job is expected to run at least this much longer
    default_memory_gib: float = DEFAULT_MEMORY_GIB


def link_between(regions: Mapping[str, HasLinks], a: str, b: str,
                 settings: TransferSettings = TransferSettings()) -> Link | None:
    """The link from `a` to `b`: declared by `a`, else by `b`, else the default (None: none)."""
    for here, there in ((a, b), (b, a)):
        info = regions.get(here)
        link = info.links.get(there) if info is not None else None
        if link is not None:
            return link
    return settings.default_link


class Reason(StrEnum):
    """Why a destination may, or may not, be moved to."""

    SAME_REGION = "SameRegion"  # nothing crosses a link: not weighed
    PAYS = "TransferPays"  # it saves more than it costs
    REQUESTED = "MoveRequested"  # a manual move: the user's call
    INVOLUNTARY = "Involuntary"  # the job must leave: made whatever it costs (the cheapest first)
    NO_LINK = "NoLink"  # no Region declares a link between the two regions, and no default is set
    NOT_WORTH = "TransferExceedsSaving"  # it costs more than it is expected to save
    LOST_WORK = "LostWorkExceedsSaving"  # no checkpoint yet: restarting from scratch would lose more than it saves


OK = (Reason.SAME_REGION, Reason.PAYS, Reason.REQUESTED, Reason.INVOLUNTARY)


@dataclass(frozen=True)
class Cost:
    size: Size
    link: Link | None  # None: within the region
    transfer_s: float
    save_s: float
    restore_s: float

    @property
    def total_s(self) -> float:
        return self.save_s + self.transfer_s + self.restore_s

    def describe(self) -> str:
        if self.size.source == SizeSource.NONE:
            return "no checkpoint to carry: it restarts from scratch, nothing is transferred"
        if self.link is None:
            return f"no transfer (same region); save {self.save_s:.0f}s + restore {self.restore_s:.0f}s"
        over = (f"{self.link.bandwidth_gbps:g} Gbit/s, {self.link.latency_ms:g} ms"
                + (" (the default link)" if self.link.assumed else ""))
        return (f"{self.size.describe()} over {over}: transfer {self.transfer_s:.0f}s + save {self.save_s:.0f}s "
                f"+ restore {self.restore_s:.0f}s = {self.total_s:.0f}s")


def cost(size: Size, link: Link | None, save_s: float | None, settings: TransferSettings = TransferSettings()) -> Cost:
    """Save + transfer + restore for a checkpoint of `size` over `link` (None: within the region)."""
    save = save_s if save_s is not None and save_s >= 0 else size.bytes * 8 / (settings.storage_gbps * 1e9)
    return Cost(size, link, link.seconds(size.bytes) if link is not None else 0.0, save, save)


@dataclass(frozen=True)
class Move:
    """What is known of one job's move, for weighing its destinations."""

    origin: str  # the region it leaves
    size: Size
    save_s: float | None = None  # its last checkpoint's measured save time
    saves_s: float | None = None  # what the move is expected to save (None: not weighed, e.g. manual)
    voluntary: bool = True
    settings: TransferSettings = field(default_factory=TransferSettings)
    checkpointed: bool = True  # a checkpoint was acked (False: a restart from scratch if none comes)
    lost_s: float = 0.0  # the work a restart from scratch loses: the run since the job was last placed

    @property
    def from_scratch(self) -> bool:
        """Nothing will be carried: no checkpoint was acked and none will be asked (an involuntary move)."""
        return not self.checkpointed and not self.voluntary


NOTHING = Size(0, SizeSource.NONE)


@dataclass(frozen=True)
class TransferVerdict:
    region: str
    reason: Reason
    cost: Cost | None
    message: str

    @property
    def ok(self) -> bool:
        return self.reason in OK


def judge(move: Move, region: str, regions: Mapping[str, HasLinks]) -> TransferVerdict:
    """Whether `move` may go to `region`, and what it costs."""
    if move.from_scratch:
        return TransferVerdict(region, Reason.INVOLUNTARY, cost(NOTHING, None, 0.0, move.settings),
                               f"{region}: no checkpoint to carry, it restarts from scratch")
    if region == move.origin:
        return TransferVerdict(region, Reason.SAME_REGION, cost(move.size, None, move.save_s, move.settings),
                               f"{region}: same region, nothing to transfer")
    if not move.checkpointed and move.saves_s is not None and move.lost_s >= move.saves_s:
        return TransferVerdict(region, Reason.LOST_WORK, None,
                               f"{region}: no checkpoint acked yet: if none comes, restarting from scratch loses "
                               f"~{move.lost_s:.0f}s of work, more than the ~{move.saves_s:.0f}s the move would save")
    link = link_between(regions, move.origin, region, move.settings)
    if link is None:
        return TransferVerdict(region, Reason.NO_LINK, None,
                               f"{region}: no link from {move.origin} (no Region lists one; no default link is set)")
    c = cost(move.size, link, move.save_s, move.settings)
    if not move.voluntary:
        return TransferVerdict(region, Reason.INVOLUNTARY, c, f"{region}: {c.describe()}")
    if move.saves_s is None:
        return TransferVerdict(region, Reason.REQUESTED, c, f"{region}: {c.describe()}")
    if c.total_s >= move.saves_s:
        return TransferVerdict(region, Reason.NOT_WORTH, c,
                               f"{region}: {c.describe()}, more than the ~{move.saves_s:.0f}s the move would save")
    return TransferVerdict(region, Reason.PAYS, c,
                           f"{region}: {c.describe()}, less than the ~{move.saves_s:.0f}s it saves")


def tiers(move: Move, candidates: Iterable[str], regions: Mapping[str, HasLinks]) -> list[tuple[str, ...]]:
    """`candidates` grouped by what moving there costs, cheapest first (the origin, then by transfer time);
    regions with no link come last, together."""
    by_cost: dict[float, list[str]] = {}
    for r in sorted(set(candidates)):
        v = judge(move, r, regions)
        key = math.inf if v.cost is None else round(v.cost.transfer_s, 3)
        by_cost.setdefault(key, []).append(r)
    return [tuple(by_cost[k]) for k in sorted(by_cost)]


def horizon(ran_s: float, settings: TransferSettings = TransferSettings()) -> float:
    """A job's expected remaining time: as long again as it has run, at least `horizon_prior_s`."""
    return max(ran_s, settings.horizon_prior_s)


def saving(horizon_s: float, slowdown: float) -> float:
    """Seconds a move saves when the symptom it leaves costs `slowdown` (0..1) of the job's pace."""
    return horizon_s * min(max(slowdown, 0.0), 1.0)


def slowdown(trigger: str, straggler_ratio: float) -> float | None:
    """The share of the job's pace its symptom costs, or None when the move is not weighed.

    A straggler runs below `straggler_ratio` of its peers (the job's spec.policy.stragglerRatio), and a
    gang goes at its slowest rank's pace: the move saves at least 1 - ratio of the time left. An overheating
    device (throttled clocks) or a device an alert warns about is assumed to cost as much: the job's own
    threshold for a rank slow enough to matter. A manual move is the user's call (None)."""
    if trigger in (migration.STRAGGLER, migration.OVERHEAT, migration.ALERT):
        return 1.0 - straggler_ratio
    return None
