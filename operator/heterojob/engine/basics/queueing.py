"""Queue order within a priority level: FIFO, or a multi-level feedback queue on attained service. Pure.

Step of the pipeline: before planning (`engine.queue.admission.plan_queue` places in `Request.order`), the queue
policy says which waiting job comes first and which running job a waiting one may displace.

- `fifo`: within a priority level, oldest first; a running job is never displaced for one of its level
  (Kubernetes' and Kueue's default order).
- `mlfq` (default): Tiresias' discretized two-dimensional least-attained-service (Gu et al., NSDI'19).
  A job's attained service is devices x seconds it has trained; `thresholds_device_h` cut it into levels
  (level 0: less than the first threshold). Within a priority level, a lower level comes first, then age,
  so a new job is not stuck behind days-long ones; a waiting job of a lower level may preempt a running
  job of a higher level through its checkpoint (the planner's preemption path, with its minimum run time
  against thrashing). Starvation bound: a job that has waited `starvation_s` since it last ran (or since it
  arrived) is promoted and its attained service counts again from zero (Tiresias' promotion): while it waits
  it is ordered ahead of every job of its priority past its first level and behind those still in their first
  level (`slots`): of the jobs that come after it, only their first `thresholds_device_h[0]` device-hours go
  first (Tiresias puts it in the first queue, ordered by arrival: past the knee every waiting job is promoted in turn
  and the queue becomes FIFO, a new short job waiting behind every promoted one; on Gavel's trace slices,
  issue 43, promoted jobs behind new ones gave 0.94 (speeds learned) and 0.92 (known) of the mean JCT over 12
  slices and loads, docs/benchmarks.md). While the queue asks for fewer
  devices than the fleet has (`promoted_displacing`), the promotion also lets it displace running jobs of
  later levels, so it waits no longer than that bound plus one pass. Past that point every long job
  reaches the bound in turn, and promotions that displace any later level turn the fleet over among long
  jobs every `starvation_s` (in the replay at 3.1 jobs/h skewed: 22,000 preemptions and 1.31x Kueue's
  JCT); then a promoted job displaces, besides what its attained level may, only the running jobs expected
  to run longer than it (`engine.queue.policy`: shortest expected remaining work, from the completed jobs'
  work), so turns are taken when the work's tail is heavy (a job that has run long has long to go) and
  not when it is light (it is nearly done). A job that has run waits at least `promote_ratio` x the time it has run since
  its last promotion (Tiresias' PROMOTEKNOB: its simulator promotes a pending job once
  `last_pending_time >= executed_time x knob`), when set. Off by default: in the replay it left long jobs
  waiting far longer than the turns it saved (mean JCT 1.2-1.8x worse near the knee); past the knee,
  `promoted_displacing` is what stops the turnover. The run a promotion starts keeps level 0 for its first `starvation_s` (no job of its priority displaces it by level meanwhile):
  without that, a long or wide job would reach a later level within minutes of its promotion, be displaced
  again and wait another full bound, running minutes per day.

Jobs' durations are never known in advance: the levels use only what has happened.

The planner compares one integer priority; `effective_priority` folds (priority, level) into it so the
planner's order and its preemption rule (strictly lower priority only) enact the policy unchanged. A
promoted job past `promoted_displacing` carries its attained level's as the priority it preempts with
(`placement.Request.preempts`, from `preempt_rank`) and the jobs it may displace besides
(`Request.also_preempts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum


class QueuePolicy(StrEnum):
    FIFO = "fifo"
    MLFQ = "mlfq"


@dataclass(frozen=True)
class QueueSettings:
    policy: QueuePolicy = QueuePolicy.MLFQ
    # level boundaries in attained device-hours: 0-1 (level 0), 1-10 (level 1), 10+ (level 2)
    thresholds_device_h: Sequence[float] = field(default=(1.0, 10.0))
    starvation_s: float = 4 * 3600.0  # shortest wait (since last run or arrival) before promotion (`rank`)
    # ... and at least this multiple of the job's run time since its last promotion (Tiresias' knob; 0: the
    # fixed bound only, the default: in the replay 2 made JCT 1.2-1.8x worse near the knee, see docs/scheduling.md)
    promote_ratio: float = 0.0
    # a waiting job displaces a running one of a later level only while the devices the queue asks for are
    # under this multiple of the fleet's (`displacing`); past it the order still says who starts next.
    # Off (inf) by default: at 1.0 the replay's JCT past the knee was worse, not better (docs/scheduling.md)
    displace_below: float = float("inf")
    # a job promoted for waiting `starvation_s` is ordered first; it displaces any running job of a later
    # level only while the queue asks for fewer devices than this multiple of the fleet's
    # (`promoted_displacing`), else only those expected to run longer than it (inf: always, Tiresias' rule)
    promoted_displace_below: float = 1.0
    # turns: a running job preempted this many times is displaced again only by priority, never by its level
    # (None: no bound). Each turn costs a save, a restore and the preemptor's wait for the save; past the
    # knee, levels and promotions turned long jobs over about three times each (issue 34)
    max_turns: int | None = 2
    # past the knee (the waiting jobs ask for at least this multiple of the fleet's devices) room left idle
    # after a pass goes to the waiting jobs that declined it, by comparative advantage (`engine.queue.allocation`);
    # inf: never
    fill_above: float = 1.0

    def __post_init__(self) -> None:
        t = list(self.thresholds_device_h)
        if any(x <= 0 for x in t) or t != sorted(t):
            raise ValueError(f"thresholds_device_h must be positive and increasing, not {t}")
        if self.starvation_s <= 0:
            raise ValueError(f"starvation_s must be positive, not {self.starvation_s}")
        if self.displace_below < 0 or self.promoted_displace_below < 0 or self.fill_above < 0:
            raise ValueError(f"displace_below, promoted_displace_below and fill_above must be 0 or more, not "
                             f"{self.displace_below}, {self.promoted_displace_below}, {self.fill_above}")
        if self.promote_ratio < 0:
            raise ValueError(f"promote_ratio must be 0 or more, not {self.promote_ratio}")
        if self.max_turns is not None and self.max_turns < 0:
            raise ValueError(f"max_turns must be 0 or more (or None: no bound), not {self.max_turns}")

    def turns_left(self, turns: int) -> bool:
        """Whether a running job preempted `turns` times may still be displaced by its level."""
        return self.max_turns is None or turns < self.max_turns

    def bound_s(self, run_s: float = 0.0) -> float:
        """How long a job that has run `run_s` wall seconds since its last promotion waits before promotion."""
        return max(self.starvation_s, self.promote_ratio * max(0.0, run_s))

    @property
    def levels(self) -> int:
        return len(self.thresholds_device_h) + 1 if self.policy == QueuePolicy.MLFQ else 1

    @property
    def thresholds_s(self) -> tuple[float, ...]:
        return tuple(t * 3600 for t in self.thresholds_device_h)


def level(attained_device_s: float, settings: QueueSettings) -> int:
    """The feedback queue a job with this attained service (since its last promotion) sits in; 0 is first."""
    if settings.policy == QueuePolicy.FIFO:
        return 0
    return sum(1 for t in settings.thresholds_device_h if attained_device_s >= t * 3600)


def starved(waiting_since: float, now: float, settings: QueueSettings, run_s: float = 0.0) -> bool:
    """Whether a job waiting since `waiting_since` (its last stop, or arrival) has hit the starvation bound
    (`QueueSettings.bound_s` of its run time `run_s` since its last promotion)."""
    return settings.policy == QueuePolicy.MLFQ and now - waiting_since >= settings.bound_s(run_s)


def promotion_time(waiting_since: float, settings: QueueSettings, run_s: float = 0.0) -> float | None:
    """When a waiting job will be promoted (for a timer), or None under FIFO."""
    return waiting_since + settings.bound_s(run_s) if settings.policy == QueuePolicy.MLFQ else None


def displacing(waiting_devices: int, fleet_devices: int, settings: QueueSettings) -> bool:
    """Whether a waiting job may displace a running job of a later level of its priority now: only under MLFQ
    and while the queue asks for fewer devices than `displace_below` x the fleet's. Past that the fleet could
    be refilled from the queue alone: a displacement adds no capacity, only decides who waits, and past the
    knee every waiting job reaches the starvation bound, so displacements (each a checkpoint and a restore)
    would turn the fleet over in a round robin while the queue grows (in the replay at 3.1 jobs/h: 22,000
    preemptions and 1.34x Kueue's JCT). Preemption by priority is not affected. Off by default: switching
    displacement off past the queue's length made JCT past the knee worse in the replay (110-119 h against
    60-92 h with it, skewed 3.1 jobs/h), as levels then only order the queue and starved long jobs wait
    for rooms that free by themselves."""
    return settings.policy == QueuePolicy.MLFQ and waiting_devices < settings.displace_below * fleet_devices


def promoted_displacing(waiting_devices: int, fleet_devices: int, settings: QueueSettings) -> bool:
    """Whether a job promoted by the starvation bound may displace any running job of a later level of its
    priority now: while the queue asks for fewer devices than `promoted_displace_below` x the fleet's.
    Past that, every long job reaches the bound in turn, and such promotions turn the same devices over
    among long jobs every `starvation_s` (each turn a checkpoint and a restore); then a promoted job is
    first in line and displaces by its promoted level only jobs expected to run longer than it
    (`engine.queue.policy.prepare`)."""
    return settings.policy == QueuePolicy.MLFQ and waiting_devices < settings.promoted_displace_below * fleet_devices


def slots(settings: QueueSettings) -> int:
    """How many ranks a priority spans: under MLFQ slot 0 is the first level, slot 1 a waiting job promoted by
    the starvation bound, slot k + 1 level k >= 1; under FIFO one slot."""
    return settings.levels + 1 if settings.policy == QueuePolicy.MLFQ else 1


def effective_priority(priority: int, job_level: int, settings: QueueSettings, promoted: bool = False) -> int:
    """One integer the planner orders and preempts by: priority first, then a lower level higher; a waiting job
    `promoted` by the starvation bound between the first level and the second (`rank`)."""
    n = slots(settings)
    if n == 1:
        return priority
    lvl = min(job_level, settings.levels - 1)
    slot = 1 if promoted else 0 if lvl == 0 else lvl + 1
    return priority * n + (n - 1 - slot)


def split(effective: int, settings: QueueSettings) -> tuple[int, int]:
    """(priority, level) back from `effective_priority` (a promoted job's level is 0)."""
    n = slots(settings)
    priority, rest = divmod(effective, n)
    slot = n - 1 - rest
    return priority, max(0, slot - 1)


@dataclass(frozen=True)
class Service:
    """What the queue policy knows of one job: attained service and when it last stopped waiting."""

    attained_device_s: float = 0.0  # devices x seconds trained since the last promotion
    waiting_since: float = 0.0  # arrival, or when it last stopped running
    promoted: bool = False  # its current (or next) run began by a promotion
    run_s: float = 0.0  # wall seconds trained since the last promotion (the promotion bound grows with it)


def on_start(service: Service, now: float, settings: QueueSettings) -> Service:
    """A job starts running: a starved one's attained service counts again from zero (its promotion holds)."""
    if starved(service.waiting_since, now, settings, service.run_s):
        return Service(0.0, service.waiting_since, True, 0.0)
    return Service(service.attained_device_s, service.waiting_since, False, service.run_s)


def running_rank(priority: int, attained_device_s: float, settings: QueueSettings, ran_s: float = 0.0,
                 promoted: bool = False, turns: int = 0) -> int:
    """A running job's effective priority: its level from attained service (it is not waiting); level 0 for
    the first `starvation_s` of a run a promotion started (`ran_s`: how long this run has lasted), and for a
    job preempted `max_turns` times (`turns`: only a higher priority displaces it now)."""
    if not settings.turns_left(turns):
        return effective_priority(priority, 0, settings)
    if promoted and settings.policy == QueuePolicy.MLFQ and ran_s < settings.starvation_s:
        return effective_priority(priority, 0, settings)
    return effective_priority(priority, level(attained_device_s, settings), settings)


def preempt_rank(priority: int, service: Service, now: float, settings: QueueSettings, promoted: bool) -> int:
    """The effective priority a waiting job displaces running jobs with: `rank`, or without its promotion
    unless `promoted` (`promoted_displacing`) says promoted jobs displace now."""
    if promoted:
        return rank(priority, service, now, settings)
    return effective_priority(priority, level(service.attained_device_s, settings), settings)


def rank(priority: int, service: Service, now: float, settings: QueueSettings) -> int:
    """A waiting job's effective priority now: its level from attained service; once starved, promoted (behind the
    jobs in their first level, ahead of the rest: `slots`)."""
    if starved(service.waiting_since, now, settings, service.run_s):
        return effective_priority(priority, 0, settings, promoted=True)
    return effective_priority(priority, level(service.attained_device_s, settings), settings)
