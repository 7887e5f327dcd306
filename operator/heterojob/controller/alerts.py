"""Alert symptoms: what firing Alertmanager alerts say about each job, until they resolve.

The alert receiver maps an alert to jobs (`alerts.mapping`); this step records a firing alert in the
job's status (`status.alerts`, so an operator restart loses none) and pokes the job, whose disruption step
weighs it like any other symptom; a resolved alert is removed. An alert asking only for a checkpoint asks
for one (recorded in status by the checkpoint protocol itself).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from heterojob.alerts import mapping
from heterojob.api.job import ALERTS_MAX, HeteroJobStatus
from heterojob.controller.status import StatusPatch, StatusWriter, read_status
from heterojob.engine import migration
from heterojob.kube.api import Kube, now_iso
from heterojob.state.times import timestamp


class AlertSymptoms:
    def __init__(self, kube: Kube, writer: StatusWriter, poke: Callable[[str], None],
                 checkpoint: Callable[[str, str], Awaitable[object]]) -> None:
        self.kube = kube
        self.writer = writer
        self.poke = poke
        self.checkpoint = checkpoint  # (job, reason): ask for a checkpoint the job goes on from

    async def alert(self, key: str, fingerprint: str, firing: bool, action: str, nodes: tuple[str, ...],
                    message: str) -> None:
        """An alert about `key` (already mapped): a firing one is recorded, a resolved one removed."""
        if firing and action == mapping.CHECKPOINT:
            await self.checkpoint(key, f"alert: {message}")
            return
        namespace, name = key.split("/", 1)
        job = await self.kube.get_job(namespace, name)
        if job is None:
            return
        status = read_status(job)
        kept = [a.model_dump(by_alias=True, exclude_none=True) for a in status.alerts
                if a.fingerprint != fingerprint]
        if firing:
            kept.append({"fingerprint": fingerprint, "since": now_iso(), "nodes": sorted(nodes),
                         "message": message[:512], "urgent": action == mapping.MIGRATE_NOW})
        if len(kept) == len(status.alerts) and not firing:
            return  # a resolved alert we never kept
        await self.writer.write(job, StatusPatch(status).set(alerts=kept[-ALERTS_MAX:]))
        self.poke(key)


def symptoms(status: HeteroJobStatus, nodes: Sequence[str], now: float) -> list[migration.Symptom]:
    """The job's firing alerts that still name a node it runs on, as migration symptoms."""
    out = []
    for a in status.alerts:
        if set(a.nodes) & set(nodes):
            out.append(migration.Symptom(migration.ALERT, timestamp(a.since) or now, tuple(a.nodes), a.message,
                                         urgent=a.urgent))
    return out
