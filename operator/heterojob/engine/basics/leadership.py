"""Leader election over a coordination.k8s.io Lease (pure): what a replica does next with the record it read.

Step of the pipeline: the elector (kube/leader.py) reads the Lease, asks `next_move`, and acts. As in
client-go's leaderelection, expiry is judged on this replica's own clock: a record counts as expired when
it has not changed for `leaseDurationSeconds` since this replica first saw it, so clock skew between
replicas (or a renewTime written by a skewed clock) cannot hand the lease to two holders.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True)
class LeaseRecord:
    holder: str | None
    duration_s: float
    renew_time: str | None
    resource_version: str | None
    transitions: int = 0
    acquire_time: str | None = None  # kept as is by renewals

    @property
    def fingerprint(self) -> tuple[str | None, str | None, str | None]:
        """What changes whenever the holder renews (used to notice a live holder)."""
        return self.holder, self.renew_time, self.resource_version


class LeaseMove(StrEnum):
    CREATE = "create"  # no Lease yet: create it, holding it
    TAKE = "take"  # free or expired: write ourselves in (a 409 means another replica was faster)
    RENEW = "renew"  # ours: write a new renewTime
    WAIT = "wait"  # someone else holds it and renews it


def next_move(record: LeaseRecord | None, me: str, unchanged_since: float, now: float) -> LeaseMove:
    """`unchanged_since`: when (our monotonic clock) we first saw this exact record; `now`: the same clock."""
    if record is None:
        return LeaseMove.CREATE
    if record.holder == me:
        return LeaseMove.RENEW
    if not record.holder or now - unchanged_since >= record.duration_s:
        return LeaseMove.TAKE
    return LeaseMove.WAIT
