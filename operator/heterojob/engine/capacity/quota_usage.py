"""A HeteroQuota's used-versus-limit summary (pure), for its status and the `kubectl get hq` column."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from heterojob.engine.capacity.fleet import Limit

MAX_SUMMARY = 200  # a printer column, not a report: longer summaries end in '...'


def used_under(limit: Limit, held: Mapping[tuple[str, str], int], cpu: Collection[str] = frozenset()) -> int:
    """Devices the namespace holds that this limit counts ('*' matches any region, and any class but the CPU
    classes in `cpu`: `engine.capacity.fleet.Limit.covers`)."""
    return sum(n for (cls, region), n in held.items() if limit.covers(cls, region, cls in cpu))


def summary(limits: Sequence[Limit], held: Mapping[tuple[str, str], int], cpu: Collection[str] = frozenset()
            ) -> str:
    """E.g. `nvidia-h100/*: 8/16, */cn-east: 8/20`; `no limits` for an empty spec."""
    parts = [f"{lim.device_class}/{lim.region}: {used_under(lim, held, cpu)}/{lim.devices}" for lim in limits]
    text = ", ".join(parts) if parts else "no limits"
    return text if len(text) <= MAX_SUMMARY else text[: MAX_SUMMARY - 3] + "..."
