"""A HeteroJob's phases: the lifecycle's vocabulary, shared by the engine and the API's status type."""

from __future__ import annotations

from enum import StrEnum


class Phase(StrEnum):
    PENDING = "Pending"
    ADMITTED = "Admitted"
    RUNNING = "Running"
    CHECKPOINTING = "Checkpointing"
    MIGRATING = "Migrating"
    RESIZING = "Resizing"
    PREEMPTED = "Preempted"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"

    @property
    def terminal(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED)
