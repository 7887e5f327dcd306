"""A running job's next step, chosen in one place (pure: `now` is in the view, nothing here acts).

The reconcile pass reads the job, syncs the cache, builds these views (`state.running`) and calls `decide`;
the controller applies the answer (`controller.moves`, `controller.checkpoints`). Competing causes are
weighed in this order, the first that applies wins:

1. a fault (an urgent symptom the rules let act) while the job checkpoints for something that was not urgent
   (a voluntary move, a resize, a preemption): the checkpoint becomes urgent (ESCALATE), whatever follows;
2. a manual move whose request annotation was removed: called off, the job runs on (CANCEL_MOVE);
3. a voluntary move whose reserved destination can no longer be used: called off before the job gives up its
   devices (DESTINATION_GONE: make before break; its next pass plans it again, held without room);
4. a yield (a preemption's victim, a reclaim's grown job) whose taker is gone, placed or no longer above it:
   the job runs on (YIELD_ENDS);
5. the lifecycle's own step (`engine.execution.lifecycle.decide`: annotate, finish a checkpoint, restart, ...), when it
   has one (LIFECYCLE);
6. for a Running job with no checkpoint of its own pending (a periodic one gives way): a checkpoint asked by
   annotation (CHECKPOINT); its symptoms, judged by `engine.capacity.migration.judge` (MIGRATE, HOLD, or nothing until
   the first holding symptom ripens); with no symptom, an elastic job's utilization noted (NOTE_IDLE), its
   shrink or growth (RESIZE, HOLD_RESIZE); an upgrade move (UPGRADE, HOLD_UPGRADE); the periodic checkpoint
   (PERIODIC).

Every answer carries `at`, the earliest time the job must be looked at again (None: only on an event).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum

from heterojob.engine.capacity import migration
from heterojob.engine.queue.completion import Upgrade, growth_pays
from heterojob.engine.execution.lifecycle import PERIODIC, Action
from heterojob.engine.basics.phases import Phase, Then
from heterojob.engine.disruption.preemption import Preemptor, Yield, YieldEnd, yield_ends, yield_of


class Step(StrEnum):
    NONE = "none"  # nothing now (look again at `at`, when set)
    ESCALATE = "escalate"
    CANCEL_MOVE = "cancel-move"
    DESTINATION_GONE = "destination-gone"
    YIELD_ENDS = "yield-ends"
    LIFECYCLE = "lifecycle"  # the lifecycle's decision goes on
    CHECKPOINT = "checkpoint"  # asked for by annotation
    MIGRATE = "migrate"
    HOLD = "hold"  # a symptom has lasted long enough; the safety rules hold the move
    NOTE_IDLE = "note-idle"  # the LowUtilization condition changes (its time starts the shrink's clock)
    RESIZE = "resize"
    HOLD_RESIZE = "hold-resize"
    UPGRADE = "upgrade"
    HOLD_UPGRADE = "hold-upgrade"
    PERIODIC = "periodic"


@dataclass(frozen=True)
class CheckpointInProgress:
    """The checkpoint in progress."""

    then: Then
    by: str | None = None  # the job it is asked for (a preemption, a reclaim)
    urgent: bool = False  # asked with no time to save (its deadline at its request)
    reason: str = ""


@dataclass(frozen=True)
class Elastic:
    """What an elastic job's resize reads."""

    replicas: int  # now
    minimum: int
    maximum: int
    start: int  # its admitted size
    growth_limit: int  # as far as its measured scaling says growth pays (`completion.growth_limit`)
    average: float | None  # its devices' utilization, %
    idle_noted: bool  # its LowUtilization condition says True
    idle_since: float | None  # since when (that condition's time), when it says True
    remaining_s: float | None = None  # its expected remaining wall time at its size now (None: not known)
    move_cost_s: float = 0.0  # what one resize costs it (`completion.MoveCost.seconds`)
    efficiency: float = 0.6  # the worst scaling growth is held to (`completion.growth_limit`)


@dataclass(frozen=True)
class RunningState:
    """The job, as status, spec and annotations say (`state.running.view`)."""

    now: float
    phase: Phase | None
    lifecycle: Action = Action.NONE  # `engine.execution.lifecycle.decide`'s answer this pass
    checkpoint: CheckpointInProgress | None = None
    symptoms: tuple[migration.Symptom, ...] = ()
    moves: tuple[float, ...] = ()  # when its earlier migrations and resizes were (status.history)
    checkpoint_request: str = ""  # heterojob.io/checkpoint-now not yet acted on ("": none)
    priority: int = 0
    elastic: Elastic | None = None
    interval_s: float | None = None  # spec.checkpoint.intervalSeconds
    last_checkpoint_at: float | None = None  # the last completed checkpoint, else the placement's start


@dataclass(frozen=True)
class Running:
    """What the rest of the fleet says about the job."""

    disrupted_now: int = 0  # jobs holding devices while they checkpoint for a move (the budget's count)
    cancelled: str | None = None  # why its manual move is called off (the request annotation removed)
    destination: str | None = None  # why the destination reserved for its voluntary move is no longer usable
    preemptor: Preemptor | None = None  # the job it yields to, as the cache knows it (None: gone)
    grow_to: Callable[[], int | None] = lambda: None  # the most replicas that fit now (asked only if weighed)
    upgrade: Callable[[], Upgrade | None] = lambda: None  # a move up that pays (asked only if weighed)


@dataclass(frozen=True)
class RunningRules:
    migration: migration.Rules
    low_percent: float = 10.0  # spec.policy.lowUtilizationPercent
    low_for_s: float = 1800.0
    by_level: bool = False  # the queue policy displaces a job of the same priority by level (mlfq)


@dataclass(frozen=True)
class RunningDecision:
    step: Step
    reason: str = ""  # why, in words (decision log, Events, messages)
    symptom: migration.Symptom | None = None  # what moves it (ESCALATE, MIGRATE, HOLD, RESIZE, UPGRADE)
    symptoms: tuple[migration.Symptom, ...] = ()  # every symptom (a move leaves every node they name)
    resize: migration.Resize | None = None
    upgrade: Upgrade | None = None
    yield_end: tuple[Yield, YieldEnd] | None = None
    at: float | None = None  # the earliest time the job must be looked at again
    idle: tuple[bool, str] | None = None  # the LowUtilization condition to note: (idle?, in words)
    verdict: migration.MigrationVerdict | None = None  # HOLD: the rules' verdict (why, named; until when)
    # a resize or upgrade the rules hold (HOLD_RESIZE, ...)
    held: tuple[tuple[Step, migration.MigrationVerdict], ...] = ()
    # RESIZE, UPGRADE: what to do instead when no room is found for it (the next candidate, asked then)
    otherwise: Callable[[], RunningDecision] | None = None


def decide(job: RunningState, running: Running, rules: RunningRules) -> RunningDecision:
    """The job's next step (see the module's docstring for the order)."""
    now, c = job.now, job.checkpoint
    checkpointing = job.phase == Phase.CHECKPOINTING and c is not None
    if checkpointing and c is not None and c.then != PERIODIC and not c.urgent:
        urgent = tuple(s for s in job.symptoms if s.urgent)
        verdict = migration.judge(urgent, rules.migration, now, job.moves, running.disrupted_now)
        if verdict.act and verdict.symptom is not None:
            return RunningDecision(Step.ESCALATE, verdict.symptom.message, verdict.symptom, urgent, at=now)
    if checkpointing and running.cancelled is not None:
        return RunningDecision(Step.CANCEL_MOVE, running.cancelled)
    if checkpointing and running.destination is not None:
        return RunningDecision(Step.DESTINATION_GONE, running.destination)
    kind = yield_of(c.then, c.by) if c is not None else None
    if checkpointing and c is not None and kind is not None and not c.urgent:
        why = yield_ends(job.priority, running.preemptor, rules.by_level, kind)
        if why is not None:
            return RunningDecision(Step.YIELD_ENDS, why.value, yield_end=(kind, why))
    if job.lifecycle != Action.NONE:
        return RunningDecision(Step.LIFECYCLE)
    if job.phase != Phase.RUNNING or (c is not None and c.then != PERIODIC):
        return RunningDecision(Step.NONE)
    if job.checkpoint_request and c is None:
        return RunningDecision(Step.CHECKPOINT, f"checkpoint requested: {job.checkpoint_request}")
    if job.symptoms:
        verdict = migration.judge(job.symptoms, rules.migration, now, job.moves, running.disrupted_now)
        if verdict.act and verdict.symptom is not None:
            return RunningDecision(Step.MIGRATE, verdict.reason, verdict.symptom, job.symptoms)
        # look again when the next holding symptom has lasted its time, or when the cooldown or cap lifts (a
        # budget's hold lifts when room frees: the controller looks at its held jobs then)
        at = _first(_ripens_at(job.symptoms, rules.migration, now), verdict.until)
        step = Step.HOLD if verdict.symptom is not None and verdict.hold is not None else Step.NONE
        return RunningDecision(step, verdict.reason, verdict.symptom, job.symptoms, at=at, verdict=verdict)
    if c is not None:  # a periodic checkpoint goes on
        return RunningDecision(Step.NONE)
    return _quiet(job, running, rules, Step.NONE, None, (), None)


def _quiet(job: RunningState, running: Running, rules: RunningRules, after: Step, idle: tuple[bool, str] | None,
           held: tuple[tuple[Step, migration.MigrationVerdict], ...], at: float | None) -> RunningDecision:
    """No symptom: a resize, else an upgrade, else the periodic checkpoint (`after`: the candidates before it
    found no room)."""
    now, e = job.now, job.elastic
    if after == Step.NONE and e is not None and e.maximum > e.minimum:
        idle_now = e.average is not None and e.average < rules.low_percent
        if idle_now != e.idle_noted:  # noted now: the shrink's clock starts with it, weighed from the next pass
            idle = (idle_now, f"average utilization {e.average:.0f}%" if e.average is not None
                    else "no utilization data")
        else:
            since = e.idle_since if idle_now else None
            change = migration.resize(e.replicas, e.minimum, e.maximum, e.average, since, now, rules.low_percent,
                                      rules.low_for_s, running.grow_to())
            if change is not None and change.replicas > e.replicas and not growth_pays(
                    e.remaining_s, e.replicas, change.replicas, e.efficiency, e.move_cost_s):
                change = None  # growing saves less than the resize and its way back cost
            if change is None and e.replicas > max(e.growth_limit, e.start):  # grown past where it scales well
                to = max(e.growth_limit, e.start)
                change = migration.Resize(migration.GROW, to, f"measured scaling too low at {e.replicas} "
                                                              f"replicas: {e.replicas} -> {to}")
            if change is None:
                at = _first(at, since + rules.low_for_s if since is not None else None)
            else:
                symptom = migration.Symptom(change.trigger, since or now, (), change.reason)
                verdict = migration.judge([symptom], _with(rules.migration, migration.GROW), now, job.moves,
                                          running.disrupted_now)
                if verdict.act:
                    return RunningDecision(Step.RESIZE, change.reason, symptom, resize=change, idle=idle, held=held,
                                    at=at, otherwise=lambda: _quiet(job, running, rules, Step.RESIZE, idle, held,
                                                                    at))
                held = (*held, (Step.HOLD_RESIZE, verdict))
    if after in (Step.NONE, Step.RESIZE):
        up = running.upgrade()
        if up is not None:
            what = (f"probe {up.to_class} (its speed there is only the class's declared throughput; the probe "
                    f"may cost {-up.saving_s:.0f}s)" if up.probe else
                    f"move up to {up.to_class}: expected to finish {up.saving_s:.0f}s sooner, the move's cost "
                    "counted")
            symptom = migration.Symptom(migration.UPGRADE, now, (), what)
            verdict = migration.judge([symptom], _with(rules.migration, migration.UPGRADE), now, job.moves,
                                      running.disrupted_now)
            if verdict.act:
                return RunningDecision(Step.UPGRADE, what, symptom, upgrade=up, idle=idle, held=held, at=at,
                                otherwise=lambda: _quiet(job, running, rules, Step.UPGRADE, idle, held, at))
            held = (*held, (Step.HOLD_UPGRADE, verdict))
    if job.interval_s:
        since = job.last_checkpoint_at if job.last_checkpoint_at is not None else now
        if now - since >= job.interval_s:
            return RunningDecision(Step.PERIODIC, f"periodic checkpoint (every {job.interval_s:.0f}s)", idle=idle,
                            held=held, at=at)
        at = _first(at, since + job.interval_s)
    return RunningDecision(Step.NONE, idle=idle, held=held, at=at)


def _first(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def _with(rules: migration.Rules, trigger: str) -> migration.Rules:
    return replace(rules, triggers=rules.triggers | {trigger})


def _ripens_at(symptoms: tuple[migration.Symptom, ...], rules: migration.Rules, now: float) -> float | None:
    """When the next symptom still holding (overheat, straggler) will have lasted its time, or None."""
    times = [t for s in symptoms if s.trigger in migration.HOLD and s.trigger in rules.triggers
             and (t := s.since + float(getattr(rules, migration.HOLD[s.trigger]))) > now]
    return min(times, default=None)
