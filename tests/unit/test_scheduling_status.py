"""status.scheduling: what the queue policy keeps across runs and restarts, written by `controller.status`,
measured by `controller.checkpoints.measure`, read back as `engine.queue.Facts` by `state.knowledge`."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from heterojob.api.job import HeteroJobSpec
from heterojob.controller.checkpoints import measure
from heterojob.state.knowledge import Knower, facts_of, measured_rates
from heterojob.controller.status import StatusPatch
from heterojob.state.job_status import read_status
from heterojob.engine.basics import queueing
from heterojob.engine.capacity.fleet import DeviceClass, Fleet, Node
from heterojob.engine.placing.placement import Alternative, Request
from heterojob.state.cache import Cache
from heterojob.api.times import iso, timestamp
from heterojob.engine.queue.facts import Facts
from heterojob.engine.disruption.holders import Holder

T0 = timestamp("2026-01-01T00:00:00Z") or 0.0
SPEC = HeteroJobSpec.model_validate({
    "devices": [{"deviceClass": "fast", "perReplica": 8}, {"deviceClass": "slow", "perReplica": 8}],
    "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}})
DECLARED = {"fast": 1.0, "slow": 0.25}


def placed(generation: int = 1, since: float = T0, cls: str = "fast", replicas: int = 2) -> dict[str, Any]:
    return {"region": "r", "deviceClass": cls, "replicas": replicas, "perReplica": 8,
            "nodes": [f"n{i}" for i in range(replicas)], "generation": generation, "since": iso(since)}


def job(status: dict[str, Any], name: str = "j") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "creationTimestamp": iso(T0 - 600)},
            "spec": SPEC.model_dump(by_alias=True), "status": status}


def test_an_ended_placement_is_counted_once_and_starts_the_starvation_clock(monkeypatch: Any) -> None:
    monkeypatch.setattr("heterojob.controller.status.time.time", lambda: T0 + 100)
    status = read_status(job({"phase": "Checkpointing", "placement": placed()}))
    body = StatusPatch(status).set(placement=None).body(1)
    s = body["scheduling"]
    assert s["attainedDeviceSeconds"] == 100 * 16 and s["runSeconds"] == {"fast": 100}
    assert s["accountedGeneration"] == 1 and s["waitingSince"] == iso(T0 + 100)
    # the same end written again (a retried pass on the old status) is not counted twice
    again = read_status(job({"phase": "Checkpointing", "placement": placed(), "scheduling": s}))
    assert StatusPatch(again).set(placement=None).body(1)["scheduling"]["attainedDeviceSeconds"] == 1600
    # a finished job's last run counts, its placement stays
    done = StatusPatch(read_status(job({"phase": "Running", "placement": placed(2, T0 + 50), "scheduling": s})))
    out = done.phase(__import__("heterojob.api.job", fromlist=["Phase"]).Phase.SUCCEEDED, "Done", "ok").body(1)
    assert out["scheduling"]["runSeconds"] == {"fast": 150} and out["scheduling"]["accountedGeneration"] == 2
    assert "placement" not in out
    # a patch that leaves the placement alone writes no scheduling
    assert "scheduling" not in StatusPatch(read_status(job({"placement": placed()}))).set(message="x").body(1)


def test_a_run_started_after_the_starvation_bound_is_promoted_and_counts_from_zero() -> None:
    mlfq = queueing.QueueSettings(starvation_s=600)
    s = {"attainedDeviceSeconds": 50_000.0, "waitingSince": iso(T0)}
    patch = StatusPatch(read_status(job({"scheduling": s}))).start_run(mlfq, T0, T0 + 601)
    assert patch.scheduling()["promoted"] is True and patch.scheduling()["attainedDeviceSeconds"] == 0
    patch = StatusPatch(read_status(job({"scheduling": s}))).start_run(mlfq, T0, T0 + 599)
    assert patch.scheduling()["promoted"] is False and patch.scheduling()["attainedDeviceSeconds"] == 50_000
    # fifo keeps the service as it is (switching the policy back loses nothing)
    patch = StatusPatch(read_status(job({"scheduling": s}))).start_run(None, T0, T0 + 10_000)
    assert patch.scheduling()["promoted"] is False and patch.scheduling()["attainedDeviceSeconds"] == 50_000


def test_speed_is_measured_from_checkpoint_steps_in_the_placement() -> None:
    # resumed at step 1000 (the last checkpoint, before this placement) at T0; asked again at T0 + 100, step 3000
    last = {"id": "c1", "step": 1000, "time": iso(T0 - 500)}
    status = read_status(job({"placement": placed(), "checkpoint": {"last": last}}))
    patch = StatusPatch(status)
    measure(patch, status, 3000, T0 + 100)
    assert [(m["deviceClass"], m["replicas"], m["stepsPerSecond"]) for m in patch.scheduling()["speeds"]] == [
        ("fast", 2, 20.0)]
    # a checkpoint within the placement starts the span (its save time taken off)
    last = {"id": "c2", "step": 3000, "time": iso(T0 + 110), "saveSeconds": 10.0}
    status = read_status(job({"placement": placed(), "checkpoint": {"last": last}, "scheduling": patch.scheduling()}))
    patch = StatusPatch(status)
    measure(patch, status, 3500, T0 + 150)
    assert [m["stepsPerSecond"] for m in patch.scheduling()["speeds"]] == [10.0]  # the newest per class and size
    # nothing measured over a span too short, a step that went back, or a step beyond belief
    for step, at in ((3001, T0 + 101), (2000, T0 + 200), (10**15, T0 + 200)):
        patch = StatusPatch(status)
        measure(patch, status, step, at)
        assert "scheduling" not in patch.fields


def test_facts_from_status_measured_speed_work_and_service() -> None:
    status = read_status(job({"scheduling": {
        "attainedDeviceSeconds": 7200.0, "waitingSince": iso(T0), "promoted": True,
        "runSeconds": {"slow": 1000.0, "fast": 100.0},
        "speeds": [{"deviceClass": "slow", "replicas": 2, "stepsPerSecond": 5.0},
                   {"deviceClass": "fast", "replicas": 1, "stepsPerSecond": 10.0}]}}))
    # sizes compare per replica, at the smallest size measured (each size has one class): slow 5/s at 2
    # replicas is 2.5/s at 1, against fast's 10/s there: its speed there is 0.25
    assert measured_rates(status.scheduling) == {"slow": 2.5, "fast": 10.0}
    facts = facts_of(status.scheduling, ["fast", "slow"], DECLARED, T0 - 600)
    assert facts.rel == {"fast": 1.0, "slow": 0.25} and facts.measured == {"fast", "slow"}
    assert facts.work_s == pytest.approx(1000 * 0.25 + 100)
    assert facts.service == queueing.Service(7200.0, T0, True)
    # nothing in status: the sheet's speeds, no service, waiting since creation
    bare = facts_of(None, ["fast", "slow"], DECLARED, T0 - 600)
    assert bare.rel == {"fast": 1.0, "slow": 0.25} and bare.service == queueing.Service(0.0, T0 - 600)


def test_completed_jobs_work_feeds_the_residual_and_is_rebuilt_from_succeeded_objects() -> None:
    classes = {c: DeviceClass(c, c, {"class": c}, throughput=t) for c, t in DECLARED.items()}
    fleet = Fleet({}, classes)
    cache = Cache()
    for i in range(25):
        obj = job({"phase": "Succeeded", "scheduling": {"runSeconds": {"fast": 100.0 * (i + 1)}}}, f"d{i}")
        cache.sync(f"ns/d{i}", obj, read_status(obj), SPEC, classes, T0)
    knower = Knower(cache, history_max=20)
    known = knower.knowledge(fleet, [], [], queueing.QueueSettings())
    assert len(known.residual) == 20  # the newest 20 kept
    assert known.displace_by_level
    # whether promoted jobs displace is judged on the whole queue's devices against the fleet's
    nodes = {"n1": Node("n1", {"class": "fast"}, {"fast": 8})}
    wide = Request("ns/w", [Alternative("fast", 4)], 2)
    assert knower.knowledge(Fleet(nodes, classes), [Request("ns/s", [Alternative("fast", 4)], 1)], [],
                            queueing.QueueSettings()).promoted_displace
    assert not knower.knowledge(Fleet(nodes, classes), [wide], [], queueing.QueueSettings()).promoted_displace
    # a job that has done 2,000 s is expected to run on about as the longer completed ones did
    assert 0 < known.residual.remaining(2000.0) < 1000.0


def test_garbage_in_status_scheduling_is_dropped_or_clamped_logged_and_rewritten(
        caplog: pytest.LogCaptureFixture) -> None:
    raw = {"phase": "Pending", "scheduling": {
        "attainedDeviceSeconds": "a lot", "waitingSince": "yesterday", "promoted": "yes",
        "runSeconds": {"fast": -5, "slow": 1e99}, "accountedGeneration": -1,
        "speeds": [{"deviceClass": "fast", "replicas": 0, "stepsPerSecond": 3}, "junk",
                   {"deviceClass": "fast", "replicas": 1, "stepsPerSecond": 3}],
        "futureField": {"kept": True}}}
    with caplog.at_level(logging.WARNING, logger="heterojob.controller"):
        status = read_status(job(raw))
    s = status.scheduling
    assert s is not None and s.attained_device_seconds == 0 and s.waiting_since is None and not s.promoted
    assert s.run_seconds == {"fast": 0.0, "slow": 1e13} and s.accounted_generation == 0
    assert [(m.device_class, m.replicas) for m in s.speeds] == [("fast", 1)]
    assert status.phase is not None and status.phase.value == "Pending"  # the rest of the status still reads
    assert "status.scheduling" in caplog.text and "attainedDeviceSeconds='a lot'" in caplog.text
    body = StatusPatch(status).set(message="x").body(1)
    assert body["scheduling"]["attainedDeviceSeconds"] == 0 and body["scheduling"]["futureField"] == {"kept": True}
    # not an object at all
    assert read_status(job({"scheduling": [1, 2]})).scheduling is not None


def test_growth_is_held_to_measured_scaling_and_a_job_past_it_goes_back() -> None:
    from heterojob.controller.moves import Moves

    elastic = HeteroJobSpec.model_validate({
        "replicas": {"min": 1, "max": 8, "initial": 1}, "devices": [{"deviceClass": "fast", "perReplica": 8}],
        "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}})

    def limit(speeds: list[tuple[int, float]], replicas: int = 1) -> int:
        st = read_status(job({"placement": placed(replicas=replicas), "scheduling": {"speeds": [
            {"deviceClass": "fast", "replicas": r, "stepsPerSecond": v} for r, v in speeds]}}))
        return Moves.growth_limit(elastic, st)

    assert limit([]) == 8  # nothing measured at its admitted size: growing is the trial that measures it
    assert limit([(1, 10.0)]) == 8
    assert limit([(1, 10.0), (8, 24.0)], replicas=8) == 4  # 8 replicas scale at 0.3: half way back next
    assert limit([(1, 10.0), (2, 19.0), (4, 18.0)], replicas=4) == 2
    assert limit([(1, 10.0)], replicas=1) == 8 and limit([(1, 10.0), (8, 24.0)]) == 4
    assert limit([(4, 30.0)]) == 8  # on another size only: no base to compare with


def test_under_the_policy_a_moving_job_lands_on_the_room_reserved_for_it(monkeypatch: Any) -> None:
    from heterojob.engine.queue import admission, policy
    from heterojob.engine.capacity.fleet import Allocation, Node
    from heterojob.engine.placing.placement import Alternative, Request

    classes = {"fast": DeviceClass("fast", "fast", {"class": "fast"}, throughput=1.0)}
    fleet = Fleet({n: Node(n, {"class": "fast", "topology.kubernetes.io/region": "r"}, {"fast": 8})
                   for n in ("a", "b")}, classes, used={("a", "fast"): 8, ("b", "fast"): 8})
    running = Holder("ns/running", 1, T0, Allocation("fast", {"a": 8}, "ns", "fast", "r"))
    parked = Holder("ns/mover", 1, T0, Allocation("fast", {"b": 8}, "ns", "fast", "r"), disrupted=True,
                              waiting=True)  # it gave its devices back; node b is held for it
    mover = Request("ns/mover", [Alternative("fast", 8)], 1, priority=1, created=T0)
    mlfq = (policy.Knowledge({}), queueing.QueueSettings())

    def plan() -> admission.Admission:
        return admission.plan_one(mover, [mover], [running, parked], fleet, T0 + 10, admission.AdmissionSettings(),
                                  mlfq)

    placed_on = plan()
    assert placed_on.outcome == admission.Outcome.PLACED and placed_on.candidate.nodes == ("b",)
    # what went wrong before: the policy's ranked holders had lost the reservation's owner
    from heterojob.engine.queue import ranking

    monkeypatch.setattr(ranking, "ranked_holder", lambda h, rank, memo: Holder(
        h.job, rank, h.since, h.allocation, h.base, h.yielding_to, h.disrupted))
    assert plan().outcome != admission.Outcome.PLACED


def test_under_the_policy_a_move_to_a_slower_class_keeps_the_room_reserved_there() -> None:
    """A user asked to move a job off the fast class; its destination on the slow class is reserved and it
    has checkpointed and let go. The policy would rather wait for the fast class (the job running there ends
    soon), but the reserved room must still be taken: make before break (found by CI's chaos test, where the
    moved job was left with no room at all)."""
    from heterojob.engine.queue import admission, policy
    from heterojob.engine.capacity.fleet import Allocation, Node
    from heterojob.engine.placing.placement import Alternative, Request

    classes = {"fast": DeviceClass("fast", "fast", {"class": "fast"}, throughput=1.0),
               "slow": DeviceClass("slow", "slow", {"class": "slow"}, throughput=0.3)}
    fleet = Fleet({"a": Node("a", {"class": "fast", "topology.kubernetes.io/region": "r"}, {"fast": 8}),
                   "s": Node("s", {"class": "slow", "topology.kubernetes.io/region": "r"}, {"slow": 8})},
                  classes, used={("a", "fast"): 8, ("s", "slow"): 8})
    running = Holder("ns/running", 1, T0, Allocation("fast", {"a": 8}, "ns", "fast", "r"))
    parked = Holder("ns/mover", 1, T0, Allocation("slow", {"s": 8}, "ns", "slow", "r"), disrupted=True,
                              waiting=True)  # it gave its devices back; node s is held for it
    mover = Request("ns/mover", [Alternative("fast", 8), Alternative("slow", 8)], 1, priority=1, created=T0)
    knowledge = policy.Knowledge({"ns/mover": Facts(rel={"fast": 1.0, "slow": 0.3}, work_s=50 * 3600),
                                  "ns/running": Facts(rel={"fast": 1.0}, work_s=10 * 3600)})
    prepared = policy.prepare([mover], [running, parked], fleet, T0 + 4000, knowledge, queueing.QueueSettings(),
                              600)
    assert prepared.choices["ns/mover"].classes[0] == "fast"  # the policy alone would wait for the fast class
    assert prepared.queue[0].alternatives[0].device_class == "slow"  # ... but the reserved room comes first
    plan = admission.plan_one(mover, [mover], [running, parked], fleet, T0 + 4000, admission.AdmissionSettings(),
                              (knowledge, queueing.QueueSettings()))
    assert plan.outcome == admission.Outcome.PLACED and plan.candidate.nodes == ("s",)


def test_jobs_naming_one_workload_share_measured_speeds_within_their_namespace() -> None:
    """A job that names its workload is placed by what that workload's other jobs measured (status
    .scheduling.speeds, finished jobs included) on classes it has not run on; another namespace's jobs of
    the same name, and jobs naming no workload, keep the declared throughput."""
    classes = {c: DeviceClass(c, c, {"class": c}, throughput=t) for c, t in DECLARED.items()}
    named = HeteroJobSpec.model_validate({**SPEC.model_dump(by_alias=True), "workload": "bert-large.bs32"})
    cache = Cache()
    # a finished job of the workload ran 9/s per replica on slow, 10/s on fast: slow is 0.9 for this model
    for key, status, spec in (
            ("ns/done", {"phase": "Succeeded", "scheduling": {"speeds": [
                {"deviceClass": "slow", "replicas": 2, "stepsPerSecond": 18.0},
                {"deviceClass": "fast", "replicas": 1, "stepsPerSecond": 10.0}]}}, named),
            ("ns/new", {"phase": "Pending"}, named),
            ("other/new", {"phase": "Pending"}, named),
            ("ns/plain", {"phase": "Pending"}, SPEC)):
        obj = job(status, key.split("/")[1])
        obj["metadata"]["namespace"] = key.split("/")[0]
        cache.sync(key, obj, read_status(obj), spec, classes, T0)
    waiting = [Request(k, [Alternative("fast", 8), Alternative("slow", 8)], 1) for k in ("ns/new", "other/new",
                                                                                       "ns/plain")]
    known = Knower(cache).knowledge(Fleet({}, classes), waiting, [], queueing.QueueSettings())
    assert known.of("ns/new").rel == pytest.approx({"fast": 1.0, "slow": 0.9})
    assert known.of("other/new").rel == known.of("ns/plain").rel == {"fast": 1.0, "slow": 0.25}
    # the speeds are the workload's, not the job's own: an upgrade may still probe them (its own speed may
    # differ from the median; measured at seed 1 and 3 near the knee, not probing classes the workload
    # measured lost 1% of the useful share and 4-9% of JCT)
    assert known.of("ns/new").measured == frozenset()


def test_a_workload_name_is_validated_with_the_field_named() -> None:
    bad = {**SPEC.model_dump(by_alias=True), "workload": "has space"}
    with pytest.raises(ValueError, match="workload"):
        HeteroJobSpec.model_validate(bad)


def test_a_workloads_jobs_of_different_sizes_pool_per_device() -> None:
    """An 8-device job measured only on fast and a 1-device job only on slow: per replica the two would say
    slow runs at 9/80 of fast; per device (the job's replicas x its devices per replica there) it is 0.9."""
    classes = {c: DeviceClass(c, c, {"class": c}, throughput=t) for c, t in DECLARED.items()}
    big = HeteroJobSpec.model_validate({**SPEC.model_dump(by_alias=True), "workload": "w"})
    small = HeteroJobSpec.model_validate({**SPEC.model_dump(by_alias=True), "workload": "w", "devices": [
        {"deviceClass": "fast", "perReplica": 1}, {"deviceClass": "slow", "perReplica": 1}]})
    cache = Cache()
    for key, status, spec in (
            ("ns/big", {"phase": "Succeeded", "scheduling": {"speeds": [
                {"deviceClass": "fast", "replicas": 1, "stepsPerSecond": 80.0}]}}, big),  # 8 per replica
            ("ns/small", {"phase": "Succeeded", "scheduling": {"speeds": [
                {"deviceClass": "slow", "replicas": 1, "stepsPerSecond": 9.0}]}}, small),
            ("ns/new", {"phase": "Pending"}, big)):
        obj = job(status, key.split("/")[1])
        cache.sync(key, obj, read_status(obj), spec, classes, T0)
    waiting = [Request("ns/new", [Alternative("fast", 8), Alternative("slow", 8)], 1)]
    known = Knower(cache).knowledge(Fleet({}, classes), waiting, [], queueing.QueueSettings())
    assert known.of("ns/new").rel == pytest.approx({"fast": 1.0, "slow": 0.9})


def test_past_the_knee_the_knowledge_carries_the_fluid_optimums_guide() -> None:
    """Once the waiting jobs ask for the fleet's devices, the plan's knowledge carries the prices of Gavel's
    max-throughput program over the jobs in the system (`engine.queue.guidance`): a job that keeps a quarter of its
    speed on the slow class fits only the fast one when another keeps 0.9 there; below the knee, none."""
    classes = {c: DeviceClass(c, c, {"class": c}, throughput=t) for c, t in DECLARED.items()}
    nodes = {c: Node(c, {"class": c}, {c: 8}) for c in classes}
    named = HeteroJobSpec.model_validate({**SPEC.model_dump(by_alias=True), "workload": "bert-large.bs32"})
    cache = Cache()
    for key, status, spec in (
            ("ns/done", {"phase": "Succeeded", "scheduling": {"speeds": [
                {"deviceClass": "slow", "replicas": 1, "stepsPerSecond": 9.0},
                {"deviceClass": "fast", "replicas": 1, "stepsPerSecond": 10.0}]}}, named),
            ("ns/new", {"phase": "Pending"}, named), ("ns/plain", {"phase": "Pending"}, SPEC)):
        cache.sync(key, job(status, key.split("/")[1]), read_status(job(status, key.split("/")[1])), spec, classes, T0)
    waiting = [Request(k, [Alternative("fast", 8), Alternative("slow", 8)], 1) for k in ("ns/new", "ns/plain")]
    knower = Knower(cache)
    known = knower.knowledge(Fleet(nodes, classes), waiting, [], queueing.QueueSettings(), now=T0)
    assert known.saturated and known.guide is not None
    assert known.guide.fits(known.of("ns/plain").rel) == {"fast"}
    assert known.guide.fits(known.of("ns/new").rel) == {"fast", "slow"}
    assert Knower(cache).knowledge(Fleet(nodes, classes), waiting, [], queueing.QueueSettings()).guide is None
    assert knower.knowledge(Fleet(nodes, classes), waiting[:1], [], queueing.QueueSettings(), now=T0).guide is None
