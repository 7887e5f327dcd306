"""Which Event type (Normal or Warning) each Event reason the operator posts carries.

Kubernetes' convention (the `type` field of core/v1 Event: "Normal" or "Warning"; `kubectl events --types`):
Normal is what the system did as it should (kube-scheduler's `Scheduled`, and its `Preempted` on a victim
pod, are Normal; so are the kubelet's `Pulled`, `Started`, `Killing`); Warning is what someone should look
at (`FailedScheduling`, `BackOff`, `FailedMount`, `NodeNotReady`). Here: an action the user asked for or
the policy chose is Normal; a fault, a refusal, lost progress or a failure is Warning.
"""

from __future__ import annotations

from typing import Literal

EventType = Literal["Normal", "Warning"]
NORMAL: EventType = "Normal"
WARNING: EventType = "Warning"

# Move triggers that report a fault or a symptom someone should look at (engine.capacity.migration's and the
# controller's own): the move is the remedy, the cause needs attention.
FAULT_TRIGGERS = frozenset({"deviceFailed", "nodeNotReady", "overheat", "straggler", "alert", "unschedulable",
                            "memberLost"})

# every reason posted with a fixed type (checked against the code by tests/unit/test_events.py)
FIXED: dict[str, EventType] = {
    "Admitted": NORMAL, "Waiting": NORMAL, "Preempting": NORMAL, "Reclaiming": NORMAL,  # admission
    "Running": NORMAL,
    "CheckpointRequested": NORMAL, "MoveCancelled": NORMAL, "PreemptionCancelled": NORMAL, "ReclaimCancelled": NORMAL,
    "MigrationHeld": NORMAL,
    "ClassProposed": NORMAL, "Drained": NORMAL,  # engine.execution.lifecycle's DRAIN: a drain someone asked for
    "SpecChangeDeferred": NORMAL, "SpecChangeApplied": NORMAL,  # engine.placing.spec_changes': a spec edit read
    "SpecEdited": NORMAL,  # engine.execution.lifecycle.after_edit: a job whose pods were refused for good, placed again
    "AllReplicasSucceeded": NORMAL,  # engine.execution.lifecycle's SUCCEED
    "CheckpointMissed": WARNING, "Restarting": WARNING, "MemberLost": WARNING, "StatusRepaired": WARNING,
    "PodRejected": WARNING, "PodsRefused": WARNING, "FaultWhileCheckpointing": WARNING, "MoveRequeued": WARNING,
    "InvalidSpec": WARNING, "Unschedulable": WARNING, "BackoffLimitExceeded": WARNING,  # engine.execution.lifecycle's
}


def move_event(then: str, trigger: str | None, checkpointed: bool) -> tuple[EventType, str]:
    """(type, reason) of the Event a finished checkpoint's move posts (`then`: migrate, resize or preempt).

    A migration the user asked for, a resize (elastic growth, shrink or reclaim) and a preemption (as
    kube-scheduler reports its victims) are Normal; a move away from a fault, or one that lost progress
    because the checkpoint never came, is Warning."""
    reason = {"migrate": "Migrating", "resize": "Resizing"}.get(then, "Preempted")
    if not checkpointed or (then == "migrate" and trigger in FAULT_TRIGGERS):
        return WARNING, reason
    return NORMAL, reason
