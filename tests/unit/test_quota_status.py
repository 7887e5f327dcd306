"""HeteroQuota status (`controller.quotas.QuotaStatus`): what each namespace holds, written when it changed, and
summed again only when the jobs' allocations changed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from heterojob.controller import quotas
from heterojob.engine.capacity.fleet import Allocation, DeviceClass, Limit
from heterojob.state.cache import Cache

H100 = DeviceClass("nvidia-h100", "nvidia.com/gpu")


class Kube:
    def __init__(self) -> None:
        self.written: list[tuple[str, str, dict[str, Any]]] = []

    async def patch_quota_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.written.append((namespace, name, status))


def test_used_follows_the_allocations_and_is_summed_again_only_when_they_change(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cache = Cache()
    cache.entry("team-a/one").allocation = Allocation("nvidia.com/gpu", {"n1": 8}, "team-a", "nvidia-h100", "east")
    kube = Kube()
    limits = [Limit("nvidia-h100", "east", 16)]
    status = quotas.QuotaStatus(kube, cache, lambda: {("team-a", "q"): (limits, None)},  # type: ignore[arg-type]  # the one call it makes
                                lambda: {"nvidia-h100": H100}, lambda: {"east": object()})
    sums: list[int] = []
    real = quotas.holdings
    monkeypatch.setattr(quotas, "holdings", lambda allocations: sums.append(1) or real(allocations))

    async def run() -> None:
        await status.sync()
        await status.sync()  # nothing changed: not summed again, not written again
        assert len(sums) == 1 and len(kube.written) == 1
        assert kube.written[0][2]["used"] == [{"deviceClass": "nvidia-h100", "region": "east", "devices": 8}]
        cache.entry("team-a/two").allocation = Allocation("nvidia.com/gpu", {"n2": 4}, "team-a", "nvidia-h100",
                                                          "east")
        await status.sync()
        assert len(sums) == 2 and kube.written[-1][2]["used"][0]["devices"] == 12
        cache.entry("team-a/one").allocation = None  # it ended
        await status.sync()
        assert kube.written[-1][2]["used"][0]["devices"] == 4

    asyncio.run(run())
