"""What the replay's operator knows (issue 34): the default mode learns a job's speed on a class only after it
has trained there for the step window, names no workloads and checkpoints only on demand; the informed mode
knows every speed at once. Also the work rule and the moves counted per job."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from heterojob.engine.basics.queueing import QueueSettings
from heterojob.replay.knowledge import ReplayKnowledge
from heterojob.replay.metrics import work_s
from heterojob.replay.config import Config, DECLARED, MONITOR_S
from heterojob.replay.replay import _Replay, replay
from heterojob.replay.traces import TraceJob, synthetic_trace, throughputs
from heterojob.telemetry.steps import STEPS_WINDOW_S

DATA = Path(__file__).resolve().parents[2] / "data" / "gavel"
TABLE = DATA / "isolated_throughputs.csv"
R18 = "ResNet-18 (batch size 64)"


def job(id: int, hours: float = 10.0, at_h: float = 0.0, gpus: int = 1, job_type: str = R18) -> TraceJob:
    rates = throughputs(TABLE)[job_type]
    return TraceJob(id, job_type, hours * 3600 * rates[gpus]["nvidia-h100"], at_h * 3600, gpus, rates, "nvidia-h100")


def test_the_modes_say_what_is_known_and_what_checkpoints() -> None:
    default, informed = Config(), Config(knowledge="informed")
    assert default.learn_after_s == STEPS_WINDOW_S + MONITOR_S and informed.learn_after_s == 0
    assert not default.named and informed.named and Config(workloads=True).named
    assert default.period_s == float("inf") and informed.period_s == 1800 == Config(periodic=True).period_s
    with pytest.raises(ValueError, match="knowledge must be one of default, informed"):
        Config(knowledge="omniscient")


def test_a_speed_is_known_only_after_the_job_has_trained_on_the_class_for_the_step_window() -> None:
    sim = _Replay([job(1, hours=2), job(2, hours=2, at_h=0.01)], "heterojob",
                  Config(nodes_per_class_region=1, regions=1, mtbf_h=1e9, elastic=False))
    sim.run()
    assert sim.known.measured[1] and sim.known.measured[2]  # both ran for hours: learned
    quick = _Replay([job(3, hours=0.05)], "heterojob", Config(nodes_per_class_region=1, regions=1, mtbf_h=1e9,
                                                               elastic=False))
    quick.run()  # 3 minutes of training: done before the step window has a figure
    assert not quick.known.measured[3]
    informed = _Replay([job(3, hours=0.05)], "heterojob", Config(nodes_per_class_region=1, regions=1, mtbf_h=1e9,
                                                                  elastic=False, knowledge="informed"))
    informed.run()
    assert informed.known.measured[3]


def test_without_workload_names_a_jobs_type_shares_measurements_only_at_its_size() -> None:
    """Issue 43: the operator pools jobs alike by their spec's fingerprint (a trace job's command is its type's)
    and size; a workload name pools its jobs at every size."""
    trace = [job(1, hours=2), job(2, hours=2, at_h=3, gpus=2)]
    for named in (False, True):
        sim = _Replay(trace, "heterojob", Config(nodes_per_class_region=1, regions=1, mtbf_h=1e9, elastic=False,
                                                 workloads=named))
        sim.run()
        assert (sim.known.key(trace[0]) == sim.known.key(trace[1])) is named
        assert len(sim.known.samples) == (1 if named else 2)


def test_a_placement_that_ends_starts_the_starvation_clock_so_a_move_is_no_promotion() -> None:
    """A job moved up (or resized) after more than the starvation bound in place lands at once: as its
    status's waitingSince says, it did not wait, so it keeps its attained service and is not promoted."""
    known, settings, j = ReplayKnowledge(DECLARED, "t"), QueueSettings(), job(1)
    known.waits(j, 0.0)
    known.starts(j, "nvidia-a100", 1, 10.0, 0.0, settings, lambda: [])
    known.trained(j, "nvidia-a100", 5 * 3600.0, 1)
    known.stopped(j, 5 * 3600.0)
    known.starts(j, "nvidia-h100", 1, 10.0, 5 * 3600.0, settings, lambda: [])
    assert known.promotions == 0 and not known.service[1].promoted
    assert known.service[1].attained_device_s == 5 * 3600.0
    known.stopped(j, 6 * 3600.0)  # preempted: it waits 4 h in the queue, then a promotion starts it
    known.waits(j, 6 * 3600.0)
    known.starts(j, "nvidia-h100", 1, 10.0, 10 * 3600.0, settings, lambda: [])
    assert known.promotions == 1 and known.service[1].promoted and known.service[1].attained_device_s == 0


def test_the_work_rule_reads_the_work_served_against_the_work_that_arrived() -> None:
    # (a window of hundreds of jobs: the work of a few heavy-tailed jobs arriving near its end is served after it)
    base = dict(nodes_per_class_region=1, regions=1, devices_per_node=8, mtbf_h=1e9, window=(100, 350))
    trace = synthetic_trace(400, 0.1, TABLE, seed=5)
    light = replay(trace, "static", Config(**base)).window
    heavy = replay(synthetic_trace(400, 20.0, TABLE, seed=5), "static", Config(**base)).window
    assert light is not None and heavy is not None
    assert light.arrived_work_h == pytest.approx(sum(work_s(j, j.total_steps) for j in trace[100:350]) / 3600)
    assert light.work_sustained and not heavy.work_sustained and heavy.work_served < 0.5
    # the threshold: 95% of the arriving work
    assert replace(light, served_work_h=0.95 * light.arrived_work_h).work_sustained
    assert not replace(light, served_work_h=0.94 * light.arrived_work_h).work_sustained
    # saturated, the work served an hour is the fleet's: at most its devices
    assert 0 < heavy.work_per_h <= 3 * 8


def test_moves_are_counted_per_completed_job() -> None:
    report = replay(synthetic_trace(80, 3.0, TABLE, seed=2), "heterojob",
                    Config(nodes_per_class_region=1, regions=1, mtbf_h=1e9))
    per = report.per_job()
    assert per["preemptions_per_job"] == round(report.preemptions / report.jobs, 3)
    assert per["upgrades_per_job"] == round(report.upgrades / report.jobs, 3)
    assert report.summary()["promotions"] == report.promotions


def test_the_cli_says_what_the_operator_knew_and_takes_the_move_cost(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from heterojob.replay import cli

    assert cli.main(["--synthetic", "30", "--jobs-per-hour", "2", "--policy", "heterojob", "--knowledge", "informed",
                     "--save-seconds", "60", "--restore-seconds", "180", "--nodes-per-class-region", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["knowledge"] == "informed" and out["heterojob"]["avg_jct_h"] > 0
    assert {"preemptions_per_job", "promotions_per_job", "upgrades_per_job"} <= set(out["heterojob"])
    with pytest.raises(SystemExit):
        cli.main(["--synthetic", "30", "--save-seconds", "-1"])
