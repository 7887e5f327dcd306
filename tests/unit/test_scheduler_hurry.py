"""A dead node's job is placed again by the next acting cycle, not behind the scheduler's duty bound or a full
cycle (`controller.scheduler.Scheduler.hurry`): an involuntary move's request, registered by its pass, starts an
acting cycle as soon as the last one's batch allows, and a cycle planning on a snapshot without it stops (its
plan dropped whole) so the next one plans it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from heterojob.api.job import HeteroJobSpec, Phase
from heterojob.api.common import parse_spec
from heterojob.controller import scheduler as scheduling
from heterojob.engine.queue.admission import Outcome
from heterojob.engine.basics.queueing import QueueSettings
from heterojob.state.knowledge import Knower
from heterojob.state.job_status import read_status
from tests.unit.test_scheduler_cycles import _scene

MOVED = "ns/moved"


def _moving_job(involuntary: bool) -> dict[str, Any]:
    """A job whose node died: Migrating, its placement gone, one replica of 4 to place again (7 devices are free)."""
    return {"metadata": {"namespace": "ns", "name": "moved", "uid": "u1", "generation": 1,
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"devices": [{"deviceClass": "h100", "perReplica": 4}], "priority": "low",
                     "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}},
            "status": {"phase": "Migrating", "observedGeneration": 1, "lastGeneration": 1,
                       "migration": {"exclude": ["n9"], "reason": "nodeNotReady: n9", "replicas": 1,
                                     "trigger": "nodeNotReady", "involuntary": involuntary}}}


class Applied:
    """Stands in for `controller.verdicts.Verdicts`: what the job's pass would apply, and whether the waiting
    jobs had their verdicts (a full cycle) by then."""

    def __init__(self, verdicts: dict[str, Any]) -> None:
        self.verdicts = verdicts
        self.admitted: list[tuple[str, bool]] = []

    async def admit(self, job: dict[str, Any], spec: Any, status: Any, plan: Any, seen: int, started: Any) -> None:
        full = any(v.admission.outcome != Outcome.PLACED for v in self.verdicts.values())
        self.admitted.append((plan.job, full))


@pytest.mark.parametrize("involuntary", [True, False])
def test_an_involuntary_moves_request_is_planned_at_once_not_after_the_duty_bound_or_the_owed_full_cycle(
        involuntary: bool) -> None:
    s, _ = _scene(None)
    applied = Applied(s.verdicts)
    s.apply = applied  # type: ignore[assignment]  # what the pass applies is recorded, not written
    job = _moving_job(involuntary)
    spec, status = parse_spec(HeteroJobSpec, job["spec"]), read_status(job)
    assert status.phase == Phase.MIGRATING

    async def run() -> float:
        while await s.cycle(acting=True):  # the backlog's acting cycles (the first places ns/small)
            pass
        # as after a costly cycle: the next is 60 s away by the duty bound, and the waiting jobs' verdicts have
        # been owed too long (the full cycle would go next)
        s._next = time.monotonic() + 60.0
        s._owed, s._owed_at, s._next_full = True, time.monotonic() - 60.0, time.monotonic() + 60.0
        s.start()
        await asyncio.sleep(0.05)
        assert s.cycles == 2  # the loop waits
        started = time.monotonic()
        await s.place(job, spec, status)  # its pass registers the request and waits (bounded) for its verdict
        took = time.monotonic() - started
        await s.stop()
        return took

    took = asyncio.run(run())
    if involuntary:
        assert applied.admitted == [(MOVED, False)]  # placed by an acting cycle, before any waiting job's verdict
        assert took < 1.0
    else:  # any other request waits for the bound, as before (its pass leaves the verdict to a later pass)
        assert applied.admitted == [] and took >= scheduling.INLINE_WAIT_S


def test_a_cycle_planning_on_a_snapshot_without_a_new_involuntary_move_stops_and_the_next_plans_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    s, _ = _scene(None)
    applied = Applied(s.verdicts)
    s.apply = applied  # type: ignore[assignment]  # what the pass applies is recorded, not written
    job = _moving_job(True)
    spec, status = parse_spec(HeteroJobSpec, job["spec"]), read_status(job)
    real = scheduling.plan_cycle
    calls: list[bool] = []
    passes: list[asyncio.Task[None]] = []

    async def cycles() -> None:
        loop = asyncio.get_running_loop()

        def plan_cycle(*args: Any, **kwargs: Any) -> Any:
            calls.append(args[9])
            if len(calls) == 1:  # the moved job's pass registers its request while this cycle plans in its thread
                loop.call_soon_threadsafe(lambda: passes.append(loop.create_task(s.place(job, spec, status))))
                deadline = time.monotonic() + 5.0
                while MOVED not in s.waiting and time.monotonic() < deadline:
                    time.sleep(0.01)
            elif len(calls) == 2:  # another dead node's job registers while the cycle that plans the first one runs
                hurried = s._hurries
                loop.call_soon_threadsafe(s.hurry)
                deadline = time.monotonic() + 5.0
                while s._hurries == hurried and time.monotonic() < deadline:
                    time.sleep(0.01)
            return real(*args, **kwargs)

        monkeypatch.setattr(scheduling, "plan_cycle", plan_cycle)
        assert not await s.cycle(acting=True)  # stopped: nothing applied, and a cycle is due again at once
        assert not s.verdicts and s.trigger.due(time.time()) and s.cycles == 0
        # the next one plans everything (the moved job and ns/small placed); it plans a move, so a later one does
        # not stop it (a stream of faults never stops every cycle): that one goes to the cycle after it
        assert await s.cycle(acting=True)
        assert {j for j, v in s.verdicts.items() if v.admission.outcome == Outcome.PLACED} <= {MOVED, "ns/small"}
        await asyncio.wait_for(passes[0], 5.0)  # its pass applies its verdict

    asyncio.run(cycles())
    assert calls == [True, True] and applied.admitted == [(MOVED, False)]


def test_a_cycle_stops_for_a_move_hurried_while_its_knowledge_is_built_before_the_policy_plans(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The policy's pass over the queue (`policy.prepare`, in `plan_cycle`) is not spent on a snapshot without
    the dead node's job: the cycle asks whether to stop once the knowledge is built, not only as its plan goes
    through the queue."""
    s, _ = _scene(QueueSettings())
    real_knowledge, real_plan = Knower.knowledge, scheduling.plan_cycle
    planned: list[bool] = []

    def knowledge(self: Knower, *args: Any, **kwargs: Any) -> Any:
        if not planned and s._hurries == s._served:
            s._hurries += 1  # `hurry`, from the loop, while this cycle builds its knowledge in its thread
        return real_knowledge(self, *args, **kwargs)

    def plan_cycle(*args: Any, **kwargs: Any) -> Any:
        planned.append(args[9])
        return real_plan(*args, **kwargs)

    monkeypatch.setattr(Knower, "knowledge", knowledge)
    monkeypatch.setattr(scheduling, "plan_cycle", plan_cycle)

    async def cycles() -> None:
        assert not await s.cycle(acting=True)  # stopped before the policy planned anything
        assert planned == [] and s.trigger.due(time.time())
        assert await s.cycle(acting=True)  # the next plans, with it
        assert planned == [True] and set(s.verdicts) == {"ns/small"}

    asyncio.run(cycles())
