"""Which Prometheus serves which region: a Region's own `spec.prometheusURL` (a member cluster's site runs
its Prometheus next to its nodes, docs/multicluster.md), else the default one (`--prometheus-url`).

The monitor's rule (controller/monitor.Monitor.sources), as a pure function of plain data so the console
reads each region's history from the same Prometheus the operator reads its present from.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

DEFAULT = "*"  # the default Prometheus also serves every node whose region it does not know


def sources(regions: Mapping[str, str | None], default_url: str | None) -> dict[str, frozenset[str]]:
    """Prometheus URL -> the regions it serves, from region -> its own URL (None: the default's).
    The default URL (if any) also serves DEFAULT."""
    out: dict[str, set[str]] = {}
    for region, own in regions.items():
        url = own or default_url
        if url:
            out.setdefault(url, set()).add(region)
    if default_url:
        out.setdefault(default_url, set()).add(DEFAULT)
    return {url: frozenset(served) for url, served in out.items()}


def own(served_by: Iterable[tuple[str, Iterable[str]]]) -> frozenset[str]:
    """The regions with a Prometheus of their own, from (URL, regions served) pairs: those served by a
    source that is not the default one."""
    out: set[str] = set()
    for _, served in served_by:
        names = set(served)
        if DEFAULT not in names:
            out |= names
    return frozenset(out)


def serves(served: Iterable[str], region: str | None, own_regions: Collection[str]) -> bool:
    """Whether a source serving `served` answers for a node in `region`: its region is served, or the
    source is the default one and the region has no Prometheus of its own (or is not known)."""
    names = set(served)
    if region in names:
        return True
    return DEFAULT in names and region not in own_regions
