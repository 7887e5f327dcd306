"""HeteroQuota status: `status.used` (what each namespace holds under the quota's limits) kept current.

Run every second by the work queue's periodic tasks; a quota's status is written only when it changed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from heterojob.engine.capacity import quota_usage
from heterojob.engine.placing import validation
from heterojob.engine.capacity.fleet import Allocation, DeviceClass, Limit, cpu_classes, holdings
from heterojob.kube.api import Kube
from heterojob.state.cache import Cache


class QuotaStatus:
    def __init__(self, kube: Kube, cache: Cache,
                 quotas: Callable[[], Mapping[tuple[str, str], tuple[Sequence[Limit], str | None]]],
                 classes: Callable[[], Mapping[str, DeviceClass]], regions: Callable[[], Mapping[str, object]]) -> None:
        self.kube = kube
        self.cache = cache
        self.quotas = quotas
        self.classes = classes  # a limit naming an unknown class or region is reported on the quota
        self.regions = regions
        self._written: dict[tuple[str, str], dict[str, Any]] = {}
        # the allocations last summed and their sums: the same (objects) a second later, the sums are too
        self._held: tuple[dict[str, Allocation], dict[str, dict[tuple[str, str], int]]] | None = None

    async def sync(self) -> None:
        allocations = self.cache.allocations()
        if self._held is not None and self._held[0] == allocations:
            held = self._held[1]
        else:
            held = holdings(allocations.values())
            self._held = (allocations, held)
        classes = self.classes()
        cpu = cpu_classes(classes)
        for (namespace, name), (limits, error) in sorted(self.quotas().items()):
            mine = held.get(namespace, {})
            used = [{"deviceClass": c, "region": r, "devices": n} for (c, r), n in sorted(mine.items())
                    if n and any(lim.covers(c, r, c in cpu) for lim in limits)]
            problems = [] if error else validation.quota_problems(
                [(lim.device_class, lim.region) for lim in limits], set(classes), set(self.regions()))
            if problems:
                error = "; ".join(map(str, problems))
            status = {"used": used, "summary": "invalid spec" if error else quota_usage.summary(limits, mine, cpu),
                      "message": f"invalid spec: {error}" if error else None}
            if self._written.get((namespace, name)) != status:
                await self.kube.patch_quota_status(namespace, name, status)
                self._written[(namespace, name)] = status
