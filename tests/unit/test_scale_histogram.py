"""bench/scale.py's reading of the cycle-CPU histogram between two scrapes: the p95's bucket and each bucket's
share, over the measured phase only (what came before the first reading is not counted)."""

from bench.scale import histogram_quantile, histogram_shares

INF = float("inf")


def test_the_shares_and_the_quantile_count_only_the_cycles_between_the_readings() -> None:
    first = {0.25: 5.0, 0.5: 5.0, 1.0: 10.0, INF: 10.0}  # before: 5 fast cycles, 5 slow ones
    last = {0.25: 15.0, 0.5: 23.0, 1.0: 29.0, INF: 30.0}  # between: 10 <= 0.25, 8 more <= 0.5, 1 more <= 1, 1 over
    assert histogram_shares(first, last) == {"0.25": 0.5, "0.5": 0.9, "1": 0.95}
    assert histogram_quantile(first, last, 0.95) == 1.0
    assert histogram_quantile(first, last, 0.9) == 0.5
    assert histogram_shares(first, first) == {}  # no cycle between: no share, not a division by zero
