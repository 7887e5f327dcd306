"""The trace replay: deterministic, every job finishes, failures lose at most one checkpoint interval,
heterojob's engine grows elastic jobs and preempts for priority, static does not hold a class behind a job
that does not fit, and throughputs never credit growth with more than linear scaling."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from heterojob.engine.basics.queueing import QueuePolicy, QueueSettings
from heterojob.replay.config import Config
from heterojob.replay.replay import gang_shape, replay
from heterojob.replay.traces import TraceJob, load_trace, synthetic_trace, throughputs

DATA = Path(__file__).resolve().parents[2] / "data" / "gavel"  # vendored, MIT (data/gavel/LICENSE)
TABLE = DATA / "isolated_throughputs.csv"
LM = "LM (batch size 20)"  # data-parallel: measured at 1, 2, 4 and 8 GPUs
FIFO = QueueSettings(policy=QueuePolicy.FIFO)  # for the tests of other rules than the queue order


def job(id: int, gpus: int = 1, hours: float = 10.0, at_h: float = 0.0, wants: str = "nvidia-h100",
        priority: int = 0, job_type: str = LM) -> TraceJob:
    rates = throughputs(TABLE)[job_type]
    return TraceJob(id, job_type, hours * 3600 * rates[gpus]["nvidia-h100"], at_h * 3600, gpus, rates, wants,
                    priority)


def test_same_seed_same_numbers_and_every_job_finishes() -> None:
    trace = load_trace(DATA / "philly-6214e9.trace", TABLE, seed=3, limit=120)
    # periodic checkpoints: without them a job longer than a node's time between failures (250 h here) never ends
    config = Config(nodes_per_class_region=2, arrival_scale=0.05, mtbf_h=2000, seed=9, periodic=True)
    a, b = replay(trace, "heterojob", config), replay(trace, "heterojob", config)
    assert a.summary() == b.summary() and a.jobs == len(trace)
    assert replay(trace, "static", config).jobs == len(trace)
    assert synthetic_trace(50, 2, TABLE, seed=4) == synthetic_trace(50, 2, TABLE, seed=4)


def test_failures_lose_at_most_one_checkpoint_interval_and_heterojob_beats_static() -> None:
    trace = synthetic_trace(300, 1.0, TABLE, seed=2)
    config = Config(nodes_per_class_region=2, regions=1, mtbf_h=500, seed=9, periodic=True)
    static, ours = replay(trace, "static", config), replay(trace, "heterojob", config)
    assert ours.failures > 0 and ours.restarts > 0 and static.restarts > 0
    interval = config.checkpoint_s + config.save_s
    assert 0 < ours.max_lost_per_failure_s <= interval and static.max_lost_per_failure_s <= interval
    assert ours.lost_device_h > 0
    assert ours.avg_jct_h < static.avg_jct_h and ours.utilization > static.utilization
    # the steady-state window (10th to 90th percentile arrival) leaves out warm-up and the long drain
    assert static.utilization < static.steady_utilization <= 1 and ours.utilization < ours.steady_utilization <= 1
    assert ours.steady_avg_jct_h < static.steady_avg_jct_h


def test_an_elastic_job_grows_into_idle_room_within_the_migration_rules() -> None:
    config = Config(nodes_per_class_region=1, regions=1, mtbf_h=1e9)
    alone = [job(0, hours=20)]
    fixed = replay(alone, "heterojob", Config(nodes_per_class_region=1, regions=1, mtbf_h=1e9, elastic=False))
    grown = replay(alone, "heterojob", config)
    assert fixed.resizes == 0 and grown.resizes == 1
    assert grown.avg_jct_h < fixed.avg_jct_h / 5  # LM (batch 20) on 8 h100 GPUs: 96% per GPU (Gavel's table)
    # ResNet-50 (batch 16) scales badly on the h100 class (8 GPUs 30% per GPU, 4 51%, 2 61%): it tries 8,
    # measures, halves to 4, measures, settles at 2 (3 resizes); grown greedily it would hold 8 GPUs for
    # a 2.4x speed-up
    r50 = [job(0, hours=20, job_type="ResNet-50 (batch size 16)")]
    held = replay(r50, "heterojob", config)
    greedy = replay(r50, "heterojob", Config(nodes_per_class_region=1, regions=1, mtbf_h=1e9, growth_efficiency=0))
    assert held.resizes == 3 and greedy.resizes == 1
    assert greedy.avg_jct_h < held.avg_jct_h < fixed.avg_jct_h / 1.2
    assert held.avg_jct_h * 2 < greedy.avg_jct_h * 8  # device-hours: 2 GPUs x held JCT < 8 GPUs x greedy JCT
    # Nobody waits for the room: with a queue, the first job keeps its size.
    # Two 8-GPU ResNet-50 gangs fill the h100 and a100 nodes and a third waits (it cannot run on ascend); a
    # 1-GPU LM job then lands on the ascend node and must not grow while that gang waits, even though the
    # gang cannot use the ascend room (the operator's rule: a waiting job of equal priority goes first).
    r50 = "ResNet-50 (batch size 128)"
    # (FIFO and no upgrade moves: under MLFQ the new job would preempt a gang that has run for an hour)
    crowded = [job(i, gpus=8, hours=20, job_type=r50) for i in range(1, 4)] + [job(0, hours=20, at_h=0.01)]
    report = replay(crowded, "heterojob", Config(nodes_per_class_region=1, regions=1, mtbf_h=1e9, queue=FIFO,
                                                 upgrades=False))
    assert report.resizes >= 1  # it grows once the gang has started (~20 h)
    assert report.jct_h_by_job[0] > 28  # growing at once would have ended it near 21 h



def test_a_waiting_job_takes_back_the_room_a_grown_job_borrowed() -> None:
    config = Config(nodes_per_class_region=1, regions=1, mtbf_h=1e9, queue=FIFO, upgrades=False)
    r50 = "ResNet-50 (batch size 128)"  # runs out of memory on the ascend (K80) class
    # the ResNet-18 job grows over the h100 node (it scales about linearly there: Gavel's table), a gang
    # fills the a100 node; a 4-GPU ResNet-50 job then needs the h100 room the first job borrowed (its
    # admitted single device is never taken)
    trace = [job(0, hours=200, job_type="ResNet-18 (batch size 64)"), job(1, gpus=8, hours=100, at_h=1, job_type=r50),
             job(3, gpus=4, hours=5, at_h=5, job_type=r50)]
    report = replay(trace, "heterojob", config)
    assert report.resizes >= 1 and report.reclaims == 1
    assert report.jct_h_by_job[3] < 5 * 1.1  # it did not wait for the grown job to finish
    assert report.jct_h_by_job[0] < 100  # still far sooner than 200 h at its admitted size

def test_a_higher_priority_job_preempts_through_a_checkpoint() -> None:
    config = Config(nodes_per_class_region=1, regions=1, mtbf_h=1e9, elastic=False, queue=FIFO)
    low = [job(i, gpus=8, hours=50, job_type="ResNet-18 (batch size 64)") for i in range(3)]
    urgent = job(9, gpus=8, hours=1, at_h=2, priority=1, job_type="ResNet-18 (batch size 64)")
    report = replay([*low, urgent], "heterojob", config)
    assert report.preemptions == 1 and report.jobs == 4
    assert report.jct_h_by_job[9] < 1.1  # one hour of work, a save and a restore: it did not wait for a 50 h job
    static = replay([*low, urgent], "static", config)
    assert static.preemptions == 0 and static.jct_h_by_job[9] > 40


def test_mlfq_lets_a_short_job_pass_a_long_one_and_fifo_does_not() -> None:
    # 200 h gangs hold the h100 and a100 nodes; a 1 h 8-GPU job arrives later (ResNet-50 cannot run on ascend)
    r50 = "ResNet-50 (batch size 128)"
    trace = [job(0, gpus=8, hours=200, job_type=r50), job(2, gpus=8, hours=200, job_type=r50),
             job(1, gpus=8, hours=1, at_h=1, job_type=r50)]
    base = dict(nodes_per_class_region=1, regions=1, mtbf_h=1e9, elastic=False)
    mlfq = replay(trace, "heterojob", Config(**base))
    fifo = replay(trace, "heterojob", Config(**base, queue=FIFO))
    assert mlfq.preemptions >= 1 and mlfq.jct_h_by_job[1] < 2  # past the long job through its checkpoint
    assert fifo.preemptions == 0 and fifo.jct_h_by_job[1] > 100  # behind the long jobs
    # the long jobs lose about the short one's hour (and a save and restore)
    assert mlfq.jct_h_by_job[0] + mlfq.jct_h_by_job[2] < fifo.jct_h_by_job[0] + fifo.jct_h_by_job[2] + 2


def test_kueue_falls_back_to_the_next_flavor_in_the_users_order_and_static_does_not() -> None:
    config = Config(nodes_per_class_region=1, regions=1, mtbf_h=1e9, periodic=True)  # 20 s saves every 30 min
    trace = [job(0, gpus=8, hours=10), job(1, gpus=8, hours=10, at_h=0.1)]  # both ask for h100
    static, kueue = replay(trace, "static", config), replay(trace, "kueue", config)
    assert static.jct_h_by_job[1] > 19  # waits for the first to finish on h100
    # starts at once on the next flavor (a100, before ascend), however slow the job is there (0.23x at 8 GPUs)
    on_a100 = trace[1].total_steps / trace[1].rate("nvidia-a100") * (1800 + 20) / 1800 / 3600
    assert kueue.jct_h_by_job[1] == pytest.approx(on_a100, rel=0.01)
    assert kueue.preemptions == kueue.resizes == kueue.upgrades == 0


def test_heterojob_moves_a_job_up_when_a_faster_class_frees() -> None:
    # a 5 h job and a 100 h job of the same type; the second starts on a slower class, then moves up once
    # the first ends (its expected remaining work is long: nothing is known yet, so "as long as it ran")
    config = Config(nodes_per_class_region=1, regions=1, mtbf_h=1e9, elastic=False)
    trace = [job(0, gpus=8, hours=5), job(1, gpus=8, hours=100, at_h=0.01)]
    moved = replay(trace, "heterojob", config)
    stays = replay(trace, "heterojob", Config(nodes_per_class_region=1, regions=1, mtbf_h=1e9, elastic=False,
                                              upgrades=False))
    assert moved.upgrades == 1 and stays.upgrades == 0
    assert moved.jct_h_by_job[1] < stays.jct_h_by_job[1]


def test_static_does_not_hold_its_class_behind_a_gang_that_does_not_fit() -> None:
    config = Config(nodes_per_class_region=1, regions=1, mtbf_h=1e9)
    trace = [job(0, gpus=4, hours=10), job(1, gpus=8, hours=1, at_h=0.1), job(2, gpus=2, hours=1, at_h=0.2)]
    report = replay(trace, "static", config)
    assert min(report.jcts_h) == pytest.approx(1.0 * 2 / 2, rel=0.2)  # the 2-GPU job ran beside the 4-GPU one


def test_growth_is_never_credited_with_better_than_linear_scaling() -> None:
    rates = throughputs(TABLE)["ResNet-18 (batch size 16)"]  # Gavel measured 32 -> 100 steps/s from 1 -> 2 V100s
    one = TraceJob(0, "r18", 1.0, 0.0, 1, rates, "nvidia-h100")
    assert one.rate("nvidia-h100", 2) == pytest.approx(2 * one.rate("nvidia-h100"))
    assert one.rate("nvidia-h100", 3) <= 3 * one.rate("nvidia-h100")
    assert one.max_replicas("nvidia-h100") == 8
    reco = TraceJob(1, "reco", 1.0, 0.0, 1, throughputs(TABLE)["Recommendation (batch size 512)"], "nvidia-a100")
    assert reco.max_replicas("nvidia-a100") == 1  # measured at one scale only: not elastic


def test_synthetic_trace_follows_gavels_recipe() -> None:
    trace = synthetic_trace(2000, 4.0, TABLE, seed=7)
    single = sum(1 for j in trace if j.gpus == 1) / len(trace)
    assert 0.7 <= single <= 0.85  # 70% drawn, plus sizes a type was never measured at
    hours = sorted(j.total_steps / j.rate("nvidia-h100") / 3600 for j in trace)
    assert 0.5 <= hours[0] and hours[-1] <= 10_000 / 60 + 1e-6
    span_h = trace[-1].arrival_s / 3600
    assert 2000 / 4.0 * 0.9 <= span_h <= 2000 / 4.0 * 1.1


def test_the_cli_prints_both_policies_and_writes_the_html_report(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "heterojob", "sim", "replay", "--limit", "40",
                          "--html", str(tmp_path / "r.html")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"trace", "static", "heterojob"} <= set(result)
    assert {"utilization", "avg_jct_h", "p99_jct_h", "makespan_h", "lost_device_h", "migrations"} <= set(
        result["static"])
    html = (tmp_path / "r.html").read_text()
    assert "Job completion time CDF" in html and "steady state" in html
    synthetic = subprocess.run([sys.executable, "-m", "heterojob", "sim", "replay", "--synthetic", "30",
                                "--policy", "heterojob"], capture_output=True, text=True, timeout=120)
    assert synthetic.returncode == 0, synthetic.stderr
    assert set(json.loads(synthetic.stdout)) >= {"trace", "heterojob"}
    # any Gavel-format trace, compressed: one JSON object, a key per policy with at least avg_jct_h
    named = subprocess.run([sys.executable, "-m", "heterojob", "sim", "replay", "--trace",
                            str(DATA / "philly-6214e9.trace"), "--arrival-scale", "0.2", "--limit", "30"],
                           capture_output=True, text=True, timeout=120)
    assert named.returncode == 0, named.stderr
    lines = named.stdout.strip().splitlines()
    assert len(lines) == 1
    every = json.loads(lines[0])
    assert all(every[p]["avg_jct_h"] > 0 for p in ("static", "kueue", "heterojob"))
    bad = subprocess.run([sys.executable, "-m", "heterojob", "sim", "replay", "--arrival-scale", "0"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--arrival-scale" in bad.stderr


def test_gavels_window_measures_jct_useful_work_and_whether_the_rate_is_sustained() -> None:
    base = dict(nodes_per_class_region=1, regions=1, devices_per_node=8, mtbf_h=1e9, window=(200, 300))
    light = replay(synthetic_trace(400, 0.1, TABLE, seed=5), "static", Config(**base)).window
    heavy = replay(synthetic_trace(400, 20.0, TABLE, seed=5), "static", Config(**base)).window
    assert light is not None and heavy is not None
    assert light.jobs_done == heavy.jobs_done == 100  # the run goes on until the window's jobs are done
    assert light.sustained and not heavy.sustained and heavy.in_system_end > 1.2 * heavy.in_system_start
    assert heavy.growth > 0.05 >= light.growth
    # the rule reads growth against arrivals, not a ratio of counts: noise at light load (seed 3, static at
    # proportional 0.5 jobs/h: 10.1 jobs over the first quarter, 16.0 over the last, of 750 arrivals between)
    # is sustained, a deep backlog growing by less than a fifth (Kueue at proportional 3.4, seed 2) is not
    noisy = replace(light, in_system_start=4, in_system_end=17, in_system_first=10.1, in_system_last=16.0,
                    arrivals_between=750)
    assert noisy.sustained
    growing = replace(light, in_system_start=450, in_system_end=530, in_system_first=458.2,
                      in_system_last=526.3, arrivals_between=750)
    assert growing.in_system_last < 1.2 * growing.in_system_first and not growing.sustained
    # the limit: 5% of the arrivals between the quarters (37 more jobs of 750 is sustained, 38 is not)
    assert replace(noisy, in_system_last=noisy.in_system_first + 37).sustained
    assert not replace(noisy, in_system_last=noisy.in_system_first + 38).sustained
    assert heavy.avg_jct_h > light.avg_jct_h
    # useful work is the busy time scaled by each job's speed there against its fastest class
    assert 0 < light.useful_share < light.busy_share < heavy.busy_share <= 1


def test_a_gang_larger_than_a_region_is_refused_not_waited_for_forever() -> None:
    """A gang never spans regions: an 8-device job on 1 node x 4 devices per class and region would wait
    forever while failures keep the clock running (Philly ee9e8c's 16-32 device jobs on the Gavel fleet did)."""
    config = Config(nodes_per_class_region=1, regions=3, devices_per_node=4)
    with pytest.raises(ValueError, match="4 devices a region holds"):
        replay([job(1, gpus=1), job(2, gpus=8)], "static", config)
    report = replay([job(1, gpus=1), job(2, gpus=4)], "heterojob", config)
    assert report.jobs == 2 and report.preempted_device_h == 0.0


def test_preemptions_are_counted_with_the_device_hours_they_idle() -> None:
    """A short job preempts a long one through its checkpoint: the victim's save and restore and the
    preemptor's wait for the save idle the victim's devices (2 x 20 s + 60 s each)."""
    config = Config(nodes_per_class_region=1, regions=1, devices_per_node=4, mtbf_h=1e9, elastic=False,
                    upgrades=False)
    trace = [job(1, gpus=4, hours=100, wants="nvidia-h100"), job(2, gpus=4, hours=100, at_h=0.0),
             job(3, gpus=4, hours=100, at_h=0.0), job(4, gpus=4, hours=0.5, at_h=20.0)]
    report = replay(trace, "heterojob", config)
    assert report.preemptions >= 1
    assert report.preempted_device_h == pytest.approx(report.preemptions * 4 * 100 / 3600, rel=0.01)
    assert report.summary()["preempted_device_h"] == round(report.preempted_device_h, 2)


def test_a_gang_keeps_its_device_count_in_equal_replicas_that_fit_a_node() -> None:
    """Philly jobs of 7, 12 or 20 GPUs were rounded up to whole nodes (12 GPUs on 8-device nodes held 16)."""
    assert gang_shape(3, 4) == (1, 3)
    assert gang_shape(8, 4) == (2, 4)
    assert gang_shape(12, 8) == (2, 6)
    assert gang_shape(20, 8) == (4, 5)
    assert gang_shape(24, 8) == (3, 8)
    assert gang_shape(7, 4) == (7, 1)  # prime: one device per replica
    for devices in range(1, 65):
        replicas, per = gang_shape(devices, 8)
        assert replicas * per == devices and per <= 8
