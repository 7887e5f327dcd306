"""Idle room past the knee, by comparative advantage (Gavel's allocation, greedy). Pure.

Step of the pipeline: inside `engine.queue.policy.prepare`, after each waiting job chose its classes by its own
expected completion (`engine.queue.completion.choose`). A job declines a slower class it could start on now when
waiting for a faster one is expected to finish sooner; below the knee that costs the fleet nothing (room
frees before a queue builds). Past it, once the waiting jobs ask for at least the fleet's devices
(`saturated`), every device left idle is throughput lost for good, while those jobs wait anyway: the fluid
max-throughput allocation (Gavel) keeps every class busy and gives each class to the jobs that lose least
there against their own fastest class. So the room still free after the pass goes to the waiting jobs that
declined it, the highest relative speed there first (what the operator knows: measured, or the sheet's
guess), as a last choice after the classes they wait for. A move up later pays for itself or not
(`engine.queue.completion.plan_upgrades`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Decliner:
    """A waiting job that declined classes it could start on now, in queue order (`order`)."""

    job: str
    order: int
    declined: tuple[str, ...]
    need: Mapping[str, int]  # devices it needs per class
    rel: Mapping[str, float]  # relative speed per class (1.0: its fastest)


def saturated(waiting_devices: int, fleet_devices: int, above: float) -> bool:
    """Whether the waiting jobs ask for at least `above` x the fleet's devices (past the knee)."""
    return fleet_devices > 0 and waiting_devices >= above * fleet_devices


def fill(free: Mapping[str, int], decliners: Iterable[Decliner]) -> dict[str, str]:
    """job -> the declined class it takes as a last choice: per class with room left, the jobs that declined
    it by relative speed there (highest first, then queue order), while the room lasts; a job gets one."""
    left = {c: n for c, n in free.items() if n > 0}
    if not left:
        return {}
    wants = sorted(((d.rel.get(c, 0.0), d.order, c, d) for d in decliners for c in d.declined
                    if c in left and d.rel.get(c, 0.0) > 0),
                   key=lambda x: (-x[0], x[1], x[2]))
    out: dict[str, str] = {}
    for _, _, c, d in wants:
        n = d.need.get(c, 0)
        if d.job in out or n <= 0 or left.get(c, 0) < n:
            continue
        left[c] -= n
        out[d.job] = c
    return out
