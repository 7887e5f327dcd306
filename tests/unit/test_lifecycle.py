"""The job lifecycle decisions on plain data."""

from __future__ import annotations

from dataclasses import replace

from heterojob.api.job import Phase
from heterojob.engine.execution.lifecycle import EVICTED, Action, AskedCheckpoint, JobView, PodView, decide


def view(phase: Phase | None = Phase.ADMITTED, generation: int | None = 1, replicas: int | None = 2,
         pods: tuple[PodView, ...] = (), restarts: int = 0, backoff: int = 3, **kw: object) -> JobView:
    return JobView(phase=phase, reason=kw.get("reason"), generation=generation, replicas=replicas,  # type: ignore
                   restarts=restarts, backoff_limit=backoff, pods=pods, spec_errors=kw.get("errors"))  # type: ignore


def pod(rank: int, phase: str = "Running", gen: int = 1, **kw: object) -> PodView:
    return PodView(f"j-g{gen}-{rank}", rank, gen, phase, **kw)  # type: ignore[arg-type]


def test_invalid_spec_is_rejected_once_and_revalidated_when_fixed() -> None:
    assert decide(view(phase=None, errors="spec.x: bad")).action == Action.REJECT
    assert decide(view(phase=Phase.FAILED, reason="InvalidSpec", errors="spec.x: bad")).action == Action.NONE
    assert decide(view(phase=Phase.FAILED, reason="InvalidSpec")).action == Action.REVALIDATED


def test_unplaced_job_is_placed_after_old_pods_are_cleaned() -> None:
    assert decide(view(phase=None, generation=None, replicas=None)).action == Action.PLACE
    d = decide(view(phase=Phase.PENDING, generation=None, replicas=None, pods=(pod(0, gen=1),)))
    assert d.action == Action.CLEANUP and d.pods == ("j-g1-0",)


def test_missing_pods_are_created_while_admitted_but_restart_the_gang_while_running() -> None:
    d = decide(view(pods=(pod(0, "Pending"),)))
    assert d.action == Action.CREATE_PODS and d.ranks == (1,)
    d = decide(view(phase=Phase.RUNNING, pods=(pod(0),)))
    assert d.action == Action.RESTART and "replica 1 disappeared" in d.message


def test_phases_follow_the_pods() -> None:
    assert decide(view(pods=(pod(0), pod(1, "Pending")))).action == Action.NONE
    assert decide(view(pods=(pod(0), pod(1)))).action == Action.RUNNING
    assert decide(view(phase=Phase.RUNNING, pods=(pod(0), pod(1)))).action == Action.NONE
    assert decide(view(phase=Phase.RUNNING, pods=(pod(0, "Succeeded"), pod(1)))).action == Action.NONE
    assert decide(view(phase=Phase.RUNNING, pods=(pod(0, "Succeeded"), pod(1, "Succeeded")))).action == Action.SUCCEED


def test_a_failed_replica_restarts_the_gang_until_the_backoff_limit() -> None:
    pods = (pod(0), pod(1, "Failed", reason="OOMKilled"))
    d = decide(view(phase=Phase.RUNNING, pods=pods, restarts=0, backoff=2))
    assert d.action == Action.RESTART and d.pods == ("j-g1-0", "j-g1-1") and "OOMKilled" in d.message
    d = decide(view(phase=Phase.RUNNING, pods=pods, restarts=2, backoff=2))
    assert d.action == Action.FAIL and "backoffLimit 2 reached" in d.message


def test_terminal_jobs_are_left_alone_and_stale_generations_cleaned() -> None:
    assert decide(view(phase=Phase.SUCCEEDED)).action == Action.NONE
    d = decide(view(generation=2, pods=(pod(0, gen=2), pod(1, gen=2), pod(0, gen=1))))
    assert d.action == Action.CLEANUP and d.pods == ("j-g1-0",)


def test_messages_count_one_replica_in_the_singular() -> None:
    assert decide(view(replicas=1, pods=(pod(0),))).message == "1 replica running"
    assert decide(view(pods=(pod(0), pod(1)))).message == "2 replicas running"


def test_an_urgent_move_does_not_blame_ranks_for_a_deadline_that_was_never_given() -> None:
    from dataclasses import replace

    from heterojob.engine.execution.lifecycle import AskedCheckpoint
    asked = (pod(0, checkpoint_request="g1-100"), pod(1, checkpoint_request="g1-100"))
    urgent = replace(view(phase=Phase.CHECKPOINTING, pods=asked), now=100.0,
                     checkpoint=AskedCheckpoint("g1-100", 100.0, "migrate", requested=100.0))
    d = decide(urgent)
    assert d.action == Action.CHECKPOINT_TIMEOUT and "no answer" not in d.message
    assert "urgent move waits for no new checkpoint" in d.message
    # where the job resumes is said by the caller, from status.checkpoint.last: a job that never saved one
    # must not read "going on from the last completed checkpoint" (the demo's fatal XID said both that and
    # "restarts from scratch" in one message)
    assert "last completed checkpoint" not in d.message
    late = replace(urgent, now=221.0, checkpoint=AskedCheckpoint("g1-100", 220.0, "migrate", requested=100.0))
    d = decide(late)
    assert d.action == Action.CHECKPOINT_TIMEOUT and "no answer from rank(s) [0, 1] by the deadline" in d.message


def test_an_evicted_rank_is_a_drain_not_a_failure() -> None:
    """A rank the Eviction API took (DisruptionTarget EvictionByEvictionAPI) moves the job off its node without
    counting a restart, even with the backoff limit used up; a rank still within its grace period lets the
    gang checkpoint by the end of it."""
    evicted = pod(0, deleting=True, node="n1", disruption=EVICTED, deletion_at=130.0)
    job = JobView(phase=Phase.RUNNING, reason=None, generation=1, replicas=2, restarts=3, backoff_limit=3,
                  pods=(evicted, pod(1, node="n2")), now=100.0, cordoned=frozenset({"n1"}))
    d = decide(job)
    assert (d.action, d.reason, d.nodes, d.pods, d.deadline) == (Action.DRAIN, "Drained", ("n1",), ("j-g1-1",), 130.0)
    assert "evicted from node n1" in d.message
    gone = JobView(phase=Phase.RUNNING, reason=None, generation=1, replicas=2, restarts=0, backoff_limit=3,
                   pods=(pod(1, node="n2"),), now=100.0, cordoned=frozenset({"n1"}))
    d = decide(gone)  # deleted before the operator saw it, its node cordoned: no grace left to save in
    assert (d.action, d.deadline) == (Action.DRAIN, None) and "disappeared while node(s) n1 are cordoned" in d.message
    # the same rank gone with no node cordoned, or failed on its own: a failure, as before
    assert decide(replace(gone, cordoned=frozenset())).action == Action.RESTART
    assert decide(replace(job, pods=(pod(0, "Failed", node="n1"), pod(1, node="n2")), restarts=0)).action \
        == Action.RESTART


def test_an_evicted_rank_not_yet_deleted_waits_for_its_deletion_and_the_grace_it_gives() -> None:
    """The Eviction API writes the DisruptionTarget condition, then deletes the pod: a pass between the two sees an
    evicted rank that still runs with no deletion yet. Moving then would leave no grace period to save in (seen
    on a real API server under load): the pass waits, and the deletion's event brings the drain with its deadline."""
    marked = pod(0, node="n1", disruption=EVICTED)
    job = JobView(phase=Phase.RUNNING, reason=None, generation=1, replicas=2, restarts=0, backoff_limit=3,
                  pods=(marked, pod(1, node="n2")), now=100.0, cordoned=frozenset({"n1"}))
    assert decide(job).action == Action.NONE
    deleted = replace(job, pods=(replace(marked, deleting=True, deletion_at=130.0), pod(1, node="n2")))
    assert (decide(deleted).action, decide(deleted).deadline) == (Action.DRAIN, 130.0)


def test_a_rank_in_its_grace_period_is_asked_for_the_checkpoint_and_counted_alive() -> None:
    pending = AskedCheckpoint("g1-9", deadline=130.0, then="migrate", requested=100.0)
    evicted = pod(0, deleting=True, node="n1", disruption=EVICTED, deletion_at=130.0)
    job = JobView(phase=Phase.CHECKPOINTING, reason=None, generation=1, replicas=2, restarts=0, backoff_limit=3,
                  pods=(evicted, pod(1, node="n2")), now=110.0, checkpoint=pending, cordoned=frozenset({"n1"}))
    d = decide(job)
    assert d.action == Action.REQUEST_CHECKPOINT and sorted(d.pods) == ["j-g1-0", "j-g1-1"]
    asked = (replace(evicted, checkpoint_request="g1-9", checkpoint_ack="g1-9;40;s3://c/g1-9/"),
             pod(1, node="n2", checkpoint_request="g1-9", checkpoint_ack="g1-9;40;s3://c/g1-9/"))
    assert decide(replace(job, pods=asked)).action == Action.CHECKPOINT_DONE
    for lost in (replace(job, pods=(asked[1],)),  # gone: the move goes on from the last checkpoint
                 replace(job, pods=(replace(asked[0], checkpoint_ack=""), asked[1]), now=130.0)):  # grace over
        d = decide(lost)
        assert (d.action, d.reason) == (Action.CHECKPOINT_TIMEOUT, "ReplicaLost")


def test_the_schedulers_verdict_on_the_current_gang_in_its_own_stable_words() -> None:
    """Issue 33 item 8d: PodsScheduled False with kube-scheduler's message (the first refused rank's, no pod
    name or time, so a gang refused again for the same reason says the same thing), True once every rank is
    bound, nothing while neither is known."""
    from heterojob.engine.execution.lifecycle import SchedulingVerdict, scheduling

    words = "0/8 nodes are available: 8 Insufficient memory."
    refused = pod(1, "Pending", unschedulable=words, unschedulable_since=5.0)
    verdict = scheduling(view(pods=(pod(0, "Pending", scheduled=True), refused)))
    assert verdict == SchedulingVerdict("False", "Unschedulable", f"the scheduler cannot place the job's pods: {words}")
    moved = scheduling(view(generation=2, pods=(pod(0, "Pending", gen=2, unschedulable=words),
                                                pod(1, "Pending", gen=2, unschedulable=words))))
    assert moved == verdict  # the next placement, refused alike: the same words
    assert scheduling(view(pods=(pod(0, "Pending"), pod(1, "Pending")))) is None  # not looked at yet
    assert scheduling(view(pods=(pod(0, "Pending", scheduled=True),))) is None  # a rank not created yet
    bound = scheduling(view(pods=(pod(0, "Pending", scheduled=True), pod(1, "Running", scheduled=True))))
    assert bound is not None and bound.status == "True"
    old = pod(0, "Pending", gen=1, unschedulable=words)  # an older generation's pod is not the gang's
    assert scheduling(view(generation=2, replicas=1, pods=(old, pod(0, "Running", gen=2, scheduled=True)))
                      ) == SchedulingVerdict("True", "Scheduled", "every pod of the gang is bound to its node")


def test_an_urgent_move_asks_no_rank_for_a_checkpoint_it_will_not_wait_for() -> None:
    """A fault's move goes on from the last completed checkpoint at once: asking the ranks first (a write per pod,
    then another pass) only delayed the replacement gang."""
    from dataclasses import replace

    from heterojob.engine.execution.lifecycle import AskedCheckpoint
    urgent = replace(view(phase=Phase.CHECKPOINTING, pods=(pod(0), pod(1))), now=100.0,
                     checkpoint=AskedCheckpoint("g1-100", 100.0, "migrate", requested=100.0))
    d = decide(urgent)
    assert d.action == Action.CHECKPOINT_TIMEOUT and "urgent move waits for no new checkpoint" in d.message
    assert d.reason == "CheckpointSkipped"  # nothing timed out: no rank was asked
    lost = replace(urgent, pods=(pod(0),))  # a rank already gone: said so
    assert (decide(lost).action, decide(lost).reason) == (Action.CHECKPOINT_TIMEOUT, "ReplicaLost")
    patient = replace(urgent, checkpoint=AskedCheckpoint("g1-100", 220.0, "migrate", requested=100.0))
    assert decide(patient).action == Action.REQUEST_CHECKPOINT  # a move that waits asks every rank


def test_a_new_gang_waiting_for_its_own_old_pods_to_terminate_is_not_called_unschedulable() -> None:
    """A move onto a node the job's earlier gang still holds: kube-scheduler refuses the new pod (Insufficient) until
    the old pods are gone, a second later; the demo posted a Warning Unschedulable for every such move."""
    from heterojob.engine.execution.lifecycle import scheduling

    words = "0/34 nodes are available: 1 Insufficient huawei.com/Ascend910"
    new = pod(0, "Pending", gen=2, node="n1", unschedulable=words, unschedulable_since=10.0)
    old_there = pod(1, "Running", gen=1, node="n1", deleting=True)
    old_elsewhere = pod(0, "Running", gen=1, node="n0", deleting=True)
    assert scheduling(view(generation=2, replicas=1, pods=(new, old_there))) is None
    verdict = scheduling(view(generation=2, replicas=1, pods=(new, old_elsewhere)))  # not in its way: said
    assert verdict is not None and verdict.status == "False" and words in verdict.message
    assert scheduling(view(generation=2, replicas=1, pods=(new,))).status == "False"  # type: ignore[union-attr]
