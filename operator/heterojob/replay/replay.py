"""`heterojob sim replay`: a discrete-event replay of a job trace on a simulated heterogeneous fleet.

Policies, on the same trace, fleet, failures and seed:
- `static`: a fleet partitioned by device class under the default Kubernetes scheduler: oldest first, a job
  starts when the class the user asked for has room for its whole gang at the trace's size (one that does
  not fit does not hold up the rest); no migration, resize or preemption. A failure restarts the
  job from its last periodic checkpoint after Kubernetes' default eviction delay (node-monitor grace 40 s +
  300 s not-ready toleration), on the same class.
- `kueue`: what a user would otherwise run, Kueue with flavor fallback: one ClusterQueue whose flavors are
  the classes in the user's order (the class asked for, then the others by declared throughput), FIFO
  (BestEffortFIFO: a job that does not fit does not block the rest), the first flavor with room; no
  migration, resize or preemption; failures take Kubernetes' path like `static`.
- `heterojob`: the operator's own policy modules and planner, with no policy of the replay's: the queue
  order (`engine.queueing`: `--queue-policy mlfq` or `fifo`) and the completion-time estimates
  (`engine.completion`: which classes a job takes now, from declared throughput and the job's measured
  speed, and upgrade moves that pay) feed `engine.admission.plan_queue`, which places, takes lent room
  back from grown jobs and preempts exactly as the operator's admission step does; elastic jobs grow as
  far as `engine.admission.growth` lends room, through `migration.resize` and `migration.judge` (the
  HeteroJob defaults: 600 s cooldown, 3 moves an hour, a disruption budget of 5). A failed node's
  jobs restart at once off it, from their last periodic checkpoint. The policy never reads a job's total
  steps or its speed on a class it has not run on; it reads what jobs of its type (its `spec.workload`)
  measured where they ran (`engine.completion.pooled`), as the operator does.

Each scheduling pass costs at most a bounded number of queued jobs (`lookahead` in queue order, plus the
first that fit free room), not every queued job against every running one: the waiting jobs are also kept
grouped by what decides whether they could start (`fit_key`: classes, replicas, devices per replica), so a
pass finds the next job that could fit free room per group, not by walking the queue, and the free room,
the fleet snapshot and the highest waiting priority are kept up to date rather than recomputed. What the
policy computes of the running and waiting jobs is carried between passes (`engine.ranking.Memo`), and a
pass whose queue has no job that could start or disturb anyone (`engine.admission.may_act`) is not
planned: the plan would place, preempt and reclaim nothing.

Every job checkpoints every `checkpoint_s` (saving takes `save_s`); a resize or preemption checkpoints on
demand (`save_s`) and the job restores (`restore_s`) where it lands. Device failures come at `mtbf_h` per
device, a node is repaired after `repair_h`.

Utilization = device-hours of useful training / (devices x makespan): work redone after a failure,
checkpoint saving and restoring are not useful; a grown job's devices all count (its throughput is Gavel's
measurement, see `traces`). Makespan runs from the first arrival to the last completion. The steady state
leaves out warm-up and drain: utilization between the 10th and 90th percentile arrival (each run's useful
work spread evenly over it) and the JCT of the jobs arriving in that window. With `window=(a, b)`
(Gavel's method: jobs a..b-1 of the trace), the run stops once those jobs are done and the report adds
their average JCT, the busy share and the useful share over their arrival span (useful: device-hours x
the job's speed on that class / its speed on its fastest class), their device-hours per job, and the jobs
in the system when the window opens and closes. Same trace, seed and config: same numbers.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from heterojob.api.job import Policy
from heterojob.engine import completion, migration, queueing, ranking
from heterojob.engine import policy as engine_policy
from heterojob.engine import admission as planner
from heterojob.engine.admission import Disruption, DisruptionKind, Holder, Outcome
from heterojob.engine.fleet import Allocation, DeviceClass, Fleet, Node
from heterojob.engine.placement import Alternative, Request, place
from heterojob.replay.report import Report, Window, timeline
from heterojob.replay.traces import CLASSES, TraceJob

REGIONS = ("cn-east", "cn-north", "eu-west", "us-west", "ap-south")
K8S_EVICTION_S = 40.0 + 300.0
NAMESPACE = "t"
POLICIES = ("static", "kueue", "heterojob")
# AcceleratorClass spec.throughput of the fleet's classes (relative to the fastest): round figures near
# the mean speed of Gavel's job types on V100, P100 and K80, as a vendor's sheet would give them
DECLARED = {"nvidia-h100": 1.0, "nvidia-a100": 0.8, "ascend-910b": 0.3}


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
    # heterojob: growth only to sizes where each extra replica brings at least this share of a replica's
    # work at the admitted size, as measured (`engine.completion.growth_limit`); 0 grows as far as room allows
    growth_efficiency: float = 0.6
    min_runtime_s: float = 300.0  # heterojob: a job younger than this is never preempted (operator default)
    disruption_budget: int = 5  # heterojob: jobs checkpointing or moving at once (operator default)
    within: float = 0.0  # heterojob: a job lists the classes where it runs at least this share of its best speed
    queue: queueing.QueueSettings = field(default_factory=queueing.QueueSettings)  # heterojob's queue order
    upgrades: bool = True  # heterojob: move running jobs up onto faster free room when it pays
    # heterojob: probe a class whose speed for a job is only the sheet's guess when the probe may cost at
    # most this share of its expected remaining time (`engine.completion.plan_upgrades`); 0: never
    probe_share: float = 0.05
    lookahead: int = 16  # queued jobs a pass plans in order (besides the first that fit free room)
    window: tuple[int, int] | None = None  # Gavel's measurement window: trace positions [a, b)
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
    held: float  # devices taken
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
    classes = {c: DeviceClass(c, c, {"class": c}, throughput=DECLARED[c]) for c in CLASSES}
    return Fleet(nodes, classes)


class _Replay:
    def __init__(self, jobs: Sequence[TraceJob], policy: str, config: Config) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}")
        self.jobs, self.policy, self.config = jobs, policy, config
        self.rng = random.Random(config.seed)
        self.base = fleet(config)
        self.used: dict[tuple[str, str], int] = {}
        self.version = 0  # bumped whenever devices are taken or given back or a node fails or is repaired
        self.seen: dict[str, tuple[int, Any]] = {}  # what `current_fleet` and `room` computed, at which version
        self.down: set[str] = set()
        self.nodes_view: dict[str, Node] = dict(self.base.nodes)
        self.events: list[tuple[float, int, str, Any]] = []
        self.seq = 0
        self.progress = {j.id: 0.0 for j in jobs}  # steps in the last checkpoint
        self.queue: dict[int, TraceJob] = {}  # waiting
        self.order_list: list[tuple[Any, ...]] = []  # the waiting jobs' keys, in queue order
        # the same keys grouped by what decides whether a job could start on the free room (`fit_key`)
        self.by_fit: dict[tuple[tuple[str, ...], int, int], list[tuple[Any, ...]]] = defaultdict(list)
        self.fit_keys: dict[int, tuple[tuple[str, ...], int, int]] = {}
        self.priorities: dict[int, int] = defaultdict(int)  # priority -> waiting jobs of it
        self.waiting_devices = 0  # devices the waiting jobs ask for (`queueing.displacing`)
        self.keys: dict[int, tuple[Any, ...]] = {}
        self.arrived: list[TraceJob] = []  # since the last scheduling pass
        self.freed: set[str] = set()  # classes that gained room since the last pass
        self.promoted = False
        self.running: dict[int, _Run] = {}
        self.moves: dict[int, list[float]] = defaultdict(list)  # resizes and preemptions, for judge
        self.requests: dict[tuple[int, int | None], Request] = {}
        self.wakes: dict[int, float] = {}  # job -> when it may be judged again
        self.finished: dict[int, float] = {}
        self.useful_s = self.lost_s = self.max_lost = 0.0
        self.useful: list[tuple[float, float, float]] = []  # (from, to, useful device-seconds), per run
        self.segments: list[tuple[float, float, float]] = []  # (from, to, device-s x speed share), per run
        self.device_s: dict[int, float] = defaultdict(float)  # devices held x seconds, per job
        self.failures = self.restarts = self.resizes = self.preemptions = self.reclaims = self.upgrades = 0
        self.preempted_device_s = 0.0  # devices idle for preemptions (saves, restores, the preemptor's wait)
        self.busy = 0
        self.busy_points: list[tuple[float, int]] = []
        self.settings = planner.Settings(min_runtime_s=config.min_runtime_s)
        defaults = Policy()
        self.rules = migration.Rules(triggers=frozenset({migration.GROW}), cooldown_s=defaults.cooldown_seconds,
                                     max_per_hour=defaults.max_migrations_per_hour, budget=config.disruption_budget)
        # what the operator knows of each job: attained service, when it last waited, measured speeds, work
        self.service: dict[int, queueing.Service] = {}
        self.measured: dict[int, dict[str, float]] = defaultdict(dict)
        # spec.workload: the trace's job type; each job's steps/s per device where it ran, pooled per type
        self.samples: dict[str, dict[int, dict[str, float]]] = defaultdict(dict)
        self.sample_counts: dict[tuple[str, str], int] = defaultdict(int)
        self.sheets: dict[str, tuple[int, dict[str, float]]] = {}  # type -> (version, `completion.sheet`)
        self.measured_sizes: dict[tuple[int, str], dict[int, float]] = defaultdict(dict)  # steps/s per replicas
        self.work_s: dict[int, float] = defaultdict(float)  # reference seconds trained (estimated speeds)
        self.residual = completion.Residual()
        self.rels: dict[int, tuple[tuple[int, int], dict[str, float]]] = {}
        self.holder_of: dict[int, Holder] = {}  # per run token
        self.facts: dict[str, engine_policy.Facts] = {}  # what each job's status tells the operator
        self.knowledge = engine_policy.Knowledge(self.facts, self.residual)
        self.memo = ranking.Memo()  # what `engine.policy.prepare` may reuse from the last pass
        self.cost = completion.MoveCost(config.save_s, config.restore_s)
        self.pending = set(range(*config.window)) if config.window else None
        self.by_position = {j.id: i for i, j in enumerate(jobs)}

    # --- events ---------------------------------------------------------------------------------------

    def push(self, t: float, kind: str, payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, payload))

    def arrival(self, job: TraceJob) -> float:
        return job.arrival_s * self.config.arrival_scale

    def shape(self, job: TraceJob) -> tuple[int, int]:
        """(replicas, devices per replica) of a job: `gang_shape` on this fleet's nodes."""
        return gang_shape(job.gpus, self.config.devices_per_node)

    def run(self) -> Report:
        config = self.config
        for job in self.jobs:
            self.push(self.arrival(job), "arrive", job)
        per_node_rate = config.devices_per_node / (config.mtbf_h * 3600)
        for name in sorted(self.base.nodes):
            self.push(self.rng.expovariate(per_node_rate), "fail", name)
        first = min((self.arrival(j) for j in self.jobs), default=0.0)
        end = first
        while self.events and len(self.finished) < len(self.jobs) and self.pending != set():
            now, _, kind, payload = heapq.heappop(self.events)
            if kind == "arrive" or kind == "requeue":
                self.enqueue(payload, now)
            elif kind == "finish":
                run = self.running.get(payload[0])
                if run is None or run.token != payload[1]:
                    continue  # a completion of a run that a failure, resize or preemption ended
                self.credit(run, run.job.total_steps, now)
                self.progress[run.job.id] = run.job.total_steps
                self.stop(run, now)
                self.finished[run.job.id] = end = now
                self.residual.add(self.work_s[run.job.id])
                if self.pending is not None:
                    self.pending.discard(self.by_position[run.job.id])
            elif kind == "fail":
                self.fail(payload, now)
                self.push(now + config.repair_h * 3600, "repair", payload)
            elif kind == "repair":
                self.down.discard(payload)
                self.nodes_view[payload] = self.base.nodes[payload]
                self.version += 1
                self.freed.add(self.base.nodes[payload].labels["class"])
                self.push(now + self.rng.expovariate(per_node_rate), "fail", payload)
            elif kind == "wake":
                self.freed.update(CLASSES)  # a job's cooldown ended: look at growing it again
            elif kind == "promote":
                job_id, since = payload
                if job_id in self.queue and self.service[job_id].waiting_since == since:
                    self.reorder(self.queue[job_id], now)
                    self.promoted = True
            if self.policy == "heterojob":
                self.place_heterojob(now)
                if config.elastic:
                    self.grow(now)
            else:
                self.place_fifo(now)
            self.freed.clear()
            self.arrived.clear()
            self.promoted = False
            if not self.busy_points or self.busy_points[-1] != (now, self.busy):
                self.busy_points.append((now, self.busy))
        return self.report(first, end)

    # --- the queue ------------------------------------------------------------------------------------

    def key(self, job: TraceJob, now: float) -> tuple[Any, ...]:
        if self.policy != "heterojob":
            return (-job.priority, self.arrival(job), job.id)
        return (-self.rank(job, now), self.arrival(job), job.id)

    def rank(self, job: TraceJob, now: float) -> int:
        return queueing.rank(job.priority, self.service.get(job.id, queueing.Service(0.0, now)), now,
                             self.config.queue)

    def enqueue(self, job: TraceJob, now: float) -> None:
        old = self.service.get(job.id) or queueing.Service()
        self.service[job.id] = queueing.Service(old.attained_device_s, now, run_s=old.run_s)
        self.refresh(job)
        self.dequeue(job)
        self.queue[job.id] = job
        self.priorities[job.priority] += 1
        self.waiting_devices += job.gpus
        self.arrived.append(job)
        self.keys[job.id] = k = self.key(job, now)
        bisect.insort(self.order_list, k)
        bisect.insort(self.by_fit[self.fit_key(job)], k)
        if self.policy == "heterojob":
            at = queueing.promotion_time(now, self.config.queue, old.run_s)
            if at is not None:
                self.push(at, "promote", (job.id, now))

    def dequeue(self, job: TraceJob) -> None:
        if self.queue.pop(job.id, None) is not None:
            self.priorities[job.priority] -= 1
            self.waiting_devices -= job.gpus
        k = self.keys.pop(job.id, None)
        if k is not None:
            for keys in (self.order_list, self.by_fit[self.fit_key(job)]):
                i = bisect.bisect_left(keys, k)
                if i < len(keys) and keys[i] == k:
                    del keys[i]

    def reorder(self, job: TraceJob, now: float) -> None:
        self.dequeue(job)
        self.queue[job.id] = job
        self.priorities[job.priority] += 1
        self.waiting_devices += job.gpus
        self.keys[job.id] = k = self.key(job, now)
        bisect.insort(self.order_list, k)
        bisect.insort(self.by_fit[self.fit_key(job)], k)

    def fit_key(self, job: TraceJob) -> tuple[tuple[str, ...], int, int]:
        """(classes it may start on, replicas, devices per replica): what `_fits` and a pass's placement
        read of a waiting job, so jobs with equal keys fit, or do not, alike."""
        key = self.fit_keys.get(job.id)
        if key is None:
            classes = job.classes if self.policy == "heterojob" else tuple(self.flavors(job))
            key = self.fit_keys[job.id] = (classes, *self.shape(job))
        return key

    # --- devices --------------------------------------------------------------------------------------

    def current_fleet(self, without: _Run | None = None) -> Fleet:
        """The fleet now (a snapshot of what is used; the same object until something changes), or as it
        would be without `without`'s devices."""
        if without is None:
            return self._memo("fleet", lambda: Fleet(self.nodes_view, self.base.classes, used=dict(self.used)))
        used = dict(self.used)
        for n, c in without.per_node.items():
            used[(n, without.cls)] -= c
        return Fleet(self.nodes_view, self.base.classes, used=used)

    def room(self) -> dict[str, tuple[int, int]]:
        """`_room` of the fleet now."""
        return self._memo("room", lambda: _room(self.current_fleet(), self.down))

    def region_free(self) -> dict[tuple[str, str], int]:
        """(class, region) -> free devices on Ready nodes now."""
        def compute() -> dict[tuple[str, str], int]:
            out: dict[tuple[str, str], int] = defaultdict(int)
            for name, node in self.base.nodes.items():
                if name not in self.down:
                    cls = node.labels["class"]
                    out[(cls, node.labels["topology.kubernetes.io/region"])] += (
                        node.allocatable[cls] - self.used.get((name, cls), 0))
            return out
        return self._memo("region_free", compute)

    def _memo(self, what: str, compute: Any) -> Any:
        at, value = self.seen.get(what, (-1, None))
        if at != self.version:
            value = compute()
            self.seen[what] = (self.version, value)
        return value

    def free_by_class(self) -> dict[str, int]:
        out = dict.fromkeys(CLASSES, 0)
        for name, node in self.base.nodes.items():
            if name in self.down:
                continue
            cls = node.labels["class"]
            out[cls] += node.allocatable[cls] - self.used.get((name, cls), 0)
        return out

    def start(self, job: TraceJob, cls: str, region: str, nodes: Sequence[str], per: int, now: float,
              pause: float = 0.0) -> None:
        per_node: dict[str, int] = defaultdict(int)
        for n in nodes:
            per_node[n] += per
            self.used[(n, cls)] = self.used.get((n, cls), 0) + per
        self.version += 1
        devices = sum(per_node.values())
        self.busy += devices
        if self.progress[job.id] > 0:
            pause += self.config.restore_s
        raw = job.rate(cls, devices)
        eff = raw * self.config.checkpoint_s / (self.config.checkpoint_s + self.config.save_s)
        self.seq += 1
        run = _Run(job, cls, region, len(nodes), dict(per_node), now, now + pause, self.progress[job.id], raw, eff,
                   self.seq)
        self.running[job.id] = run
        self.dequeue(job)
        if self.policy == "heterojob":
            self.service[job.id] = queueing.on_start(self.service[job.id], now, self.config.queue)
        if cls not in self.measured[job.id]:
            self.pool(job, cls)
        self.measured[job.id][cls] = job.rate(cls)  # the SDK reports steps/s once it trains there
        self.measured_sizes[(job.id, cls)][len(nodes)] = raw  # ... at the size it runs at
        self.refresh(job)
        self.push(run.started + (job.total_steps - run.steps_at_start) / eff, "finish", (job.id, run.token))

    def credit(self, run: _Run, steps: float, now: float) -> None:
        """Count the run's training up to `steps` as useful (spread evenly over the run, for windows)."""
        trained = (steps - run.steps_at_start) / run.raw
        useful = trained * run.devices
        self.useful_s += useful
        if useful > 0:
            self.useful.append((min(run.started, now), now, useful))
            best = max(run.job.rate(c) for c in CLASSES)  # the report's yardstick, never the policy's
            share = run.job.rate(run.cls) / best if best > 0 else 0.0
            self.segments.append((min(run.started, now), now, useful * share))
        if trained > 0:
            rel = self.rel(run.job)
            self.work_s[run.job.id] += trained * rel.get(run.cls, 0.0)
            svc = self.service.get(run.job.id, queueing.Service())
            self.service[run.job.id] = queueing.Service(svc.attained_device_s + trained * run.devices,
                                                        svc.waiting_since, svc.promoted, svc.run_s + trained)
            self.refresh(run.job)

    def stop(self, run: _Run, now: float) -> None:
        for n, c in run.per_node.items():
            self.used[(n, run.cls)] -= c
        self.version += 1
        self.busy -= run.devices
        self.holder_of.pop(run.token, None)
        self.device_s[run.job.id] += run.devices * (now - run.held)
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
        v = self.base.nodes[node]
        self.nodes_view[node] = Node(v.name, v.labels, v.allocatable, ready=False)
        self.version += 1
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
            delay = config.recovery_s if self.policy == "heterojob" else K8S_EVICTION_S
            self.push(now + delay, "requeue", run.job)

    # --- what the operator knows ----------------------------------------------------------------------

    def rel(self, job: TraceJob) -> dict[str, float]:
        """Relative speed per class the job runs on: measured where it ran, elsewhere scaled by its workload's
        sheet (what the jobs of its type measured, `completion.sheet`), else by the declared throughput."""
        measured = self.measured.get(job.id, {})
        version, sheet = self.sheets.get(job.job_type, (0, DECLARED))
        cached = self.rels.get(job.id)
        if cached is None or cached[0] != (len(measured), version):
            cached = self.rels[job.id] = ((len(measured), version), completion.speeds(sheet, measured, job.classes))
        return cached[1]

    def pool(self, job: TraceJob, cls: str) -> None:
        """A job measured its speed on a class for the first time: its workload's sheet takes it in. The sheet
        is read again (and the type's jobs' facts with it) when a class's sample count reaches a power of
        two: it is a median, which later samples barely move (the operator reads it afresh every plan)."""
        self.samples[job.job_type].setdefault(job.id, {})[cls] = job.rate(cls) / job.gpus  # per device
        n = self.sample_counts[(job.job_type, cls)] = self.sample_counts[(job.job_type, cls)] + 1
        if n & (n - 1):
            return
        version = self.sheets.get(job.job_type, (0, DECLARED))[0] + 1
        self.sheets[job.job_type] = (version, completion.sheet(DECLARED, completion.pooled(
            self.samples[job.job_type].values())))
        for other in [*self.queue.values(), *(r.job for r in self.running.values())]:
            if other.job_type == job.job_type and other.id != job.id:
                self.refresh(other)

    def refresh(self, job: TraceJob) -> None:
        """The job's facts as its status would carry them (attained service, speeds, work done)."""
        self.facts[f"{NAMESPACE}/{job.id}"] = engine_policy.Facts(self.service.get(job.id, queueing.Service()),
                                                           self.rel(job), self.work_s[job.id],
                                                           frozenset(self.measured.get(job.id, ())))

    # --- static and kueue -----------------------------------------------------------------------------

    def flavors(self, job: TraceJob) -> list[str]:
        if self.policy == "static":
            return [job.wants]
        rest = sorted((c for c in job.classes if c != job.wants), key=lambda c: (-DECLARED[c], c))
        return [job.wants, *rest]

    def place_fifo(self, now: float) -> None:
        """static and kueue: oldest first, each waiting job starts on the first class in its list with room
        for the whole gang (a job that does not fit does not hold up the rest). A pass looks at the queue
        only as far as some class still has free devices.

        The queue is walked per `fit_key` group, not job by job: the next job in queue order among the
        groups that could fit the free room. Room only shrinks during a pass, so a group that does not fit,
        or whose placement failed, stays out for the rest of the pass (its later jobs would fail alike); a
        pass costs (groups x jobs started), not the queue's length."""
        if not (self.freed or self.arrived):
            return
        groups: dict[tuple[tuple[str, ...], int, int], list[tuple[Any, ...]]]
        if self.freed:
            groups = self.by_fit
        else:  # nothing freed: only the new arrivals can start
            groups = defaultdict(list)
            for k in sorted(self.keys[j.id] for j in self.arrived if j.id in self.keys):
                groups[self.fit_key(self.queue[k[2]])].append(k)
        room = self.room()
        at = dict.fromkeys(groups, 0)
        out: set[tuple[tuple[str, ...], int, int]] = set()
        while True:
            best = None
            for g, keys in groups.items():
                if g in out:
                    continue
                if at[g] >= len(keys) or not _fits(room, g):
                    out.add(g)
                elif best is None or keys[at[g]] < groups[best][at[best]]:
                    best = g
            if best is None:
                return
            keys = groups[best]
            k = keys[at[best]]
            job = self.queue[k[2]]
            classes, replicas, per = best
            flavors = [c for c in classes if room[c][0] >= replicas * per and room[c][1] >= per]
            result = place(Request(f"{NAMESPACE}/{job.id}", [Alternative(c, per) for c in flavors], replicas),
                           self.current_fleet())
            if result.chosen is None:
                out.add(best)
                continue
            c = result.chosen
            self.start(job, c.device_class, c.region, c.nodes, per, now)  # leaves self.by_fit's lists
            if at[best] < len(keys) and keys[at[best]] == k:
                at[best] += 1  # a list of this pass's own
            room = self.room()

    # --- heterojob ------------------------------------------------------------------------------------

    def request(self, job: TraceJob, replicas: int | None = None) -> Request:
        key = (job.id, replicas)
        if key not in self.requests:
            self.requests[key] = self._request(job, replicas)
        return self.requests[key]

    def _request(self, job: TraceJob, replicas: int | None) -> Request:
        per = self.shape(job)[1]
        rel = self.rel(job)
        listed = [c for c in sorted(rel, key=lambda c: (-rel[c], c)) if rel[c] >= self.config.within]
        return Request(f"{NAMESPACE}/{job.id}", [Alternative(c, per) for c in listed],
                       replicas or self.shape(job)[0], priority=job.priority, created=self.arrival(job))

    def candidates(self) -> list[TraceJob]:
        """The queue a pass plans: the first `lookahead` jobs in order, then the first that fit free room;
        when no room was freed and nobody was promoted, only the new arrivals (the rest did not fit before
        and nothing changed for them)."""
        if not (self.freed or self.promoted):
            return [j for j in self.arrived if j.id in self.queue]
        n = self.config.lookahead
        head = self.order_list[:n]
        if len(self.order_list) > n:  # the first `n` beyond the head that fit, from each fitting group
            room = self.room()
            extra: list[tuple[Any, ...]] = []
            for g, keys in self.by_fit.items():
                if keys and _fits(room, g):
                    i = bisect.bisect_right(keys, head[-1]) if head else 0
                    extra.extend(keys[i:i + n])
            head += sorted(extra)[:n]
        return [self.queue[k[2]] for k in head]

    def place_heterojob(self, now: float) -> None:
        """The operator's policy and planner (`engine.admission.plan_with_policy`: queue order, class choice
        by expected completion, then `plan_queue`), applied at once: placements start, victims and lenders
        checkpoint (`save_s`) and the job starts where the plan put it. Then the upgrade moves
        `engine.policy.upgrades` proposes, each onto room found before the job is stopped."""
        if not (self.freed or self.arrived or self.promoted):
            return
        # what the operator knows too: the queue's length in devices decides whether levels displace
        self.knowledge.promoted_displace = queueing.promoted_displacing(self.waiting_devices, self.config.devices,
                                                                        self.config.queue)
        self.knowledge.displace_by_level = queueing.displacing(self.waiting_devices, self.config.devices,
                                                               self.config.queue)
        pool = self.candidates()
        if not pool:
            if self.freed and self.config.upgrades:
                self.upgrade(now, frozenset())
            return
        fleet = self.current_fleet()
        holders = self.holders()
        if not any(self.room()[c][0] for c in CLASSES):  # nothing free: only displacement helps
            ranks = [engine_policy.waiting_rank(self.request(j), now, self.knowledge, self.config.queue, self.memo)
                     for j in pool]  # `rank`, as the policy reads it
            top = max(ranks)
            min_runtime = self.config.min_runtime_s
            ranked = engine_policy.ranked_holders(holders, now, self.knowledge, self.config.queue, self.memo)
            if not any(h.priority < top and now - h.since >= min_runtime for h in ranked):
                return
            # no job could disturb anyone even on every class it lists: then on the classes the policy keeps
            # of them neither (`may_act` of the narrowed queue is False too), and with nothing free no upgrade
            # moves either, so the pass would do nothing
            if not planner.may_act([ranking.ranked_request(self.request(j), rank, None, self.memo)
                                    for j, rank in zip(pool, ranks, strict=True)], ranked, fleet, now, self.settings):
                return
        by_key = {f"{NAMESPACE}/{j.id}": j for j in pool}
        # `planner.plan_with_policy`, without planning a queue in which no job can start or disturb anyone
        prepared = engine_policy.prepare([self.request(j) for j in pool], holders, fleet, now, self.knowledge,
                                         self.config.queue, self.settings.min_runtime_s, self.memo)
        if planner.may_act(prepared.queue, prepared.holders, fleet, now, self.settings):
            plan = planner.plan_queue(prepared.queue, prepared.holders, fleet, now, self.settings)
        else:
            plan = planner.Plan()
        requests = {r.job: r for r in prepared.queue}
        for admission in sorted(plan.admissions.values(), key=lambda a: self.keys[by_key[a.job].id]):
            job, c = by_key[admission.job], admission.candidate
            if admission.outcome == Outcome.PLACED:
                assert c is not None
                self.start(job, c.device_class, c.region, c.nodes, c.per_replica, now)
            elif admission.disruptions:
                for d in admission.disruptions:
                    self.disturb(d, now)
                chosen = place(requests[admission.job], self.current_fleet()).chosen
                if chosen is not None:  # where the plan put it, unless a shrunk job landed elsewhere
                    self.start(job, chosen.device_class, chosen.region, chosen.nodes, chosen.per_replica, now,
                               pause=self.config.save_s)
        if self.config.upgrades:
            self.upgrade(now, prepared.waiting_for)

    def holders(self) -> list[Holder]:
        """Running jobs as the planner sees them; a grown one carries its trace size as its base."""
        out = []
        for r in self.running.values():
            h = self.holder_of.get(r.token)
            if h is None:
                key = f"{NAMESPACE}/{r.job.id}"
                replicas, per = self.shape(r.job)
                base = Request(key, [Alternative(r.cls, per)], replicas, allowed_regions=(r.region,),
                               priority=r.job.priority) if r.replicas > replicas else None
                h = self.holder_of[r.token] = Holder(key, r.job.priority, r.started, Allocation(
                    r.cls, r.per_node, NAMESPACE, r.cls, r.region), base, None, False)
            out.append(h)
        return out

    def upgrade(self, now: float, waiting_for: frozenset[str]) -> None:
        """Move running jobs up onto faster room no waiting job chose to wait for, when the move pays."""
        room = self.room()
        if not any(room[c][0] for c in CLASSES if c not in waiting_for):
            return  # `upgrades` proposes moves onto free devices only, and none are free
        allowed = {f"{NAMESPACE}/{r.job.id}": r.job.classes for r in self.running.values()}
        for u in engine_policy.upgrades(self.holders(), self.current_fleet(), now, self.knowledge, waiting_for,
                                        self.cost, self.config.min_runtime_s, allowed, self.config.probe_share,
                                        self.memo):
            run = self.running[int(u.job.split("/", 1)[1])]
            replicas, per = self.shape(run.job)
            chosen = place(Request(u.job, [Alternative(u.to_class, per)], replicas), self.current_fleet()).chosen
            if chosen is None:
                continue  # the devices are free but not in one region or node: no room held, no move
            self.checkpoint_and_stop(run, now)  # make-before-break: the room was found before
            self.moves[run.job.id].append(now)
            self.upgrades += 1
            self.start(run.job, chosen.device_class, chosen.region, chosen.nodes, per, now, pause=self.config.save_s)

    def disturb(self, d: Disruption, now: float) -> None:
        """A victim checkpoints and requeues; a lender checkpoints and restarts at its admitted size."""
        run = self.running[int(d.job.split("/", 1)[1])]
        self.checkpoint_and_stop(run, now)
        self.moves[run.job.id].append(now)
        if d.kind == DisruptionKind.PREEMPT:
            self.preemptions += 1
            self.preempted_device_s += run.devices * (2 * self.config.save_s + self.config.restore_s)
            self.push(now + self.config.save_s, "requeue", run.job)
            return
        self.reclaims += 1
        replicas, per = self.shape(run.job)
        base = Request(d.job, [Alternative(run.cls, per)], replicas, allowed_regions=(run.region,),
                       priority=run.job.priority)
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
        top = max((p for p, n in self.priorities.items() if n), default=None)  # planner.top_priority, kept up
        for run in self.by_id():
            job = run.job
            base = self.shape(job)[0]
            if run.replicas <= base and (top is not None and top >= job.priority
                                         or not self.region_free().get((run.cls, run.region))):
                continue  # at most its admitted size (`most` is never below it): it grows no further, see below
            most = job.max_replicas(run.cls) if self.shape(job)[0] == 1 and job.gpus <= 8 else self.shape(job)[0]
            if self.config.growth_efficiency > 0 and most > base:
                most = completion.growth_limit(base, most, self.measured_sizes[(job.id, run.cls)],
                                               self.config.growth_efficiency)
            if now < run.started:
                continue  # still restoring from its last move
            if run.replicas > most:  # grown past where it scales well: back to the last good size
                freed = self.current_fleet(without=run)
                change = migration.Resize(migration.GROW, most, f"scaling below {self.config.growth_efficiency:g} "
                                          f"at {run.replicas} replicas: {run.replicas} -> {most}")
            else:
                if run.replicas >= most:
                    continue  # at its largest
                if top is not None and top >= job.priority:
                    continue  # `growth` lends nothing while a job of its priority or above waits
                if not self.region_free().get((run.cls, run.region)):
                    continue  # no device free beside its own there: `growth` finds no larger size
                freed = self.current_fleet(without=run)
                target = planner.growth(self.request(job, run.replicas), top, freed, run.replicas, most, run.cls,
                                        run.region)
                change = migration.resize(run.replicas, base, most, None, None, now, 0.0, 0.0, target)
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
            result = place(Request(f"{NAMESPACE}/{job.id}", [Alternative(run.cls, self.shape(job)[1])],
                                   change.replicas, allowed_regions=(run.region,)), freed)
            if result.chosen is None:
                continue
            self.checkpoint_and_stop(run, now)
            self.moves[job.id].append(now)
            self.resizes += 1
            c = result.chosen
            self.start(job, c.device_class, c.region, c.nodes, c.per_replica, now, pause=self.config.save_s)
            if change.replicas > self.shape(job)[0]:  # a trial size: judge its measured scaling once it may move
                self.wakes[job.id] = wake = now + self.rules.cooldown_s
                self.push(wake, "wake", job.id)

    def by_id(self) -> list[_Run]:
        """The running jobs by job id (a list of their own: kept until devices are taken or given back)."""
        return self._memo("by_id", lambda: sorted(self.running.values(), key=lambda r: r.job.id))

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
        report = Report(self.policy, len(self.finished), self.useful_s / (total * makespan),
                        statistics.fmean(jcts) if jcts else 0.0,
                        jcts[min(len(jcts) - 1, int(0.99 * len(jcts)))] if jcts else 0.0, makespan / 3600,
                        self.lost_s / 3600, self.failures, self.restarts, self.resizes, self.preemptions,
                        self.reclaims, self.max_lost, in_window / (total * (hi - lo)) if hi > lo else 0.0,
                        statistics.fmean(steady) if steady else 0.0, (lo / 3600, hi / 3600),
                        timeline(self.busy_points, total, first, end), jcts, by_job, upgrades=self.upgrades,
                        preempted_device_h=self.preempted_device_s / 3600)
        if self.config.window:
            report.window = self.window_report(*self.config.window)
        return report

    def window_report(self, a: int, b: int) -> Window:
        inside = self.jobs[a:b]
        t0, t1 = self.arrival(inside[0]), self.arrival(inside[-1])
        span = max(t1 - t0, 1e-9)
        busy = sum(max(0.0, min(t, t1) - max(s, t0)) * b_ for (s, b_), (t, _) in
                   zip(self.busy_points, self.busy_points[1:], strict=False))
        useful = sum(u * max(0.0, min(e, t1) - max(s, t0)) / (e - s) for s, e, u in self.segments if e > s)
        ends = sorted(self.finished.values())
        starts = sorted(self.arrival(j) for j in self.jobs)

        def in_system(t: float) -> int:
            return bisect.bisect_right(starts, t) - bisect.bisect_right(ends, t)

        done = [j for j in inside if j.id in self.finished]
        quarter = max(1, len(inside) // 4)
        return Window(statistics.fmean((self.finished[j.id] - self.arrival(j)) / 3600 for j in done) if done else 0.0,
                      len(done), busy / (self.config.devices * span), useful / (self.config.devices * span),
                      statistics.fmean(self.device_s[j.id] / 3600 for j in done) if done else 0.0,
                      in_system(t0), in_system(t1),
                      statistics.fmean(in_system(self.arrival(j)) for j in inside[:quarter]),
                      statistics.fmean(in_system(self.arrival(j)) for j in inside[-quarter:]),
                      len(inside) - quarter)


def gang_shape(devices: int, per_node: int) -> tuple[int, int]:
    """(replicas, devices per replica) for a job of `devices`: one replica up to a node's devices, else the
    fewest equal replicas that each fit a node (a gang's replicas are alike). The job keeps its device count:
    12 GPUs on 8-device nodes are 2 x 6, not 2 whole nodes; a prime count past a node runs one per replica."""
    if devices <= per_node:
        return 1, devices
    replicas = math.ceil(devices / per_node)
    while devices % replicas:
        replicas += 1
    return replicas, devices // replicas


def _fits(room: dict[str, tuple[int, int]], key: tuple[tuple[str, ...], int, int]) -> bool:
    """Whether `_room` leaves a class of `key` (classes, replicas, devices per replica) room enough."""
    classes, replicas, per = key
    return any(room[c][0] >= replicas * per and room[c][1] >= per for c in classes)


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
    """Replay `jobs` under `policy` ("static", "kueue" or "heterojob"). A job whose gang cannot fit one region
    of a class is refused up front (it would wait forever while failures keep the replay's clock running)."""
    most = config.nodes_per_class_region * config.devices_per_node
    too_big = [j.id for j in jobs if j.gpus > most]
    if too_big:
        raise ValueError(f"jobs {too_big[:5]}{'...' if len(too_big) > 5 else ''} ask for more than the {most} devices "
                         f"a region holds of a class (nodes_per_class_region x devices_per_node): drop them "
                         f"from the trace or replay a larger fleet")
    return _Replay(jobs, policy, config).run()

