"""A running job's symptoms, judged by its own spec.policy, each onset kept in status.symptoms
(state/symptoms.py, on plain data). The operator end to end: tests/harness/test_symptom_policy.py."""

from __future__ import annotations

from typing import Any

from heterojob.api.common import parse_spec
from heterojob.api.job import HeteroJobSpec
from heterojob.api.job_status import HeteroJobStatus
from heterojob.api.times import iso
from heterojob.engine.capacity import migration
from heterojob.engine.basics.phases import Phase
from heterojob.engine.execution.running import RunningRules, Running, RunningState, decide
from heterojob.state.symptoms import changed, gather
from heterojob.telemetry.model import DeviceSample, Health
from heterojob.telemetry.snapshot import Availability, RegionTelemetry, Snapshot

T0 = 1_800_000_000.0
NODES = ("n0", "n1", "n2")


def spec(**policy: Any) -> HeteroJobSpec:
    return parse_spec(HeteroJobSpec, {
        "devices": [{"deviceClass": "nvidia-h100", "perReplica": 1}], "replicas": {"min": 3},
        "template": {"spec": {"containers": [{"name": "main", "image": "train"}]}},
        "policy": {"triggers": ["deviceFailed", "nodeNotReady", "overheat", "straggler"], **policy}})


def status(symptoms: dict[str, Any] | None = None, **extra: Any) -> HeteroJobStatus:
    return HeteroJobStatus.model_validate({
        "phase": "Running", "placement": {"region": "cn-east", "deviceClass": "nvidia-h100", "replicas": 3,
                                          "perReplica": 1, "nodes": list(NODES), "generation": 2},
        **({"symptoms": symptoms} if symptoms else {}), **extra})


def snapshot(utilization: tuple[float, ...] = (90.0, 90.0, 90.0), temperature: tuple[float, ...] = (60, 60, 60),
             health: Health = Health.HEALTHY, available: bool = True) -> Snapshot:
    devices = [DeviceSample(f"GPU-{r}", NODES[r], "dcgm", utilization=utilization[r], temperature_c=temperature[r],
                            health=health, namespace="team-a", pod=f"train-g2-{r}", region="cn-east")
               for r in range(3)]
    region = RegionTelemetry(Availability.OK if available else Availability.UNAVAILABLE,
                             "" if available else "Prometheus down")
    return Snapshot(devices={d.device_id: d for d in devices}, regions={"cn-east": region},
                    by_pod={("team-a", d.pod or ""): (d,) for d in devices})


META = {"namespace": "team-a", "name": "train"}


def rules(s: HeteroJobSpec) -> migration.Rules:
    p = s.policy
    return migration.Rules(triggers=frozenset(t.value for t in p.triggers), overheat_for_s=p.overheat_for_seconds,
                           straggler_for_s=p.straggler_for_seconds, cooldown_s=p.cooldown_seconds)


def look(s: HeteroJobSpec, st: HeteroJobStatus, snap: Snapshot | None, now: float
         ) -> tuple[migration.MigrationVerdict, HeteroJobStatus]:
    """One pass: gather, judge, and the status with the onsets written (as the operator does)."""
    g = gather(META, s, st, {}, snap, None, now)
    verdict = migration.judge(g.symptoms, rules(s), now, [], 0)
    if changed(st.symptoms, g.onsets):
        st = st.model_copy(update={"symptoms": g.onsets})
    return verdict, st


def test_a_straggler_below_the_jobs_own_ratio_moves_it_only_after_straggler_for_seconds() -> None:
    s = spec(stragglerRatio=0.7, stragglerForSeconds=300)
    behind = snapshot(utilization=(90.0, 90.0, 55.0))  # 55 < 0.7 x 90 = 63, but not below 0.5 x 90 = 45
    verdict, st = look(s, status(), behind, T0)
    assert not verdict.act and "straggler for 0s of 300s" in verdict.reason
    assert st.symptoms is not None and st.symptoms.straggler == iso(T0) and st.symptoms.generation == 2
    verdict, st = look(s, st, behind, T0 + 299)
    assert not verdict.act
    verdict, st = look(s, st, behind, T0 + 300)
    assert verdict.act and verdict.symptom is not None and verdict.symptom.trigger == migration.STRAGGLER
    assert verdict.symptom.nodes == ("n2",)


def test_the_default_ratio_does_not_see_that_straggler() -> None:
    g = gather(META, spec(), status(), {}, snapshot(utilization=(90.0, 90.0, 55.0)), None, T0)
    assert g.symptoms == [] and g.onsets is None


def test_overheat_celsius_80_moves_a_job_at_85_degrees_after_overheat_for_seconds() -> None:
    s = spec(overheatCelsius=80, overheatForSeconds=120)
    # 85 °C is under the operator's --overheat-celsius (90): the device's health is still HEALTHY
    hot = snapshot(temperature=(60, 85, 60))
    verdict, st = look(s, status(), hot, T0)
    assert not verdict.act and "overheat for 0s of 120s" in verdict.reason
    held = gather(META, s, st, {}, hot, None, T0 + 10).symptoms
    assert decide(RunningState(T0 + 10, Phase.RUNNING, symptoms=tuple(held)), Running(), RunningRules(rules(s))).at == T0 + 120
    verdict, st = look(s, st, hot, T0 + 119)
    assert not verdict.act
    verdict, st = look(s, st, hot, T0 + 120)
    assert verdict.act and verdict.symptom is not None and verdict.symptom.trigger == migration.OVERHEAT
    assert verdict.symptom.nodes == ("n1",) and "85°C >= 80°C" in verdict.symptom.message


def test_a_job_with_a_higher_threshold_is_not_moved_by_the_operators() -> None:
    """At 92 °C the operator's 90 °C calls the device degraded (nothing new goes there); a job that allows 95
    stays."""
    g = gather(META, spec(overheatCelsius=95), status(), {}, snapshot(temperature=(60, 92, 60),
                                                                      health=Health.DEGRADED), None, T0)
    assert g.symptoms == []


def test_the_onset_is_the_jobs_own_not_another_writers_condition() -> None:
    """A Straggler condition (the monitor's) False since long ago does not start the clock: the job's own
    onset does, and it ends when the symptom does."""
    s = spec(stragglerRatio=0.7, stragglerForSeconds=300)
    old = {"conditions": [{"type": "Straggler", "status": "False", "reason": "Even",
                           "lastTransitionTime": iso(T0 - 3600)}]}
    verdict, st = look(s, status(**old), snapshot(utilization=(90.0, 90.0, 55.0)), T0)
    assert not verdict.act and st.symptoms is not None and st.symptoms.straggler == iso(T0)
    verdict, st = look(s, st, snapshot(), T0 + 100)  # even again: the clock is gone
    assert st.symptoms is None
    verdict, st = look(s, st, snapshot(utilization=(90.0, 90.0, 55.0)), T0 + 400)
    assert not verdict.act and st.symptoms is not None and st.symptoms.straggler == iso(T0 + 400)


def test_missing_telemetry_neither_starts_nor_ends_a_clock() -> None:
    s = spec(overheatCelsius=80)
    kept = {"generation": 2, "overheat": iso(T0)}
    for snap in (None, snapshot(temperature=(60, 85, 60), available=False)):
        g = gather(META, s, status(kept), {}, snap, None, T0 + 60)
        assert g.symptoms == [] and g.onsets is not None and g.onsets.overheat == iso(T0)
    g = gather(META, s, status(), {}, None, None, T0)
    assert g.onsets is None


def test_an_onset_of_another_placement_or_in_the_future_is_not_trusted() -> None:
    s = spec(overheatCelsius=80)
    hot = snapshot(temperature=(60, 85, 60))
    g = gather(META, s, status({"generation": 1, "overheat": iso(T0 - 3600)}), {}, hot, None, T0)
    assert [x.since for x in g.symptoms] == [T0]
    g = gather(META, s, status({"generation": 2, "overheat": iso(T0 + 3600)}), {}, hot, None, T0)
    assert [x.since for x in g.symptoms] == [T0]


def test_a_failed_device_is_urgent_and_not_also_overheating() -> None:
    g = gather(META, spec(overheatCelsius=80), status(), {}, snapshot(temperature=(60, 99, 60),
                                                                      health=Health.FAILED), None, T0)
    assert [x.trigger for x in g.symptoms] == [migration.DEVICE_FAILED] and g.symptoms[0].urgent
