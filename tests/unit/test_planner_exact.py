"""The planner with free room indexed (`engine.capacity.rooms`) plans exactly what the straightforward scan plans.

The oracle is `tests/oracle/reference.py`: `place` as it was (every usable node of every region read, full
or not; packing by scanning; scores summed over the region) and `Ledger.may_fit` by a scan. Seeded random
fleets and queues, with what placement filters on (software and labels per node, quotas, excluded nodes,
network-down chips, unhealthy, failed, not Ready and cordoned nodes, allowed and preferred regions, several
alternatives, two classes sharing a resource) and holders that preempt, reclaim, yield or wait on their own
room, must come out of `plan_queue` equal, admission by admission: outcome, candidate and score, message,
disruptions and whom to wake. A `rooms.Memory` kept across a sequence of cycles in which room is taken and
freed (and nodes change) must not change any plan either.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest
from heterojob.engine.basics import queueing
from heterojob.engine.capacity import rooms
from heterojob.engine.disruption import preemption, victims
from heterojob.engine.queue import admission, completion, policy
from heterojob.engine.disruption.holders import Holder
from heterojob.engine.queue.admission import QueuePlan, plan_queue
from heterojob.engine.capacity.fleet import Allocation, DeviceClass, Failed, Fleet, Limit, Node, holdings, usage
from heterojob.engine.placing.placement import Alternative, Ledger, Request, fits, place
from tests.oracle import reference as reference_module
from tests.oracle.reference import fewest_reference, most_replicas_reference, place_reference, reference

NOW = 100_000.0
REGION = "topology.kubernetes.io/region"
CLASSES = {
    "h100": DeviceClass("h100", "nvidia.com/gpu", {"acc": "h100"}, 1.0, {"driver": "550.54.15", "cuda": "12.4"}),
    "a100": DeviceClass("a100", "nvidia.com/gpu", {"acc": "a100"}, 0.7, {"driver": "535.1", "cuda": "12.2"}),
    # every NVIDIA node: shares its resource (and nodes) with the two above
    "any-gpu": DeviceClass("any-gpu", "nvidia.com/gpu", {"vendor": "nvidia"}, 0.5),
    "910b": DeviceClass("910b", "huawei.com/Ascend910", {"acc": "910b"}, 0.6, {"cann": "8.0.0"}),
    "cpu": DeviceClass("cpu", "cpu", {"acc": "cpu"}, 0.1),
}
ACC = {"h100": "nvidia.com/gpu", "a100": "nvidia.com/gpu", "910b": "huawei.com/Ascend910", "cpu": "cpu"}
NEEDS = [({}, {}), ({"cuda": ">=12.4"}, {}), ({}, {"rdma": "true"}), ({"cann": ">=8.0.0"}, {}),
         ({"driver": ">=550"}, {"rdma": "true"})]


def _nodes(rng: random.Random, count: int, regions: int) -> dict[str, Node]:
    nodes = {}
    for i in range(count):
        acc = rng.choice(list(ACC))
        labels = {REGION: f"r{rng.randrange(regions)}", "acc": acc}
        if acc in ("h100", "a100"):
            labels["vendor"] = "nvidia"
        if rng.random() < 0.4:
            labels["rdma"] = rng.choice(["true", "true", "false"])
        software = {}
        if rng.random() < 0.3:
            software = {"cuda": rng.choice(["12.2", "12.4", "12.6"])} if acc != "910b" else {
                "cann": rng.choice(["8.0.RC3", "8.0.0"])}
        devices = rng.choice([4, 8, 8, 16]) if acc != "cpu" else rng.choice([32, 64])
        roll = rng.random()
        nodes[f"n{i:03d}"] = Node(f"n{i:03d}", labels, {ACC[acc]: devices}, ready=roll > 0.04,
                                  schedulable=not 0.04 < roll < 0.07, taints=frozenset({"x"}) if 0.07 < roll < 0.09
                                  else frozenset(), reason="kubelet stopped posting" if roll < 0.02 else "",
                                  software=software)
    return nodes


def _allocation(rng: random.Random, fleet: Fleet, namespace: str, spare: dict[str, int]) -> Allocation | None:
    """Room on one to three nodes of one class and region that have it (taken from `spare`)."""
    node = rng.choice(list(fleet.nodes))
    first = fleet.nodes[node]
    acc = first.labels["acc"]
    same = [n for n, v in fleet.nodes.items() if v.labels["acc"] == acc and v.region == first.region
            and spare.get(n, 0) > 0]
    if not same:
        return None
    per = {}
    for n in rng.sample(same, min(len(same), rng.choice([1, 1, 2, 3]))):
        d = rng.randint(1, spare[n])
        per[n] = d
        spare[n] -= d
    cls = acc if rng.random() < 0.9 or acc not in ("h100", "a100") else "any-gpu"
    return Allocation(ACC[acc], per, namespace, cls, first.region or "")


def _request(rng: random.Random, job: str, regions: int, nodes: list[str], created: float) -> Request:
    alternatives = []
    for cls in rng.sample(list(CLASSES), rng.choice([1, 1, 2, 3])):
        requires, labels = rng.choice(NEEDS) if rng.random() < 0.4 else ({}, {})
        per = rng.choice([1, 2, 4, 8]) if cls != "cpu" else rng.choice([4, 16, 32])
        alternatives.append(Alternative(cls, per, requires, labels))
    if rng.random() < 0.05:
        alternatives.append(Alternative("l40s", 1))  # unknown class
    names = [f"r{i}" for i in range(regions)] + (["r9"] if rng.random() < 0.1 else [])
    allowed = tuple(rng.sample(names, rng.randint(1, 2))) if rng.random() < 0.2 else ()
    preferred = tuple(rng.sample(names, rng.randint(1, 2))) if rng.random() < 0.3 else ()
    exclude = frozenset(rng.sample(nodes, rng.randint(1, 6))) if rng.random() < 0.2 else frozenset()
    priority = rng.randint(0, 3)
    preempts = rng.randint(0, priority) if rng.random() < 0.15 else None
    return Request(job, alternatives, rng.choice([1, 1, 2, 3, 4, 8]), allowed, preferred, exclude, priority, created,
                   preempts=preempts)


def scene(seed: int, count: int = 60, regions: int = 3, jobs: int = 40
          ) -> tuple[list[Request], list[Holder], Fleet]:
    """A random fleet about `fill` used by holders, and a queue."""
    rng = random.Random(seed)
    nodes = _nodes(rng, count, regions)
    names = sorted(nodes)
    base = Fleet(nodes, CLASSES)
    spare = {n: max(v.allocatable.values()) for n, v in nodes.items()}
    holders: list[Holder] = []
    namespaces = ["a", "b", "c"]
    fill = rng.choice([0.3, 0.7, 0.95, 1.2])
    for i in range(int(count * fill * 1.5)):
        ns = rng.choice(namespaces)
        alloc = _allocation(rng, base, ns, spare)
        if alloc is None:
            continue
        job = f"{ns}/h{i}"
        kind = rng.random()
        grown = None
        if kind < 0.15 and alloc.devices >= 2:
            grown = Request(job, [Alternative(alloc.device_class, 1)], max(1, alloc.devices // 2),
                            allowed_regions=(alloc.region,), priority=0)
        holders.append(Holder(job, rng.randint(0, 3), NOW - rng.choice([60.0, 10_000.0]), alloc, base=grown))
    queue = [_request(rng, f"{rng.choice(namespaces)}/w{k}", regions, names, float(k)) for k in range(jobs)]
    for k, request in enumerate(queue):  # some preempt by a lower priority, and some running jobs besides
        if request.preempts is not None and request.preempts < request.priority and holders:
            also = frozenset(h.job for h in rng.sample(holders, min(len(holders), 8))
                             if request.preempts <= h.priority < request.priority)
            queue[k] = replace(request, also_preempts=also)
    # some holders yield to a waiting job already, some wait on room reserved for themselves
    for i in rng.sample(range(len(holders)), min(len(holders), 3)):
        holders[i] = replace(holders[i], yielding_to=rng.choice(queue).job, disrupted=True)
    for request in rng.sample(queue, min(len(queue), 2)):
        spot = _allocation(rng, base, request.namespace, spare)
        if spot is not None:
            holders.append(Holder(request.job, request.priority, NOW, spot, waiting=True))
    foreign = {(n, ACC[v.labels["acc"]]): 1 for n, v in nodes.items() if rng.random() < 0.05}
    allocations = [h.allocation for h in holders]
    quotas = {"a": [Limit("*", "*", rng.choice([40, 200]), "team-a")],
              "b": [Limit("h100", "r0", rng.choice([8, 32]), "b-h100"), Limit("910b", "*", 24)]}
    unhealthy = {n: "GPU 3 overheating" for n in rng.sample(names, 2)}
    failed = {n: Failed(1, f"{n}: device 0 fatal XID 79") for n in rng.sample(names, 2)}
    down = {n: f"chip {k} network down" for k, n in enumerate(rng.sample(names, 3))}
    fleet = Fleet(nodes, CLASSES, used=usage(allocations, foreign), quotas=quotas, held=holdings(allocations),
                  unhealthy=unhealthy, failed=failed, network_down=down if rng.random() < 0.7 else {})
    return queue, holders, fleet


def _both(queue: list[Request], holders: list[Holder], fleet: Fleet, memory: rooms.Memory | None = None
          ) -> tuple[QueuePlan, QueuePlan]:
    fast = plan_queue(queue, holders, fleet, NOW, memory=memory)
    with reference():
        slow = plan_queue(queue, holders, fleet, NOW)
    return fast, slow


@pytest.mark.parametrize("seed", range(60))
def test_the_plan_with_free_room_indexed_is_the_plan_of_the_full_scan(seed: int) -> None:
    queue, holders, fleet = scene(seed)
    fast, slow = _both(queue, holders, fleet)
    assert fast.admissions.keys() == slow.admissions.keys()
    for job, admission_ in fast.admissions.items():
        assert admission_ == slow[job], job


def test_the_scenes_exercise_every_outcome_and_filter() -> None:
    """The random scenes above are not all alike: together they place, queue, preempt, reclaim, wait and find
    no room, and their messages name quota, software, labels, network-down and unready nodes."""
    outcomes: set[admission.Outcome] = set()
    text = ""
    for seed in range(60):
        plan = plan_queue(*scene(seed), NOW)
        outcomes |= {a.outcome for a in plan.admissions.values()}
        text += " ".join(a.message for a in plan.admissions.values())
    assert outcomes == set(admission.Outcome)
    for words in ("quota", "fail the software check", "label rdma=true missing", "network down", "not counted",
                  "kubelet stopped posting", "unhealthy", "unknown AcceleratorClass", "region not in spec.regions",
                  "waiting for", "queued behind"):
        assert words in text, words


@pytest.mark.parametrize("seed", range(40))
def test_a_place_on_a_ledger_that_takes_and_gives_back_room_is_the_full_scans(seed: int) -> None:
    queue, holders, fleet = scene(seed, jobs=30)
    rng = random.Random(seed)
    ledger = Ledger(fleet)
    child: Ledger | None = None
    for request in queue:
        target = child or ledger
        fast = place(request, target.fleet, target.index)
        slow = place_reference(request, target.fleet, target.index)
        assert fast == slow, request.job
        assert fits(request, target.fleet, target.index) == (fast.chosen is not None)
        assert target.may_fit(request) or fast.chosen is None
        if fast.chosen is not None and rng.random() < 0.7:
            target.take(fast.chosen.allocation(request.namespace))
        if holders and rng.random() < 0.3:  # a holder gives its room back
            target.take(holders.pop(rng.randrange(len(holders))).allocation, -1)
        if child is None and rng.random() < 0.1:  # a scratch ledger on the ledger's fleet starts from its room
            child = Ledger(ledger.fleet)


@pytest.mark.parametrize("seed", range(40))
def test_a_search_says_a_job_fits_whenever_placement_would_as_victims_come_and_go(seed: int) -> None:
    """`victims.Search` (no placement, its ledger untouched) against giving room back and taking it again on
    a ledger and asking `place`; `first_fit` against asking after each victim, as `preemption` did, and the
    bisection `preemption` falls back on."""
    queue, holders, fleet = scene(seed, jobs=12)
    rng = random.Random(seed)
    for request in queue:
        rooms = [h.allocation for h in rng.sample(holders, min(len(holders), rng.randint(0, 60)))]
        ledger, search = Ledger(fleet), victims.Search(request, Ledger(fleet))
        assert search.known
        given: list[Allocation] = []
        for room in rooms + rooms[::2]:
            if room in given and rng.random() < 0.5:
                given.remove(room)
                ledger.take(room)
                search.take(room)
            else:
                given.append(room)
                ledger.take(room, -1)
                search.give(room)
            assert search.fits() == (place_reference(request, ledger.fleet, ledger.index).chosen is not None)
        ledger, expected = Ledger(fleet), None
        for k, room in enumerate(rooms, 1):
            ledger.take(room, -1)
            if place_reference(request, ledger.fleet, ledger.index).chosen is not None:
                expected = k
                break
        fresh = Ledger(fleet)
        assert victims.first_fit(victims.Search(request, fresh), rooms) == expected, request.job
        assert preemption._first_by_bisection(request, fresh, rooms) == expected, request.job
        assert fresh.used == Ledger(fleet).used and fresh.held == Ledger(fleet).held  # left as it was


@pytest.mark.parametrize("seed", range(30))
def test_the_fewest_victims_are_those_placing_after_each_victim_finds(seed: int) -> None:
    """`preemption._fewest` for victims, by `victims.Search` and by the ledger (when a search cannot tell),
    against adding victims and sparing them one placement at a time."""
    queue, holders, fleet = scene(seed, jobs=12)
    rng = random.Random(seed)
    for request in queue:
        pool = [preemption._Disturbable(h.job, h.priority, h.since, h.allocation)
                for h in rng.sample(holders, min(len(holders), rng.randint(0, 60)))]
        expected = fewest_reference(request, Ledger(fleet), pool)
        assert preemption._fewest(request, Ledger(fleet), iter(pool), victims_only=True) == expected
        assert preemption._fewest_on_ledger(request, Ledger(fleet), pool) == expected
        # grown jobs, each placed again at its admitted size once disturbed (a reclaim), among them
        grown = [preemption._Disturbable(h.job, h.priority, h.since, h.allocation, h.base)
                 for h in holders if h.base is not None and all(d.job != h.job for d in pool)]
        mixed = sorted(pool + rng.sample(grown, min(len(grown), rng.randint(0, 20))), key=lambda d: d.since)
        expected = fewest_reference(request, Ledger(fleet), mixed)
        assert preemption._fewest(request, Ledger(fleet), mixed) == expected
        assert preemption._fewest_placing(request, Ledger(fleet), mixed) == expected


@pytest.mark.parametrize("seed", range(30))
def test_a_reclaim_whose_last_room_does_not_fit_goes_back_to_the_last_room_that_did(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Should the job not fit once every grown job is spared or taken again (one placed at its admitted size
    elsewhere than before), `_fewest` answers where it fit last, as placing after each step did (there: the
    last placement that fit): the ledger goes back over what it took since. Forced here by refusing the
    final placement of the job itself, in both."""
    queue, holders, fleet = scene(seed, jobs=12)
    rng = random.Random(seed)
    grown = [preemption._Disturbable(h.job, h.priority, h.since, h.allocation, h.base)
             for h in holders if h.base is not None]
    checked = 0
    for request in queue:
        pool = rng.sample(grown, min(len(grown), rng.randint(1, 20)))

        def refusing(real: Any, last: int | None, job: str = request.job) -> tuple[Any, list[int]]:
            """`real`, refusing the job's placement number `last` (None: the first after the search)."""
            calls: list[int] = []

            def place_(r: Request, *args: Any) -> Any:
                result = real(r, *args)
                if r.job == job:
                    calls.append(1)
                    if len(calls) == (last or 1):
                        return replace(result, chosen=None)
                return result
            return place_, calls

        counting, calls = refusing(reference_module.place_reference, -1)
        with monkeypatch.context() as m:
            m.setattr(reference_module, "place_reference", counting)
            if fewest_reference(request, Ledger(fleet), pool) is None:
                continue
        oracle, _ = refusing(reference_module.place_reference, len(calls))  # its last: the final placement
        ours, _ = refusing(preemption.place, None)  # the search places the job only at the end
        with monkeypatch.context() as m:
            m.setattr(reference_module, "place_reference", oracle)
            m.setattr(preemption, "place", ours)
            expected = fewest_reference(request, Ledger(fleet), pool)
            assert preemption._fewest(request, Ledger(fleet), pool) == expected
        checked += 1
    assert checked or not grown


@pytest.mark.parametrize("seed", range(30))
def test_the_pools_bound_on_the_room_disturbing_could_make_is_the_full_scans(seed: int) -> None:
    """`_Pool._most_replicas` (kept per region while its room and disturbable holders are unchanged) against
    scanning every node and holder, as the pass takes victims and room changes on its ledger."""
    queue, holders, fleet = scene(seed, jobs=30)
    rng = random.Random(seed)
    pool, ledger, taken = admission._Pool(holders), Ledger(fleet), set[str]()
    for request in queue:
        for alt in request.alternatives:
            if alt.device_class in fleet.classes:
                args = (alt, request, ledger, taken, NOW, 300.0)
                assert pool._most_replicas(*args) == most_replicas_reference(pool, *args), request.job
        step = rng.random()
        free = [h for h in holders if h.job not in taken and h.job in pool.free]
        if step < 0.4 and free:  # a victim gives its room back
            victim = rng.choice(free)
            taken.add(victim.job)
            for a in victim.footprint:
                ledger.take(a, -1)
        elif step < 0.7:  # a job is placed, or room given back elsewhere
            placed = place(request, ledger.fleet, ledger.index).chosen
            if placed is not None:
                ledger.take(placed.allocation(request.namespace))
        elif step < 0.8 and holders:
            ledger.take(rng.choice(holders).allocation, rng.choice([-1, 1]))


@pytest.mark.parametrize("seed", range(12))
def test_a_memory_kept_across_cycles_plans_what_a_fresh_plan_plans(seed: int) -> None:
    """Cycles in which placed jobs take their room, holders finish and give theirs back, nothing changes, or
    a node changes: each plan with the memory the cycles share equals a plan without it, and the scan's."""
    queue, holders, fleet = scene(seed, jobs=30)
    rng = random.Random(seed)
    memory = rooms.Memory()
    reused = 0
    for cycle in range(8):
        fast, slow = _both(queue, holders, fleet, memory)
        assert fast == slow == plan_queue(queue, holders, fleet, NOW), cycle
        reused += sum(len(v) for v in memory.verdicts.values())
        if cycle == 4:  # a memory lent to another fleet once (an empty one) plans that one right, and ours after
            empty = replace(fleet, used={}, held={})
            assert plan_queue(queue, [], empty, NOW, memory=memory) == plan_queue(queue, [], empty, NOW)
            assert plan_queue(queue, holders, fleet, NOW, memory=memory) == fast
        step = rng.random()
        if step < 0.5:  # the placed jobs start; the rest wait
            for a in fast.placed:
                assert a.candidate is not None
                holders.append(Holder(a.job, 1, NOW, a.candidate.allocation(a.job.split("/")[0])))
            queue = [r for r in queue if fast[r.job].outcome != admission.Outcome.PLACED]
        elif step < 0.8 and holders:  # a few holders finish
            for _ in range(rng.randint(1, 3)):
                if holders:
                    holders.pop(rng.randrange(len(holders)))
        elif step < 0.9:  # a node goes NotReady (a new fleet view)
            name = rng.choice(sorted(fleet.nodes))
            fleet = replace(fleet, nodes={**fleet.nodes, name: replace(fleet.nodes[name], ready=False)})
        allocations = [h.allocation for h in holders]
        fleet = replace(fleet, used=usage(allocations), held=holdings(allocations))
    assert reused  # the memory held verdicts across cycles


@pytest.mark.parametrize("seed", range(8))
def test_plan_with_policy_is_the_same_with_the_reference_placement(seed: int) -> None:
    queue, holders, fleet = scene(seed, count=80, jobs=50)
    knowledge = policy.Knowledge({}, completion.Residual([3600.0, 7200.0]))
    settings = queueing.QueueSettings()
    fast, _ = admission.plan_with_policy(queue, holders, fleet, NOW, knowledge, settings, memory=rooms.Memory())
    with reference():
        slow, _ = admission.plan_with_policy(queue, holders, fleet, NOW, knowledge, settings)
    assert fast == slow


def test_the_oracle_tells_a_wrong_balance_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """A room index that lost one node's free devices would be caught: some plan then differs."""
    real = rooms.Rooms.build

    def lossy(self: rooms.Rooms, device_class: str, *args: object) -> None:
        real(self, device_class, *args)  # type: ignore[arg-type]
        for room in self.free[device_class].values():
            if room:
                room.pop(sorted(room)[0])
                break

    monkeypatch.setattr(rooms.Rooms, "build", lossy)
    assert any(fast != slow for fast, slow in (_both(*scene(seed)) for seed in range(10)))


ACTS = (admission.Outcome.PLACED, admission.Outcome.PREEMPTING, admission.Outcome.RECLAIMING)


@pytest.mark.parametrize("seed", range(80))
def test_the_acting_part_of_a_plan_is_the_full_plans_jobs_that_act(seed: int) -> None:
    """`plan_queue(acting=True)` (what the scheduler applies first) holds exactly the full plan's jobs that
    place, preempt or reclaim (or wait for their victims), each admission equal, message and victims alike."""
    queue, holders, fleet = scene(seed, jobs=rng_jobs(seed))
    full = plan_queue(queue, holders, fleet, NOW)
    acting = plan_queue(queue, holders, fleet, NOW, acting=True)
    assert acting.admissions == {j: a for j, a in full.admissions.items() if a.outcome in ACTS}


def rng_jobs(seed: int) -> int:
    return (10, 40, 80)[seed % 3]


def test_the_acting_scenes_have_jobs_that_act_and_jobs_that_wait() -> None:
    kinds: set[admission.Outcome] = set()
    for seed in range(80):
        queue, holders, fleet = scene(seed, jobs=rng_jobs(seed))
        kinds |= {a.outcome for a in plan_queue(queue, holders, fleet, NOW).admissions.values()}
    assert kinds >= {*ACTS, admission.Outcome.QUEUED, admission.Outcome.NO_ROOM}


@pytest.mark.parametrize("seed", range(12))
def test_what_an_alternative_found_on_a_starting_room_is_reused_only_while_its_room_and_quota_are_unchanged(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """`rooms.Memory.parts`: the next cycle on the same room asks no alternative again on the fleet as given;
    one whose namespace's quota use or class's room changed is asked again, and every plan is the scan's."""
    from heterojob.engine.placing import placement

    queue, holders, fleet = scene(seed, jobs=30)
    memory = rooms.Memory()
    asked: list[int] = []
    real = placement._alternative

    def counted(*args: Any) -> Any:
        asked.append(1)
        return real(*args)

    monkeypatch.setattr(placement, "_alternative", counted)
    first = plan_queue(queue, holders, fleet, NOW, memory=memory)
    root = sum(1 for _ in memory.parts)
    before = len(asked)
    assert plan_queue(queue, holders, fleet, NOW, memory=memory) == first
    assert root and len(asked) - before < before  # the fleet as given: known; only the ledger's steps ask
    rng = random.Random(seed)
    for _ in range(4):  # a namespace's quota use changes, or a holder finishes
        if rng.random() < 0.5 and holders:
            holders.pop(rng.randrange(len(holders)))
        else:
            ns = rng.choice(["a", "b"])
            holders = [replace(h, allocation=replace(h.allocation, namespace=ns)) if rng.random() < 0.2 else h
                       for h in holders]
        allocations = [h.allocation for h in holders]
        fleet = replace(fleet, used=usage(allocations), held=holdings(allocations))
        fast, slow = _both(queue, holders, fleet, memory)
        assert fast == slow == plan_queue(queue, holders, fleet, NOW)


@pytest.mark.parametrize("seed", range(20))
def test_a_pool_taken_from_the_last_pass_over_the_same_holders_plans_what_a_new_one_plans(seed: int) -> None:
    """`pool._Pool.of`: the same holder objects as the last pass (the scheduler's acting cycle, then its full
    one) reuse what was sorted from them; at another time (some holders pass the minimum runtime) and on
    other holders the plans stay those of a fresh pool."""
    queue, holders, fleet = scene(seed, jobs=40)
    memory = rooms.Memory()
    for now in (NOW, NOW, NOW + 20_000.0, NOW + 20_000.0):
        assert plan_queue(queue, holders, fleet, now, memory=memory) == plan_queue(queue, holders, fleet, now)
        assert memory.pool is not None and memory.pool[0] == tuple(holders)
    fewer = holders[1:]
    allocations = [h.allocation for h in fewer]
    fewer_fleet = replace(fleet, used=usage(allocations), held=holdings(allocations))
    assert plan_queue(queue, fewer, fewer_fleet, NOW, memory=memory) == plan_queue(queue, fewer, fewer_fleet, NOW)
