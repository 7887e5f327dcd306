"""The straightforward planner pieces the fast ones replaced, kept as the oracle they must equal. Pure.

`place_reference` is `placement.place` as it was before free room was indexed (`engine.capacity.rooms`): for each
(class, region) it reads every usable node, full or not, packs by scanning, and scores by summing over the
region. `may_fit_reference` is `Ledger.may_fit` by a scan of the class's nodes; `fewest_reference` is
`preemption._fewest` placing the job after every victim added or spared; `victims_reference` and
`most_replicas_reference` are `pool._Pool.victims` as one list of every class (sorted by
`plan_preemption`) and `_Pool._most_replicas` by a scan of every node and disturbable holder; the pool's
bound on quota (`_Pool.quota_allows`) is left out (every search runs). `reference()`
swaps them in for the planner (`engine.queue.admission`, `engine.disruption.preemption`), so a test or a benchmark can run
the same plan either way and compare (tests/unit/test_planner_exact.py, bench/planner.py). Not used by the
operator, so it lives with the tests rather than in its package.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

from heterojob.engine.disruption import pool, preemption
from heterojob.engine.placing import placement
from heterojob.engine.capacity.fleet import Allocation, Fleet, cpu_classes, quota_room
from heterojob.engine.placing.placement import (
    NETWORK_DOWN, W_BALANCE, W_PACKING, W_PREFERENCE, W_PREFERRED_REGION, W_THROUGHPUT, Alternative, Candidate, DeviceClass, FleetIndex, Ledger, Rejection, Request, Result, software_mismatch, software_summary,
)


def pack_reference(free: Mapping[str, int], replicas: int, per_replica: int) -> tuple[str, ...] | None:
    """Best fit: each replica goes to the node with the least free room that still holds it.

    Keeps whole nodes free for larger gangs (less fragmentation). Returns one node per rank, or None.
    """
    room = {n: f for n, f in free.items() if f >= per_replica}
    chosen: list[str] = []
    for _ in range(replicas):
        if not room:
            return None
        node = min(room, key=lambda n: (room[n], n))
        room[node] -= per_replica
        if room[node] < per_replica:
            del room[node]
        chosen.append(node)
    return tuple(chosen)



def place_reference(request: Request, fleet: Fleet, index: FleetIndex | None = None) -> Result:
    index = index or FleetIndex(fleet)
    result = Result(chosen=None)
    feasible: list[Candidate] = []
    limits = fleet.quotas.get(request.namespace, ())
    held = fleet.held.get(request.namespace, {})
    for i, alt in enumerate(request.alternatives):
        cls = fleet.classes.get(alt.device_class)
        if cls is None:
            known = ", ".join(sorted(fleet.classes)) or "none"
            result.rejections.append(Rejection(alt.device_class, f"unknown AcceleratorClass (known: {known})"))
            continue
        regions = index.regions(cls)
        if not regions:
            mismatch = software_mismatch(cls, alt.requires)
            reason = f"software: {mismatch}" if mismatch else "no node of this class in any region"
            result.rejections.append(Rejection(cls.name, reason))
            continue
        by_region, soft_failed = index.software(cls, alt)
        if soft_failed and not any(by_region.values()):
            # every usable node of the class fails: one rejection, in the class's words when no node
            # publishes its own version of what failed
            mismatch = software_mismatch(cls, alt.requires)
            own = any(name in index.fleet.nodes[n].software for n in _class_nodes_reference(index, cls)
                      for name in alt.requires)
            if mismatch is not None and not own and not alt.node_labels and not alt.pod_requests:
                result.rejections.append(Rejection(cls.name, f"software: {mismatch}"))
            else:
                merged: dict[str, int] = {}
                for reasons in soft_failed.values():
                    for why, n in reasons.items():
                        merged[why] = merged.get(why, 0) + n
                result.rejections.append(Rejection(cls.name, f"software: {software_summary(merged)}"))
            continue
        need = request.replicas * alt.per_replica
        capacity, used, resource = index.capacity(cls), fleet.used, cls.resource_name
        for region in request.allowed_regions:
            if region not in regions:  # say why an allowed region fails, ahead of the regions not allowed
                result.rejections.append(Rejection(f"{region}/{cls.name}", f"no {cls.name} node in this region"))
        for region in regions:
            label = f"{region}/{cls.name}"
            if request.allowed_regions and region not in request.allowed_regions:
                result.rejections.append(Rejection(label, request.outside_allowed))
                continue
            over = quota_room(limits, held, cls.name, region, need, cpu_classes(fleet.classes))
            if over is not None:
                result.rejections.append(Rejection(label, over, quota=True))
                continue
            names = [n for n in by_region.get(region, ()) if n not in request.exclude_nodes]
            cut: list[str] = []
            if request.replicas > 1 and fleet.network_down:  # a gang's collectives cross every chip's network
                cut = [n for n in names if n in fleet.network_down]
                names = [n for n in names if n not in fleet.network_down]
            free = {n: max(0, capacity[n] - used.get((n, resource), 0)) for n in names}
            nodes = pack_reference(free, request.replicas, alt.per_replica)
            if nodes is None:
                result.rejections.append(Rejection(label, _no_room_reference(free, request, alt,
                                                                   index.unfit_reasons(cls, region),
                                                                   soft_failed.get(region, {}),
                                                                   {n: fleet.network_down[n] for n in cut})))
                continue
            score = _score_reference(i, len(request.alternatives), cls, region, request, capacity, free, nodes,
                                     alt.per_replica)
            feasible.append(Candidate(region, i, cls.name, cls.resource_name, alt.per_replica, nodes, score))
    if feasible:
        result.chosen = max(feasible, key=lambda c: (c.score, -c.alternative_index, c.region))
    return result


def _class_nodes_reference(index: FleetIndex, cls: DeviceClass) -> Iterable[str]:
    for names in index.nodes(cls).values():
        yield from names


def _no_room_reference(free: Mapping[str, int], request: Request, alt: Alternative, unfit_why: Mapping[str, int],
             soft_failed: Mapping[str, int], network_down: Mapping[str, str] = {}) -> str:  # noqa: B006 - read only
    unfit = sum(unfit_why.values())
    if not free and not soft_failed and not network_down and len(unfit_why) == 1 and unfit:
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


def _score_reference(index: int, n_alts: int, cls: DeviceClass, region: str, request: Request,
                     capacity: Mapping[str, int], free: Mapping[str, int], nodes: tuple[str, ...],
                     per_replica: int) -> float:
    preference = W_PREFERENCE * (n_alts - index)
    preferred = 0.0
    if region in request.preferred_regions:
        n = len(request.preferred_regions)
        preferred = W_PREFERRED_REGION * (n - list(request.preferred_regions).index(region)) / n
    throughput = W_THROUGHPUT * min(cls.throughput, 1.0)
    # packing: how full the chosen nodes are afterwards (fills partly used nodes, keeps empty ones whole)
    chosen = set(nodes)
    chosen_capacity = sum(capacity[n] for n in chosen) or 1
    left = sum(free[n] for n in chosen) - len(nodes) * per_replica
    packing = W_PACKING * (1 - left / chosen_capacity)
    # balance: prefer the region with the larger share of this class still free afterwards
    region_capacity = sum(capacity[n] for n in free) or 1
    balance = W_BALANCE * (sum(free.values()) - len(nodes) * per_replica) / region_capacity
    return preference + preferred + throughput + packing + balance


def may_fit_reference(ledger: Ledger, request: Request) -> bool:
    """`Ledger.may_fit` by a scan of every usable node of each alternative's class."""
    for alt in request.alternatives:
        cls = ledger.fleet.classes.get(alt.device_class)
        if cls is None:
            continue
        used, resource, total, most = ledger.used, cls.resource_name, 0, 0
        for node, capacity in ledger.index.capacity(cls).items():
            free = capacity - used.get((node, resource), 0)
            if free > 0:
                total += free
                most = max(most, free)
        if most > 0 and most >= alt.per_replica and total >= request.replicas * alt.per_replica:
            return True
    return False


def fewest_reference(request: Request, ledger: Ledger, pool: Iterable[preemption._Disturbable],
                     victims_only: bool = False) -> tuple[tuple[str, ...], Candidate] | None:
    """Disturb jobs of `pool` in order until `request` fits (each gives up its allocation and, with a
    base request, is placed again at that size), then spare any it fits without, most important first."""
    smaller: dict[str, Allocation | None] = {}

    def disturb(item: preemption._Disturbable) -> bool:
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

    def spare(item: preemption._Disturbable) -> None:
        shrunk = smaller.pop(item.job)
        if shrunk is not None:
            ledger.take(shrunk, -1)
        ledger.take(item.allocation, +1)

    chosen: list[preemption._Disturbable] = []
    fits: Candidate | None = None
    for item in pool:
        if not disturb(item):
            continue
        chosen.append(item)
        fits = (place_reference(request, ledger.fleet, ledger.index).chosen if may_fit_reference(ledger, request)
                else None)
        if fits is not None:
            break
    if fits is None:
        return None
    for item in sorted(chosen, key=lambda i: (-i.priority, i.since)):
        spare(item)
        spared = place_reference(request, ledger.fleet, ledger.index).chosen
        if spared is not None:
            chosen.remove(item)
            fits = spared
        else:
            disturb(item)
    final = place_reference(request, ledger.fleet, ledger.index).chosen
    return tuple(i.job for i in chosen), final or fits


def victims_reference(pool: pool._Pool, request: Request, taken: set[str]) -> list[preemption.RunningJob]:
    """The free holders of lower priority than `request` not yet taken (and those between it preempts
    besides), of every class, in no particular order."""
    return [preemption.RunningJob(h.job, h.priority, h.since, h.allocation) for h in pool.free.values()
            if h.job not in taken and (h.priority < request.preempt_priority or
                                       h.priority < request.priority and h.job in request.also_preempts)]


def most_replicas_reference(pool: pool._Pool, alt: Alternative, request: Request, ledger: Ledger,
                            taken: set[str], now: float, min_runtime_s: float) -> int:
    """The most replicas of `alt` one region could hold if every holder `request` may disturb gave up its
    devices, by a scan of every disturbable holder and every usable node."""
    cls = ledger.fleet.classes[alt.device_class]
    used, resource, capacity = ledger.used, cls.resource_name, ledger.index.capacity(cls)
    rank, per = request.priority, alt.per_replica
    extra: dict[str, int] = {}
    for below, per_node, job in pool.disturbable(resource, now, min_runtime_s):
        if below < rank and job not in taken:
            for n, devices in per_node.items():
                extra[n] = extra.get(n, 0) + devices
    most = 0
    for region, names in ledger.index.nodes(cls).items():
        if request.allowed_regions and region not in request.allowed_regions:
            continue
        fit = 0
        for n in names:
            have = capacity[n] - used.get((n, resource), 0) + extra.get(n, 0)
            if have >= per:
                fit += have // per
        most = max(most, fit)
    return most


def fits_reference(request: Request, fleet: Fleet, index: FleetIndex | None = None) -> bool:
    """`placement.fits` as the straightforward placement answers it."""
    return place_reference(request, fleet, index).chosen is not None


@contextmanager
def reference() -> Iterator[None]:
    """Within: every module of heterojob that calls `placement.place` calls `place_reference`,
    `Ledger.may_fit` scans and `preemption` looks for victims one placement per victim. Not thread-safe (it
    swaps module attributes)."""
    fast, fits, fewest = placement.place, Ledger.may_fit, preemption._fewest
    victims, most, quota = pool._Pool.victims, pool._Pool._most_replicas, pool._Pool.quota_allows
    swapped = [m for name, m in list(sys.modules.items())
               if name.startswith("heterojob.") and m is not None and getattr(m, "place", None) is fast]
    fast_fits = placement.fits
    asks = [m for name, m in list(sys.modules.items())
            if name.startswith("heterojob.") and m is not None and getattr(m, "fits", None) is fast_fits]
    for module in swapped:
        module.place = place_reference  # type: ignore[attr-defined]  # swapped in for the comparison
    for module in asks:
        module.fits = fits_reference  # type: ignore[attr-defined]  # swapped in for the comparison
    Ledger.may_fit = may_fit_reference  # type: ignore[assignment, method-assign]  # swapped in for the comparison
    preemption._fewest = fewest_reference
    pool._Pool.victims = victims_reference  # type: ignore[assignment, method-assign]  # swapped in for the comparison
    pool._Pool._most_replicas = most_replicas_reference  # type: ignore[assignment, method-assign]  # swapped in for the comparison
    pool._Pool.quota_allows = lambda *args: True  # type: ignore[method-assign]  # swapped in for the comparison
    try:
        yield
    finally:
        for module in swapped:
            module.place = fast  # type: ignore[attr-defined]  # put back
        for module in asks:
            module.fits = fast_fits  # type: ignore[attr-defined]  # put back
        Ledger.may_fit = fits  # type: ignore[method-assign]  # put back
        preemption._fewest = fewest
        pool._Pool.victims = victims  # type: ignore[method-assign]  # put back
        pool._Pool._most_replicas = most  # type: ignore[method-assign]  # put back
        pool._Pool.quota_allows = quota  # type: ignore[method-assign]  # put back
