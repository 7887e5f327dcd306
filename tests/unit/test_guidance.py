"""Past the knee the fluid optimum's prices guide which class a waiting job takes (`engine.queue.guidance`, issue 34):
a class goes to the jobs that keep most of their speed there, no device a waiting job could use idles for it,
and a misfit measured where it runs yields to a job that fits there."""

from __future__ import annotations

import math

import pytest

from heterojob.engine.basics import queueing
from heterojob.engine.queue import admission, aside, completion, guidance, policy
from heterojob.engine.capacity.fleet import Allocation, DeviceClass, Fleet, Node
from heterojob.engine.placing.placement import Alternative, Request
from heterojob.engine.queue.facts import Facts
from heterojob.engine.disruption.holders import Holder

H = 3600.0
A = {"fast": 1.0, "slow": 0.5}  # keeps half its speed on the slow class
B = {"fast": 1.0, "slow": 0.1}  # keeps a tenth
C = {"fast": 1.0, "slow": 0.25}  # keeps a quarter


def test_prices_are_the_dual_of_the_max_throughput_program() -> None:
    # equal work of A and B on 4 + 4 devices: the optimum runs B on fast only and splits A (a third of it on
    # fast), so A is indifferent between the two: the slow class's device-second is worth half a fast one's
    work = guidance.demand([(A, 2, 10 * H), (B, 1, 20 * H), ({"fast": 0.0, "slow": 0.0}, 1, H)])
    assert work == {guidance.kind(A): 20 * H, guidance.kind(B): 20 * H}  # devices x work; a job that runs nowhere: none
    prices = guidance.prices(work, {"fast": 4, "slow": 4})
    assert prices == pytest.approx({"fast": 1.0, "slow": 0.5}, abs=1e-6)
    guide = guidance.Guide(prices)
    assert guide.fits(B) == {"fast"} and guide.fits(A) == {"fast", "slow"}
    assert guide.advantage(B) == pytest.approx({"fast": 1.0, "slow": 0.2})
    # one kind alone still uses every class it runs on; a class none of the work runs on is free: it fits any
    assert guidance.prices({guidance.kind(B): H}, {"fast": 4, "slow": 4}) == pytest.approx({"fast": 1.0, "slow": 0.1})
    idle = guidance.Guide(guidance.prices({guidance.kind({"fast": 1.0}): H}, {"fast": 4, "slow": 4}))
    assert idle.prices["slow"] == 0.0 and idle.fits(B) == {"slow"} and math.isinf(idle.values(B)["slow"])
    assert guidance.prices({}, {"fast": 4}) == {} and guidance.guide([(B, 1, H)], {"fast": 0}) is None


def test_guided_choice_waits_for_the_class_it_fits_and_keeps_the_other_as_a_last_choice() -> None:
    guide = guidance.Guide({"fast": 1.0, "slow": 0.5})
    waits = {"fast": 20 * H, "slow": 0.0}
    plain = completion.choose(H, B, waits)
    assert plain.classes[0] == "slow"  # alone, it would rather run 10x slower than wait 20 hours
    guided = guidance.choose(H, B, waits, guide)
    assert guided.classes == ("fast",) and guided.declined == ("slow",) and guided.unfit == ("slow",)
    assert guided.completion_s == plain.completion_s  # the estimates the job's message reads are all there
    assert guidance.choose(H, A, waits, guide).classes[0] == "slow"  # A fits slow: it starts there now


def _scene(now: float) -> tuple[Fleet, list[Holder], dict[str, Facts]]:
    nodes = {"f": Node("f", {"topology.kubernetes.io/region": "r"}, {"fast": 1}),
             "s": Node("s", {"topology.kubernetes.io/region": "r"}, {"slow": 1})}
    classes = {"fast": DeviceClass("fast", "fast", throughput=1.0), "slow": DeviceClass("slow", "slow",
                                                                                      throughput=0.5)}
    fleet = Fleet(nodes, classes, used={("f", "fast"): 1})
    holders = [Holder("ns/run", 0, now - 0.5 * H, Allocation("fast", {"f": 1}, "ns", "fast", "r"))]
    facts = {"ns/run": Facts(service=queueing.Service(0.0, 0.0), rel={"fast": 1.0}, work_s=50 * H,
                                    measured=frozenset({"fast"})),
             "ns/b": Facts(service=queueing.Service(0.0, now), rel=B, measured=frozenset(B)),
             "ns/a": Facts(service=queueing.Service(0.0, now), rel=A, measured=frozenset(A))}
    return fleet, holders, facts


def test_past_the_knee_the_slow_room_goes_to_the_job_that_keeps_most_speed_there() -> None:
    now = 10 * H
    fleet, holders, facts = _scene(now)
    # b is first in line; the fast class frees in ~50 h: alone b would take the slow device at a tenth of its speed
    queue = [Request("ns/b", [Alternative("fast", 1), Alternative("slow", 1)], 1, created=now - 60),
             Request("ns/a", [Alternative("fast", 1), Alternative("slow", 1)], 1, created=now)]
    settings = admission.AdmissionSettings(min_runtime_s=1e9)  # nobody is preempted: the room frees by itself

    def plan(guide: guidance.Guide | None) -> dict[str, admission.Admission]:
        known = policy.Knowledge(facts, completion.Residual(), saturated=True, guide=guide)
        return admission.plan_with_policy(queue, holders, fleet, now, known, queueing.QueueSettings(), settings)[0]

    unguided = plan(None)
    assert unguided["ns/b"].candidate is not None and unguided["ns/b"].candidate.device_class == "slow"
    guided = plan(guidance.Guide({"fast": 1.0, "slow": 0.5}))
    assert guided["ns/b"].outcome == admission.Outcome.NO_ROOM  # it waits for the class it fits
    assert guided["ns/a"].outcome == admission.Outcome.PLACED and guided["ns/a"].candidate is not None
    assert guided["ns/a"].candidate.device_class == "slow"
    # alone, a job that does not fit the slow class still takes its idle device (work conservation), even with a
    # guide below saturation; with a floor (`Guide.floor`), not when it would run there under it
    c = Request("ns/c", [Alternative("fast", 1), Alternative("slow", 1)], 1, created=now)
    for floor in (0.0, 0.2):
        known = policy.Knowledge({**facts, "ns/c": Facts(service=queueing.Service(0.0, now), rel=C)},
                                 completion.Residual(), saturated=False,
                                 guide=guidance.Guide({"fast": 1.0, "slow": 0.5}, floor=floor))
        assert known.guide is not None and known.guide.fits(C) == {"fast"}
        alone = admission.plan_with_policy([c], holders, fleet, now, known, queueing.QueueSettings(), settings)[0]
        assert alone["ns/c"].candidate is not None and alone["ns/c"].candidate.device_class == "slow"
        alone = admission.plan_with_policy(queue[:1], holders, fleet, now, known, queueing.QueueSettings(),
                                           settings)[0]
        took = alone["ns/b"].candidate.device_class if alone["ns/b"].candidate is not None else None
        assert took == ("slow" if floor == 0.0 else None)  # a tenth of its speed: under a floor of 0.2
    # its message says why the slow class is only a last choice
    narrowed = Request("ns/b", [Alternative("fast", 1)], 1)
    choice = guidance.choose(H, B, {"fast": 20 * H, "slow": 0.0}, guidance.Guide({"fast": 1.0, "slow": 0.5}))
    assert "slow: a last choice: the fleet is saturated" in aside.set_aside(queue[0], narrowed, choice, fleet)


def test_a_measured_misfit_ranks_last_so_a_job_that_fits_its_class_displaces_it() -> None:
    settings = queueing.QueueSettings()
    guide = guidance.Guide({"fast": 1.0, "slow": 0.5})
    at = queueing.effective_priority(0, 0, settings)  # level 0: no waiting job of its priority displaces it
    on_slow = Allocation("slow", {"s": 1}, "ns", "slow", "r")
    running = [Holder("ns/b", at, 0.0, on_slow), Holder("ns/a", at, 0.0, on_slow),
               Holder("ns/g", at, 0.0, on_slow)]
    facts = {"ns/b": Facts(rel=B, measured=frozenset(B)),  # measured: a tenth of its speed there
             "ns/a": Facts(rel=A, measured=frozenset(A)),  # fits
             "ns/g": Facts(rel=B)}  # a guess from the sheet never evicts
    out = guidance.lowered(running, policy.Knowledge(facts), guide, settings)
    assert [h.priority for h in out] == [queueing.effective_priority(0, settings.levels - 1, settings), at, at]
    spent = {**facts, "ns/b": Facts(rel=B, measured=frozenset(B), turns=settings.max_turns or 0)}
    assert guidance.lowered(running, policy.Knowledge(spent), guide, settings) is running  # no turns left
