"""Idle room past the knee goes to the waiting jobs that declined it, by comparative advantage
(`engine.queue.allocation`, issue 34); below the knee a job still declines a slower class it is better off waiting
out (`engine.queue.completion.choose`)."""

from __future__ import annotations

from heterojob.engine.basics import queueing
from heterojob.engine.queue import admission, allocation, completion, policy
from heterojob.engine.capacity.fleet import Allocation, DeviceClass, Fleet, Node
from heterojob.engine.placing.placement import Alternative, Request
from heterojob.engine.queue.facts import Facts
from heterojob.engine.disruption.holders import Holder

H = 3600.0


def test_fill_gives_free_room_to_the_jobs_that_lose_least_there_and_one_class_each() -> None:
    d = allocation.Decliner
    jobs = [d("a", 0, ("slow",), {"slow": 1, "mid": 1}, {"slow": 0.1, "mid": 0.5}),
            d("b", 1, ("slow", "mid"), {"slow": 1, "mid": 1}, {"slow": 0.6, "mid": 0.9}),
            d("c", 2, ("slow",), {"slow": 4}, {"slow": 0.9}),  # too wide for what is left
            d("e", 3, ("slow",), {"slow": 1}, {"slow": 0.3})]
    assert allocation.fill({"slow": 2, "mid": 1}, jobs) == {"b": "mid", "e": "slow", "a": "slow"}
    assert allocation.fill({"slow": 1}, jobs) == {"b": "slow"}
    assert allocation.fill({"slow": 0}, jobs) == {}
    assert allocation.saturated(144, 144, 1.0) and not allocation.saturated(143, 144, 1.0)
    assert not allocation.saturated(10**6, 144, float("inf")) and not allocation.saturated(5, 0, 1.0)


def test_past_the_knee_a_job_that_declined_an_idle_slower_class_takes_it_below_it_waits() -> None:
    nodes = {"f": Node("f", {"topology.kubernetes.io/region": "r"}, {"fast": 1}),
             "s": Node("s", {"topology.kubernetes.io/region": "r"}, {"slow": 1})}
    classes = {"fast": DeviceClass("fast", "fast", throughput=1.0), "slow": DeviceClass("slow", "slow",
                                                                                      throughput=0.25)}
    now = 10 * H
    fleet = Fleet(nodes, classes, used={("f", "fast"): 1})
    holder = Holder("ns/run", 0, now - 0.5 * H, Allocation("fast", {"f": 1}, "ns", "fast", "r"))
    job = Request("ns/w", [Alternative("fast", 1), Alternative("slow", 1)], 1, created=now)
    facts = {"ns/run": Facts(service=queueing.Service(0.0, 0.0), rel={"fast": 1.0}, work_s=0.5 * H),
             "ns/w": Facts(service=queueing.Service(0.0, now), rel={"fast": 1.0, "slow": 0.25})}
    residual = completion.Residual([1 * H] * 30)  # the running job is half done: waiting beats 4x slower
    settings = admission.AdmissionSettings(min_runtime_s=1e9)  # nobody is preempted: the room frees by itself

    def plan(saturated: bool) -> admission.Admission:
        known = policy.Knowledge(facts, residual, saturated=saturated)
        return admission.plan_with_policy([job], [holder], fleet, now, known, queueing.QueueSettings(),
                                          settings)[0]["ns/w"]

    assert plan(False).outcome == admission.Outcome.NO_ROOM  # it waits for the fast class
    placed = plan(True)
    assert placed.outcome == admission.Outcome.PLACED and placed.candidate is not None
    assert placed.candidate.device_class == "slow"  # the idle slow room is not lost past the knee
