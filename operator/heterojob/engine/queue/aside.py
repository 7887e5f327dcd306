"""What a waiting job's message says of the classes the queue policy set aside: its own expected completion
there against the class it waits for, and the quota limits that would refuse them besides. Pure; the
scheduling cycle (`engine.queue.cycle`) adds it to the message of every job that waits."""

from __future__ import annotations

import math
from dataclasses import replace

from heterojob.engine.queue import completion
from heterojob.engine.capacity.fleet import Fleet
from heterojob.engine.placing.placement import FleetIndex, Rejection, Request, listed, place


def set_aside(request: Request, narrowed: Request, choice: completion.Choice | None, fleet: Fleet,
              quota_memo: dict[tuple[object, ...], list[Rejection]] | None = None, index: FleetIndex | None = None
              ) -> str:
    """Why the classes of `request` that the policy left out of `narrowed` (`engine.queue.policy.prepare`: a
    waiting job keeps only the classes worth taking now) are not where it waits, from `choice`'s estimates,
    and the quota limits that would refuse them besides: a waiting job's message accounts for every class
    the user listed, not only those its plan explains. Empty when none was set aside. `index`: `fleet`'s
    `FleetIndex`, shared by the calls of one cycle (built once)."""
    kept = {a.device_class for a in narrowed.alternatives}
    aside = [a for a in request.alternatives if a.device_class not in kept]
    if not aside:
        return ""
    done = choice.completion_s if choice is not None else {}
    first = choice.classes[0] if choice is not None and choice.classes else ""  # its best expected completion
    best = done.get(first, math.inf)
    notes = []
    for a in aside:
        c = a.device_class
        mine = done.get(c, math.inf)
        if not (math.isfinite(mine) and math.isfinite(best)):
            notes.append(f"{c}: no expected completion (no usable node of it, or no speed known for it: "
                         f"AcceleratorClass spec.throughput)")
        elif choice is not None and c in choice.unfit:
            notes.append(f"{c}: a last choice: the fleet is saturated and does more work giving {c} to jobs that "
                         f"keep more of their speed there (it runs {first} best for the fleet)")
        elif choice is not None and c in choice.declined:
            notes.append(f"{c}: declined: waiting for {first} is expected to finish sooner (~{_hours(best)}) "
                         f"than starting on {c} now (~{_hours(mine)})")
        else:
            notes.append(f"{c}: waiting for it is expected to finish later (~{_hours(mine)}) than waiting for "
                         f"{first} (~{_hours(best)})")
    text = f"set aside: {listed(notes, 4)}"
    if not fleet.quotas.get(request.namespace):
        return text  # no quota in its namespace: placement refuses nothing by quota (`placement._Quota`)
    aside_request = replace(request, alternatives=aside)
    blockers = quota_memo.get(aside_request.shape) if quota_memo is not None else None
    if blockers is None:  # equal shapes meet the same quotas (`quota_memo`: one fleet, one cycle)
        blockers = [r for r in place(aside_request, fleet, index).rejections if r.quota]
        if quota_memo is not None:
            quota_memo[aside_request.shape] = blockers
    return text + (f"; and quota besides: {listed(blockers, 4)}" if blockers else "")


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h"
