"""heterojob in the replay: the operator's scheduling cycle (`engine.cycle`) on the replay's clock.

What the operator's scheduler (`controller.scheduler`) does, with the replay's events as its events:
- an arrival or a requeue (after a failure, a preemption) adds a request: `Trigger.request`; a completion,
  a stopped run (resize, preemption, upgrade), a failed or repaired node gives room back or changes the
  fleet: `Trigger.room`; a waiting job's starvation promotion is a timer (`engine.cycle.timer`), put on the
  replay's event queue so the clock stops there;
- events of one instant are one batch (as the operator plans the events of one batch in one cycle);
- when the trigger is due, one cycle plans the whole waiting queue (`engine.cycle.plan_cycle`, with the
  queue policy, one `ranking.Memo` and one `rooms.Memory` kept across cycles); a cycle that acted
  (`Cycle.acted`) is followed by another; cycles stop when one acts on nothing;
- when the free room of some class grew since the last cycle (`Cycle.room_grew`), the running jobs an
  upgrade move may pay for (`engine.cycle.upgrade_candidates`) each check their own move
  (`engine.cycle.upgrade_of`), each on the fleet the moves before left.

A plan is applied at once: placements start, victims and lenders checkpoint (`save_s`) and the preemptor
starts where the plan put it once they are gone. Elastic jobs grow as far as `engine.admission.growth`
lends room, through `migration.resize` and `migration.judge`.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from heterojob.api.job import Policy
from heterojob.engine import admission as planner
from heterojob.engine import completion, migration, queueing, ranking, rooms
from heterojob.engine.admission import Disruption, DisruptionKind, Holder, Outcome
from heterojob.engine.cycle import (
    Cycle,
    Trigger,
    plan_cycle,
    timer,
    upgrade_candidates,
    upgrade_of,
)
from heterojob.engine.fleet import Allocation
from heterojob.engine.placement import Alternative, Request, place
from heterojob.replay.devices import Run
from heterojob.replay.traces import TraceJob

if TYPE_CHECKING:
    from heterojob.replay.replay import _Replay


class Scheduler:
    def __init__(self, sim: _Replay) -> None:
        self.sim = sim
        config = sim.config
        self.waiting: dict[int, TraceJob] = {}
        self.priorities: dict[int, int] = defaultdict(int)  # priority -> waiting jobs of it
        self.waiting_devices = 0  # devices the waiting jobs ask for (`queueing.displacing`)
        self.trigger = Trigger()
        self.memo = ranking.Memo()  # what the policy may reuse between cycles
        self.memory = rooms.Memory()  # what placement found per class and region, while its room is unchanged
        self.free: dict[str, int] = {}  # free devices per class after the last cycle's placements
        self.waiting_for: frozenset[str] = frozenset()  # classes the last cycle's waiting jobs wait for
        self.timers: dict[int, float] = {}  # job -> the timer put on the replay's event queue
        self.cycles = 0
        self.settings = planner.Settings(min_runtime_s=config.min_runtime_s)
        defaults = Policy()
        self.rules = migration.Rules(triggers=frozenset({migration.GROW}), cooldown_s=defaults.cooldown_seconds,
                                     max_per_hour=defaults.max_migrations_per_hour, budget=config.disruption_budget)
        self.moves: dict[int, list[float]] = defaultdict(list)  # resizes, preemptions, upgrades, for judge
        self.wakes: dict[int, float] = {}  # job -> when its growth may be judged again
        self.requests: dict[tuple[int, int | None], Request] = {}
        self.holder_of: dict[int, Holder] = {}  # per run token
        self.growth_limits: dict[tuple[int, str], tuple[int, int]] = {}  # (job, class) -> (sizes measured, most)
        self.cost = completion.MoveCost(config.save_s, config.restore_s)

    # --- events ---------------------------------------------------------------------------------------

    def add(self, job: TraceJob, now: float, run_s: float) -> None:
        """A request added (an arrival, a requeue), waiting since `now`."""
        self.remove(job)
        self.waiting[job.id] = job
        self.priorities[job.priority] += 1
        self.waiting_devices += job.gpus
        self.trigger.request(self.key(job))
        self.at(job, timer(now, now, self.sim.config.queue, run_s))

    def remove(self, job: TraceJob) -> None:
        if self.waiting.pop(job.id, None) is not None:
            self.priorities[job.priority] -= 1
            self.waiting_devices -= job.gpus
            self.trigger.at(self.key(job), None)

    def room_freed(self) -> None:
        self.trigger.room()

    def stopped(self, run: Run) -> None:
        self.holder_of.pop(run.token, None)

    def at(self, job: TraceJob, when: float | None) -> None:
        """The job's plan changes at `when` by the clock alone: a timer, and an event for the replay's clock."""
        self.trigger.at(self.key(job), when)
        if when is not None and self.timers.get(job.id) != when:
            self.timers[job.id] = when
            self.sim.push(when, "timer", job.id)

    def key(self, job: TraceJob) -> str:
        return f"{self.sim.namespace}/{job.id}"

    # --- the cycle ------------------------------------------------------------------------------------

    def place(self, now: float) -> None:
        """Cycles while the trigger is due, then growth, then cycles again if growth gave room back."""
        self.plan(now)
        if self.sim.config.elastic:
            self.grow(now)
            self.plan(now)

    def plan(self, now: float) -> None:
        sim, config = self.sim, self.sim.config
        while self.trigger.due(now):
            self.trigger.planned(now)
            knowledge = sim.known.knowledge
            # what the operator knows too: the queue's length in devices decides whether levels displace
            knowledge.promoted_displace = queueing.promoted_displacing(self.waiting_devices, config.devices,
                                                                       config.queue)
            knowledge.displace_by_level = queueing.displacing(self.waiting_devices, config.devices, config.queue)
            fleet, holders = sim.devices.current_fleet(), self.holders()
            cycle = plan_cycle([self.request(j) for j in self.waiting.values()], holders, fleet, now, self.settings,
                               (knowledge, config.queue), None, self.memo, self.memory)
            self.cycles += 1
            self.waiting_for = cycle.waiting_for
            looked = upgrade_candidates(cycle, self.free, holders, fleet, now, knowledge, self.cost,
                                        config.min_runtime_s, config.probe_share, self.memo) if config.upgrades else []
            self.free = dict(cycle.free)
            self.apply(cycle, now)
            for job in looked:
                self.upgrade(job, now)
            if cycle.acted:
                self.trigger.room()  # what it placed and disturbed changes the snapshot: plan once more

    def apply(self, cycle: Cycle, now: float) -> None:
        """Placements start; victims and lenders checkpoint and the job that disturbs them starts where the
        plan put it (after their save)."""
        sim = self.sim
        for admission in cycle.acting:  # what it does (the waiting jobs' messages are not read here)
            key = admission.job
            job = self.waiting[int(key.split("/", 1)[1])]
            c = admission.candidate
            if admission.outcome == Outcome.PLACED:
                assert c is not None
                sim.start(job, c.device_class, c.region, c.nodes, c.per_replica, now)
                continue
            if admission.disruptions:
                for d in admission.disruptions:
                    self.disturb(d, now)
                chosen = place(Request(key, [Alternative(c.device_class, c.per_replica)], len(c.nodes),
                                       allowed_regions=(c.region,)), sim.devices.current_fleet()).chosen \
                    if c is not None else None
                if chosen is not None:  # where the plan put it, unless a shrunk job landed there
                    sim.start(job, chosen.device_class, chosen.region, chosen.nodes, chosen.per_replica, now,
                              pause=sim.config.save_s)
            # a job left waiting keeps the timer `add` set: what it is computed from (when it started
            # waiting, its run time) changes only when it is added again

    def holders(self) -> list[Holder]:
        """Running jobs as the planner sees them."""
        return [self.holder(r) for r in self.sim.devices.running.values()]

    def holder(self, r: Run) -> Holder:
        """A running job as the planner sees it; a grown one carries its trace size as its base."""
        h = self.holder_of.get(r.token)
        if h is None:
            key = self.key(r.job)
            replicas, per = self.sim.shape(r.job)
            base = Request(key, [Alternative(r.cls, per)], replicas, allowed_regions=(r.region,),
                           priority=r.job.priority) if r.replicas > replicas else None
            h = self.holder_of[r.token] = Holder(key, r.job.priority, r.started, Allocation(
                r.cls, r.per_node, self.sim.namespace, r.cls, r.region), base, None, False)
        return h

    def request(self, job: TraceJob, replicas: int | None = None) -> Request:
        key = (job.id, replicas)
        if key not in self.requests:
            per = self.sim.shape(job)[1]
            rel = self.sim.known.rel(job)
            listed = [c for c in sorted(rel, key=lambda c: (-rel[c], c)) if rel[c] >= self.sim.config.within]
            self.requests[key] = Request(self.key(job), [Alternative(c, per) for c in listed],
                                         replicas or self.sim.shape(job)[0], priority=job.priority,
                                         created=self.sim.arrival(job))
        return self.requests[key]

    # --- moves ----------------------------------------------------------------------------------------

    def upgrade(self, key: str, now: float) -> None:
        """A running job's own upgrade check (`engine.cycle.upgrade_of`); a move is made before break: the
        room is found before the job is stopped."""
        sim = self.sim
        run = sim.devices.running.get(int(key.split("/", 1)[1]))
        if run is None:
            return
        u = upgrade_of([self.holder(run)], run.job.classes, sim.devices.current_fleet(), now, sim.known.knowledge,
                       self.waiting_for if self.waiting else frozenset(), self.cost, sim.config.min_runtime_s,
                       sim.config.probe_share, self.memo)
        if u is None:
            return
        replicas, per = sim.shape(run.job)
        chosen = place(Request(u.job, [Alternative(u.to_class, per)], replicas), sim.devices.current_fleet()).chosen
        if chosen is None:
            return  # the devices are free but not in one region or node: no room held, no move
        sim.checkpoint_and_stop(run, now)
        self.moves[run.job.id].append(now)
        sim.metrics.upgrades += 1
        sim.start(run.job, chosen.device_class, chosen.region, chosen.nodes, per, now, pause=sim.config.save_s)

    def disturb(self, d: Disruption, now: float) -> None:
        """A victim checkpoints and requeues; a lender checkpoints and restarts at its admitted size."""
        sim = self.sim
        run = sim.devices.running[int(d.job.split("/", 1)[1])]
        sim.checkpoint_and_stop(run, now)
        self.moves[run.job.id].append(now)
        if d.kind == DisruptionKind.PREEMPT:
            sim.metrics.preemptions += 1
            sim.metrics.preempted_device_s += run.devices * (2 * sim.config.save_s + sim.config.restore_s)
            sim.push(now + sim.config.save_s, "requeue", run.job)
            return
        sim.metrics.reclaims += 1
        replicas, per = sim.shape(run.job)
        base = Request(d.job, [Alternative(run.cls, per)], replicas, allowed_regions=(run.region,),
                       priority=run.job.priority)
        back = place(base, sim.devices.current_fleet()).chosen
        if back is None:  # not where the plan put it: it waits in the queue like a preempted job
            sim.push(now + sim.config.save_s, "requeue", run.job)
            return
        sim.start(run.job, back.device_class, back.region, back.nodes, back.per_replica, now,
                  pause=sim.config.save_s)

    def most(self, job: TraceJob, cls: str, base: int) -> int:
        """The most replicas the job grows to on `cls`: as far as it scales (`completion.growth_limit` of the
        sizes it measured there, a table that only gains entries)."""
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

    def grow(self, now: float) -> None:
        """Elastic jobs grow as far as the planner lends room (`engine.admission.growth`: never while a job
        of their priority or above waits), within the migration rules; each resize checkpoints and restores."""
        sim, config, devices = self.sim, self.sim.config, self.sim.devices
        if not (sim.freed or sim.arrived):
            return  # no room appeared and no job started since the last look
        top = max((p for p, n in self.priorities.items() if n), default=None)  # planner.top_priority, kept up
        for run in devices.by_id():
            job = run.job
            base = sim.shape(job)[0]
            if run.replicas <= base and (top is not None and top >= job.priority
                                         or not devices.region_free().get((run.cls, run.region))):
                continue  # at most its admitted size (`most` is never below it): it grows no further, see below
            if now < run.started:
                continue  # still restoring from its last move
            most = self.most(job, run.cls, base)
            change: migration.Resize | None
            if run.replicas > most:  # grown past where it scales well: back to the last good size
                freed = devices.current_fleet(without=run)
                change = migration.Resize(migration.GROW, most, f"scaling below {config.growth_efficiency:g} "
                                          f"at {run.replicas} replicas: {run.replicas} -> {most}")
            else:
                if run.replicas >= most:
                    continue  # at its largest
                if top is not None and top >= job.priority:
                    continue  # `growth` lends nothing while a job of its priority or above waits
                if not devices.region_free().get((run.cls, run.region)):
                    continue  # no device free beside its own there: `growth` finds no larger size
                freed = devices.current_fleet(without=run)
                target = planner.growth(self.request(job, run.replicas), top, freed, run.replicas, most, run.cls,
                                        run.region)
                change = migration.resize(run.replicas, base, most, None, None, now, 0.0, 0.0, target)
            if change is None:
                continue
            moving = sum(1 for r in devices.running.values() if r.started > now)
            verdict = migration.judge([migration.Symptom(change.trigger, now, (), change.reason)], self.rules, now,
                                      self.moves[job.id], moving)
            if not verdict.act:
                last = max(self.moves[job.id], default=now)
                wake = max(now + 60, last + self.rules.cooldown_s)
                if self.wakes.get(job.id, 0) <= now:
                    self.wakes[job.id] = wake
                    sim.push(wake, "wake", job.id)
                continue
            result = place(Request(self.key(job), [Alternative(run.cls, sim.shape(job)[1])],
                                   change.replicas, allowed_regions=(run.region,)), freed)
            if result.chosen is None:
                continue
            sim.checkpoint_and_stop(run, now)
            self.moves[job.id].append(now)
            sim.metrics.resizes += 1
            c = result.chosen
            sim.start(job, c.device_class, c.region, c.nodes, c.per_replica, now, pause=config.save_s)
            if change.replicas > sim.shape(job)[0]:  # a trial size: judge its measured scaling once it may move
                self.wakes[job.id] = wake = now + self.rules.cooldown_s
                sim.push(wake, "wake", job.id)
