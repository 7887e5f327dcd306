"""Alert symptoms: what firing Alertmanager alerts say about each job, until they resolve.

The alert receiver maps an alert to jobs (`alerts.mapping`); this store turns firing alerts into
migration symptoms that `disruption` weighs like any other, and forgets them when they resolve or the
job goes away. Kept in memory: a restarted operator hears still-firing alerts again on Alertmanager's
repeat interval.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from heterojob.alerts import mapping
from heterojob.engine import migration


class AlertSymptoms:
    def __init__(self, poke: Callable[[str], None], checkpoint: Callable[[str, str], Awaitable[object]]) -> None:
        self.poke = poke
        self.checkpoint = checkpoint  # (job, reason): ask for a checkpoint the job goes on from
        self._by_job: dict[str, dict[str, migration.Symptom]] = {}  # job -> fingerprint -> symptom

    async def alert(self, key: str, fingerprint: str, firing: bool, action: str, nodes: tuple[str, ...],
                    message: str) -> None:
        """An alert about `key` (already mapped): firing ones become symptoms, resolved ones clear them."""
        mine = self._by_job.setdefault(key, {})
        if not firing:
            mine.pop(fingerprint, None)
            return
        if action == mapping.CHECKPOINT:
            await self.checkpoint(key, f"alert: {message}")
            return
        mine[fingerprint] = migration.Symptom(migration.ALERT, time.time(), nodes, message,
                                              urgent=action == mapping.MIGRATE_NOW)
        self.poke(key)

    def about(self, key: str, nodes: tuple[str, ...]) -> list[migration.Symptom]:
        """The job's alert symptoms that still name a node it runs on."""
        return [s for s in self._by_job.get(key, {}).values() if set(s.nodes) & set(nodes)]

    def forget(self, key: str) -> None:
        self._by_job.pop(key, None)
