"""A HeteroQuota's used-versus-limit summary (pure), for its status and the `kubectl get hq` column."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from heterojob.engine.fleet import Limit

MAX_SUMMARY = 200  # a printer column, not a report: longer summaries end in '...'


def used_under(limit: Limit, held: Mapping[tuple[str, str], int]) -> int:
    """Devices the namespace holds that this limit counts ('*' matches any class or region)."""
    return sum(n for (cls, region), n in held.items() if limit.covers(cls, region))


def summary(limits: Sequence[Limit], held: Mapping[tuple[str, str], int]) -> str:
    """E.g. `nvidia-h100/*: 8/16, */cn-east: 8/20`; `no limits` for an empty spec."""
    parts = [f"{lim.device_class}/{lim.region}: {used_under(lim, held)}/{lim.devices}" for lim in limits]
    text = ", ".join(parts) if parts else "no limits"
    return text if len(text) <= MAX_SUMMARY else text[: MAX_SUMMARY - 3] + "..."
