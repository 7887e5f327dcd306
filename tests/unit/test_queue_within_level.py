"""The order within a queue slot (`queueing.within_key`): first-level jobs by arrival; past the first level
(promoted jobs too) the job that has done the least work first, so a late job that has had one turn is not
queued behind the long jobs that came before it and have had many."""

from __future__ import annotations

from heterojob.engine.basics import queueing
from heterojob.engine.capacity.fleet import DeviceClass, Fleet, Node
from heterojob.engine.placing.placement import Alternative, Request
from heterojob.engine.queue import admission, policy
from heterojob.engine.queue.facts import Facts

H = 3600.0
MLFQ = queueing.QueueSettings()


def test_past_the_first_level_the_job_with_the_least_work_done_goes_first_and_new_jobs_by_arrival() -> None:
    nodes = {"n1": Node("n1", {"topology.kubernetes.io/region": "r"}, {"gpu": 1})}
    fleet = Fleet(nodes, {"g": DeviceClass("g", "gpu")}, used={("n1", "gpu"): 1})  # full: everyone waits
    now = 100 * H
    since = now - 1 * H  # waiting an hour: under the starvation bound

    def job(name: str, created: float, attained_h: float, work_h: float, waiting_since: float = since
            ) -> tuple[Request, Facts]:
        return (Request(name, [Alternative("g", 1)], 1, created=created),
                Facts(service=queueing.Service(attained_h * H, waiting_since), rel={"g": 1.0}, work_s=work_h * H))

    jobs = [
        job("ns/old-long", 0.0, 60.0, 60.0),  # last level, came first, 60 h done
        job("ns/late", 50 * H, 12.0, 12.0),  # last level, came later, 12 h done
        job("ns/mid", 20 * H, 30.0, 30.0),
        job("ns/new-b", 98 * H, 0.0, 0.0),  # first level: by arrival, whatever their work
        job("ns/new-a", 97 * H, 0.5, 0.5),
        # promoted (waited past the bound): ahead of later levels, least work first among promoted ones
        job("ns/starved-long", 1 * H, 40.0, 90.0, now - 5 * H),
        job("ns/starved-short", 60 * H, 15.0, 15.0, now - 5 * H),
    ]
    queue = [r for r, _ in jobs]
    facts = {r.job: f for r, f in jobs}
    known = policy.Knowledge(facts)
    _, prepared = admission.plan_with_policy(queue, [], fleet, now, known, MLFQ, admission.AdmissionSettings())
    order = [r.job for r in sorted(prepared.queue, key=lambda r: r.order)]
    assert order == ["ns/new-a", "ns/new-b", "ns/starved-short", "ns/starved-long", "ns/late", "ns/mid",
                     "ns/old-long"]
    # by arrival when switched off (and under FIFO the key is always the arrival)
    arrival = queueing.QueueSettings(least_work_within=False)
    _, prepared = admission.plan_with_policy(queue, [], fleet, now, known, arrival,
                                             admission.AdmissionSettings())
    assert [r.job for r in sorted(prepared.queue, key=lambda r: r.order)][-3:] == ["ns/old-long", "ns/mid", "ns/late"]
    fifo = queueing.QueueSettings(policy=queueing.QueuePolicy.FIFO)
    assert queueing.within_key(queueing.effective_priority(0, 0, fifo), 5.0, 9.0, fifo) == 5.0
