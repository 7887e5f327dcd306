"""Per-node filters of placement: a node's software and labels against an alternative's needs, and whether a
node may take a class's replicas now. Pure; `engine.placing.placement` applies them (per fleet view, `FleetIndex`)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from heterojob.engine.basics import versions
from heterojob.engine.capacity.fleet import DeviceClass, Fleet, Node


def software_mismatch(cls: DeviceClass, requires: Mapping[str, str]) -> str | None:
    """Why the class's software stack does not meet `requires` (engine.basics.versions: PEP 440 and CANN's RCs)."""
    for name, spec in sorted(requires.items()):
        mismatch = versions.check(name, cls.software.get(name), spec)
        if mismatch is not None:
            return str(mismatch)
    return None


@lru_cache(maxsize=4096)
def _version_check(name: str, have: str | None, wanted: str, own: bool) -> str | None:
    """One node's version against one requirement, short (cached: a fleet has few distinct versions)."""
    mismatch = versions.check(name, have, wanted)
    if mismatch is None:
        return None
    if have is None:
        return f"no {name} version (no node label, none declared by the class)"
    if mismatch.why.startswith(":"):
        return str(mismatch)
    return f"{name} {have} does not satisfy {wanted}" + ("" if own else " (the class's declared version)")


def node_software_mismatch(node: Node, cls: DeviceClass, requires: Mapping[str, str],
                           node_labels: Mapping[str, str] = {},  # noqa: B006 - read only
                           pod_requests: Mapping[str, int] = {}) -> str | None:  # noqa: B006 - read only
    """Why this node's software (its own labels first, else the class's stack) or labels miss the needs, or
    its allocatable is smaller than a replica's pod requests (`too_small`)."""
    for name, spec in sorted(requires.items()):
        own = node.software.get(name)
        why = _version_check(name, own or cls.software.get(name), spec, own is not None)
        if why is not None:
            return why
    for key, value in sorted(node_labels.items()):
        have = node.labels.get(key)
        if have != value:
            return f"label {key}={value} missing" if have is None else f"label {key} is {have!r}, not {value!r}"
    return too_small(node, cls, pod_requests)


def too_small(node: Node, cls: DeviceClass, pod_requests: Mapping[str, int]) -> str | None:
    """Why the node can never run one replica: a resource its pod requests (the class's devices aside: placement
    counts those) above what the node allocates at all, as kube-scheduler would find it ("Insufficient memory")
    on an empty node. A resource the node does not report is not judged here (kube-scheduler still is)."""
    for name, wanted in sorted(pod_requests.items()):
        have = node.allocatable.get(name)
        if name != cls.resource_name and have is not None and wanted > have:
            return (f"the pod requests {_amount(name, wanted)} of {name}, more than the node allocates "
                    f"({_amount(name, have)})")
    return None


def _amount(name: str, value: int) -> str:
    if name == "memory" or name == "ephemeral-storage" or name.startswith("hugepages-"):
        for unit, size in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
            if value >= size:
                return f"{value / size:.4g}{unit}"
    return str(value)


def software_summary(failures: Mapping[str, int], limit: int = 2) -> str:
    """`2 node(s) fail the software check: cuda 12.2 does not satisfy >=12.4` (the commonest reasons)."""
    total = sum(failures.values())
    ranked = sorted(failures.items(), key=lambda kv: (-kv[1], kv[0]))
    if len(ranked) == 1:
        reasons = ranked[0][0]
    else:
        reasons = "; ".join(f"{why} ({n})" for why, n in ranked[:limit]) + (
            f"; and {len(ranked) - limit} more reason(s)" if len(ranked) > limit else "")
    return f"{total} node(s) fail the software check: {reasons}"


def node_unfit(node: Node, cls: DeviceClass, fleet: Fleet) -> str | None:
    """Why a node cannot take this class's replicas now, or None. Pods tolerate only the class's own taint;
    telemetry and alerts keep a node off by `Fleet.keep_off` (a failed device its device plugin does not
    withhold yet, an overheating one, a firing alert)."""
    if not node.matches(cls.node_selector) or node.allocatable.get(cls.resource_name, 0) <= 0:
        return "not of this class"
    if not node.ready:
        return "not Ready"
    if not node.schedulable:
        return "cordoned"
    if not node.taints <= {cls.resource_name}:
        return "tainted"
    why = fleet.keep_off(node, cls.resource_name)
    return None if why is None else f"unhealthy ({why})"
