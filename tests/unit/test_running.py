"""A running job's next step (engine/execution/running.py `decide`, on plain data): the order of competing causes and
the earliest time to look again. The views from a real spec and status: state/running.py, state/symptoms.py."""

from __future__ import annotations

from typing import Any

from heterojob.api.common import parse_spec
from heterojob.api.job import HeteroJobSpec
from heterojob.api.job_status import HeteroJobStatus
from heterojob.engine.capacity import migration
from heterojob.engine.queue import completion
from heterojob.engine.queue.completion import Upgrade
from heterojob.engine.execution.lifecycle import Action
from heterojob.engine.basics.phases import Phase, Then
from heterojob.engine.disruption.preemption import Preemptor, Yield, YieldEnd
from heterojob.engine.execution.running import (
    CheckpointInProgress, Elastic, RunningRules, Running, RunningState, Step, decide,
)
from heterojob.state import running as views
from heterojob.state.symptoms import gather
from heterojob.telemetry.model import DeviceSample, Health
from heterojob.telemetry.snapshot import Availability, RegionTelemetry, Snapshot

T0 = 1_800_000_000.0
ALL = frozenset({migration.DEVICE_FAILED, migration.NODE_NOT_READY, migration.OVERHEAT, migration.STRAGGLER,
                 migration.ALERT, migration.MANUAL})
RULES = RunningRules(migration.Rules(ALL))
DEAD = migration.Symptom(migration.DEVICE_FAILED, T0, ("n1",), "GPU-1 on n1: fatal XID 79", urgent=True)
HOT = migration.Symptom(migration.OVERHEAT, T0 - 600, ("n2",), "GPU-2 on n2: 95°C")


def checkpointing(then: Then = Then.MIGRATE, by: str | None = None, urgent: bool = False, **kw: Any) -> RunningState:
    return RunningState(now=T0, phase=Phase.CHECKPOINTING, checkpoint=CheckpointInProgress(then, by, urgent, "asked"), **kw)


def test_a_fault_during_a_voluntary_checkpoint_wins_over_every_other_cause() -> None:
    job = checkpointing(symptoms=(DEAD, HOT), lifecycle=Action.CHECKPOINT_DONE)
    every = Running(cancelled="the annotation was removed", destination="n9 (not Ready)", preemptor=None)
    d = decide(job, every, RULES)
    assert d.step == Step.ESCALATE and d.symptom == DEAD and d.at == T0
    for then, by in ((Then.RESIZE, None), (Then.PREEMPT, "ns/taker")):  # a resize's, a preemption's too
        assert decide(checkpointing(then, by, symptoms=(DEAD,)), Running(), RULES).step == Step.ESCALATE


def test_a_fault_does_not_escalate_a_checkpoint_already_urgent_nor_one_the_rules_hold() -> None:
    assert decide(checkpointing(urgent=True, symptoms=(DEAD,)), Running(), RULES).step == Step.NONE
    advisory = RunningRules(migration.Rules(ALL, advisory=True))
    assert decide(checkpointing(symptoms=(DEAD,)), Running(), advisory).step == Step.NONE
    untriggered = RunningRules(migration.Rules(frozenset({migration.OVERHEAT})))
    assert decide(checkpointing(symptoms=(DEAD,)), Running(), untriggered).step == Step.NONE


def test_a_fault_outranks_a_periodic_checkpoint_as_a_move_not_an_escalation() -> None:
    job = RunningState(now=T0, phase=Phase.RUNNING, checkpoint=CheckpointInProgress(Then.CONTINUE), symptoms=(DEAD,))
    d = decide(job, Running(), RULES)
    assert d.step == Step.MIGRATE and d.symptom == DEAD


def test_a_cancelled_move_runs_on_before_a_dead_destination_or_what_the_lifecycle_says() -> None:
    job = checkpointing(lifecycle=Action.CHECKPOINT_DONE)
    d = decide(job, Running(cancelled="the heterojob.io/migrate annotation was removed", destination="n9 gone"),
               RULES)
    assert d.step == Step.CANCEL_MOVE and "annotation was removed" in d.reason


def test_a_dead_destination_holds_the_move_the_job_runs_on() -> None:
    job = checkpointing(then=Then.RESIZE, by="ns/taker", lifecycle=Action.REQUEST_CHECKPOINT)
    d = decide(job, Running(destination="its reserved destination is no longer usable: n9 (gone)"), RULES)
    assert d.step == Step.DESTINATION_GONE and "n9" in d.reason


def test_a_yield_ends_when_its_taker_is_gone_and_holds_while_it_waits_above() -> None:
    victim = checkpointing(Then.PREEMPT, by="ns/taker", priority=1, lifecycle=Action.REQUEST_CHECKPOINT)
    d = decide(victim, Running(preemptor=None), RULES)
    assert d.step == Step.YIELD_ENDS and d.yield_end == (Yield.PREEMPT, YieldEnd.PREEMPTOR_GONE)
    assert decide(victim, Running(preemptor=Preemptor(3, waiting=True)), RULES).step == Step.LIFECYCLE
    urgent = checkpointing(Then.PREEMPT, by="ns/taker", urgent=True)  # a fault's: it leaves anyway
    assert decide(urgent, Running(preemptor=None), RULES).step == Step.NONE


def test_the_lifecycle_goes_before_the_running_jobs_own_steps() -> None:
    job = RunningState(now=T0, phase=Phase.RUNNING, lifecycle=Action.RESTART, symptoms=(DEAD,))
    assert decide(job, Running(), RULES).step == Step.LIFECYCLE


def test_a_checkpoint_asked_by_annotation_goes_before_symptoms() -> None:
    job = RunningState(now=T0, phase=Phase.RUNNING, checkpoint_request="before-upgrade", symptoms=(DEAD,))
    d = decide(job, Running(), RULES)
    assert d.step == Step.CHECKPOINT and "before-upgrade" in d.reason


def test_a_symptom_held_by_the_cooldown_is_a_hold_and_one_not_ripe_says_when_to_look_again() -> None:
    moved = RunningState(now=T0, phase=Phase.RUNNING, symptoms=(HOT,), moves=(T0 - 60,))
    d = decide(moved, Running(), RULES)
    assert d.step == Step.HOLD and "cooldown" in d.reason
    assert d.verdict is not None and d.verdict.hold == migration.Hold.COOLDOWN
    assert d.at == T0 - 60 + 600  # when the cooldown lifts, not a look every second while it holds
    d = decide(RunningState(now=T0, phase=Phase.RUNNING, symptoms=(HOT,)), Running(disrupted_now=5), RULES)
    assert d.step == Step.HOLD and d.at is None  # the budget: looked at again when room frees
    young = migration.Symptom(migration.OVERHEAT, T0 - 30, ("n2",), "hot")
    d = decide(RunningState(now=T0, phase=Phase.RUNNING, symptoms=(young,)), Running(), RULES)
    assert d.step == Step.NONE and d.at == T0 - 30 + 120


def test_symptoms_keep_resize_and_upgrade_from_being_weighed() -> None:
    asked: list[str] = []
    fleet = Running(grow_to=lambda: asked.append("grow") or 8,
                    upgrade=lambda: asked.append("upgrade") or Upgrade("ns/j", "h100", 900.0))
    young = migration.Symptom(migration.STRAGGLER, T0, ("n2",), "rank 2 behind")
    decide(RunningState(now=T0, phase=Phase.RUNNING, symptoms=(young,), elastic=elastic()), fleet, RULES)
    assert asked == []


def elastic(**kw: Any) -> Elastic:
    return Elastic(**{"replicas": 2, "minimum": 1, "maximum": 8, "start": 2, "growth_limit": 8, "average": 80.0,
                      "idle_noted": False, "idle_since": None, **kw})


def test_without_symptoms_a_resize_goes_before_an_upgrade_before_the_periodic_checkpoint() -> None:
    up = Upgrade("ns/j", "h100", 900.0)
    job = RunningState(now=T0, phase=Phase.RUNNING, elastic=elastic(), interval_s=600, last_checkpoint_at=T0 - 900)
    d = decide(job, Running(grow_to=lambda: 4, upgrade=lambda: up), RULES)
    assert d.step == Step.RESIZE and d.resize is not None and d.resize.replicas == 4
    assert d.otherwise is not None
    then = d.otherwise()  # no room for the new size: the upgrade is weighed
    assert then.step == Step.UPGRADE and then.upgrade == up
    assert then.otherwise is not None and then.otherwise().step == Step.PERIODIC  # no room up there either
    assert decide(job, Running(upgrade=lambda: up), RULES).step == Step.UPGRADE
    assert decide(job, Running(), RULES).step == Step.PERIODIC


def test_a_quiet_job_is_looked_at_again_when_its_shrink_or_its_periodic_checkpoint_is_due() -> None:
    idle = elastic(average=3.0, idle_noted=True, idle_since=T0 - 100)
    job = RunningState(now=T0, phase=Phase.RUNNING, elastic=idle, interval_s=3600, last_checkpoint_at=T0 - 60)
    d = decide(job, Running(), RunningRules(migration.Rules(ALL), low_percent=10, low_for_s=1800))
    assert d.step == Step.NONE and d.at == T0 - 100 + 1800
    d = decide(job, Running(), RunningRules(migration.Rules(ALL), low_percent=10, low_for_s=7200))
    assert d.at == T0 - 60 + 3600
    d = decide(RunningState(now=T0, phase=Phase.RUNNING, elastic=elastic(average=3.0)), Running(), RULES)
    assert d.idle == (True, "average utilization 3%")  # noted first: its time starts the shrink's clock


def test_a_resize_the_cooldown_holds_is_noted_and_the_periodic_checkpoint_still_goes() -> None:
    job = RunningState(now=T0, phase=Phase.RUNNING, elastic=elastic(), moves=(T0 - 30,), interval_s=600,
                     last_checkpoint_at=T0 - 900)
    d = decide(job, Running(grow_to=lambda: 4), RULES)
    assert d.step == Step.PERIODIC and [s for s, _ in d.held] == [Step.HOLD_RESIZE]


# --- from a real spec and status, through the views --------------------------------------------------------

def spec(**policy: Any) -> HeteroJobSpec:
    return parse_spec(HeteroJobSpec, {
        "devices": [{"deviceClass": "nvidia-h100", "perReplica": 1}], "replicas": {"min": 3},
        "template": {"spec": {"containers": [{"name": "main", "image": "train"}]}},
        "policy": {"triggers": ["deviceFailed", "nodeNotReady", "overheat", "straggler"], **policy}})


STATUS = {"phase": "Running", "placement": {"region": "cn-east", "deviceClass": "nvidia-h100", "replicas": 3,
                                            "perReplica": 1, "nodes": ["n0", "n1", "n2"], "generation": 1}}


def snapshot(utilization: tuple[float, ...], temperature: tuple[float, ...]) -> Snapshot:
    devices = [DeviceSample(f"GPU-{r}", f"n{r}", "dcgm", utilization=utilization[r], temperature_c=temperature[r],
                            health=Health.HEALTHY, namespace="team-a", pod=f"train-g1-{r}") for r in range(3)]
    return Snapshot(devices={d.device_id: d for d in devices}, regions={"cn-east": RegionTelemetry(Availability.OK)},
                    by_pod={("team-a", d.pod or ""): (d,) for d in devices})


def steps(s: HeteroJobSpec, snap: Snapshot, times: tuple[float, ...]) -> list[Step]:
    """The job's step at each time, its status keeping the onsets as the operator writes them."""
    status, out = HeteroJobStatus.model_validate(STATUS), []
    for now in times:
        g = gather({"namespace": "team-a", "name": "train"}, s, status, {}, snap, None, now)
        status = status.model_copy(update={"symptoms": g.onsets})
        out.append(decide(views.view(s, status, g.symptoms, Action.NONE, now), Running(),
                          views.rules(s, budget=5, advisory=False, by_level=False)).step)
    return out


def test_a_straggler_ratio_of_0_7_moves_the_job_only_after_straggler_for_seconds_below_it() -> None:
    s = spec(stragglerRatio=0.7, stragglerForSeconds=300)
    behind = snapshot((90.0, 90.0, 55.0), (60, 60, 60))  # 55% < 0.7 x 90%
    assert steps(s, behind, (T0, T0 + 150, T0 + 299, T0 + 300)) == [Step.NONE] * 3 + [Step.MIGRATE]
    assert steps(spec(stragglerForSeconds=300), behind, (T0, T0 + 300)) == [Step.NONE, Step.NONE]  # 0.5: even


def test_overheat_celsius_80_moves_a_job_at_85_degrees_after_overheat_for_seconds() -> None:
    s = spec(overheatCelsius=80, overheatForSeconds=120)
    hot = snapshot((90.0, 90.0, 90.0), (60, 85, 60))
    assert steps(s, hot, (T0, T0 + 119, T0 + 120)) == [Step.NONE, Step.NONE, Step.MIGRATE]
    assert steps(spec(overheatForSeconds=120), hot, (T0, T0 + 120)) == [Step.NONE, Step.NONE]  # 90 °C: cool


def test_a_job_grows_only_when_the_time_it_saves_covers_the_resize_and_its_way_back() -> None:
    """`completion.growth_pays`: from 2 to 4 replicas at the worst scaling growth keeps (0.6) the job runs
    1.2x as fast, saving a sixth of its remaining time; the resize and the move back cost 2 x 120 s here."""
    def step(remaining_s: float | None, cost_s: float = 120.0) -> Step:
        job = RunningState(now=T0, phase=Phase.RUNNING, elastic=elastic(remaining_s=remaining_s, move_cost_s=cost_s))
        return decide(job, Running(grow_to=lambda: 4), RULES).step

    assert step(None) == Step.RESIZE  # nothing known of its remaining work: it grows, as before
    assert step(3 * 3600.0) == Step.RESIZE  # saves 30 min for 4 min of moves
    assert step(1200.0) == Step.NONE  # saves 200 s: less than the two moves
    assert step(3 * 3600.0, cost_s=1200.0) == Step.NONE  # moves ten times as dear
    assert completion.growth_pays(1e6, 2, 3, 0.6, 1.0) is False  # 3 x 0.6 / 2 < 1: never faster
    assert completion.growth_pays(1e6, 2, 2, 0.6, 1e9) is True  # not a growth
