"""Why a gang does not fit, in the words a user reads in the job's message: a region's room too small (with
the nodes not counted, left out for a chip's network or failing the software check), or no node of a class
meeting an alternative's software and labels. Pure; `engine.placing.placement` builds its rejections with these."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from heterojob.engine.capacity.filters import software_mismatch, software_summary
from heterojob.engine.capacity.fleet import DeviceClass
from heterojob.engine.capacity.fleet_index import FleetIndex
from heterojob.engine.capacity.placement_types import Alternative, Rejection, Request


def _soft_rejection(index: FleetIndex, cls: DeviceClass, alt: Alternative,
                    soft_failed: Mapping[str, Mapping[str, int]]) -> Rejection:
    """Every usable node of the class fails `alt`'s software or labels: one rejection, in the class's words
    when no node publishes its own version of what failed (cached per fleet view)."""
    key = (cls.name, alt.needs)
    known = index._v.soft_rejection.get(key)
    if known is None:
        mismatch = software_mismatch(cls, alt.requires)
        own = any(name in index.fleet.nodes[n].software for n in _class_nodes(index, cls) for name in alt.requires)
        if mismatch is not None and not own and not alt.node_labels and not alt.pod_requests:
            known = Rejection(cls.name, f"software: {mismatch}")
        else:
            merged: dict[str, int] = {}
            for reasons in soft_failed.values():
                for why, n in reasons.items():
                    merged[why] = merged.get(why, 0) + n
            known = Rejection(cls.name, f"software: {software_summary(merged)}")
        index._v.soft_rejection[key] = known
    return known


def _class_nodes(index: FleetIndex, cls: DeviceClass) -> Iterable[str]:
    for names in index.nodes(cls).values():
        yield from names


NETWORK_DOWN = "network down"  # the filter's name in messages: a chip's network or RoCE link is down


def _no_room(free: Mapping[str, int], request: Request, alt: Alternative, unfit_why: Mapping[str, int],
             soft_failed: Mapping[str, int], network_down: Mapping[str, str] = {},  # noqa: B006 - read only
             counted: bool | None = None) -> str:
    """Why the gang does not fit the region's `free` room (nodes without free devices may be left out of it:
    `counted` then says whether the region has any node counted, full or not)."""
    unfit = sum(unfit_why.values())
    if counted is None:
        counted = bool(free)
    if not counted and not soft_failed and not network_down and len(unfit_why) == 1 and unfit:
        # no node of the region counts, for one reason (a lost member cluster, all NotReady...): say that,
        # not "0 free on 0 node(s)"
        why = next(iter(unfit_why))
        return f"{why}: its {unfit} node(s) are not counted"
    fit = sum(f // alt.per_replica for f in free.values())
    total = sum(free.values())
    text = (f"room for {fit} of {request.replicas} replicas ({total} free on "
            f"{sum(1 for f in free.values() if f)} node(s), {alt.per_replica} per replica)")
    if unfit:
        whys = ", ".join(f"{why} ({n})" if len(unfit_why) > 1 else why
                         for why, n in sorted(unfit_why.items(), key=lambda kv: (-kv[1], kv[0]))[:3])
        text += f"; {unfit} node(s) not Ready, cordoned, tainted or unhealthy: {whys}"
    if network_down:
        first = sorted(network_down)[0]
        text += (f"; {len(network_down)} node(s) left out, {NETWORK_DOWN} (an Ascend chip's collectives cannot "
                 f"cross it; a job of {request.replicas} replicas needs them): {first}: {network_down[first]}"
                 + (f" and {len(network_down) - 1} more" if len(network_down) > 1 else ""))
    return text + (f"; {software_summary(soft_failed)}" if soft_failed else "")
