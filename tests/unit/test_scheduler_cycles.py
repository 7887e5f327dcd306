"""The operator's scheduler (`controller.scheduler.Scheduler`) under a backlog: an acting cycle applies the jobs
that place or disturb someone before every waiting job's verdict is planned, the policy's knowledge is built
off the event loop, and a cycle after a quiet spell does not wait for a batch."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from heterojob.api.job import HeteroJobSpec, HeteroJobStatus, Phase
from heterojob.controller import scheduler as scheduling
from heterojob.controller.planning import Planning
from heterojob.controller.scheduler import BATCH_S, Scheduler, Waiting
from heterojob.engine.queue import admission as planner
from heterojob.engine.queue.admission import AdmissionSettings, Outcome
from heterojob.engine.capacity.fleet import Allocation, DeviceClass, Fleet, Node, holdings, usage
from heterojob.engine.placing.placement import Alternative, Request
from heterojob.engine.basics.queueing import QueueSettings
from heterojob.metrics import OperatorMetrics
from heterojob.state.cache import Cache
from heterojob.state.knowledge import Knower

H100 = DeviceClass("h100", "nvidia.com/gpu", {"acc": "h100"}, 1.0)
NOW = time.time()


def _scene(queue: QueueSettings | None) -> tuple[Scheduler, list[str]]:
    """Four nodes of 8, three full; 40 old jobs of a higher priority that fit nowhere (two replicas of 16),
    and one new small job that fits the free node."""
    nodes = {f"n{i}": Node(f"n{i}", {"topology.kubernetes.io/region": "east", "acc": "h100"},
                           {"nvidia.com/gpu": 8}) for i in range(4)}
    cache = Cache()
    for i in range(3):
        e = cache.entry(f"ns/run{i}")
        e.allocation = Allocation("nvidia.com/gpu", {f"n{i}": 8}, "ns", "h100", "east")
        e.priority, e.since = 3, NOW - 60
    waiting = [Request(f"ns/big{k}", [Alternative("h100", 16)], 2, priority=2, created=NOW - 1000 + k)
               for k in range(40)]
    waiting.append(Request("ns/small", [Alternative("h100", 1)], 1, priority=1, created=NOW))
    for r in waiting:
        cache.wait(r.job, r)

    def fleet() -> Fleet:
        allocations = [a for e in cache.entries.values() for a in e.footprint()]
        return Fleet(nodes, {"h100": H100}, used=usage(allocations), held=holdings(allocations))

    pokes: list[str] = []
    planning = Planning(None, None, cache, None, OperatorMetrics(),  # type: ignore[arg-type]  # the apply side is not used here
                        lambda exclude: fleet(), AdmissionSettings())
    s = Scheduler(planning, None, pokes.append, lambda _: None, queue)  # type: ignore[arg-type]  # nor are pods
    for r in waiting:
        s.waiting[r.job] = Waiting(r, HeteroJobStatus(), NOW - 10)
        s.trigger.request(r.job)
    return s, pokes


@pytest.mark.parametrize("queue", [None, QueueSettings()])
def test_an_acting_cycle_places_the_job_that_fits_before_the_backlog_is_planned(queue: QueueSettings | None
                                                                                ) -> None:
    s, pokes = _scene(queue)

    async def cycles() -> None:
        assert await s.cycle(acting=True)
        # the job that fits is placed and its pass poked at once; no waiting job has a verdict yet, one is owed
        assert set(s.verdicts) == {"ns/small"} and s.verdicts["ns/small"].admission.outcome == Outcome.PLACED
        assert pokes == ["ns/small"] and s._owed
        assert s.cache.entries["ns/small"].planned is not None  # its room is held in the cache at once
        assert await s.cycle(acting=True)  # it acted: the next cycle plans the new snapshot, acting again
        assert set(s.verdicts) == {"ns/small"}
        assert not await s.cycle(acting=True)  # nothing new since
        assert await s.cycle()  # the full cycle: every waiting job's verdict
        assert not s._owed
        assert {j for j, v in s.verdicts.items() if v.admission.outcome != Outcome.PLACED} == {
            f"ns/big{k}" for k in range(40)}
        assert not await s.cycle()  # nothing owed, nothing new

    asyncio.run(cycles())


def test_the_policys_knowledge_is_built_in_the_cycles_thread_not_on_the_event_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    s, _ = _scene(QueueSettings())
    threads: list[int] = []
    real = Knower.knowledge

    def knowledge(self: Knower, *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Knower, "knowledge", knowledge)

    async def cycles() -> int:
        await s.cycle(acting=True)
        await s.cycle()
        return threading.get_ident()

    loop = asyncio.run(cycles())
    assert len(threads) == 2 and loop not in threads


def test_the_facts_and_holders_of_unchanged_jobs_are_the_same_objects_from_one_cycle_to_the_next() -> None:
    """What the policy's memo keeps per object (`engine.queue.ranking.Memo`) is found again in the next cycle."""
    s, _ = _scene(QueueSettings())
    first = s.cache.holders()
    assert s.cache.holders() == first and all(a is b for a, b in zip(s.cache.holders(), first, strict=True))
    fleet, waiting = s.fleet(), s.cache.waiting()
    one = s.knower.knowledge(fleet, waiting, first, QueueSettings(), s.knower.view())
    two = s.knower.knowledge(fleet, waiting, s.cache.holders(), QueueSettings(), s.knower.view())
    assert one.facts.keys() == two.facts.keys() and all(one.facts[j] is two.facts[j] for j in one.facts)
    s.cache.entries["ns/run0"].since = NOW - 30  # a changed holder is a new object, the others stay
    third = s.cache.holders()
    assert third[0] is not first[0] and third[0].since == NOW - 30 and third[1] is first[1]


def test_a_cycle_after_a_quiet_spell_starts_at_once_and_events_after_a_cycle_are_batched(
        monkeypatch: pytest.MonkeyPatch) -> None:
    s, _ = _scene(None)
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(delay: float, *args: Any) -> Any:
        slept.append(delay)
        return await real_sleep(delay, *args)

    monkeypatch.setattr(scheduling.asyncio, "sleep", sleep)

    async def run() -> None:
        s._next = time.monotonic() - 1.0  # quiet for a second
        s.start()
        s.wake()
        for _ in range(200):
            await real_sleep(0.01)
            if s.cycles >= 1:
                break
        await s.stop()

    asyncio.run(run())
    assert s.cycles >= 1 and slept and slept[0] == 0.0  # no batch wait after a quiet spell
    assert s._next >= time.monotonic() - 1.0 and BATCH_S > 0  # ... but one after each cycle


def test_a_steady_stream_of_events_does_not_hold_the_waiting_jobs_verdicts_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Events every few milliseconds keep an acting cycle due; the full cycle still runs once the verdicts have
    been owed `OWED_S` (here 0.2 s)."""
    monkeypatch.setattr(scheduling, "OWED_S", 0.2)
    s, _ = _scene(None)

    async def run() -> bool:
        s.start()
        s.wake()
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline:
            s.trigger.request("ns/big0")  # something happened, again and again
            s.wake()
            await asyncio.sleep(0.005)
            if any(v.admission.outcome != Outcome.PLACED for v in s.verdicts.values()):
                break
        await s.stop()
        return any(v.admission.outcome != Outcome.PLACED for v in s.verdicts.values())

    assert asyncio.run(run())


def test_an_event_stops_a_full_cycle_for_an_acting_one_until_the_verdicts_are_owed_too_long(
        monkeypatch: pytest.MonkeyPatch) -> None:
    s, _ = _scene(None)
    real = scheduling.plan_cycle
    calls: list[bool] = []

    def plan_cycle(*args: Any, **kwargs: Any) -> Any:
        acting = args[9] if len(args) > 9 else kwargs.get("acting", False)
        calls.append(acting)
        if not acting:
            s._interrupt.set()  # an event arrives while the full cycle plans (`wake`, from the loop)
        return real(*args, **kwargs)

    monkeypatch.setattr(scheduling, "plan_cycle", plan_cycle)

    async def cycles() -> None:
        assert await s.cycle(acting=True)
        assert not await s.cycle()  # stopped: no verdicts, still owed, and a cycle is due again
        assert s._owed and s.trigger.due(time.time())
        assert not any(v.admission.outcome != Outcome.PLACED for v in s.verdicts.values())
        assert await s.cycle(acting=True)  # the event's acting cycle goes first
        s._owed_at = time.monotonic() - scheduling.OWED_S - 1  # owed too long: the next full cycle is not stopped
        assert await s.cycle()
        assert not s._owed and any(v.admission.outcome != Outcome.PLACED for v in s.verdicts.values())

    asyncio.run(cycles())
    assert calls == [True, False, True, False]


def test_a_running_jobs_own_knowledge_is_what_the_cycles_knowledge_says_of_it() -> None:
    """`Knower.of_running` (a running job's upgrade check, on its pass): its facts as the whole knowledge has
    them, with the last cycle's completed work; None before any cycle."""
    s, _ = _scene(QueueSettings())
    fleet, holders = s.fleet(), s.cache.holders()
    run0 = next(h for h in holders if h.job == "ns/run0")
    assert s.knower.of_running("ns/run0", run0, fleet) is None
    whole = s.knower.knowledge(fleet, s.cache.waiting(), holders, QueueSettings(), s.knower.view())
    own = s.knower.of_running("ns/run0", run0, fleet)
    assert own is not None and own.facts["ns/run0"] == whole.facts["ns/run0"]
    assert own.residual is whole.residual and own.displace_by_level == whole.displace_by_level


def test_a_waiting_job_whose_status_says_its_verdict_is_not_poked_again_by_the_next_full_cycle(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The scheduler compares each full cycle's verdict with what the job's status says. It used to compare with
    what the status said at the pass that registered the request: the pass that applied the first verdict
    (poked by the cycle, its write's echo settled, so no pass follows) left that stale, and every full cycle
    (at least one per `RECHECK_S`) ran every waiting job's pass again: at 5,000 waiting, about 170 passes a
    second with nothing changing, in front of every new job's pass."""
    monkeypatch.setattr(scheduling, "INLINE_WAIT_S", 0.0)  # a poked pass applies the verdict, as under a backlog
    s, pokes = _scene(None)
    spec = HeteroJobSpec.model_validate({"replicas": {"min": 2}, "devices": [{"deviceClass": "h100", "perReplica": 16}],
                                         "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}})
    job = {"metadata": {"name": "lone", "namespace": "ns", "uid": "u-lone", "generation": 1,
                        "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": spec.model_dump(by_alias=True)}
    applied: list[str] = []

    class Applies:
        async def wait(self, job: dict[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                       plan: planner.Admission) -> HeteroJobStatus:
            applied.append(plan.outcome.value)
            return status.model_copy(update={"phase": Phase.PENDING, "reason": plan.outcome.value,
                                             "message": plan.message})

    s.apply = Applies()  # type: ignore[assignment]  # what the pass writes is Verdicts' (harness tests)

    async def run() -> None:
        await s.place(job, spec, HeteroJobStatus())  # its pass registers the request
        await s.cycle(acting=True)
        await s.cycle()
        assert "ns/lone" in pokes and s.verdicts["ns/lone"].admission.outcome == Outcome.NO_ROOM
        await s.place(job, spec, HeteroJobStatus())  # the poked pass applies the verdict
        assert applied == [Outcome.NO_ROOM.value] and "ns/lone" not in s.verdicts
        for _ in range(3):  # room given back elsewhere, then the full cycle: nothing new for it
            pokes.clear()
            s.trigger.room()
            await s.cycle(acting=True)
            assert await s.cycle()
            assert "ns/lone" not in pokes and "ns/lone" not in s.verdicts

    asyncio.run(run())


def test_a_cycle_on_an_unchanged_fleet_does_not_sort_its_nodes_into_classes_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The policy's knowledge counts the devices per class with the plan's memo (`policy.devices_by_class`):
    without it, every cycle looked every node up by its labels (a third of a cycle's CPU at 12,500 nodes). No
    node is looked at again, by either way of sorting them, while the nodes and their use are unchanged."""
    from heterojob.engine.queue import policy, ranking

    s, _ = _scene(QueueSettings())
    looked: list[object] = []

    class Counted(dict):  # type: ignore[type-arg]  # the module's node -> class table, counting lookups
        def __contains__(self, key: object) -> bool:
            looked.append(key)
            return super().__contains__(key)

    monkeypatch.setattr(policy, "_CLASS_MEMO", Counted())
    real = ranking.class_of
    monkeypatch.setattr(ranking, "class_of", lambda fleet, node, *a: looked.append(node) or real(fleet, node, *a))

    async def cycles() -> None:
        await s.cycle(acting=True)
        await s.cycle()
        assert looked  # the first cycle sorts them
        looked.clear()
        s.trigger.request("ns/big0")  # something to plan again; the nodes and their use are unchanged
        await s.cycle(acting=True)
        await s.cycle()

    asyncio.run(cycles())
    assert s.cycles >= 3 and looked == []
