"""The bench's throughput yardstick (`replay.capacity`): Gavel's fluid max-throughput LP and the static
partition's bound, on a mix small enough to solve by hand."""

from __future__ import annotations

import pytest

from heterojob.replay.capacity import best_rate, blind_rate, static_rate, work_cap
from heterojob.replay.traces import TraceJob

DEVICES = {"fast": 1, "slow": 1}


def mix(wants_a: str, wants_b: str) -> list[TraceJob]:
    """Half the jobs lose 2x on the slow class (A), half only 10% (B); each is 1 device-hour on fast."""
    a = {1: {"fast": 1.0, "slow": 0.5}}
    b = {1: {"fast": 1.0, "slow": 0.9}}
    return [TraceJob(2 * i + k, t, 3600.0, 0.0, 1, rates, w)
            for i in range(50) for k, (t, rates, w) in enumerate((("A", a, wants_a), ("B", b, wants_b)))]


def test_the_lp_gives_each_class_the_jobs_that_lose_least_there() -> None:
    # per arrival: A is 0.5 device-h on fast; B 0.5 on fast or 0.556 on slow. All A on fast and B split so
    # both classes fill alike: 0.5 + 0.5 b = 0.556 (1 - b), b = 1/19, t = 10/19: 1.9 jobs/h
    assert best_rate(mix("fast", "slow"), DEVICES) == pytest.approx(1.9)
    # the LP does not depend on what users ask for; static does
    assert best_rate(mix("fast", "fast"), DEVICES) == pytest.approx(1.9)
    assert static_rate(mix("fast", "slow"), DEVICES) == pytest.approx(1 / 0.5556, rel=1e-3)  # slow fills first
    assert static_rate(mix("fast", "fast"), DEVICES) == pytest.approx(1.0)  # one class does it all
    # the wrong partition (A on slow) is the worst static
    assert static_rate(mix("slow", "fast"), DEVICES) == pytest.approx(1.0)


def test_a_class_a_job_cannot_run_on_is_never_given_to_it() -> None:
    only_fast = [TraceJob(i, "A", 3600.0, 0.0, 1, {1: {"fast": 1.0, "slow": 0.0}}, "fast") for i in range(10)]
    assert best_rate(only_fast, DEVICES) == pytest.approx(1.0)
    assert best_rate([], DEVICES) == float("inf")


def test_a_policy_that_cannot_tell_the_models_apart_splits_them_alike_and_sustains_less() -> None:
    # one split for A and B: per arrival 1.0 device-h on fast or 1.556 on slow (A 2 h, B 1.11 h, halved);
    # both classes fill alike at x = 1.556 / 2.556 on fast: 1.643 jobs/h, against the LP's 1.9
    assert blind_rate(mix("fast", "slow"), DEVICES) == pytest.approx(2.556 / 1.556, rel=1e-3)
    assert blind_rate(mix("fast", "slow"), DEVICES) < best_rate(mix("fast", "slow"), DEVICES)
    only_a = [j for j in mix("fast", "slow") if j.job_type == "A"]
    assert blind_rate(only_a, DEVICES) == pytest.approx(best_rate(only_a, DEVICES))  # one model: nothing to tell


def test_the_work_cap_bounds_the_work_an_hour_even_where_the_lp_must_serve_the_mix_as_it_arrives() -> None:
    # each class busy with the job that loses least there: fast does 1.0 work an hour, slow 0.9 (a B job)
    assert work_cap(mix("fast", "slow"), DEVICES) == pytest.approx(1.9)
    # half A, half B: the LP's work an hour (1.9 jobs/h x 1 device-h each) is the cap itself
    assert best_rate(mix("fast", "slow"), DEVICES) * 1.0 == pytest.approx(work_cap(mix("fast", "slow"), DEVICES))
    # with B scarce (1 in 10) the LP must give slow to A jobs too; a policy serving a backlog of B could not
    # do more than the cap, but it may do more than the LP: the cap is the bound at saturation
    scarce = [j for j in mix("fast", "slow") if j.job_type == "A" or j.id % 10 == 1]
    lp_work = best_rate(scarce, DEVICES) * 1.0
    assert work_cap(scarce, DEVICES) == pytest.approx(1.9)
    assert lp_work < work_cap(scarce, DEVICES) - 0.1
