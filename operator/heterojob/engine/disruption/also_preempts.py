"""Whom a promoted job still displaces past the point where promotions displace by level, indexed once per
`policy.prepare` pass. Pure.

A promoted job whose promotion does not displace (`Knowledge.promoted_displace` off) still displaces the
running jobs of the levels between the one it preempts with and its rank that are expected to run longer
than it by more than a turn costs (`policy.prepare`). Past the knee most waiting jobs are promoted, and each
asked every running job; `AlsoPreempts` sorts the running jobs of each such span of ranks once by expected
remaining work, so each job's answer is a bisection, and equal answers are the same set (what later steps
key on)."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence


class AlsoPreempts:
    """`AlsoPreempts(ranked, work)(work_s, above, rank)`: the jobs of `ranked` ((job, effective priority) pairs)
    ranked in [above, rank) whose expected remaining work (`work()`: job -> reference seconds, read on first
    use) is more than `work_s`."""

    def __init__(self, ranked: Sequence[tuple[str, int]], work: Callable[[], Mapping[str, float]]) -> None:
        self._ranked, self._work = ranked, work
        # (above, rank) -> the span's works ascending, its jobs by work descending, and the sets made so far
        self._spans: dict[tuple[int, int], tuple[list[float], list[str], dict[int, frozenset[str]]]] = {}

    def __call__(self, work_s: float, above: int, rank: int) -> frozenset[str]:
        span = self._spans.get((above, rank))
        if span is None:
            work = self._work()
            jobs = sorted((work[job], job) for job, p in self._ranked if above <= p < rank)
            span = self._spans[(above, rank)] = ([w for w, _ in jobs], [job for _, job in reversed(jobs)], {})
        works, longest_first, made = span
        count = len(works) - bisect.bisect_right(works, work_s)  # works strictly above `work_s`
        out = made.get(count)
        if out is None:
            out = made[count] = frozenset(longest_first[:count])
        return out
