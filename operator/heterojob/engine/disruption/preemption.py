"""Disruption planning: which running jobs give up room for a waiting one (plan only; acting is elsewhere).

`plan_preemption` finds the fewest, lowest-priority running jobs whose devices would let a job fit;
`plan_reclaim` the fewest grown elastic jobs that, shrunk back to the size they were admitted with, would
(growth only borrows room nobody waited for). Both disturb jobs on a scratch `Ledger` until the job fits,
then spare every one it fits without. Called by `engine.queue.admission`, never by actuators directly.
`yield_ends` says whether a job still at the checkpoint it was asked for on another's behalf still yields
(a preemption's victim, or a reclaim's grown job; asked by `controller.moves`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple

from heterojob.engine.capacity.fleet import Allocation, Fleet
from heterojob.engine.disruption import victims
from heterojob.engine.placing.placement import Candidate, Ledger, Request, fits, fits_where, place, still_fits


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
    victim the job fits without is spared again, most important first. `running` may come `Ordered`
    (then it is read only as far as the victims go).
    """
    classes = {a.device_class for a in request.alternatives}
    may = request.may_preempt
    pool: Iterable[_Disturbable] = (
        _Disturbable(r.job, r.priority, r.since, r.allocation)
        for r in (running if isinstance(running, Ordered) else sorted(running, key=_order))
        if now - r.since >= min_runtime_s and r.allocation.device_class in classes and may(r.priority, r.job))
    found = _fewest(request, Ledger(fleet), pool, victims_only=True)
    return Preemption(found[0], found[1]) if found else None


def _order(r: RunningJob) -> tuple[int, float, str]:
    """The order victims are added in: lowest priority, then youngest, then name."""
    return (r.priority, -r.since, r.job)


class Ordered(Iterable[RunningJob]):
    """Running jobs already in the order `plan_preemption` adds victims in (`_order`), read lazily: from
    several lists each in that order (`admission._Pool`, per class)."""

    def __init__(self, *runs: Iterable[RunningJob]) -> None:
        self.runs = runs

    def __iter__(self) -> Iterator[RunningJob]:
        if len(self.runs) == 1:
            return iter(self.runs[0])
        return heapq.merge(*self.runs, key=_order)


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


class _Disturbable(NamedTuple):  # a tuple: made for every victim a search reads
    job: str
    priority: int
    since: float
    allocation: Allocation
    base: Request | None = None  # shrink to this size (reclaim); None: stop the job (preemption)


def _fewest(request: Request, ledger: Ledger, pool: Iterable[_Disturbable], victims_only: bool = False
            ) -> tuple[tuple[str, ...], Candidate] | None:
    """Disturb jobs of `pool` in order until `request` fits (each gives up its allocation and, with a
    base request, is placed again at that size), then spare any it fits without, most important first.
    `victims_only`: no job of `pool` has a base (then `pool` is read only as far as needed). Whether it
    fits after each step is asked of `victims.Search`, not placed; the ledger still places each job at its
    base size."""
    if victims_only:  # the same, with fewer placements
        return _fewest_victims(request, ledger, pool)
    search = victims.Search(request, ledger)
    if not search.known:
        return _fewest_placing(request, ledger, list(pool))
    if not search.pairs:
        return None  # it fits nowhere, whoever gives room
    smaller: dict[str, Allocation | None] = {}
    since_fit: list[tuple[Allocation, int]] = []  # what the ledger took since the last room it fit in

    def take(room: Allocation, sign: int) -> None:
        if sign > 0:  # the search first: it reads what the ledger used before
            search.take(room)
        else:
            search.give(room)
        ledger.take(room, sign)
        since_fit.append((room, sign))

    def disturb(item: _Disturbable) -> bool:
        take(item.allocation, -1)
        if item.base is None:
            smaller[item.job] = None
            return True
        # `ledger.place(item.base)`, its room taken by `take` (its memo of failed shapes only saves time)
        result = place(item.base, ledger.fleet, ledger.index).chosen
        if result is None:  # cannot go back to its base size in its class and region: leave it be
            take(item.allocation, +1)
            return False
        smaller[item.job] = shrunk = result.allocation(item.base.namespace)
        take(shrunk, +1)
        return True

    def spare(item: _Disturbable) -> None:
        shrunk = smaller.pop(item.job)
        if shrunk is not None:
            take(shrunk, -1)
        take(item.allocation, +1)

    chosen: list[_Disturbable] = []
    for item in pool:
        if not disturb(item):
            continue
        chosen.append(item)
        if search.fits():
            since_fit.clear()
            break
    else:
        return None
    for item in sorted(chosen, key=lambda i: (-i.priority, i.since)):
        spare(item)
        if search.fits():
            chosen.remove(item)
            since_fit.clear()
        else:
            disturb(item)
    final = place(request, ledger.fleet, ledger.index).chosen
    if final is None:  # the last room it fit in: back to it
        for room, sign in reversed(since_fit):
            ledger.take(room, -sign)
        final = place(request, ledger.fleet, ledger.index).chosen
    assert final is not None
    return tuple(i.job for i in chosen), final


def _fewest_placing(request: Request, ledger: Ledger, pool: Sequence[_Disturbable]
                    ) -> tuple[tuple[str, ...], Candidate] | None:
    """`_fewest`, placing `request` after every step (when `victims.Search` cannot tell)."""
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


def _fewest_victims(request: Request, ledger: Ledger, pool: Iterable[_Disturbable]
                    ) -> tuple[tuple[str, ...], Candidate] | None:
    """`_fewest` for jobs that only give room back (none is placed again at a smaller size): the same victims
    and candidate, with one placement. Each step asks only whether `request` fits now, which
    `victims.Search` answers as victims give their room back and are spared again; the ledger takes only the
    victims chosen in the end."""
    search = victims.Search(request, ledger)
    if not search.known:
        return _fewest_on_ledger(request, ledger, list(pool))
    if not search.pairs:
        return None
    chosen: list[_Disturbable] = []  # `victims.first_fit`, inline: victims added until it fits
    read: list[bool] = []  # whether the search reads anything of each
    fits = search.fits()  # it fits already: the first victim is added before it is asked
    for item in pool:
        chosen.append(item)
        if fits:
            break
        read.append(search.give(item.allocation))
        if search.fits():
            break
    else:
        return None
    if fits:
        read.append(search.give(chosen[0].allocation))
    first = len(chosen)
    spared: set[int] = set()
    for k in sorted(range(first), key=lambda k: (-chosen[k].priority, chosen[k].since)):
        if not read[k]:  # taken again, it changes nothing the search reads: the job still fits
            spared.add(k)
            continue
        search.take(chosen[k].allocation)
        if search.fits():
            spared.add(k)
        else:
            search.give(chosen[k].allocation)
    kept = [item for k, item in enumerate(chosen) if k not in spared]
    ledger.take_all((item.allocation for item in kept), -1)
    final = place(request, ledger.fleet, ledger.index).chosen
    assert final is not None  # `search` said it fits
    return tuple(item.job for item in kept), final


def _fewest_on_ledger(request: Request, ledger: Ledger, pool: Sequence[_Disturbable]
                      ) -> tuple[tuple[str, ...], Candidate] | None:
    """`_fewest_victims` when `victims.Search` cannot tell: the first count of victims by doubling, then
    bisecting, on `placement.fits`; a victim whose room is not where the job fits spared without asking
    (`placement.still_fits`; its room taken back on the ledger only before the next question). Sparing one
    and taking it again leaves the ledger as it was, so the room after sparing still fits."""
    rooms = [item.allocation for item in pool]
    first = _first_by_bisection(request, ledger, rooms)
    if first is None:
        return None
    ledger.take_all(rooms[:first], -1)
    where = fits_where(request, ledger.fleet, ledger.index)  # where it fits now
    assert where is not None
    spared: set[int] = set()
    pending: list[Allocation] = []  # spared, not yet taken back on the ledger (nowhere near `where`)
    for k in sorted(range(first), key=lambda k: (-pool[k].priority, pool[k].since)):
        pending.append(rooms[k])
        if still_fits(where, rooms[k], request, ledger.index):
            spared.add(k)
            continue
        ledger.take_all(pending, +1)
        pending = []
        found = fits_where(request, ledger.fleet, ledger.index)
        if found is not None:
            spared.add(k)
            where = found
        else:
            ledger.take(rooms[k], -1)  # as it was: `where` holds again
    ledger.take_all(pending, +1)
    final = place(request, ledger.fleet, ledger.index).chosen
    assert final is not None  # every step above left room it fits
    return tuple(pool[k].job for k in range(first) if k not in spared), final


def _first_by_bisection(request: Request, ledger: Ledger, rooms: Sequence[Allocation]) -> int | None:
    """`victims.first_fit` by doubling, then bisecting, on `placement.fits` (the ledger left as it was)."""
    done = 0  # rooms[:done] given back on `ledger`

    def upto(k: int) -> bool:
        nonlocal done
        if done < k:
            ledger.take_all(rooms[done:k], -1)
        else:
            ledger.take_all(rooms[k:done], +1)
        done = k
        return ledger.may_fit(request) and fits(request, ledger.fleet, ledger.index)

    low, high = 0, 1  # `request` does not fit with rooms[:low] given back (0: not asked, as `_fewest`)
    found: int | None = None
    while rooms and found is None:
        if upto(high):
            found = high
        elif high == len(rooms):
            break
        else:
            low, high = high, min(2 * high, len(rooms))
    while found is not None and high - low > 1:  # fits with rooms[:high], not with rooms[:low]
        middle = (low + high) // 2
        if upto(middle):
            high = found = middle
        else:
            low = middle
    upto(0)
    return found
