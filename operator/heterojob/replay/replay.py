"""`heterojob sim replay`: a discrete-event replay of a job trace on a simulated heterogeneous fleet.

Policies, on the same trace, fleet, failures and seed:
- `static`: a fleet partitioned by device class under the default Kubernetes scheduler: oldest first, a job
  starts when the class the user asked for has room for its whole gang at the trace's size (one that does
  not fit does not hold up the rest); no migration, resize or preemption. A failure restarts the
  job from its last periodic checkpoint after Kubernetes' default eviction delay (node-monitor grace 40 s +
  300 s not-ready toleration), on the same class.
- `heterojob`: the operator's own planner, with no policy of the replay's: `engine.admission.plan_queue`
  places the queue in priority and age order on any class the job runs on, takes lent room back from grown
  jobs and preempts lower-priority ones exactly as the operator's admission step does; elastic jobs grow
  as far as `engine.admission.growth` lends room, through `migration.resize` and `migration.judge` (the
  HeteroJob defaults: 600 s cooldown, 3 moves an hour, a disruption budget of 5). A failed node's
  jobs restart at once off it, from their last periodic checkpoint.

Every job checkpoints every `checkpoint_s` (saving takes `save_s`); a resize or preemption checkpoints on
demand (`save_s`) and the job restores (`restore_s`) where it lands. Device failures come at `mtbf_h` per
device, a node is repaired after `repair_h`.

Utilization = device-hours of useful training / (devices x makespan): work redone after a failure,
checkpoint saving and restoring are not useful; a grown job's devices all count (its throughput is Gavel's
measurement, see `traces`). Makespan runs from the first arrival to the last completion. The steady state
leaves out warm-up and drain: utilization between the 10th and 90th percentile arrival (each run's useful
work spread evenly over it) and the JCT of the jobs arriving in that window. Same trace, seed and config:
same numbers.
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from heterojob.api.job import Policy
from heterojob.engine import migration
from heterojob.engine import admission as planner
from heterojob.engine.fleet import Allocation, DeviceClass, Fleet, Node
from heterojob.engine.admission import Disruption, DisruptionKind, Holder, Outcome
from heterojob.engine.placement import Alternative, Request, place
from heterojob.replay.report import Report, timeline
from heterojob.replay.traces import CLASSES, TraceJob

REGIONS = ("cn-east", "cn-north", "eu-west", "us-west", "ap-south")
K8S_EVICTION_S = 40.0 + 300.0
NAMESPACE = "t"


@dataclass(frozen=True)
class Config:
    nodes_per_class_region: int = 2
    regions: int = 3
    devices_per_node: int = 8
    arrival_scale: float = 1.0  # arrivals at t * scale: < 1 compresses the trace (more load)
    mtbf_h: float = 50_000.0  # per device
    repair_h: float = 4.0
    checkpoint_s: float = 1800.0
    save_s: float = 20.0
    restore_s: float = 60.0
    recovery_s: float = 1.0  # heterojob: fault seen -> replacement pods (bench/recovery.py measures 0.1 s)
    elastic: bool = True  # heterojob: data-parallel jobs may grow into idle room
    min_runtime_s: float = 300.0  # heterojob: a job younger than this is never preempted (operator default)
    disruption_budget: int = 5  # heterojob: jobs checkpointing or moving at once (operator default)
    within: float = 0.0  # heterojob: a job lists the classes where it runs at least this share of its best speed
    seed: int = 0

    @property
    def devices(self) -> int:
        return self.nodes_per_class_region * len(CLASSES) * self.regions * self.devices_per_node


@dataclass
class _Run:
    job: TraceJob
    cls: str
    region: str
    replicas: int
    per_node: dict[str, int]
    started: float  # progress begins (after a restore)
    steps_at_start: float
    raw: float  # steps/s while training at this size
    eff: float  # steps/s including periodic checkpoint saves
    token: int

    @property
    def devices(self) -> int:
        return sum(self.per_node.values())

    def done(self, now: float) -> float:
        return min(self.job.total_steps, self.steps_at_start + max(0.0, now - self.started) * self.eff)


def fleet(config: Config) -> Fleet:
    nodes = {}
    for region in REGIONS[:config.regions]:
        for cls in CLASSES:
            for i in range(config.nodes_per_class_region):
                name = f"{region}-{cls}-{i:02d}"
                nodes[name] = Node(name, {"class": cls, "topology.kubernetes.io/region": region},
                                   {cls: config.devices_per_node})
    classes = {c: DeviceClass(c, c, {"class": c}) for c in CLASSES}
    return Fleet(nodes, classes)


class _Replay:
    def __init__(self, jobs: Sequence[TraceJob], policy: str, config: Config) -> None:
        if policy not in ("static", "heterojob"):
            raise ValueError(f"policy must be static or heterojob, not {policy!r}")
        self.jobs, self.policy, self.config = jobs, policy, config
        self.rng = random.Random(config.seed)
        self.base = fleet(config)
        self.used: dict[tuple[str, str], int] = {}
        self.down: set[str] = set()
        self.events: list[tuple[float, int, str, Any]] = []
        self.seq = 0
        self.progress = {j.id: 0.0 for j in jobs}  # steps in the last checkpoint
        self.queue: dict[int, TraceJob] = {}  # waiting
        self.arrived: list[TraceJob] = []  # since the last scheduling pass
        self.freed: set[str] = set()  # classes that gained room since the last pass
        self.running: dict[int, _Run] = {}
        self.moves: dict[int, list[float]] = defaultdict(list)  # resizes and preemptions, for judge
        self.requests: dict[tuple[int, int | None], Request] = {}
        self.wakes: dict[int, float] = {}  # job -> when it may be judged again
        self.finished: dict[int, float] = {}
        self.useful_s = self.lost_s = self.max_lost = 0.0
        self.useful: list[tuple[float, float, float]] = []  # (from, to, useful device-seconds), per run
        self.failures = self.restarts = self.resizes = self.preemptions = self.reclaims = 0
        self.busy = 0
        self.busy_points: list[tuple[float, int]] = []
        self.settings = planner.Settings(min_runtime_s=config.min_runtime_s)
        defaults = Policy()
        self.rules = migration.Rules(triggers=frozenset({migration.GROW}), cooldown_s=defaults.cooldown_seconds,
                                     max_per_hour=defaults.max_migrations_per_hour, budget=config.disruption_budget)

    # --- events ---------------------------------------------------------------------------------------

    def push(self, t: float, kind: str, payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, payload))

    def arrival(self, job: TraceJob) -> float:
        return job.arrival_s * self.config.arrival_scale

    def run(self) -> Report:
        config = self.config
        for job in self.jobs:
            self.push(self.arrival(job), "arrive", job)
        per_node_rate = config.devices_per_node / (config.mtbf_h * 3600)
        for name in sorted(self.base.nodes):
            self.push(self.rng.expovariate(per_node_rate), "fail", name)
        first = min((self.arrival(j) for j in self.jobs), default=0.0)
        end = first
        while self.events and len(self.finished) < len(self.jobs):
            now, _, kind, payload = heapq.heappop(self.events)
            if kind == "arrive" or kind == "requeue":
                self.queue[payload.id] = payload
                self.arrived.append(payload)
            elif kind == "finish":
                run = self.running.get(payload[0])
                if run is None or run.token != payload[1]:
                    continue  # a completion of a run that a failure, resize or preemption ended
                self.credit(run, run.job.total_steps, now)
                self.progress[run.job.id] = run.job.total_steps
                self.stop(run, now)
                self.finished[run.job.id] = end = now
            elif kind == "fail":
                self.fail(payload, now)
                self.push(now + config.repair_h * 3600, "repair", payload)
            elif kind == "repair":
                self.down.discard(payload)
                self.freed.add(self.base.nodes[payload].labels["class"])
                self.push(now + self.rng.expovariate(per_node_rate), "fail", payload)
            elif kind == "wake":
                self.freed.update(CLASSES)  # a job's cooldown ended: look at growing it again
            if self.policy == "static":
                self.place_static(now)
            else:
                self.place_heterojob(now)
                if config.elastic:
                    self.grow(now)
            self.freed.clear()
            self.arrived.clear()
            if not self.busy_points or self.busy_points[-1] != (now, self.busy):
                self.busy_points.append((now, self.busy))
        return self.report(first, end)

    # --- devices --------------------------------------------------------------------------------------

    def current_fleet(self, without: _Run | None = None) -> Fleet:
        nodes = {n: (Node(v.name, v.labels, v.allocatable, ready=False) if n in self.down else v)
                 for n, v in self.base.nodes.items()}
        used = dict(self.used)
        if without is not None:
            for n, c in without.per_node.items():
                used[(n, without.cls)] -= c
        return Fleet(nodes, self.base.classes, used=used)

    def start(self, job: TraceJob, cls: str, region: str, nodes: Sequence[str], per: int, now: float,
              pause: float = 0.0) -> None:
        per_node: dict[str, int] = defaultdict(int)
        for n in nodes:
            per_node[n] += per
            self.used[(n, cls)] = self.used.get((n, cls), 0) + per
        devices = sum(per_node.values())
        self.busy += devices
        if self.progress[job.id] > 0:
            pause += self.config.restore_s
        raw = job.rate(cls, devices)
        eff = raw * self.config.checkpoint_s / (self.config.checkpoint_s + self.config.save_s)
        self.seq += 1
        run = _Run(job, cls, region, len(nodes), dict(per_node), now + pause, self.progress[job.id], raw, eff,
                   self.seq)
        self.running[job.id] = run
        self.queue.pop(job.id, None)
        self.push(run.started + (job.total_steps - run.steps_at_start) / eff, "finish", (job.id, run.token))

    def credit(self, run: _Run, steps: float, now: float) -> None:
        """Count the run's training up to `steps` as useful (spread evenly over the run, for windows)."""
        useful = (steps - run.steps_at_start) / run.raw * run.devices
        self.useful_s += useful
        if useful > 0:
            self.useful.append((min(run.started, now), now, useful))

    def stop(self, run: _Run, now: float) -> None:
        for n, c in run.per_node.items():
            self.used[(n, run.cls)] -= c
        self.busy -= run.devices
        del self.running[run.job.id]
        self.freed.add(run.cls)

    def checkpoint_and_stop(self, run: _Run, now: float) -> None:
        """An on-demand checkpoint (resize, preemption): nothing is lost, the save takes `save_s`."""
        done = run.done(now)
        self.credit(run, done, now)
        self.progress[run.job.id] = done
        self.stop(run, now)

    def fail(self, node: str, now: float) -> None:
        self.failures += 1
        self.down.add(node)
        config = self.config
        for run in [r for r in self.running.values() if node in r.per_node]:
            ran = max(0.0, now - run.started)
            done = run.done(now)
            periods = math.floor(ran / (config.checkpoint_s + config.save_s))
            saved = min(done, run.steps_at_start + periods * config.checkpoint_s * run.raw)
            self.credit(run, saved, now)
            lost = (done - saved) / run.raw
            self.lost_s += lost * run.devices
            self.max_lost = max(self.max_lost, lost)
            self.progress[run.job.id] = saved
            self.stop(run, now)
            self.restarts += 1
            delay = K8S_EVICTION_S if self.policy == "static" else config.recovery_s
            self.push(now + delay, "requeue", run.job)

    # --- policies -------------------------------------------------------------------------------------

    def order(self, job: TraceJob) -> tuple[int, float, int]:
        return (-job.priority, self.arrival(job), job.id)

    def place_static(self, now: float) -> None:
        """The default Kubernetes scheduler on a partitioned fleet: oldest first, each waiting job starts
        when its class has room for the whole gang (a job that does not fit does not hold up the rest)."""
        touched = self.freed | {j.wants for j in self.arrived}
        if not touched:
            return
        pool = self.queue.values() if self.freed else self.arrived
        room = _room(self.current_fleet(), self.down)
        for job in sorted((j for j in pool if j.wants in touched), key=lambda j: (self.arrival(j), j.id)):
            replicas, per = job.shape
            if room[job.wants][0] < replicas * per or room[job.wants][1] < per:
                continue
            result = place(Request(f"{NAMESPACE}/{job.id}", [Alternative(job.wants, per)], replicas),
                           self.current_fleet())
            if result.chosen is not None:
                self.start(job, job.wants, result.chosen.region, result.chosen.nodes, per, now)
                room = _room(self.current_fleet(), self.down)

    def request(self, job: TraceJob, replicas: int | None = None) -> Request:
        key = (job.id, replicas)
        if key not in self.requests:
            self.requests[key] = self._request(job, replicas)
        return self.requests[key]

    def _request(self, job: TraceJob, replicas: int | None) -> Request:
        per = job.shape[1]
        best = job.rate(job.classes[0])
        listed = [c for c in job.classes if job.rate(c) >= self.config.within * best]
        return Request(f"{NAMESPACE}/{job.id}", [Alternative(c, per) for c in listed],
                       replicas or job.shape[0], priority=job.priority, created=self.arrival(job))

    def place_heterojob(self, now: float) -> None:
        """The operator's planner (`engine.admission.plan_queue`) over the waiting jobs (all of them when room
        was freed, else only the new arrivals: the others did not fit before and nothing changed), applied
        at once: placements start, victims and lenders checkpoint (`save_s`) and the job starts where the
        plan put it."""
        pool = list(self.queue.values()) if self.freed else list(self.arrived)
        if not pool:
            return
        by_key = {f"{NAMESPACE}/{j.id}": j for j in pool}
        plan = planner.plan_queue([self.request(j) for j in pool], self.holders(now), self.current_fleet(), now,
                                  self.settings)
        for admission in sorted(plan.admissions.values(), key=lambda a: self.order(by_key[a.job])):
            job, c = by_key[admission.job], admission.candidate
            if admission.outcome == Outcome.PLACED:
                assert c is not None
                self.start(job, c.device_class, c.region, c.nodes, c.per_replica, now)
            elif admission.disruptions:
                for d in admission.disruptions:
                    self.disturb(d, now)
                chosen = place(self.request(job), self.current_fleet()).chosen
                if chosen is not None:  # where the plan put it, unless a shrunk job landed elsewhere
                    self.start(job, chosen.device_class, chosen.region, chosen.nodes, chosen.per_replica, now,
                               pause=self.config.save_s)

    def holders(self, now: float) -> list[Holder]:
        """Running jobs as the planner sees them; a grown one carries its trace size as its base."""
        out = []
        for r in self.running.values():
            key = f"{NAMESPACE}/{r.job.id}"
            base = Request(key, [Alternative(r.cls, r.job.shape[1])], r.job.shape[0], allowed_regions=(r.region,),
                           priority=r.job.priority) if r.replicas > r.job.shape[0] else None
            out.append(Holder(key, r.job.priority, r.started, Allocation(r.cls, r.per_node, NAMESPACE, r.cls,
                                                                         r.region), base, None, r.started > now))
        return out

    def disturb(self, d: Disruption, now: float) -> None:
        """A victim checkpoints and requeues; a lender checkpoints and restarts at its admitted size."""
        run = self.running[int(d.job.split("/", 1)[1])]
        self.checkpoint_and_stop(run, now)
        self.moves[run.job.id].append(now)
        if d.kind == DisruptionKind.PREEMPT:
            self.preemptions += 1
            self.push(now + self.config.save_s, "requeue", run.job)
            return
        self.reclaims += 1
        base = Request(d.job, [Alternative(run.cls, run.job.shape[1])], run.job.shape[0],
                       allowed_regions=(run.region,), priority=run.job.priority)
        back = place(base, self.current_fleet()).chosen
        if back is None:  # not where the plan put it: it waits in the queue like a preempted job
            self.push(now + self.config.save_s, "requeue", run.job)
            return
        self.start(run.job, back.device_class, back.region, back.nodes, back.per_replica, now,
                   pause=self.config.save_s)

    def grow(self, now: float) -> None:
        """Elastic jobs grow as far as the planner lends room (`engine.admission.growth`: never while a job
        of their priority or above waits), within the migration rules; each resize checkpoints and restores."""
        if not (self.freed or self.arrived):
            return  # no room appeared and no job started since the last look
        top = planner.top_priority(self.request(j) for j in self.queue.values())
        for run in sorted(self.running.values(), key=lambda r: r.job.id):
            job = run.job
            most = job.max_replicas(run.cls)
            if run.replicas >= most or now < run.started:
                continue  # at its largest, or still restoring from its last move
            freed = self.current_fleet(without=run)
            target = planner.growth(self.request(job, run.replicas), top, freed, run.replicas, most, run.cls,
                                    run.region)
            change = migration.resize(run.replicas, job.shape[0], most, None, None, now, 0.0, 0.0, target)
            if change is None:
                continue
            moving = sum(1 for r in self.running.values() if r.started > now)
            verdict = migration.judge([migration.Symptom(change.trigger, now, (), change.reason)], self.rules, now,
                                      self.moves[job.id], moving)
            if not verdict.act:
                last = max(self.moves[job.id], default=now)
                wake = max(now + 60, last + self.rules.cooldown_s)
                if self.wakes.get(job.id, 0) <= now:
                    self.wakes[job.id] = wake
                    self.push(wake, "wake", job.id)
                continue
            result = place(Request(f"{NAMESPACE}/{job.id}", [Alternative(run.cls, job.shape[1])], change.replicas,
                                   allowed_regions=(run.region,)), freed)
            if result.chosen is None:
                continue
            self.checkpoint_and_stop(run, now)
            self.moves[job.id].append(now)
            self.resizes += 1
            c = result.chosen
            self.start(job, c.device_class, c.region, c.nodes, c.per_replica, now, pause=self.config.save_s)

    # --- report ---------------------------------------------------------------------------------------

    def report(self, first: float, end: float) -> Report:
        makespan = max(end - first, 1e-9)
        by_job = {j.id: (self.finished[j.id] - self.arrival(j)) / 3600 for j in self.jobs if j.id in self.finished}
        jcts = sorted(by_job.values())
        total = self.config.devices
        arrivals = sorted(self.arrival(j) for j in self.jobs)
        lo, hi = (arrivals[len(arrivals) // 10], arrivals[-1 - len(arrivals) // 10]) if arrivals else (0.0, 0.0)
        steady = [by_job[j.id] for j in self.jobs if j.id in by_job and lo <= self.arrival(j) <= hi]
        in_window = sum(u * max(0.0, min(t1, hi) - max(t0, lo)) / (t1 - t0) for t0, t1, u in self.useful if t1 > t0)
        return Report(self.policy, len(self.finished), self.useful_s / (total * makespan),
                      statistics.fmean(jcts) if jcts else 0.0,
                      jcts[min(len(jcts) - 1, int(0.99 * len(jcts)))] if jcts else 0.0, makespan / 3600,
                      self.lost_s / 3600, self.failures, self.restarts, self.resizes, self.preemptions, self.reclaims,
                      self.max_lost, in_window / (total * (hi - lo)) if hi > lo else 0.0,
                      statistics.fmean(steady) if steady else 0.0, (lo / 3600, hi / 3600),
                      timeline(self.busy_points, total, first, end), jcts, by_job)


def _room(fleet: Fleet, down: set[str]) -> dict[str, tuple[int, int]]:
    """class -> (most free devices in one region, most free on one node), over Ready nodes."""
    per_region: dict[tuple[str, str], int] = defaultdict(int)
    per_node: dict[str, int] = defaultdict(int)
    for name, node in fleet.nodes.items():
        if name in down:
            continue
        cls = node.labels["class"]
        free = fleet.free(name, cls)
        per_region[(cls, node.labels["topology.kubernetes.io/region"])] += free
        per_node[cls] = max(per_node[cls], free)
    best_region: dict[str, int] = defaultdict(int)
    for (cls, _), free in per_region.items():
        best_region[cls] = max(best_region[cls], free)
    return {c: (best_region[c], per_node[c]) for c in CLASSES}


def replay(jobs: Sequence[TraceJob], policy: str, config: Config) -> Report:
    """Replay `jobs` under `policy` ("static" or "heterojob")."""
    return _Replay(jobs, policy, config).run()
