"""`engine.queue.settled`: a pass skips the reclaim and preemption searches the pass before proved find nothing.
Checked against plans made without it, pass after pass, as a fleet changes between cycles: time passes
(running jobs come past the minimum runtime), jobs finish, arrive, are placed and preempted, a node fails,
a quota changes, room is taken by others."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from heterojob.engine.queue import admission, settled
from heterojob.engine.disruption.holders import Holder
from heterojob.engine.queue.admission import AdmissionSettings, Outcome, plan_queue
from heterojob.engine.capacity.fleet import Allocation, DeviceClass, Fleet, Limit, Node, holdings, usage
from heterojob.engine.placing.placement import Alternative, Request
from heterojob.engine.capacity.rooms import Memory

NOW = 100_000.0
CLASSES = {"h100": DeviceClass("h100", "nvidia.com/gpu", {"acc": "h100"}, 1.0),
           "910b": DeviceClass("910b", "huawei.com/Ascend910", {"acc": "910b"}, 0.5)}
REGIONS = ("east", "west")
SETTINGS = AdmissionSettings(min_runtime_s=300.0)


class _Scene:
    """A fleet nearly full of running jobs of several priorities and ages, a queue of jobs of every priority
    and size; `step` changes it as a cycle's interval would."""

    def __init__(self, seed: int) -> None:
        self.rng = rng = random.Random(seed)
        self.now = NOW
        self.nodes: dict[str, Node] = {}
        self.holders: list[Holder] = []
        self.queue: list[Request] = []
        self.quotas: dict[str, list[Limit]] = {}
        self.count = 0
        for i in range(10):
            cls = CLASSES["h100" if i % 2 == 0 else "910b"]
            name = f"n{i}"
            self.nodes[name] = Node(name, {"topology.kubernetes.io/region": REGIONS[(i // 2) % 2],
                                           **cls.node_selector}, {cls.resource_name: 8})
            left = 8 - rng.choice([0, 0, 1, 2])
            while left > 0:
                n = min(left, rng.choice([1, 2, 4, 8]))
                self.holders.append(self._holder(name, n, rng.choice([0, 1, 2]),
                                                 self.now - rng.choice([30.0, 200.0, 250.0, 5_000.0])))
                left -= n
        for _ in range(rng.randint(10, 30)):
            self.arrive()

    def _holder(self, node: str, n: int, priority: int, since: float, namespace: str = "ns") -> Holder:
        region = self.nodes[node].labels["topology.kubernetes.io/region"]
        cls = CLASSES[self.nodes[node].labels["acc"]]
        self.count += 1
        return Holder(f"{namespace}/run{self.count}", priority, since,
                      Allocation(cls.resource_name, {node: n}, namespace, cls.name, region))

    def arrive(self) -> None:
        rng = self.rng
        per = rng.choice([1, 2, 4, 8])
        alts = [Alternative(rng.choice(list(CLASSES)), per)]
        if rng.random() < 0.4:
            alts.append(Alternative("910b" if alts[0].device_class == "h100" else "h100", per))
        self.count += 1
        namespace = rng.choice(["ns", "ns", "team"])
        self.queue.append(Request(f"{namespace}/w{self.count}", alts, rng.choice([1, 1, 2, 3]),
                                  priority=rng.choice([0, 1, 2, 3]), created=self.now - rng.choice([0.0, 60.0])))

    def fleet(self) -> Fleet:
        allocations = [a for h in self.holders for a in h.footprint]
        return Fleet(self.nodes, CLASSES, used=usage(allocations), quotas=self.quotas, held=holdings(allocations))

    def apply(self, plan: admission.QueuePlan) -> None:
        """What the operator does with a plan: the placed jobs run, the disturbed ones yield to their taker."""
        asked = {d.job: d.by for d in plan.disruptions}
        self.holders = [replace(h, yielding_to=asked[h.job], disrupted=True) if h.job in asked else h
                        for h in self.holders]
        by_job = {r.job: r for r in self.queue}
        for a in plan.placed:
            assert a.candidate is not None
            r = by_job[a.job]
            self.holders.append(Holder(a.job, r.priority, self.now, a.candidate.allocation(r.namespace)))
        self.queue = [r for r in self.queue if plan[r.job].outcome != Outcome.PLACED]

    def step(self, kind: str) -> None:
        rng = self.rng
        if kind == "time":  # running jobs come past the minimum runtime
            self.now += rng.choice([20.0, 120.0])
        elif kind == "finish" and self.holders:  # room given back
            gone = rng.choice([h for h in self.holders if not h.yielding_to] or self.holders)
            self.holders = [h for h in self.holders if h is not gone]
            # ... and the jobs that yielded to a job no longer waiting run on
        elif kind == "arrive":
            self.arrive()
        elif kind == "taken":  # a young job of another namespace takes free room (room only shrinks)
            node = rng.choice(list(self.nodes))
            resource = next(iter(self.nodes[node].allocatable))
            free = 8 - sum(h.allocation.per_node.get(node, 0) for h in self.holders
                           if h.allocation.resource == resource)
            if free > 0:
                self.holders.append(self._holder(node, 1, 3, self.now, "other"))
        elif kind == "node":  # a node fails, or comes back
            name = rng.choice(list(self.nodes))
            self.nodes = {**self.nodes, name: replace(self.nodes[name], ready=not self.nodes[name].ready)}
        elif kind == "quota":
            self.quotas = {} if self.quotas else {"team": [Limit("*", "*", rng.choice([8, 16]))]}
        elif kind == "edit" and self.queue:  # a waiting job edited: another size
            k = rng.randrange(len(self.queue))
            self.queue[k] = replace(self.queue[k], replicas=self.queue[k].replicas % 3 + 1)
        waiting = {r.job for r in self.queue}
        self.holders = [replace(h, yielding_to=None, disrupted=False)
                        if h.yielding_to and h.yielding_to not in waiting else h for h in self.holders]


STEPS = ("time", "finish", "finish", "finish", "arrive", "taken", "node", "quota", "edit", "none", "taken", "arrive")


@pytest.mark.parametrize(("epochs", "seeds"), [(settled.EPOCHS, 40), (1, 12)])  # 1: past the cap, nothing kept
def test_plans_with_what_the_last_pass_settled_equal_plans_without_it(monkeypatch: pytest.MonkeyPatch, epochs: int,
                                                                       seeds: int) -> None:
    monkeypatch.setattr(settled, "EPOCHS", epochs)
    skipped = 0
    known = settled.Tracker.known

    def counted(self: settled.Tracker, request: Request) -> bool:
        nonlocal skipped
        out = known(self, request)
        skipped += out
        return out

    monkeypatch.setattr(settled.Tracker, "known", counted)
    for seed in range(seeds):
        scene = _Scene(seed)
        memory = Memory()
        for k in range(30):
            fleet = scene.fleet()
            fresh = plan_queue(scene.queue, scene.holders, fleet, scene.now, SETTINGS)
            acting = plan_queue(scene.queue, scene.holders, fleet, scene.now, SETTINGS, memory, acting=True)
            full = plan_queue(scene.queue, scene.holders, fleet, scene.now, SETTINGS, memory)
            assert full.admissions == fresh.admissions, f"seed {seed}, step {k}"
            assert acting.admissions == {j: a for j, a in fresh.admissions.items()
                                         if a.outcome in (Outcome.PLACED, Outcome.PREEMPTING, Outcome.RECLAIMING)
                                         }, f"seed {seed}, step {k}"
            if (full.placed or full.disruptions) and scene.rng.random() < 0.8:  # or not acted on (stopped, edited)
                scene.apply(full)
            scene.step(scene.rng.choice(STEPS))
    assert skipped > 20  # the shortcut was taken (the scenes leave jobs for which nothing could be done)


def _one_node_scene(free: int) -> tuple[dict[str, Node], Holder, Holder, Request]:
    """One 8-GPU node: an old low-priority job (a victim) on 4, a young high-priority one on `8 - 4 - free`;
    a waiting job of 8 per replica that preempts only if the victim's 4 and the free room make 8."""
    node = Node("n0", {"topology.kubernetes.io/region": "east", "acc": "h100"}, {"nvidia.com/gpu": 8})
    victim = Holder("ns/victim", 0, NOW - 5_000, Allocation("nvidia.com/gpu", {"n0": 4}, "ns", "h100", "east"))
    keeper = Holder("team/keeper", 3, NOW - 30, Allocation("nvidia.com/gpu", {"n0": 4 - free}, "team", "h100", "east"))
    waiting = Request("team/big", [Alternative("h100", 8)], 1, priority=2, created=NOW - 60)
    return {"n0": node}, victim, keeper, waiting


def test_room_given_back_since_lets_the_search_run_again() -> None:
    """Nothing could be done with 2 free and the victim's 4; once the young job's 2 are given back, the search
    runs again and preempts (the earlier finding is not kept: fewer devices in use than it was made with)."""
    nodes, victim, keeper, waiting = _one_node_scene(free=2)
    memory = Memory()
    fleet = Fleet(nodes, CLASSES, used=usage([victim.allocation, keeper.allocation]))
    assert plan_queue([waiting], [victim, keeper], fleet, NOW, SETTINGS, memory)[waiting.job].outcome == \
        Outcome.NO_ROOM
    fleet = Fleet(nodes, CLASSES, used=usage([victim.allocation]))
    assert plan_queue([waiting], [victim], fleet, NOW, SETTINGS, memory)[waiting.job].outcome == Outcome.PREEMPTING


def test_quota_given_back_since_lets_the_search_run_again() -> None:
    """The namespace's quota refused the gang; its job on another node is replaced by another namespace's on
    the same devices (no device freed, the quota's use falls): the search runs again and preempts."""
    nodes = {n: Node(n, {"topology.kubernetes.io/region": "east", "acc": "h100"}, {"nvidia.com/gpu": 8})
             for n in ("n0", "n1")}
    victim = Holder("ns/victim", 0, NOW - 5_000, Allocation("nvidia.com/gpu", {"n0": 8}, "ns", "h100", "east"))
    keeper = Holder("team/keeper", 3, NOW - 30, Allocation("nvidia.com/gpu", {"n1": 8}, "team", "h100", "east"))
    waiting = Request("team/big", [Alternative("h100", 8)], 1, priority=2, created=NOW - 60)
    quotas = {"team": [Limit("*", "*", 8)]}
    memory = Memory()
    allocations = [victim.allocation, keeper.allocation]
    fleet = Fleet(nodes, CLASSES, used=usage(allocations), quotas=quotas, held=holdings(allocations))
    assert plan_queue([waiting], [victim, keeper], fleet, NOW, SETTINGS, memory)[waiting.job].outcome == \
        Outcome.NO_ROOM
    other = Holder("other/keeper", 3, NOW - 30, replace(keeper.allocation, namespace="other"))
    allocations = [victim.allocation, other.allocation]
    fleet = Fleet(nodes, CLASSES, used=usage(allocations), quotas=quotas, held=holdings(allocations))
    assert plan_queue([waiting], [victim, other], fleet, NOW, SETTINGS, memory)[waiting.job].outcome == \
        Outcome.PREEMPTING


def test_a_victim_taken_by_a_job_ahead_and_free_again_lets_the_search_run_again() -> None:
    """A job ahead took the only victim, so nothing could be done for the next; that job goes before its
    preemption is acted on, the victim runs on free to disturb: the search runs again and preempts it."""
    nodes = {"n0": Node("n0", {"topology.kubernetes.io/region": "east", "acc": "h100"}, {"nvidia.com/gpu": 8})}
    victim = Holder("ns/victim", 0, NOW - 5_000, Allocation("nvidia.com/gpu", {"n0": 8}, "ns", "h100", "east"))
    urgent = Request("ns/urgent", [Alternative("h100", 8)], 1, priority=3, created=NOW - 60)
    second = Request("ns/second", [Alternative("h100", 8)], 1, priority=2, created=NOW - 60)
    fleet = Fleet(nodes, CLASSES, used=usage([victim.allocation]))
    memory = Memory()
    first = plan_queue([urgent, second], [victim], fleet, NOW, SETTINGS, memory)
    assert first[urgent.job].outcome == Outcome.PREEMPTING and first[second.job].outcome == Outcome.NO_ROOM
    assert plan_queue([second], [victim], fleet, NOW, SETTINGS, memory)[second.job].outcome == Outcome.PREEMPTING
