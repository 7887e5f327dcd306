"""Disruption planning: which running jobs give up room for a waiting one (plan only; acting is elsewhere).

`plan_preemption` finds the fewest, lowest-priority running jobs whose devices would let a job fit;
`plan_reclaim` the fewest grown elastic jobs that, shrunk back to the size they were admitted with, would
(growth only borrows room nobody waited for). Both disturb jobs on a scratch `Ledger` until the job fits,
then spare every one it fits without. Called by `engine.admission`, never by actuators directly.
`yield_ends` says whether a job still at the checkpoint it was asked for on another's behalf still yields
(a preemption's victim, or a reclaim's grown job; asked by `controller.moves`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from heterojob.engine.fleet import Allocation, Fleet
from heterojob.engine.placement import Candidate, Ledger, Request, fits, fits_where, place, still_fits


@dataclass(frozen=True)
class RunningJob:
    job: str
    priority: int
    since: float  # when its current placement started (unix seconds)
    allocation: Allocation


@dataclass(frozen=True)
class Preemption:
    victims: tuple[str, ...]
    candidate: Candidate

    def explain(self) -> str:
        c = self.candidate
        return (f"preempting {len(self.victims)} lower-priority job(s) ({', '.join(self.victims)}) "
                f"for {c.region}/{c.device_class}")


def plan_preemption(request: Request, fleet: Fleet, running: Iterable[RunningJob], now: float,
                    min_runtime_s: float) -> Preemption | None:
    """The fewest, lowest-priority running jobs whose devices would let `request` fit, or None.

    Only jobs of strictly lower priority that have run at least `min_runtime_s` are considered. Victims
    are added lowest priority first (then youngest: least progress lost) until the job fits, then any
    victim the job fits without is spared again, most important first.
    """
    classes = {a.device_class for a in request.alternatives}
    pool = sorted((r for r in running if request.may_preempt(r.priority, r.job) and now - r.since >= min_runtime_s
                   and r.allocation.device_class in classes),
                  key=lambda r: (r.priority, -r.since, r.job))
    found = _fewest(request, Ledger(fleet), [_Disturbable(r.job, r.priority, r.since, r.allocation) for r in pool])
    return Preemption(found[0], found[1]) if found else None


class Yield(StrEnum):
    """What a job asked to give room to a waiting one does (the value names it in messages)."""

    PREEMPT = "preemption"  # checkpoints, gives all its devices back and waits (`plan_preemption`)
    RECLAIM = "reclaim"  # checkpoints and shrinks back to its admitted size: the lent devices go back (`plan_reclaim`)

    @property
    def cancelled(self) -> str:
        """The reason (phase and Event) written when it is called off and the job runs on as it is."""
        return "PreemptionCancelled" if self is Yield.PREEMPT else "ReclaimCancelled"


def yield_of(then: str, by: str | None) -> Yield | None:
    """Which yield a pending checkpoint serves (`then` what follows it, `by` the job it is asked for), or
    None: a checkpoint the job asked for itself (a move, its own resize, a periodic one)."""
    if not by:
        return None
    return Yield.PREEMPT if then == "preempt" else Yield.RECLAIM if then == "resize" else None


class YieldEnd(StrEnum):
    """Why a job still at the checkpoint it was asked for on another's behalf yields no more (the value is the
    reason written)."""

    PREEMPTOR_GONE = "PreemptorGone"  # the job it yields to was deleted
    PREEMPTOR_NOT_WAITING = "PreemptorNotWaiting"  # it runs elsewhere, finished, or waits for nothing
    NOT_OUTRANKED = "NotOutranked"  # a priority was edited: the victim is no longer below its preemptor


@dataclass(frozen=True)
class Preemptor:
    """What a victim's yield depends on of the job it yields to, now."""

    priority: int  # spec priority (Priority.rank)
    waiting: bool  # still waits for room (no placement, not finished)


def yield_ends(victim_priority: int, preemptor: Preemptor | None, by_level: bool,
               kind: Yield = Yield.PREEMPT) -> YieldEnd | None:
    """Why a job asked to checkpoint and give room to `preemptor` should run on as it is instead, or None (it
    yields).

    As kube-scheduler re-checks a nominated pod's victims: the yield holds while the job it yields to exists,
    still waits, and may still take the room by spec priority. A preemption: strictly above the victim, or at
    it when the queue policy displaces by level (`by_level`, MLFQ: an earlier level displaces a later one of the
    same priority). A reclaim (`kind`): at or above the grown job, whatever the queue policy, as `plan_reclaim`
    takes lent room back."""
    if preemptor is None:
        return YieldEnd.PREEMPTOR_GONE
    if not preemptor.waiting:
        return YieldEnd.PREEMPTOR_NOT_WAITING
    if victim_priority > preemptor.priority:
        return YieldEnd.NOT_OUTRANKED
    if victim_priority == preemptor.priority and kind is Yield.PREEMPT and not by_level:
        return YieldEnd.NOT_OUTRANKED
    return None


# --- reclaiming lent devices --------------------------------------------------------------------------

@dataclass(frozen=True)
class GrownJob:
    """A running elastic job above the size it was admitted with: the devices beyond it are lent."""

    job: str
    priority: int
    since: float  # when its current (grown) placement started
    allocation: Allocation
    base: Request  # the job at its admitted size, in its class and region


@dataclass(frozen=True)
class Reclaim:
    shrink: tuple[tuple[str, int], ...]  # (job, replicas to go back to)
    candidate: Candidate

    def explain(self) -> str:
        c = self.candidate
        jobs = ", ".join(f"{j} to {n} replica(s)" for j, n in self.shrink)
        return f"reclaiming lent devices: shrinking {jobs} for {c.region}/{c.device_class}"


def plan_reclaim(request: Request, fleet: Fleet, grown: Iterable[GrownJob]) -> Reclaim | None:
    """The fewest grown jobs that, back at their admitted size, would let `request` fit, or None.

    A job grows only into room no waiting job of its priority or above could use, so that room is lent:
    a waiting job of the same priority or above takes it back. Grown jobs are shrunk lowest priority
    first, then the most recently grown; each goes back to its base size in its own class and region.
    """
    classes = {a.device_class for a in request.alternatives}
    pool = sorted((g for g in grown if g.priority <= request.priority and g.allocation.device_class in classes),
                  key=lambda g: (g.priority, -g.since, g.job))
    found = _fewest(request, Ledger(fleet),
                    [_Disturbable(g.job, g.priority, g.since, g.allocation, g.base) for g in pool])
    if found is None:
        return None
    replicas = {g.job: g.base.replicas for g in pool}
    return Reclaim(tuple((j, replicas[j]) for j in found[0]), found[1])


@dataclass(frozen=True)
class _Disturbable:
    job: str
    priority: int
    since: float
    allocation: Allocation
    base: Request | None = None  # shrink to this size (reclaim); None: stop the job (preemption)


def _fewest(request: Request, ledger: Ledger, pool: Sequence[_Disturbable]
            ) -> tuple[tuple[str, ...], Candidate] | None:
    """Disturb jobs of `pool` in order until `request` fits (each gives up its allocation and, with a
    base request, is placed again at that size), then spare any it fits without, most important first."""
    if pool and all(item.base is None for item in pool):
        return _fewest_victims(request, ledger, pool)
    smaller: dict[str, Allocation | None] = {}

    def disturb(item: _Disturbable) -> bool:
        ledger.take(item.allocation, -1)
        if item.base is None:
            smaller[item.job] = None
            return True
        result = ledger.place(item.base).chosen
        if result is None:  # cannot go back to its base size in its class and region: leave it be
            ledger.take(item.allocation, +1)
            return False
        smaller[item.job] = result.allocation(item.base.namespace)
        return True

    def spare(item: _Disturbable) -> None:
        shrunk = smaller.pop(item.job)
        if shrunk is not None:
            ledger.take(shrunk, -1)
        ledger.take(item.allocation, +1)

    chosen: list[_Disturbable] = []
    fits: Candidate | None = None
    for item in pool:
        if not disturb(item):
            continue
        chosen.append(item)
        fits = place(request, ledger.fleet, ledger.index).chosen if ledger.may_fit(request) else None
        if fits is not None:
            break
    if fits is None:
        return None
    for item in sorted(chosen, key=lambda i: (-i.priority, i.since)):
        spare(item)
        spared = place(request, ledger.fleet, ledger.index).chosen
        if spared is not None:
            chosen.remove(item)
            fits = spared
        else:
            disturb(item)
    final = place(request, ledger.fleet, ledger.index).chosen
    return tuple(i.job for i in chosen), final or fits


def _fewest_victims(request: Request, ledger: Ledger, pool: Sequence[_Disturbable]
                    ) -> tuple[tuple[str, ...], Candidate] | None:
    """`_fewest` for jobs that only give room back (none is placed again at a smaller size): the same victims
    and candidate, found with fewer placements. Room only grows as more of `pool` (in order) give theirs
    back, so whether `request` fits is monotone in how many do: the fewest are found by doubling, then
    bisecting, asking only whether it fits (`placement.fits`). A victim whose room is not where the job fits
    is spared without asking (`placement.still_fits`); sparing one and taking it again leaves the ledger as
    it was, so the room after sparing still fits and only the last placement is made whole."""
    done = 0  # pool[:done] have given their room back on `ledger`

    def upto(k: int) -> bool:
        nonlocal done
        while done < k:
            ledger.take(pool[done].allocation, -1)
            done += 1
        while done > k:
            done -= 1
            ledger.take(pool[done].allocation, +1)
        return ledger.may_fit(request) and fits(request, ledger.fleet, ledger.index)

    low, high = 0, 1  # `request` does not fit with pool[:low] given back (0: not asked, as `_fewest`)
    while not upto(high):
        if high == len(pool):
            return None
        low, high = high, min(2 * high, len(pool))
    while high - low > 1:  # fits with pool[:high], not with pool[:low]
        middle = (low + high) // 2
        if upto(middle):
            high = middle
        else:
            low = middle
    upto(high)
    spared: set[int] = set()
    where = fits_where(request, ledger.fleet, ledger.index)  # where it fits now
    for k in sorted(range(high), key=lambda k: (-pool[k].priority, pool[k].since)):
        room = pool[k].allocation
        ledger.take(room, +1)
        if where is not None and still_fits(where, room, request, ledger.index):
            spared.add(k)
            continue
        found = fits_where(request, ledger.fleet, ledger.index)
        if found is not None:
            spared.add(k)
            where = found
        else:
            ledger.take(room, -1)  # as it was: `where` holds again
    final = place(request, ledger.fleet, ledger.index).chosen
    assert final is not None  # every step above left room it fits
    return tuple(pool[k].job for k in range(high) if k not in spared), final
