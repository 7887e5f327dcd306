"""The bench's throughput yardstick (`replay.capacity`): Gavel's fluid max-throughput LP and the static
partition's bound, on a mix small enough to solve by hand."""

from __future__ import annotations

import pytest

from heterojob.replay.capacity import best_rate, blind_rate, static_rate
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
