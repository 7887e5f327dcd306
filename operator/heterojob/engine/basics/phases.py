"""A HeteroJob's lifecycle vocabulary, shared by the engine and the API's status types: its phases, the
groups of phases the operator reasons about (defined here once), and what follows a checkpoint (`Then`)."""

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
        return self in TERMINAL


TERMINAL = frozenset({Phase.SUCCEEDED, Phase.FAILED})
MOVING = (Phase.MIGRATING, Phase.RESIZING)  # placed again after a checkpoint, avoiding the nodes it left
DISRUPTED = (Phase.CHECKPOINTING, *MOVING)  # moving: lends nothing
# in the queue when it holds no placement (None: a new job, no phase yet)
WAITING = (None, Phase.PENDING, Phase.PREEMPTED, *MOVING)


class Then(StrEnum):
    """What follows a checkpoint (`status.checkpoint.pending.then`)."""

    PREEMPT = "preempt"  # give the devices to the job that asked (`by`), back to the queue
    MIGRATE = "migrate"  # placed again elsewhere (a symptom, a request, an upgrade, a drain)
    RESIZE = "resize"  # placed again with another number of replicas (shrink, grow, a reclaim by `by`)
    CONTINUE = "continue"  # a periodic checkpoint: the job goes on where it is


MOVE_THENS = (Then.MIGRATE, Then.RESIZE)  # a checkpoint that lands the job on a new placement
YIELDS = (Then.PREEMPT, Then.RESIZE)  # what follows a checkpoint asked for on behalf of another job (`by`)
THEN_PHASE = {Then.MIGRATE: Phase.MIGRATING, Then.RESIZE: Phase.RESIZING}  # the phase after such a checkpoint
