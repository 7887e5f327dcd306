"""heterojob in the replay: the operator's scheduling cycle (`engine.queue.cycle`) on the replay's clock.

What the operator's scheduler (`controller.scheduler`) does, with the replay's events as its events:
- an arrival or a requeue (after a failure, a preemption) adds a request: `CycleTrigger.request`; a completion,
  a stopped run (resize, preemption, upgrade), a failed or repaired node gives room back or changes the
  fleet: `CycleTrigger.room`; a waiting job's starvation promotion is a timer (`engine.queue.cycle.timer`), put on the
  replay's event queue so the clock stops there;
- events of one instant are one batch (as the operator plans the events of one batch in one cycle);
- when the trigger is due, one cycle plans the whole waiting queue (`engine.queue.cycle.plan_cycle`, with the
  queue policy, one `ranking.Memo` and one `rooms.Memory` kept across cycles); a cycle that acted
  (`Cycle.acted`) is followed by another; cycles stop when one acts on nothing;
- a cycle is planned and read only for what acts (`plan_cycle(acting=True)`, `Cycle.acting`): one the
  planner's necessary test says acts on nothing is not planned, and no waiting job's message is made
  (`engine.queue.cycle.Cycle`);
- when the free room of some class grew since the last cycle (`Cycle.room_grew`), the running jobs an
  upgrade move may pay for (`engine.queue.cycle.upgrade_candidates`) each check their own move
  (`engine.queue.cycle.upgrade_of`), each on the fleet the moves before left.

A plan is applied at once: placements start, victims and lenders checkpoint (`save_s`) and the preemptor
starts where the plan put it once they are gone. A running job's next step (growth, shrink, an upgrade, a
move off a failed node) is `engine.execution.running.decide`'s (`replay.decisions`).
"""

from __future__ import annotations

from collections import defaultdict

from heterojob.engine.queue import admission as planner
from heterojob.engine.basics import queueing
from heterojob.engine.capacity import rooms
from heterojob.engine.queue import allocation, completion, guidance, ranking
from heterojob.engine.disruption.holders import Holder
from heterojob.engine.queue.admission import Disruption, DisruptionKind, Outcome
from heterojob.engine.queue.cycle import Cycle, CycleTrigger, plan_cycle, timer, upgrade_candidates, upgrade_of
from heterojob.engine.capacity.fleet import Allocation
from heterojob.engine.placing.placement import Alternative, Request, place
from heterojob.replay.devices import Run
from heterojob.replay.decisions import Decisions
from heterojob.replay.traces import TraceJob

from heterojob.replay.simulation import Simulation


class ReplayScheduler:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        config = sim.config
        self.waiting: dict[int, TraceJob] = {}
        self.priorities: dict[int, int] = defaultdict(int)  # priority -> waiting jobs of it
        self.waiting_devices = 0  # devices the waiting jobs ask for (`queueing.displacing`)
        self.trigger = CycleTrigger()
        self.memo = ranking.Memo()  # what the policy may reuse between cycles
        self.memory = rooms.Memory()  # what placement found per class and region, while its room is unchanged
        self.free: dict[str, int] = {}  # free devices per class after the last cycle's placements
        self.waiting_for: frozenset[str] = frozenset()  # classes the last cycle's waiting jobs wait for
        self.chose: dict[str, str] = {}  # the class each waiting job chose at the last cycle (`Knowledge.chose`)
        self.timers: dict[int, float] = {}  # job -> the timer put on the replay's event queue
        self.cycles = 0
        self.settings = planner.AdmissionSettings(min_runtime_s=config.min_runtime_s)
        self.requests: dict[tuple[int, int | None], Request] = {}
        self.holder_of: dict[int, Holder] = {}  # per run token
        self.cost = completion.MoveCost(config.save_s, config.restore_s)
        sim.known.knowledge.move_cost_s = self.cost.seconds  # what a preemption must gain (`engine.queue.policy`)
        self.running = Decisions(self)  # growth, upgrades and faults: `engine.execution.running.decide`
        self.guided: tuple[float, guidance.Guide | None] | None = None  # when the guide was built, and it

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
            self.running.grow(now)
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
            knowledge.saturated = allocation.saturated(self.waiting_devices, config.devices, config.queue.fill_above)
            knowledge.chose = self.chose  # the classes the waiting jobs chose last (kept within a margin)
            fleet, holders = sim.devices.current_fleet(), self.holders()
            knowledge.guide = self.guide(now, holders) if allocation.saturated(
                self.waiting_devices, config.devices, config.guide_above) else None
            cycle = plan_cycle([self.request(j) for j in self.waiting.values()], holders, fleet, now, self.settings,
                               (knowledge, config.queue), None, self.memo, self.memory, acting=True)
            self.cycles += 1
            self.waiting_for, self.chose = cycle.waiting_for, dict(cycle.chose)
            looked = upgrade_candidates(cycle, self.free, holders, fleet, now, knowledge, self.cost,
                                        config.min_runtime_s, config.probe_share, self.memo) if config.upgrades else []
            self.free = dict(cycle.free)
            self.apply(cycle, now)
            for job in looked:
                self.upgrade(job, now)
            if cycle.acted:
                self.trigger.room()  # what it placed and disturbed changes the snapshot: plan once more

    def guide(self, now: float, holders: list[Holder]) -> guidance.Guide | None:
        """The fluid optimum's prices (`engine.queue.guidance`) over every job in the system, built again once
        `Config.guide_s` has passed since the last (the queue's make-up moves slowly past the knee)."""
        config = self.sim.config
        if config.guide_s is None:
            return None
        if self.guided is None or now - self.guided[0] >= config.guide_s:
            waiting = [self.request(j) for j in self.waiting.values()]
            jobs = guidance.in_system(waiting, holders, now, self.sim.known.knowledge)
            self.guided = (now, guidance.guide(jobs, self.capacity()))
        return self.guided[1]

    def capacity(self) -> dict[str, int]:
        per = self.sim.config.per_class
        return {c: per.get(c, 0) for c in self.sim.base.classes}

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
        """A running job's own upgrade check (`engine.queue.cycle.upgrade_of`), weighed by `engine.execution.running.decide`
        (`replay.decisions`)."""
        sim = self.sim
        run = sim.devices.running.get(int(key.split("/", 1)[1]))
        if run is None:
            return
        self.running.upgrade(run, lambda: upgrade_of(
            [self.holder(run)], run.job.classes, sim.devices.current_fleet(), now, sim.known.knowledge,
            self.waiting_for if self.waiting else frozenset(), self.cost, sim.config.min_runtime_s,
            sim.config.probe_share, self.memo), now)

    def disturb(self, d: Disruption, now: float) -> None:
        """A victim checkpoints and requeues; a lender checkpoints and restarts at its admitted size."""
        sim = self.sim
        run = sim.devices.running[int(d.job.split("/", 1)[1])]
        sim.checkpoint_and_stop(run, now)
        self.running.moves[run.job.id].append(now)
        if d.kind == DisruptionKind.PREEMPT:
            sim.metrics.preemptions += 1
            sim.known.preempted(run.job)  # a turn (`QueueSettings.max_turns`)
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

    def top(self) -> int | None:
        """The highest priority among the waiting jobs (`admission.top_priority`, kept up to date)."""
        return max((p for p, n in self.priorities.items() if n), default=None)
