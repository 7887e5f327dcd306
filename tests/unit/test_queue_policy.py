"""The scheduling rules on plain data: queue order (MLFQ / least attained service with a starvation bound,
FIFO), completion-time class choice (a slower class is declined when waiting for a faster one is
shorter), upgrade moves (taken only when they pay), and the planner enacting the order."""

from __future__ import annotations

import pytest

from heterojob.engine.basics import queueing
from heterojob.engine.queue import admission, completion, policy
from heterojob.engine.capacity.fleet import Allocation, DeviceClass, Fleet, Limit, Node
from heterojob.engine.placing.placement import Alternative, Request
from heterojob.engine.queue.facts import Facts
from heterojob.engine.disruption.holders import Holder

H = 3600.0
MLFQ = queueing.QueueSettings()  # levels at 1 and 10 device-hours, starvation bound 24 h
FIFO = queueing.QueueSettings(policy=queueing.QueuePolicy.FIFO)


# --- queue order ------------------------------------------------------------------------------------------

def test_least_attained_service_goes_first_within_a_priority_level() -> None:
    new = queueing.rank(0, queueing.Service(0.0, 100.0), 200.0, MLFQ)
    long = queueing.rank(0, queueing.Service(50 * H, 0.0), 200.0, MLFQ)  # older, but 50 device-hours in
    assert new > long
    assert queueing.level(0.5 * H, MLFQ) == 0 and queueing.level(2 * H, MLFQ) == 1 and queueing.level(10 * H, MLFQ) == 2
    # priority still comes first: a long low-priority job never outranks a new job of a higher priority,
    # and a long high-priority job still outranks a new low-priority one
    assert queueing.rank(1, queueing.Service(500 * H, 0.0), 1.0, MLFQ) > queueing.rank(0, queueing.Service(), 1.0, MLFQ)
    assert queueing.split(queueing.effective_priority(2, 1, MLFQ), MLFQ) == (2, 1)


def test_fifo_ignores_attained_service() -> None:
    assert queueing.rank(0, queueing.Service(0.0, 0.0), 1.0, FIFO) == queueing.rank(0, queueing.Service(99 * H), 1.0,
                                                                                    FIFO)
    assert queueing.promotion_time(5.0, FIFO) is None


def test_starvation_bound_promotes_a_long_waiting_job_ahead_of_every_later_level_behind_new_jobs() -> None:
    """Promoted, a job goes ahead of every job past its first level, even one that came after it, and behind
    jobs still in their first level (a new short job is not queued behind every promoted one past the knee)."""
    waited_from = 1000.0
    svc = queueing.Service(80 * H, waited_from)
    just_before = waited_from + MLFQ.starvation_s - 1
    at_bound = queueing.promotion_time(waited_from, MLFQ)
    assert at_bound == waited_from + MLFQ.starvation_s
    newcomer = queueing.rank(0, queueing.Service(0.0, just_before), just_before, MLFQ)
    assert queueing.rank(0, svc, just_before, MLFQ) < newcomer  # still behind short jobs before the bound
    promoted = queueing.rank(0, svc, at_bound, MLFQ)
    second_level = queueing.rank(0, queueing.Service(2 * H, at_bound), at_bound, MLFQ)  # came later, ran 2 dev-h
    assert second_level < promoted < queueing.rank(0, queueing.Service(0.0, at_bound), at_bound, MLFQ)
    assert promoted < queueing.rank(1, queueing.Service(80 * H, at_bound), at_bound, MLFQ)  # priority still first
    assert queueing.split(promoted, MLFQ) == (0, 0)
    # running, the run a promotion started keeps the first level: a new job does not displace it
    assert queueing.running_rank(0, 0.0, MLFQ, ran_s=60.0, promoted=True) == queueing.effective_priority(0, 0, MLFQ)
    # once it runs, its attained service counts from zero, so it is not demoted again at once
    assert queueing.on_start(svc, at_bound, MLFQ).attained_device_s == 0.0
    assert queueing.on_start(svc, just_before, MLFQ).attained_device_s == 80 * H
    with pytest.raises(ValueError, match="thresholds_device_h"):
        queueing.QueueSettings(thresholds_device_h=(10.0, 1.0))


def test_a_job_that_ran_long_waits_in_proportion_before_promotion() -> None:
    """Tiresias' PROMOTEKNOB: the bound is at least `promote_ratio` x the wall time the job ran since its last
    promotion, so past the knee a job that just ran 10 h does not come back after 4 h to displace another."""
    waited_from = 1000.0
    ran_10h = queueing.Service(80 * H, waited_from, run_s=10 * H)
    assert queueing.QueueSettings().promote_ratio == 0.0  # off by default (README says why)
    knob = queueing.QueueSettings(promote_ratio=2.0)
    assert queueing.promotion_time(waited_from, knob, ran_10h.run_s) == waited_from + 20 * H
    level0 = queueing.effective_priority(0, 0, knob, promoted=True)
    assert queueing.rank(0, ran_10h, waited_from + 19 * H, knob) < level0  # past the fixed 4 h, not promoted
    assert queueing.rank(0, ran_10h, waited_from + 20 * H, knob) == level0
    # a job that ran briefly (or never) keeps the fixed bound
    ran_1h = queueing.Service(8 * H, waited_from, run_s=1 * H)
    assert queueing.promotion_time(waited_from, knob, ran_1h.run_s) == waited_from + knob.starvation_s
    # promotion starts the count again: the next bound is the fixed one until it runs long again
    after = queueing.on_start(ran_10h, waited_from + 20 * H, knob)
    assert after.promoted and after.run_s == 0.0 and after.attained_device_s == 0.0
    not_yet = queueing.on_start(ran_10h, waited_from + 5 * H, knob)  # started before its bound: counts kept
    assert not not_yet.promoted and not_yet.run_s == 10 * H
    # ratio 0: the fixed bound only (the rule before)
    fixed = queueing.QueueSettings(promote_ratio=0.0)
    assert queueing.promotion_time(waited_from, fixed, 10 * H) == waited_from + fixed.starvation_s
    with pytest.raises(ValueError, match="promote_ratio"):
        queueing.QueueSettings(promote_ratio=-1.0)


def test_levels_displace_only_while_the_queue_is_shorter_than_the_fleet() -> None:
    """Past the knee the queue alone could refill the fleet: a displacement adds no capacity, so levels only
    order the queue (preemption by priority is not affected: that is the planner's rule, not this one)."""
    assert queueing.displacing(500, 108, queueing.QueueSettings())  # off by default: levels always displace under MLFQ
    short = queueing.QueueSettings(displace_below=1.0)
    assert queueing.displacing(100, 108, short)
    assert not queueing.displacing(108, 108, short) and not queueing.displacing(500, 108, short)
    assert not queueing.displacing(0, 108, FIFO)  # FIFO never displaces by level
    # the planner, given `displace_by_level` from it: a new job preempts the long one only with a short queue
    nodes = {"n1": Node("n1", {"topology.kubernetes.io/region": "r"}, {"gpu": 1})}
    fleet = Fleet(nodes, {"g": DeviceClass("g", "gpu")}, used={("n1", "gpu"): 1})
    now = 100 * H
    holder = Holder("ns/long", 0, 0.0, Allocation("gpu", {"n1": 1}, "ns", "g", "r"))
    new = Request("ns/new", [Alternative("g", 1)], 1, created=now)
    for waiting, preempts in ((1, True), (1, True), (2, False)):
        known = policy.Knowledge({"ns/long": Facts(service=queueing.Service(40 * H, 0.0), rel={"g": 1.0}),
                                  "ns/new": Facts(service=queueing.Service(0.0, now), rel={"g": 1.0})},
                                 displace_by_level=queueing.displacing(waiting, 2, short))
        plan, _ = admission.plan_with_policy([new], [holder], fleet, now, known, MLFQ, admission.AdmissionSettings())
        assert (plan["ns/new"].outcome == admission.Outcome.PREEMPTING) is preempts
    with pytest.raises(ValueError, match="displace_below"):
        queueing.QueueSettings(displace_below=-1.0)


def test_the_planner_preempts_a_long_running_job_for_a_new_one_under_mlfq_only() -> None:
    nodes = {"n1": Node("n1", {"topology.kubernetes.io/region": "r"}, {"gpu": 1})}
    fleet = Fleet(nodes, {"g": DeviceClass("g", "gpu")}, used={("n1", "gpu"): 1})
    now = 100 * H
    for settings, preempts in ((MLFQ, True), (FIFO, False)):
        running = Holder("ns/long", queueing.running_rank(0, 40 * H, settings), 0.0,
                                   Allocation("gpu", {"n1": 1}, "ns", "g", "r"))
        new = Request("ns/new", [Alternative("g", 1)], 1, priority=queueing.rank(0, queueing.Service(0.0, now), now,
                                                                                  settings), created=now)
        plan = admission.plan_queue([new], [running], fleet, now)
        assert (plan["ns/new"].outcome == admission.Outcome.PREEMPTING) is preempts


def test_past_the_knee_a_promoted_job_displaces_only_jobs_expected_to_run_longer_than_it() -> None:
    """Past the knee every long job reaches the starvation bound in turn. If promotion let it displace any
    job of a later level, long jobs would take 4-hour turns on the same devices: that pays when the running
    job has longer to go than the promoted one (a heavy tail: the longer a job has run, the longer it is
    expected to run on) and costs when it is nearly done (a light tail: a turn delays the one about to end).
    So once the queue asks for the fleet's devices, a promoted job is ordered first and displaces by its
    promoted level only the running jobs whose expected remaining work (from the completed jobs' work) is
    larger than its own; new jobs still displace long ones by level, and priority still preempts."""
    nodes = {"n1": Node("n1", {"topology.kubernetes.io/region": "r"}, {"gpu": 1})}
    fleet = Fleet(nodes, {"g": DeviceClass("g", "gpu")}, used={("n1", "gpu"): 1})
    now = 100 * H
    holder = Holder("ns/long", 0, 0.0, Allocation("gpu", {"n1": 1}, "ns", "g", "r"))  # 100 h in
    starved = Request("ns/starved", [Alternative("g", 1)], 1, created=now - 20 * H)
    facts = {"ns/long": Facts(service=queueing.Service(40 * H, 0.0), rel={"g": 1.0}),
             # 30 device-hours in (level 2, as the long one), half an hour of its work done
             "ns/starved": Facts(service=queueing.Service(30 * H, now - 5 * H), rel={"g": 1.0},
                                        work_s=0.5 * H),
             "ns/new": Facts(service=queueing.Service(0.0, now), rel={"g": 1.0})}
    light = completion.Residual([101 * H] * 30)  # every job runs 101 h: the long one is nearly done
    heavy = completion.Residual([1 * H] * 25 + [1000 * H] * 5)  # a job 100 h in is one of the 1,000 h ones
    # promoted jobs displace by level only while the queue asks for fewer devices than the fleet has
    assert queueing.promoted_displacing(1, 2, MLFQ) and not queueing.promoted_displacing(2, 2, MLFQ)
    assert not queueing.promoted_displacing(0, 2, queueing.QueueSettings(promoted_displace_below=0.0))
    assert not queueing.promoted_displacing(0, 2, FIFO)
    past_knee = queueing.promoted_displacing(2, 2, MLFQ)
    assert queueing.starved(now - 5 * H, now, MLFQ)

    def plan(queue: list[Request], residual: completion.Residual, promoted_displace: bool = past_knee
             ) -> tuple[admission.QueuePlan, policy.Prepared]:
        known = policy.Knowledge(facts, residual, promoted_displace=promoted_displace)
        return admission.plan_with_policy(queue, [holder], fleet, now, known, MLFQ, admission.AdmissionSettings())

    done, prepared = plan([starved], light)
    assert done["ns/starved"].outcome == admission.Outcome.NO_ROOM  # the long job ends within the hour
    # ... and its status says why a job first in line displaces nobody
    assert done["ns/starved"].message.endswith(admission.PROMOTED_HELD)
    # not when no running job is below its order anyway (a higher priority holds the room)
    vip = Holder("ns/long", 1, 0.0, Allocation("gpu", {"n1": 1}, "ns", "g", "r"))
    known = policy.Knowledge(facts, light, promoted_displace=past_knee)
    other, _ = admission.plan_with_policy([starved], [vip], fleet, now, known, MLFQ, admission.AdmissionSettings())
    assert other["ns/starved"].outcome == admission.Outcome.NO_ROOM
    assert admission.PROMOTED_HELD not in other["ns/starved"].message
    assert prepared.queue[0].priority == queueing.effective_priority(0, 0, MLFQ, promoted=True)  # still promoted
    done, _ = plan([starved], heavy)
    assert done["ns/starved"].outcome == admission.Outcome.PREEMPTING  # 900 h to go against its 167 h
    assert [d.job for d in done["ns/starved"].disruptions] == ["ns/long"]
    # a newcomer in its first level is planned before it (and displaces the long job by level): past the knee
    # every waiting job is promoted in turn, and a promoted one ahead of new jobs would make the queue FIFO
    new = Request("ns/new", [Alternative("g", 1)], 1, created=now)
    done, prepared = plan([new, starved], light)
    assert [r.job for r in sorted(prepared.queue, key=lambda r: r.order)] == ["ns/new", "ns/starved"]
    assert done["ns/new"].outcome == admission.Outcome.PREEMPTING
    assert [d.job for d in done["ns/new"].disruptions] == ["ns/long"]
    # a promoted job of a higher priority still preempts a lower one
    urgent = Request("ns/starved", [Alternative("g", 1)], 1, priority=1, created=now - 20 * H)
    assert plan([urgent], light)[0]["ns/starved"].outcome == admission.Outcome.PREEMPTING
    # with a short queue (or Tiresias' rule, `promoted_displace_below` inf) the promotion displaces anyway
    assert plan([starved], light, True)[0]["ns/starved"].outcome == admission.Outcome.PREEMPTING
    with pytest.raises(ValueError, match="promoted_displace_below"):
        queueing.QueueSettings(promoted_displace_below=-1.0)


# --- completion-time choice -------------------------------------------------------------------------------

DECLARED = {"fast": 1.0, "slow": 0.25}


def test_speeds_come_from_declared_throughput_then_the_jobs_own_measurement() -> None:
    assert completion.speeds(DECLARED, {}, ["fast", "slow"]) == {"fast": 1.0, "slow": 0.25}
    # measured 2 steps/s on slow: fast is predicted at 8 by the declared ratio
    assert completion.speeds(DECLARED, {"slow": 2.0}, ["fast", "slow"]) == {"fast": 1.0, "slow": 0.25}
    # measured on both: this job is only 2x faster on fast than on slow, whatever the sheet says
    assert completion.speeds(DECLARED, {"slow": 4.0, "fast": 8.0}, ["fast", "slow"]) == {"fast": 1.0, "slow": 0.5}


def test_slow_class_declined_when_the_wait_for_the_fast_one_is_shorter() -> None:
    rel = {"fast": 1.0, "slow": 0.25}
    # 10 h of work: 40 h on slow now, or 2 h wait + 10 h on fast
    choice = completion.choose(10 * H, rel, {"fast": 2 * H, "slow": 0.0})
    assert choice.classes == ("fast",) and choice.declined == ("slow",)
    assert choice.completion_s["fast"] == 12 * H and choice.completion_s["slow"] == 40 * H
    # a 50 h wait is worse than 40 h on slow now: start on slow (the busy fast class is not listed)
    choice = completion.choose(10 * H, rel, {"fast": 50 * H, "slow": 0.0})
    assert choice.classes == ("slow",) and choice.declined == ()
    # both free: the fast one only (should the fast room go to a job ahead, this one waits for it)
    both = completion.choose(10 * H, rel, {"fast": 0.0, "slow": 0.0})
    assert both.classes == ("fast",) and both.declined == ("slow",)


def test_a_waiting_job_keeps_the_class_it_waits_for_until_another_is_clearly_sooner() -> None:
    """Ten-hour estimates drift with the clock: a waiting job that chose class a keeps it while b is expected
    to complete within `KEEP_MARGIN` of it (its status, where it queues, does not flap), and moves to b once b
    is clearly sooner; free room now is never given up for the class it waited for."""
    rel = {"a": 1.0, "b": 1.0}
    drifted = {"a": 10.4 * H, "b": 10.0 * H}  # b now 4% sooner
    assert completion.choose(H, rel, drifted).classes == ("b",)  # chosen afresh: the best
    assert completion.choose(H, rel, drifted, kept="a").classes == ("a",)  # kept: within the margin
    assert completion.choose(H, rel, {"a": 14 * H, "b": 10 * H}, kept="a").classes == ("b",)  # clearly sooner
    assert completion.choose(H, rel, {"a": 10.4 * H, "b": 0.0}, kept="a").classes == ("b",)  # b free now
    assert completion.choose(H, rel, drifted, kept="gone").classes == ("b",)  # a class it can no longer use


def test_the_policy_pass_keeps_each_waiting_jobs_last_choice_within_the_margin() -> None:
    """`prepare` gives each job the class `Knowledge.chose` says it waited for, while that stays within the
    margin: the next pass of the same queue narrows it there (the full fleet, both classes busy)."""
    now = 100 * H
    nodes = {"a1": Node("a1", {"topology.kubernetes.io/region": "r"}, {"agpu": 1}),
             "b1": Node("b1", {"topology.kubernetes.io/region": "r"}, {"bgpu": 1})}
    classes = {"a": DeviceClass("a", "agpu", {}, throughput=1.0), "b": DeviceClass("b", "bgpu", {}, throughput=0.97)}
    holders = [Holder("ns/ra", 1, now - H, Allocation("agpu", {"a1": 1}, "ns", "a", "r")),
               Holder("ns/rb", 1, now - H, Allocation("bgpu", {"b1": 1}, "ns", "b", "r"))]
    fleet = Fleet(nodes=nodes, classes=classes, used={("a1", "agpu"): 1, ("b1", "bgpu"): 1})
    job = Request("ns/w", [Alternative("a", 1), Alternative("b", 1)], 1, created=now)
    knowledge = policy.Knowledge({"ns/w": Facts(rel={"a": 1.0, "b": 0.97})})
    fresh = policy.prepare([job], holders, fleet, now, knowledge, queueing.QueueSettings(), 300.0)
    assert [a.device_class for a in fresh.queue[0].alternatives] == ["a"] and fresh.chose == {"ns/w": "a"}
    knowledge.chose = {"ns/w": "b"}  # it waited for b at the pass before: a is only 3% sooner
    kept = policy.prepare([job], holders, fleet, now, knowledge, queueing.QueueSettings(), 300.0)
    assert [a.device_class for a in kept.queue[0].alternatives] == ["b"] and kept.chose == {"ns/w": "b"}


def test_a_job_that_can_start_on_free_room_does_not_preempt_for_a_faster_class() -> None:
    """Work conservation: a new job (first level) could displace the long job on the fast class, but the slow
    class is free, so it weighs the fast one by when it frees by itself (the long job is expected to run
    for hours) and starts on the slow class; once the slow class is full too, it preempts on the fast one."""
    now = 100 * H
    nodes = {"f1": Node("f1", {"topology.kubernetes.io/region": "r"}, {"fgpu": 1}),
             "s1": Node("s1", {"topology.kubernetes.io/region": "r"}, {"sgpu": 1})}
    classes = {"fast": DeviceClass("fast", "fgpu", {}, throughput=1.0),
               "slow": DeviceClass("slow", "sgpu", {}, throughput=0.5)}
    long = Holder("ns/long", 0, now - 20 * H, Allocation("fgpu", {"f1": 1}, "ns", "fast", "r"))
    facts = {"ns/long": Facts(service=queueing.Service(0.0, 0.0), rel={"fast": 1.0, "slow": 0.5},
                                     work_s=0.0, measured=frozenset({"fast"})),
             "ns/new": Facts(service=queueing.Service(0.0, now), rel={"fast": 1.0, "slow": 0.5})}
    known = policy.Knowledge(facts)
    new = Request("ns/new", [Alternative("fast", 1), Alternative("slow", 1)], 1, created=now)
    free_slow = Fleet(nodes, classes, used={("f1", "fgpu"): 1})
    plan, prepared = admission.plan_with_policy([new], [long], free_slow, now, known, MLFQ,
                                                admission.AdmissionSettings())
    assert plan["ns/new"].outcome == admission.Outcome.PLACED and plan["ns/new"].candidate.device_class == "slow"
    assert not plan["ns/new"].disruptions
    both_full = Fleet(nodes, classes, used={("f1", "fgpu"): 1, ("s1", "sgpu"): 1})
    other = Holder("ns/other", 0, now - 20 * H, Allocation("sgpu", {"s1": 1}, "ns", "slow", "r"))
    known = policy.Knowledge({**facts, "ns/other": facts["ns/long"]})
    plan, _ = admission.plan_with_policy([new], [long, other], both_full, now, known, MLFQ,
                                         admission.AdmissionSettings())
    assert plan["ns/new"].outcome == admission.Outcome.PREEMPTING
    assert plan["ns/new"].candidate.device_class == "fast"
    # the rule on its own: free room on any class it may run on rules displacement out
    assert not policy.displaces({"fast": 1, "slow": 1}, {"fast": 0, "slow": 1}, {"fast": 1.0, "slow": 0.5})
    assert policy.displaces({"fast": 1, "slow": 1}, {"fast": 0, "slow": 0}, {"fast": 1.0, "slow": 0.5})
    assert policy.displaces({"fast": 1, "slow": 1}, {"fast": 0, "slow": 1}, {"fast": 1.0, "slow": 0.0})


def test_expected_wait_counts_running_ends_and_the_queue_ahead() -> None:
    running = [completion.Busy(2, 5 * H), completion.Busy(2, 1 * H)]
    assert completion.expected_wait(2, 2, 8, running, 0.0) == 0.0  # free now
    assert completion.expected_wait(3, 1, 8, running, 0.0) == 1 * H  # the first end frees enough
    assert completion.expected_wait(4, 1, 8, running, 0.0) == 5 * H
    assert completion.expected_wait(3, 1, 8, running, 16 * H) == 3 * H  # + 16 device-hours ahead on 8 devices
    assert completion.expected_wait(9, 8, 8, running, 0.0) == float("inf")  # never fits


def test_residual_work_comes_from_completed_jobs_not_from_the_job() -> None:
    r = completion.Residual(prior_s=H, min_samples=3)
    assert r.remaining(0.0) == H and r.remaining(5 * H) == 5 * H  # no history: as long again
    for w in (1 * H, 2 * H, 9 * H):
        r.add(w)
    assert r.remaining(0.0) == pytest.approx(4 * H)  # mean of 1, 2, 9
    assert r.remaining(3 * H) == pytest.approx(6 * H)  # only the 9 h job ran longer than 3 h
    assert r.remaining(20 * H) == 20 * H


# --- upgrade moves ----------------------------------------------------------------------------------------

COST = completion.MoveCost(save_s=20, restore_s=60, risk=0.5)  # 120 s


def test_upgrade_move_taken_only_when_it_pays() -> None:
    rel = {"fast": 1.0, "slow": 0.5}
    assert completion.upgrade_saving(H, 0.5, 1.0, COST) == pytest.approx(2 * H - H - 120)
    near_done = completion.Mover("a", "slow", 1, 60.0, rel)  # 2 min left on slow: saves 1 min, costs 2
    long = completion.Mover("b", "slow", 1, 5 * H, rel)
    assert completion.plan_upgrades([near_done], {"fast": 4}, COST) == []
    moves = completion.plan_upgrades([near_done, long], {"fast": 4}, COST)
    assert [(m.job, m.to_class) for m in moves] == [("b", "fast")]
    # never down, never without room, never while restoring or checkpointing
    assert completion.plan_upgrades([completion.Mover("c", "fast", 1, 9 * H, rel)], {"slow": 4}, COST) == []
    assert completion.plan_upgrades([completion.Mover("d", "slow", 4, 9 * H, rel)], {"fast": 3}, COST) == []
    assert completion.plan_upgrades([completion.Mover("e", "slow", 1, 9 * H, rel, settled=False)], {"fast": 3},
                                    COST) == []


def test_upgrades_take_their_room_before_the_next_one_largest_saving_first() -> None:
    rel = {"fast": 1.0, "slow": 0.5}
    movers = [completion.Mover("small", "slow", 2, 2 * H, rel), completion.Mover("big", "slow", 2, 8 * H, rel)]
    assert [m.job for m in completion.plan_upgrades(movers, {"fast": 3}, COST)] == ["big"]
    assert [m.job for m in completion.plan_upgrades(movers, {"fast": 4}, COST)] == ["big", "small"]


def fast_busy_slow_free(sheet: dict[str, float]) -> tuple[Fleet, float, Holder, Request,
                                                         policy.Knowledge]:
    """One fast node busy with a job that started 10 minutes ago, one slow node free (declared 4x slower),
    and a job that may run on either, whose speeds come from `sheet`."""
    nodes = {"f": Node("f", {"topology.kubernetes.io/region": "r", "c": "fast"}, {"fast": 4}),
             "s": Node("s", {"topology.kubernetes.io/region": "r", "c": "slow"}, {"slow": 4})}
    classes = {"fast": DeviceClass("fast", "fast", {"c": "fast"}, throughput=1.0),
               "slow": DeviceClass("slow", "slow", {"c": "slow"}, throughput=0.25)}
    fleet = Fleet(nodes, classes, used={("f", "fast"): 4})
    now = 10 * H
    running = Holder("ns/r", 0, now - 600, Allocation("fast", {"f": 4}, "ns", "fast", "r"))
    waiting = Request("ns/w", [Alternative("fast", 4), Alternative("slow", 4)], 1, created=now)
    known = policy.Knowledge({"ns/r": Facts(rel={"fast": 1.0}),
                              "ns/w": Facts(rel=completion.speeds(sheet, {}, ["fast", "slow"]))},
                             displace_by_level=False)
    return fleet, now, running, waiting, known


def test_the_operators_plan_declines_a_slow_class_when_the_fast_one_frees_sooner() -> None:
    fleet, now, running, waiting, known = fast_busy_slow_free({"fast": 1.0, "slow": 0.25})
    # without the policy it starts at once on the slow class; with it, 4x slower for ~1 h of expected work
    # loses to waiting ~1 h for the fast one (the running job is expected to run as long again, 1 h at least)
    plain = admission.plan_one(waiting, [waiting], [running], fleet, now)
    assert plain.outcome == admission.Outcome.PLACED and plain.candidate.device_class == "slow"
    chosen = admission.plan_one(waiting, [waiting], [running], fleet, now, policy=(known, MLFQ))
    assert chosen.outcome == admission.Outcome.NO_ROOM and "r/slow" not in chosen.message
    # the declined class is still accounted for in the message, with why
    assert "set aside: slow: declined: waiting for fast is expected to finish sooner" in chosen.message
    # the running job of the same priority is not displaced while attained service is not known across runs
    assert not chosen.disruptions


# --- starvation: a promoted run is not displaced by level at once --------------------------------------------

def test_a_promoted_run_keeps_the_first_level_for_one_bound_then_is_demoted() -> None:
    starved_since = 0.0
    at_bound = starved_since + MLFQ.starvation_s
    svc = queueing.on_start(queueing.Service(80 * H, starved_since), at_bound, MLFQ)
    assert svc.promoted and svc.attained_device_s == 0.0
    first = queueing.effective_priority(0, 0, MLFQ)
    # an 8-device gang passes 10 device-hours after 75 min: still level 0 while the promoted run is young
    after_2h = 8 * 2 * H
    assert queueing.running_rank(0, after_2h, MLFQ, 2 * H, svc.promoted) == first
    assert queueing.running_rank(0, after_2h, MLFQ, MLFQ.starvation_s, svc.promoted) == queueing.effective_priority(
        0, 2, MLFQ)
    # a run that was not a promotion is ranked by its attained service alone
    plain = queueing.on_start(queueing.Service(0.0, at_bound - 60), at_bound, MLFQ)
    assert not plain.promoted
    assert queueing.running_rank(0, after_2h, MLFQ, 2 * H, plain.promoted) == queueing.effective_priority(0, 2, MLFQ)
    # so a newcomer of the same priority cannot preempt the promoted gang, but can preempt the other
    nodes = {"n1": Node("n1", {"topology.kubernetes.io/region": "r"}, {"gpu": 8})}
    fleet = Fleet(nodes, {"g": DeviceClass("g", "gpu")}, used={("n1", "gpu"): 8})
    now = at_bound + 2 * H
    new = Request("ns/new", [Alternative("g", 8)], 1, created=now)  # priority 0, ranked by the policy
    for service, preempts in ((svc, False), (plain, True)):
        holder = Holder("ns/gang", 0, at_bound, Allocation("gpu", {"n1": 8}, "ns", "g", "r"))
        known = policy.Knowledge({"ns/gang": Facts(service=service, rel={"g": 1.0}),
                                  "ns/new": Facts(service=queueing.Service(0.0, now), rel={"g": 1.0})})
        plan, _ = admission.plan_with_policy([new], [holder], fleet, now, known, MLFQ, admission.AdmissionSettings())
        assert (plan["ns/new"].outcome == admission.Outcome.PREEMPTING) is preempts


# --- elastic growth ---------------------------------------------------------------------------------------

def test_growth_limited_to_sizes_where_measured_scaling_is_good() -> None:
    assert completion.scaling_efficiency(1, 10.0, 2, 18.0) == pytest.approx(0.9)
    # nothing measured at the admitted size: no growth
    assert completion.growth_limit(1, 8, {}) == 1
    # only the admitted size measured: the first growth, as far as the room goes, is the trial
    assert completion.growth_limit(1, 8, {1: 10.0}) == 8
    # 8 replicas at 30% per replica (2.4x for 8x the devices): halve toward the admitted size
    assert completion.growth_limit(1, 8, {1: 10.0, 8: 24.0}) == 4
    # 4 at 70%: stay there; 4 at 45% as well: try 2
    assert completion.growth_limit(1, 8, {1: 10.0, 8: 24.0, 4: 28.0}) == 4
    assert completion.growth_limit(1, 8, {1: 10.0, 8: 24.0, 4: 18.0}) == 2
    # 2 bad too: back to the admitted size for good
    assert completion.growth_limit(1, 8, {1: 10.0, 8: 24.0, 4: 18.0, 2: 11.0}) == 1
    # a good size above a bad one does not reopen growth past the bad one
    assert completion.growth_limit(1, 8, {1: 10.0, 2: 19.0, 4: 18.0, 8: 80.0}) == 2
    # never above the maximum; the threshold is the caller's
    assert completion.growth_limit(1, 3, {1: 10.0, 2: 20.0}) == 3
    assert completion.growth_limit(1, 8, {1: 10.0, 8: 24.0}, min_efficiency=0.25) == 8


def test_borrowed_room_does_not_count_as_a_wait() -> None:
    """A class whose devices are only lent to a grown job is as good as free to a waiting job: the planner
    takes the borrowed room back, so the completion estimate must not send the job elsewhere."""
    nodes = {"f": Node("f", {"topology.kubernetes.io/region": "r", "c": "fast"}, {"fast": 8}),
             "s": Node("s", {"topology.kubernetes.io/region": "r", "c": "slow"}, {"slow": 8})}
    classes = {"fast": DeviceClass("fast", "fast", {"c": "fast"}, throughput=1.0),
               "slow": DeviceClass("slow", "slow", {"c": "slow"}, throughput=0.5)}
    fleet = Fleet(nodes, classes, used={("f", "fast"): 8, ("s", "slow"): 8})
    now = 10 * H
    base = Request("ns/grown", [Alternative("fast", 1)], 1)
    grown = Holder("ns/grown", 0, now - 5 * H, Allocation("fast", {"f": 8}, "ns", "fast", "r"), base)
    full = Holder("ns/full", 0, now - 5 * H, Allocation("slow", {"s": 8}, "ns", "slow", "r"))
    waiting = Request("ns/w", [Alternative("fast", 4), Alternative("slow", 4)], 1, created=now)
    rel = {"fast": 1.0, "slow": 0.5}
    known = policy.Knowledge({"ns/grown": Facts(rel=rel, work_s=5 * H), "ns/full": Facts(rel=rel),
                              "ns/w": Facts(rel=rel)}, displace_by_level=False)
    prepared = policy.prepare([waiting], [grown, full], fleet, now, known, FIFO, 300.0)
    assert prepared.choices["ns/w"].completion_s["fast"] == pytest.approx(H)  # no wait: 1 h of work (prior)
    plan, _ = admission.plan_with_policy([waiting], [grown, full], fleet, now, known, FIFO,
                                         admission.AdmissionSettings())
    assert plan["ns/w"].outcome == admission.Outcome.RECLAIMING
    assert [d.job for d in plan["ns/w"].disruptions] == ["ns/grown"]


def test_a_long_job_probes_a_class_the_sheet_ranks_second_and_a_short_one_does_not() -> None:
    """The declared throughput is a class's mean; some models run faster on the class the sheet ranks
    second (Gavel's table: Recommendation is 2.2x faster on P100 than on V100). A job measured only where it
    runs probes such a class on free room when the probe costs little against its expected remaining time."""
    rel = {"fast": 1.0, "second": 0.8, "slow": 0.3}  # measured on fast only: the others are the sheet's guess
    unmeasured = frozenset({"second", "slow"})
    free = {"second": 4, "slow": 4}
    long = completion.Mover("long", "fast", 1, 20 * H, rel, unmeasured=unmeasured)
    short = completion.Mover("short", "fast", 1, 0.5 * H, rel, unmeasured=unmeasured)
    moves = completion.plan_upgrades([long, short], free, COST, probe_share=0.05, min_runtime_s=300)
    assert [(m.job, m.to_class, m.probe) for m in moves] == [("long", "second", True)]  # never the far slower one
    assert moves[0].saving_s == -completion.probe_cost(1.0, 0.8, COST, 300)  # 2 moves + 75 s slower: 315 s
    assert completion.probe_cost(1.0, 0.8, COST, 300) == pytest.approx(2 * 120 + 75)
    # off by default, never once measured there, never before a move up that pays
    assert completion.plan_upgrades([long], free, COST) == []
    measured = completion.Mover("m", "fast", 1, 20 * H, {"fast": 1.0, "second": 0.5})
    assert completion.plan_upgrades([measured], free, COST, probe_share=0.05) == []
    up = completion.Mover("up", "second", 1, 20 * H, {"fast": 1.0, "second": 0.8}, unmeasured=frozenset({"fast"}))
    first = completion.plan_upgrades([long, up], {"fast": 1, "second": 1}, COST, probe_share=0.05)
    assert [(m.job, m.probe) for m in first] == [("up", False), ("long", True)]


def test_a_workloads_pooled_speeds_replace_the_sheet_where_a_job_has_not_run() -> None:
    # three jobs of one workload measured steps/s per replica; the third straggled on fast: the median holds
    pool = completion.pooled([{"fast": 10.0, "slow": 9.0}, {"fast": 10.0}, {"fast": 2.0, "slow": 9.0, "x": 0.0}])
    assert pool == {"fast": 10.0, "slow": 9.0}
    sheet = completion.sheet(DECLARED, pool)
    assert sheet == {"fast": 10.0, "slow": 9.0}
    # a new job of the workload: 0.9 on slow where the sheet says 0.25; measured 5/s on fast: slow at 4.5
    assert completion.speeds(sheet, {}, ["fast", "slow"]) == {"fast": 1.0, "slow": 0.9}
    assert completion.speeds(sheet, {"fast": 5.0}, ["fast", "slow"]) == pytest.approx({"fast": 1.0, "slow": 0.9})
    # its own measurement still wins where it ran
    assert completion.speeds(sheet, {"fast": 5.0, "slow": 1.0}, ["fast", "slow"]) == {"fast": 1.0, "slow": 0.2}
    # a class the pool has not seen is scaled from the measured ones by the declared ratio; nothing measured
    # (or only classes without a declared throughput): the declared sheet
    three = {"fast": 1.0, "mid": 0.5, "slow": 0.25}
    assert completion.sheet(three, {"slow": 2.0}) == {"fast": 8.0, "mid": 4.0, "slow": 2.0}
    assert completion.sheet(three, {}) == three and completion.sheet(three, {"other": 3.0}) == three


def test_the_plan_takes_a_slow_class_the_jobs_workload_runs_well_on() -> None:
    """The setting of `test_the_operators_plan_declines_a_slow_class_when_the_fast_one_frees_sooner`, but
    the job's workload measured 0.95 of its fast speed on the slow class: 4x slower by the sheet, it is
    nearly as fast there, so it starts now rather than wait for the fast class."""
    sheet = completion.sheet({"fast": 1.0, "slow": 0.25}, completion.pooled([{"fast": 4.0, "slow": 3.8}]))
    fleet, now, running, waiting, known = fast_busy_slow_free(sheet)
    chosen = admission.plan_one(waiting, [waiting], [running], fleet, now, policy=(known, MLFQ))
    assert chosen.outcome == admission.Outcome.PLACED and chosen.candidate.device_class == "slow"


def test_a_waiting_jobs_message_accounts_for_the_classes_the_policy_set_aside() -> None:
    """The user-trial case (team-a/llama-finetune): both classes full, the preferred fast class held by a
    job expected to run for hours and over the namespace's quota, the slow class freeing soon. The policy
    keeps only the slow class (`completion.choose`), yet the message names the fast one, why it was set
    aside (its expected completion) and the quota that blocks it besides."""
    now = 100 * H
    nodes = {"f1": Node("f1", {"topology.kubernetes.io/region": "r"}, {"fgpu": 1}),
             "s1": Node("s1", {"topology.kubernetes.io/region": "r"}, {"sgpu": 1})}
    classes = {"fast": DeviceClass("fast", "fgpu", {}, throughput=1.0),
               "slow": DeviceClass("slow", "sgpu", {}, throughput=0.5)}
    rel = {"fast": 1.0, "slow": 0.5}
    long = Holder("ns/long", 2, now - 20 * H, Allocation("fgpu", {"f1": 1}, "ns", "fast", "r"))
    short = Holder("ns/short", 2, now - 60, Allocation("sgpu", {"s1": 1}, "ns", "slow", "r"))
    facts = {"ns/long": Facts(queueing.Service(0.0, 0.0), rel, work_s=20 * H, measured=frozenset({"fast"})),
             "ns/short": Facts(queueing.Service(0.0, 0.0), rel),
             "ns/new": Facts(queueing.Service(0.0, now), rel)}
    known = policy.Knowledge(facts, completion.Residual([1 * H] * 30))
    new = Request("ns/new", [Alternative("fast", 1), Alternative("slow", 1)], 1, created=now)
    full = Fleet(nodes, classes, used={("f1", "fgpu"): 1, ("s1", "sgpu"): 1},
                 quotas={"ns": [Limit("fast", "*", 1, "gpus")]}, held={"ns": {("fast", "r"): 1}})
    prepared = policy.prepare([new], [long, short], full, now, known, MLFQ, 300.0)
    assert [a.device_class for a in prepared.queue[0].alternatives] == ["slow"]  # the narrowing this is about
    plan = admission.plan_one(new, [new], [long, short], full, now, admission.AdmissionSettings(), (known, MLFQ))
    assert plan.outcome != admission.Outcome.PLACED
    message = plan.message
    assert "r/slow: room for 0 of 1 replicas" in message  # what the plan explains, as before
    assert "set aside: fast: waiting for it is expected to finish later (~" in message and "than waiting for slow" \
        in message
    assert "quota besides: r/fast: quota 1/1 used (gpus: fast in any region; needs 1)" in message
    # a class it could start on now but declines says so
    choice = completion.Choice(("fast",), {"fast": 2 * H, "slow": 6 * H}, ("slow",))
    aside = admission.set_aside(new, Request("ns/new", [Alternative("fast", 1)], 1), choice,
                                Fleet(nodes, classes))
    assert aside == ("set aside: slow: declined: waiting for fast is expected to finish sooner (~2.0 h) than "
                     "starting on slow now (~6.0 h)")
