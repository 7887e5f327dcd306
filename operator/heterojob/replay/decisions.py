"""heterojob's running jobs in the replay: each look at one asks `engine.execution.running.decide`, the one place the
operator chooses a running job's next step, and carries its answer out on the replay's fleet.

The replay looks at a running job, as the operator's passes would, with the views it has then:
- growth and shrink (`grow`): after an event that gave room back or started a job, every elastic job, with
  the room `engine.queue.admission.growth` lends it (`Running.grow_to`) and the size its measured scaling allows
  (`Elastic.growth_limit`, `engine.queue.completion.growth_limit`); a move the rules hold (cooldown, hourly cap,
  budget) is looked at again when they may let it (a "wake" on the replay's clock);
- upgrades (`upgrade`): the jobs a cycle's grown free room may pay to move (`engine.queue.cycle.upgrade_candidates`,
  as the operator's scheduler pokes them), each with its own move (`engine.queue.cycle.upgrade_of`,
  `Running.upgrade`);
- faults (`fault`): a failed node's jobs, with the NotReady node as an urgent symptom (never held).
`decide` judges every move by the HeteroJob defaults (600 s cooldown, 3 moves an hour, a disruption budget
of `Config.disruption_budget`), with the moves of each job (resizes, preemptions, upgrades) as its history
and the jobs restoring as the budget's count.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from functools import partial

from heterojob.api.job import Policy
from heterojob.engine.queue import admission as planner
from heterojob.engine.capacity import migration
from heterojob.engine.queue import completion
from heterojob.engine.queue.completion import Upgrade
from heterojob.engine.basics.phases import Phase
from heterojob.engine.placing.placement import Alternative, Request, place
from heterojob.engine.queue.policy import remaining_s
from heterojob.engine.execution.running import (
    RunningDecision, Elastic, Running, RunningState, RunningRules, Step, decide,
)
from heterojob.replay.devices import Run

from heterojob.replay.simulation import Planner


def _none() -> None:
    return None


class Decisions:
    """The running jobs' side of heterojob in the replay (see the module docstring)."""

    def __init__(self, scheduler: Planner) -> None:
        self.scheduler, self.sim = scheduler, scheduler.sim
        config, defaults = self.sim.config, Policy()
        self.rules = RunningRules(migration.Rules(
            triggers=frozenset({migration.NODE_NOT_READY}), cooldown_s=defaults.cooldown_seconds,
            max_per_hour=defaults.max_migrations_per_hour, budget=config.disruption_budget))
        self.moves: dict[int, list[float]] = defaultdict(list)  # resizes, preemptions, upgrades (the history)
        self.wakes: dict[int, float] = {}  # job -> when its held resize may be looked at again
        self.growth_limits: dict[tuple[int, str], tuple[int, int]] = {}  # (job, class) -> (sizes measured, most)

    def decide(self, run: Run, now: float, grow_to: Callable[[], int | None] = _none,
               upgrade: Callable[[], Upgrade | None] = _none,
               symptoms: tuple[migration.Symptom, ...] = ()) -> RunningDecision:
        """`engine.execution.running.decide` for a running job, from what the replay knows of it."""
        job = run.job
        base = self.sim.shape(job)[0]
        most = job.max_replicas(run.cls) if base == 1 and job.gpus <= 8 else base
        elastic = None
        if self.sim.config.elastic:
            sch, efficiency = self.scheduler, self.sim.config.growth_efficiency
            elastic = Elastic(run.replicas, base, most, base, self.most(run, base), None, False, None,
                              remaining_s=remaining_s(sch.holder(run), now, self.sim.known.knowledge),
                              move_cost_s=sch.cost.seconds, efficiency=efficiency if efficiency > 0 else 1.0)
        view = RunningState(now, Phase.RUNNING, symptoms=symptoms, moves=tuple(self.moves[job.id]),
                          priority=job.priority, elastic=elastic)
        return decide(view, Running(disrupted_now=self.restoring(now), grow_to=grow_to, upgrade=upgrade), self.rules)

    def restoring(self, now: float) -> int:
        """Jobs moving now (the budget's count): those still saving or restoring after a move."""
        return sum(1 for r in self.sim.devices.running.values() if r.started > now)

    def most(self, run: Run, base: int) -> int:
        """The most replicas the job grows to on its class: as far as it scales (`completion.growth_limit` of
        the sizes it measured there, a table that only gains entries)."""
        job, cls = run.job, run.cls
        sizes = self.sim.known.measured_sizes[(job.id, cls)]
        known = self.growth_limits.get((job.id, cls))
        if known is not None and known[0] == len(sizes):
            return known[1]
        config = self.sim.config
        most = job.max_replicas(cls) if base == 1 and job.gpus <= 8 else base
        if config.growth_efficiency > 0 and most > base:
            most = completion.growth_limit(base, most, sizes, config.growth_efficiency)
        self.growth_limits[(job.id, cls)] = (len(sizes), most)
        return most

    # --- growth and shrink -------------------------------------------------------------------------------

    def grow(self, now: float) -> None:
        """Every elastic job's resize, when room appeared or a job started since the last look (`decide`
        weighs growth into the room `growth` lends, never while a job of its priority or above waits, and a
        shrink back to where its measured scaling is good)."""
        sim, devices = self.sim, self.sim.devices
        if not (sim.freed or sim.arrived):
            return  # no room appeared and no job started since the last look
        top = self.scheduler.top()
        for run in devices.by_id():
            job = run.job
            base = sim.shape(job)[0]
            if run.replicas <= base and (top is not None and top >= job.priority
                                         or not devices.region_free().get((run.cls, run.region))):
                continue  # no larger size lent, none to shrink back from: `decide` finds no resize
            if now < run.started:
                continue  # still restoring from its last move: not Running yet
            if run.replicas == self.most(run, base):
                continue  # at its largest where it scales well: `decide` finds no resize either way
            d = self.decide(run, now, grow_to=partial(self.room_for, run, top))
            if d.step == Step.RESIZE and d.resize is not None:
                self.resize(run, d.resize, now)
            elif any(step == Step.HOLD_RESIZE for step, _ in d.held):
                last = max(self.moves[job.id], default=now)
                if self.wakes.get(job.id, 0) <= now:
                    self.wakes[job.id] = wake = max(now + 60, last + self.rules.migration.cooldown_s)
                    sim.push(wake, "wake", job.id)

    def room_for(self, run: Run, top: int | None) -> int | None:
        """`Running.grow_to`: the most replicas `engine.queue.admission.growth` lends the job where it runs."""
        sim = self.sim
        if top is not None and top >= run.job.priority or not sim.devices.region_free().get((run.cls, run.region)):
            return None  # nothing lent while a job of its priority or above waits; no device free beside its own
        most = self.most(run, sim.shape(run.job)[0])
        if run.replicas >= most:
            return None  # at its largest: `growth` lends nothing (the fleet without it is not built)
        return planner.growth(self.scheduler.request(run.job, run.replicas), top,
                              sim.devices.current_fleet(without=run), run.replicas, most, run.cls, run.region)

    def resize(self, run: Run, change: migration.Resize, now: float) -> None:
        """A resize `decide` let act: placed where the job runs, without its own devices; it checkpoints
        (`save_s`) and restores there. No room of that size: nothing moves (the next candidate, an upgrade,
        is looked at when free room grows)."""
        sim, job = self.sim, run.job
        result = place(Request(self.scheduler.key(job), [Alternative(run.cls, sim.shape(job)[1])], change.replicas,
                               allowed_regions=(run.region,)), sim.devices.current_fleet(without=run))
        if result.chosen is None:
            return
        sim.checkpoint_and_stop(run, now)
        self.moves[job.id].append(now)
        sim.metrics.resizes += 1
        c = result.chosen
        sim.start(job, c.device_class, c.region, c.nodes, c.per_replica, now, pause=sim.config.save_s)
        if change.replicas > sim.shape(job)[0]:  # a trial size: judge its measured scaling once it may move
            self.wakes[job.id] = wake = now + self.rules.migration.cooldown_s
            sim.push(wake, "wake", job.id)

    # --- upgrades ------------------------------------------------------------------------------------------

    def upgrade(self, run: Run, find: Callable[[], Upgrade | None], now: float) -> None:
        """A running job's upgrade move (or probe), when `decide` lets the one `find` proposes act; made
        before break: the room is found before the job is stopped."""
        d = self.decide(run, now, upgrade=find)
        if d.step != Step.UPGRADE or d.upgrade is None:
            return  # none pays, or the rules hold it (cooldown, hourly cap, budget)
        sim = self.sim
        replicas, per = sim.shape(run.job)
        chosen = place(Request(d.upgrade.job, [Alternative(d.upgrade.to_class, per)], replicas),
                       sim.devices.current_fleet()).chosen
        if chosen is None:
            return  # the devices are free but not in one region or node: no room held, no move
        sim.checkpoint_and_stop(run, now)
        self.moves[run.job.id].append(now)
        sim.metrics.upgrades += 1
        sim.start(run.job, chosen.device_class, chosen.region, chosen.nodes, per, now, pause=sim.config.save_s)

    # --- faults ------------------------------------------------------------------------------------------

    def fault(self, run: Run, node: str, now: float) -> bool:
        """Whether a job on a failed node moves off it now (`decide` on the NotReady node: an involuntary
        move, never held)."""
        symptom = migration.Symptom(migration.NODE_NOT_READY, now, (node,), f"node {node} is NotReady", urgent=True)
        d = self.decide(run, now, symptoms=(symptom,))
        return d.step == Step.MIGRATE
