"""Where a job that leaves its room lands: a voluntary move's destination (`plan_move`, make before break) and
an involuntary move's (`plan_relocation`, the cheapest checkpoint transfer that fits: `cheapest_tier`). Pure.

Step of the pipeline: the planner's move paths, on top of `engine.queue.admission.plan_one`. Called by the moves
step (`controller.moves`), the scheduling cycle (`engine.queue.cycle`), the console's previews and the tests.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from heterojob.engine.capacity import transfer
from heterojob.engine.disruption.holders import Holder
from heterojob.engine.queue.admission import Admission, AdmissionSettings, Outcome, plan_one
from heterojob.engine.capacity.fleet import Fleet
from heterojob.engine.placing.placement import Ledger, Request, place


def plan_move(request: Request, queue: Iterable[Request], holders: Iterable[Holder], fleet_without_it: Fleet,
              now: float, settings: AdmissionSettings = AdmissionSettings(),
              move: transfer.Move | None = None) -> Admission:
    """Where a running job would land if it moved now (make before break): PLACED with the destination to
    reserve before its checkpoint is asked for, or why there is none. A voluntary move takes no room a job
    ahead of it in the queue could use and disturbs nobody. `fleet_without_it` must not count the job's
    own devices (it gives them up when it moves); `request` says which nodes it leaves. With `move` (its
    checkpoint and the region it leaves), a destination in another region is taken only when
    `transfer.judge` lets it: the move saves more than it costs and a link leads there; when only such
    regions had room, the answer names the reason (`reason`: NoLink, TransferExceedsSaving or
    LostWorkExceedsSaving)."""
    verdicts: dict[str, transfer.TransferVerdict] = {}
    open_ = True
    if move is not None:
        verdicts = {r: transfer.judge(move, r, fleet_without_it.regions) for r in _regions(request, fleet_without_it)}
        if any(not v.ok for v in verdicts.values()):
            request = replace(request, allowed_regions=tuple(sorted(r for r, v in verdicts.items() if v.ok)))
            open_ = bool(request.allowed_regions)
    others = [h for h in holders if h.job != request.job]
    if open_:
        admission = plan_one(request, [r for r in queue if r.job != request.job], others, fleet_without_it, now,
                             settings)
    else:  # every region is refused
        admission = Admission(request.job, Outcome.NO_ROOM, "no region may be moved to")
    if admission.outcome == Outcome.PLACED:
        assert admission.candidate is not None
        verdict = verdicts.get(admission.candidate.region)
        if verdict is not None and verdict.cost is not None and verdict.cost.link is not None:
            return replace(admission, message=f"{admission.message}; {verdict.message}")
        return admission
    why = admission.message if admission.outcome in (Outcome.QUEUED, Outcome.NO_ROOM) else \
        place(request, fleet_without_it).explain()
    refused = {r: v for r, v in verdicts.items() if not v.ok}
    if refused:  # would it have fitted in a region the transfer rules out? then that is why it is held
        fits = place(replace(request, allowed_regions=tuple(sorted(refused))), fleet_without_it).chosen
        if fits is not None:
            v = refused[fits.region]
            others_refused = "; ".join(x.message for r, x in sorted(refused.items()) if r != fits.region)
            return Admission(request.job, Outcome.NO_ROOM, f"no destination worth the move: {v.message}"
                             + (f"; also {others_refused}" if others_refused else "")
                             + (f"; elsewhere {why}" if open_ else ""), reason=v.reason.value)
    return Admission(request.job, Outcome.NO_ROOM, f"no destination: {why}")


def plan_relocation(request: Request, queue: Iterable[Request], holders: Iterable[Holder], fleet: Fleet, now: float,
                    settings: AdmissionSettings = AdmissionSettings(), move: transfer.Move | None = None) -> Admission:
    """`plan_one` for a job that must leave where it ran (an involuntary move: a dead device, a lost member):
    with `move`, the regions that fit are tried cheapest transfer first (`cheapest_tier`), and the first tier
    where it is placed wins; when none places it, the plan over every allowed region (it may preempt or queue
    there) as before."""
    queue, holders = list(queue), list(holders)
    if move is not None:
        _, placed = cheapest_tier(request, queue, holders, fleet, now, settings, move)
        if placed is not None and placed.candidate is not None:
            v = transfer.judge(move, placed.candidate.region, fleet.regions)
            note = f"; the cheapest transfer that fits: {v.message}" if v.cost and v.cost.link else ""
            return replace(placed, message=placed.message + note)
    return plan_one(request, queue, holders, fleet, now, settings)


def cheapest_tier(request: Request, queue: list[Request], holders: list[Holder], fleet: Fleet, now: float,
                  settings: AdmissionSettings, move: transfer.Move) -> tuple[Request, Admission | None]:
    """`request` narrowed to the first tier of regions (`transfer.tiers`: its own, then by transfer time,
    unlinked last) where `plan_one` places it now, with that plan; (`request`, None) when no tier does or
    there is one tier only."""
    groups = transfer.tiers(move, _regions(request, fleet), fleet.regions)
    if len(groups) > 1:
        mine = Ledger(fleet)  # room reserved for the job itself (the healthy part of its old room) is its own
        for h in holders:
            if h.job == request.job and h.waiting:
                mine.take(h.allocation, -1)
        for tier in groups:
            narrowed = replace(request, allowed_regions=tier)
            if place(narrowed, mine.fleet, mine.index).chosen is None:
                continue  # nothing fits there even alone: no plan needed
            admission = plan_one(narrowed, queue, holders, fleet, now, settings)
            if admission.outcome == Outcome.PLACED:
                return narrowed, admission
    return request, None


def _regions(request: Request, fleet: Fleet) -> list[str]:
    """The regions `request` may go to: its allowed ones, else every region of the fleet."""
    if request.allowed_regions:
        return list(request.allowed_regions)
    names = set(fleet.regions)
    if not fleet.regions:
        names |= {n.region for n in fleet.nodes.values() if n.region}
    return sorted(names)
