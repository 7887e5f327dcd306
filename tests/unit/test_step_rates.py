"""Measured speeds from the SDK's step metric (telemetry/steps.py, controller/monitor.py): each job's step rate
read from the `up` answer it rides on, training pods never taken for exporters, and status.scheduling.speeds
written only when the figure is news (none recorded, or off by more than 10% and 5 minutes old), for any class,
without a checkpoint. Missing figures write nothing."""

from __future__ import annotations

from typing import Any

import pytest

from heterojob import defaults
from heterojob.api.times import iso
from heterojob.controller import FleetSource
from heterojob.controller.monitor import Monitor, TelemetryConfig
from heterojob.state.knowledge import measured_rates
from heterojob.api.job import Scheduling
from heterojob.telemetry import steps
from heterojob.telemetry.family import ROLE_LABEL
from heterojob.telemetry.model import HealthPolicy
from heterojob.telemetry.snapshot import UP, JobRef, NodeFacts, Snapshot, SourceResult, WatchedJob, build, queries
from heterojob.telemetry.watched import watched_job

NOW = 1_800_000_000.0


def rate_series(pod: str, value: str, namespace: str = "team-a") -> dict[str, Any]:
    return {"metric": {"namespace": namespace, "pod": pod, ROLE_LABEL: steps.STEPS}, "value": [NOW, value]}


def up(value: str, **labels: str) -> dict[str, Any]:
    return {"metric": {"__name__": "up", **labels}, "value": [NOW, value]}


def test_the_step_rate_rides_on_the_up_query_over_its_own_window() -> None:
    q = queries(60, steps_window_s=240)
    assert len(q) == len(queries(60))  # no extra query per cycle
    assert q[UP].startswith("up or ") and "deriv(heterojob_training_steps_total[240s])" in q[UP]
    # only counters that started before the window: a pod's start, restore or warm-up is never a slow step
    assert "heterojob_training_steps_created < time() - 240" in q[UP]
    assert (f"max_over_time(heterojob_training_steps_total[240s]) - min_over_time(heterojob_training_steps_total"
            f"[240s]) >= {steps.MIN_STEPS}") in q[UP]
    assert f'"{ROLE_LABEL}", "{steps.STEPS}"' in q[UP]


def test_rates_per_pod_and_a_jobs_rate_is_its_fastest_rank() -> None:
    answer = [up("1", job="x"), rate_series("train-g2-0", "4.5"), rate_series("train-g2-1", "4.25"),
              rate_series("train-g2-1", "4.0"), rate_series("bad", "NaN"), rate_series("neg", "-1"),
              {"metric": {ROLE_LABEL: steps.STEPS}, "value": [NOW, "3"]}]  # no pod: no figure
    got = steps.rates(answer)
    assert got == {("team-a", "train-g2-0"): 4.5, ("team-a", "train-g2-1"): 4.25}
    assert steps.job_rate("team-a", ["train-g2-0", "train-g2-1"], got) == 4.5
    assert steps.job_rate("team-a", ["train-g2-1", "train-g2-9"], got) == 4.25  # a rank without a series: no say
    assert steps.job_rate("team-b", ["train-g2-0"], got) is None
    assert steps.job_rate("team-a", ["idle"], {("team-a", "idle"): 0.0}) is None  # stalled: nothing to record


def test_a_training_pod_scraped_for_its_steps_is_no_exporter() -> None:
    """A dcgm-exporter (honorLabels) names the training pod in `pod`; that pod is now also a scrape target.
    It must stay the device's workload, and its failing scrape must not mark its node's exporter down."""
    gpu = {"UUID": "GPU-1", "gpu": "0", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "n1", "node": "n1",
           "namespace": "team-a", "pod": "train-g2-0"}
    dcgm = {"dcgm:identity": [{"metric": gpu, "value": [NOW, "90"]}],
            "dcgm:temperature": [{"metric": gpu, "value": [NOW, "50"]}]}
    for training in (
            # serving its steps (any scrape config), or down but labelled as the shipped PodMonitor does
            [up("1", namespace="team-a", pod="train-g2-0", node="n1"), rate_series("train-g2-0", "2")],
            [up("0", namespace="team-a", pod="train-g2-0", node="n1", heterojob_job="train")],
            [up("0", namespace="team-a", pod="train-g2-0", node="n1", heterojob_io_job="train")]):
        answer = {**dcgm, UP: [up("1", namespace="gpu-operator", pod="dcgm-abc", node="n1"), *training]}
        s = build([SourceResult("p", frozenset({"*"}), answer)], {"n1": NodeFacts("cn-east", "nvidia-h100", 8)},
                  {}, HealthPolicy())
        assert s.devices["GPU-1"].pod == "train-g2-0", training
        assert s.exporters_down == frozenset(), training
    assert s.step_rates == {}
    answer = {**dcgm, UP: [rate_series("train-g2-0", "2")]}
    s = build([SourceResult("p", frozenset({"*"}), answer)], {}, {}, HealthPolicy())
    assert s.step_rates == {("team-a", "train-g2-0"): 2.0}


def test_a_speed_is_news_when_none_is_recorded_or_it_moved_and_is_old() -> None:
    recorded = [{"deviceClass": "nvidia-h100", "replicas": 2, "stepsPerSecond": 10.0, "time": iso(NOW - 600)},
                {"deviceClass": "nvidia-h100", "replicas": 4, "stepsPerSecond": 10.0, "time": iso(NOW - 10)}]
    assert steps.worth_writing([], "nvidia-h100", 2, 10.0, NOW)
    assert steps.worth_writing(recorded, "ascend-910b", 2, 10.0, NOW)  # another class
    assert steps.worth_writing(recorded, "nvidia-h100", 1, 10.0, NOW)  # another size
    assert not steps.worth_writing(recorded, "nvidia-h100", 2, 10.9, NOW)  # within 10%: noise
    assert not steps.worth_writing(recorded, "nvidia-h100", 2, 9.1, NOW)
    assert steps.worth_writing(recorded, "nvidia-h100", 2, 11.5, NOW)  # moved, and written 10 minutes ago
    assert not steps.worth_writing(recorded, "nvidia-h100", 4, 20.0, NOW)  # moved, but written 10 s ago
    assert steps.worth_writing(recorded, "nvidia-h100", 4, 20.0, NOW + steps.REWRITE_AFTER_S)
    untimed = [{"deviceClass": "nvidia-h100", "replicas": 2, "stepsPerSecond": 10.0}]
    assert steps.worth_writing(untimed, "nvidia-h100", 2, 20.0, NOW)


def job(name: str, device_class: str, replicas: int = 2, speeds: tuple[dict[str, Any], ...] = ()) -> WatchedJob:
    return WatchedJob(JobRef("team-a", name, "cn-east", 3, replicas, 8), device_class, "41", speeds=speeds)


def monitor(jobs: dict[str, WatchedJob]) -> Monitor:
    return Monitor(None, FleetSource.from_objects(defaults.all_objects()), lambda: jobs, TelemetryConfig())


def test_the_monitor_records_a_measured_speed_without_any_checkpoint() -> None:
    recorded = ({"deviceClass": "nvidia-h100", "replicas": 2, "stepsPerSecond": 3.0, "time": iso(NOW - 3600)},
                {"deviceClass": "ascend-910b", "replicas": 2, "stepsPerSecond": 2.0, "time": iso(NOW - 3600)})
    jobs = {"team-a/gpu": job("gpu", "nvidia-h100", speeds=recorded), "team-a/cpu": job("cpu", "cpu", replicas=1),
            "team-a/steady": job("steady", "nvidia-h100", speeds=recorded[:1]),
            "team-a/silent": job("silent", "nvidia-h100")}
    snapshot = Snapshot(devices={}, regions={}, step_rates={
        ("team-a", "gpu-g3-0"): 4.0, ("team-a", "gpu-g3-1"): 3.9, ("team-a", "cpu-g3-0"): 0.5,
        ("team-a", "steady-g3-0"): 3.1, ("team-a", "gpu-g2-0"): 99.0})  # a former generation's pod: not this run's
    m = monitor(jobs)
    patches = {j.ref.name: p for j, p in m.job_patches(snapshot, iso(NOW))}
    speeds = patches["gpu"]["scheduling"]["speeds"]
    assert set(patches["gpu"]) >= {"scheduling"} and list(patches["gpu"]["scheduling"]) == ["speeds"]
    assert speeds[0] == recorded[1] and speeds[-1] == {"deviceClass": "nvidia-h100", "replicas": 2,
                                                        "stepsPerSecond": 4.0, "time": iso(NOW)}
    # the scheduler reads it as it reads a checkpoint's measurement
    assert measured_rates(Scheduling.model_validate({"speeds": speeds})) == {"nvidia-h100": 4.0, "ascend-910b": 2.0}
    # a CPU job (no exporter reports its class) gets its speed too, and nothing else
    assert patches["cpu"] == {"scheduling": {"speeds": [{"deviceClass": "cpu", "replicas": 1, "stepsPerSecond": 0.5,
                                                         "time": iso(NOW)}]}}
    assert "scheduling" not in patches.get("steady", {})  # 3.1 vs 3.0: not news
    assert "scheduling" not in patches.get("silent", {})  # no metric: nothing, never a fault
    assert m.stats.speeds == 2


@pytest.mark.parametrize("raw, expected", [
    ({"speeds": [{"deviceClass": "cpu", "replicas": 1, "stepsPerSecond": 2.5, "time": "2026-01-01T00:00:00Z"},
                 {"deviceClass": "cpu", "replicas": 1, "stepsPerSecond": -3}, "junk"]},
     ({"deviceClass": "cpu", "replicas": 1, "stepsPerSecond": 2.5, "time": "2026-01-01T00:00:00Z"},)),
    ("not an object", ()), (None, ())])
def test_the_watched_job_reads_its_recorded_speeds_as_untrusted_input(raw: Any, expected: tuple[Any, ...]) -> None:
    obj = {"metadata": {"namespace": "team-a", "name": "j", "resourceVersion": "5"},
           "status": {"phase": "Running", "scheduling": raw,
                      "placement": {"region": "cn-east", "generation": 1, "replicas": 1, "perReplica": 4,
                                    "deviceClass": "cpu"}}}
    w = watched_job(obj)
    assert w is not None and w.speeds == expected
