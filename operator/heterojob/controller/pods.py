"""Pods: create a placement's gang (and its headless Service), delete pods, give devices back.

Called by the reconcile pass (missing ranks, cleanup) and by admission (a new placement). Creation is
idempotent by name, so a pass that runs again after a crash creates only what is missing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from heterojob.api.job import HeteroJobSpec, HeteroJobStatus, Phase
from heterojob.constants import LABEL_HOSTNAME, LABEL_REGION
from heterojob.controller.decisionlog import decided
from heterojob.controller.status import StatusPatch, StatusWriter
from heterojob.engine.fleet import Fleet, RegionInfo
from heterojob.kube import manifests
from heterojob.kube.api import Kube
from heterojob.state.cache import Cache


class Pods:
    def __init__(self, kube: Kube, writer: StatusWriter, cache: Cache, fleet: Callable[[], Fleet],
                 poke: Callable[[str], None], room_freed: Callable[[], None]) -> None:
        self.kube = kube
        self.writer = writer
        self.cache = cache
        self.fleet = fleet
        self.poke = poke
        self.room_freed = room_freed  # waiting jobs get another look

    async def create(self, job: dict[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                     ranks: Sequence[int], fleet: Fleet | None = None) -> None:
        """Create the pods of `ranks` (and the Service with a whole gang) for the job's placement."""
        p = status.placement
        assert p is not None
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        fleet = fleet or self.fleet()
        cls = fleet.classes.get(p.device_class)
        alt_index = next((i for i, a in enumerate(spec.devices) if a.device_class == p.device_class), None)
        if cls is None or alt_index is None:
            message = f"device class {p.device_class} vanished; placing again"
            decided(key, "replace", message)
            await self.writer.write(job, StatusPatch(status).phase(Phase.PENDING, None, message).set(placement=None))
            self.poke(key)
            return
        region = fleet.regions.get(p.region) or RegionInfo(p.region, {LABEL_REGION: p.region})
        objs: list[dict[str, Any]] = [manifests.service(job)] if len(ranks) == p.replicas else []
        resume = status.checkpoint.last.uri if status.checkpoint and status.checkpoint.last else None
        for rank in ranks:
            node = p.nodes[rank]
            node_obj = fleet.nodes.get(node)
            hostname = node_obj.labels.get(LABEL_HOSTNAME, node) if node_obj else node
            objs.append(manifests.pod(
                job, spec, cls=cls, region=region, alternative_index=alt_index, node=node,
                node_hostname=hostname, rank=rank, world_size=p.replicas, generation=p.generation,
                per_replica=p.per_replica, resume_from=resume))
        await asyncio.gather(*(self.kube.create(o) for o in objs))

    async def delete(self, namespace: str, pods: Sequence[str]) -> None:
        await asyncio.gather(*(self.kube.delete_pod(namespace, p) for p in pods))

    async def release(self, key: str, pods: Sequence[str]) -> None:
        """Delete `pods` and give the job's devices back to the cache (waiting jobs get another look)."""
        await self.delete(key.split("/", 1)[0], pods)
        if self.cache.release(key):
            self.room_freed()
