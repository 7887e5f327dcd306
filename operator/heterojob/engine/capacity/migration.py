"""Whether a running job should be disrupted now (migrated), from its symptoms and the safety rules.

Pure: symptoms carry when they began (`state.symptoms`: kept in status.symptoms, so a restart keeps the
clock); `now` is an argument. Hysteresis comes from holding times (overheat and stragglers must persist),
then per-job cooldown, a per-hour cap, a cluster-wide disruption budget, and advisory mode, in that order.
An involuntary move (`urgent`: a failed device, a NotReady node, an alert naming a dead device) is never
held by cooldown, cap or budget: the job may be dead already, and holding it only strands it there.
A held verdict names its cause (`Hold`) in words that stay the same while the hold does, with the time it
lifts by itself (cooldown, hourly cap), so the controller says it once; its countdown is for the log.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

DEVICE_FAILED = "deviceFailed"
NODE_NOT_READY = "nodeNotReady"
OVERHEAT = "overheat"
STRAGGLER = "straggler"
ALERT = "alert"
MANUAL = "manual"


@dataclass(frozen=True)
class Symptom:
    trigger: str
    since: float  # unix seconds: when it began
    nodes: tuple[str, ...]  # nodes the job should leave
    message: str
    urgent: bool = False  # the job may already be dead: restore from the last checkpoint, do not ask for one


@dataclass(frozen=True)
class Rules:
    triggers: frozenset[str]
    overheat_for_s: float = 120.0
    straggler_for_s: float = 300.0
    cooldown_s: float = 600.0
    max_per_hour: int = 3
    budget: int = 5  # cluster-wide: at most this many jobs disrupted at once
    advisory: bool = False  # decide and record, touch nothing


class Hold(StrEnum):
    """Why a ripe voluntary move waits (the MoveHeld condition's reason)."""

    COOLDOWN = "Cooldown"
    HOURLY_CAP = "MaxMigrationsPerHour"
    BUDGET = "DisruptionBudget"
    ADVISORY = "Advisory"


@dataclass(frozen=True)
class MigrationVerdict:
    act: bool
    symptom: Symptom | None
    reason: str  # why it acts, or why it does not, with live figures (a countdown): for the decision log
    hold: Hold | None = None  # a ripe move that waits: why, named
    cause: str = ""  # that hold in words that stay the same while the hold does (for Events and conditions)
    until: float | None = None  # unix seconds: when the hold lifts by itself (cooldown, hourly cap), if it does


HOLD = {OVERHEAT: "overheat_for_s", STRAGGLER: "straggler_for_s"}


def judge(symptoms: Iterable[Symptom], rules: Rules, now: float, disruptions: Sequence[float],
          disrupted_now: int) -> MigrationVerdict:
    """The most urgent symptom that has held long enough, and whether the safety rules let it act.

    `disruptions` are the times of this job's earlier migrations and resizes (from status.history);
    `disrupted_now` how many jobs hold devices while they checkpoint for a move right now (a job that has
    given its devices back and waits for room uses none of the budget).
    """
    ripe: list[Symptom] = []
    waiting: list[str] = []
    for s in symptoms:
        if s.trigger not in rules.triggers:
            continue
        hold = getattr(rules, HOLD[s.trigger]) if s.trigger in HOLD else 0.0
        if now - s.since < hold:
            waiting.append(f"{s.trigger} for {now - s.since:.0f}s of {hold:.0f}s")
            continue
        ripe.append(s)
    if not ripe:
        return MigrationVerdict(False, None, ("holding: " + "; ".join(waiting)) if waiting else "healthy")
    symptom = sorted(ripe, key=lambda s: (not s.urgent, s.since))[0]
    advisory = MigrationVerdict(False, symptom, f"advisory mode: would migrate ({symptom.message})", Hold.ADVISORY,
                                f"advisory mode: would migrate ({symptom.trigger}"
                                + (f" off {', '.join(symptom.nodes)})" if symptom.nodes else ")"))
    if symptom.urgent:
        return advisory if rules.advisory else MigrationVerdict(True, symptom, symptom.message)
    move = f"{symptom.trigger} move held"
    last = max(disruptions, default=None)
    if last is not None and now - last < rules.cooldown_s:
        return MigrationVerdict(False, symptom,
                                f"cooldown: {rules.cooldown_s - (now - last):.0f}s left after the last move",
                                Hold.COOLDOWN, f"{move}: cooldown of {rules.cooldown_s:.0f}s after the last move",
                                last + rules.cooldown_s)
    recent = sorted(t for t in disruptions if now - t < 3600)
    if len(recent) >= rules.max_per_hour:
        # it lifts when enough of the last hour's moves are more than an hour old
        lifts = recent[len(recent) - rules.max_per_hour] + 3600 if rules.max_per_hour > 0 else None
        return MigrationVerdict(False, symptom, f"{len(recent)} moves in the last hour (maxMigrationsPerHour "
                                f"{rules.max_per_hour})", Hold.HOURLY_CAP,
                                f"{move}: maxMigrationsPerHour ({rules.max_per_hour}) reached", lifts)
    if disrupted_now >= rules.budget:
        return MigrationVerdict(False, symptom,
                                f"disruption budget: {disrupted_now} of {rules.budget} jobs already moving",
                                Hold.BUDGET,
                                f"{move}: the disruption budget ({rules.budget} jobs moving at once) is used up")
    if rules.advisory:
        return advisory
    return MigrationVerdict(True, symptom, symptom.message)


LOW_UTILIZATION = "lowUtilization"
GROW = "grow"
UPGRADE = "upgrade"  # a move up to a faster class (or a probe of one), proposed by engine.queue.policy.upgrades


@dataclass(frozen=True)
class Resize:
    trigger: str  # LOW_UTILIZATION (shrink) or GROW
    replicas: int
    reason: str


def resize(current: int, minimum: int, maximum: int, average: float | None, low_since: float | None, now: float,
           low_percent: float, low_for_s: float, grow_to: int | None) -> Resize | None:
    """Whether an elastic job should shrink (utilization under `low_percent` for `low_for_s`) or grow
    (`grow_to`: the most replicas that fit now, with quota, when no job of its priority or above waits).

    Shrinking halves toward `minimum`; missing utilization never shrinks anything.
    """
    if average is not None and average < low_percent and current > minimum:
        if low_since is not None and now - low_since >= low_for_s:
            target = max(minimum, current // 2)
            return Resize(LOW_UTILIZATION, target, f"utilization {average:.0f}% < {low_percent:.0f}% for "
                                                   f"{now - low_since:.0f}s: {current} -> {target} replicas")
        return None
    if grow_to is not None and current < grow_to <= maximum and (average is None or average >= low_percent):
        return Resize(GROW, grow_to, f"room for {grow_to} replicas (max {maximum}): {current} -> {grow_to}")
    return None
