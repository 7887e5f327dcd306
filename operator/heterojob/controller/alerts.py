"""Alert symptoms: what firing Alertmanager alerts say about each job, until they resolve.

The alert receiver maps an alert to jobs (`alerts.mapping`); this step records a firing alert in the
job's status (`status.alerts`, so an operator restart loses none) and pokes the job, whose disruption step
weighs it like any other symptom; a resolved alert is removed. An alert asking only for a checkpoint asks
for one (recorded in status by the checkpoint protocol itself).

A symptom counts from its firing episode's start (Alertmanager's `startsAt`, `episode`): the same episode
heard again (its repeat, or read back after a restart) keeps its `since`; a later one (the alert resolved and
fired again, perhaps while no operator ran to hear the resolve) is a new firing with a new `since`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from heterojob.alerts import mapping
from heterojob.api.job_status import ALERTS_MAX, AlertSymptom
from heterojob.controller.status import StatusPatch, StatusWriter
from heterojob.state.job_status import read_status
from heterojob.kube.api import Kube
from heterojob.api.times import iso, timestamp


class AlertSymptoms:
    def __init__(self, kube: Kube, writer: StatusWriter, poke: Callable[[str], None],
                 checkpoint: Callable[[str, str], Awaitable[object]]) -> None:
        self.kube = kube
        self.writer = writer
        self.poke = poke
        self.checkpoint = checkpoint  # (job, reason): ask for a checkpoint the job goes on from
        self._dead: dict[str, tuple[str, str, str]] = {}  # fingerprint -> (node, device, why): firing migrate-now
        self._hot: dict[str, tuple[str, str]] = {}  # fingerprint -> (node, why) of a firing migrate alert
        # one alert write per job at a time, in arrival order: the receiver's workers run concurrently, and a
        # resolve whose read of status.alerts came before its firing's write would find nothing to remove
        # (the symptom then stays: Alertmanager sends a resolve once); two firings would drop each other
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # job -> its lock, how many hold or wait

    def node_alert(self, fingerprint: str, firing: bool, action: str, node: str, message: str, device: str = ""
                   ) -> bool:
        """A firing alert about a node's device, until it resolves (whether or not a job runs there now): one
        that says the device is dead (migrate-now) counts it failed (`device`: its id, "" unknown), one that asks
        to move off (migrate: an overheating device) keeps new work off the node. Kept in memory: at start the
        firing alerts are read back from Alertmanager (alerts/restore.py, with --alertmanager-url), and
        Alertmanager repeats them (and, with --alertmanager-sync, one no longer active there is resolved).
        Whether this lifted a hold on a node (a waiting job may fit there now)."""
        lifted = (self._dead.pop(fingerprint, None), self._hot.pop(fingerprint, None)) != (None, None)
        if firing and node and action == mapping.MIGRATE_NOW:
            self._dead[fingerprint] = (node, device, message)
        elif firing and node and action == mapping.MIGRATE:
            self._hot[fingerprint] = (node, message)
        return lifted and not firing

    def dead(self) -> dict[str, dict[str, str]]:
        """node -> device -> why: the devices firing alerts say are dead ("": an alert naming none, at least one)."""
        out: dict[str, dict[str, str]] = {}
        for node, device, why in self._dead.values():
            out.setdefault(node, {})[device] = f"alert: {why}"
        return out

    def hot(self) -> dict[str, str]:
        """node -> why nothing new may go there (a firing alert asks to move off it)."""
        return {node: f"alert: {why}" for node, why in self._hot.values()}

    async def alert(self, key: str, fingerprint: str, firing: bool, action: str, nodes: tuple[str, ...],
                    message: str, starts_at: datetime) -> None:
        """An alert about `key` (already mapped): a firing one is recorded, a resolved one removed.
        `starts_at`: Alertmanager's start of its firing episode."""
        if firing and action == mapping.CHECKPOINT:
            await self.checkpoint(key, f"alert: {message}")
            return
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)  # counted before any await: queued in arrival order (FIFO)
        try:
            async with lock:
                await self._record(key, fingerprint, firing, action, nodes, message, starts_at)
        finally:
            lock, users = self._locks[key]
            if users > 1:
                self._locks[key] = (lock, users - 1)
            else:
                del self._locks[key]  # nobody holds or waits for it

    async def _record(self, key: str, fingerprint: str, firing: bool, action: str, nodes: tuple[str, ...],
                      message: str, starts_at: datetime) -> None:
        namespace, name = key.split("/", 1)
        job = await self.kube.get_job(namespace, name)
        if job is None:
            return
        status = read_status(job)
        known = next((a for a in status.alerts if a.fingerprint == fingerprint), None)
        if known is not None and episode(known, starts_at, time.time()) is None:
            return  # about an older episode than the one recorded (a late webhook): stale, changes nothing
        kept = [a.model_dump(by_alias=True, exclude_none=True) for a in status.alerts
                if a.fingerprint != fingerprint]
        if firing:
            since = episode(known, starts_at, time.time())
            assert since is not None
            entry = {"fingerprint": fingerprint, "since": since, "startsAt": episode_key(starts_at),
                     "nodes": sorted(nodes), "message": message[:512], "urgent": action == mapping.MIGRATE_NOW}
            if known is not None and known.model_dump(by_alias=True, exclude_none=True) == entry:
                self.poke(key)
                return  # nothing new to write
            kept.append(entry)
        if len(kept) == len(status.alerts) and not firing:
            return  # a resolved alert we never kept
        await self.writer.write(job, StatusPatch(status).set(alerts=kept[-ALERTS_MAX:]))
        self.poke(key)


def episode_key(starts_at: datetime) -> str:
    """`startsAt` as status keeps it: UTC, to the millisecond (as the receiver compares episodes)."""
    return starts_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def episode(known: AlertSymptom | None, starts_at: datetime, now: float) -> str | None:
    """The `since` of a firing alert's symptom whose episode began at `starts_at`, given what status holds of
    its fingerprint (`known`), or None when that is an older episode (stale: nothing to write).

    The same episode keeps its since (heard again: Alertmanager's repeat, or read back after a restart). A
    later one is a new firing: since is its startsAt (no later than `now`, for an Alertmanager clock ahead of
    ours). An entry written before startsAt was kept has only its since, when the old episode was heard
    while it fired: an episode starting after that began after the old one resolved."""
    began = iso(min(starts_at.timestamp(), now))
    if known is None:
        return began
    if known.starts_at is not None:
        theirs = episode_key(starts_at)
        if theirs == known.starts_at:
            return known.since
        before = timestamp(known.starts_at)
        return None if before is not None and starts_at.timestamp() < before else began
    heard = timestamp(known.since)
    return began if heard is None or starts_at.timestamp() > heard else known.since
