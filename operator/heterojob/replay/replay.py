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
- `heterojob`: the operator's own scheduler cycle (`replay.scheduler`: `engine.queue.cycle.plan_cycle` over the
  whole waiting queue whenever `engine.queue.cycle.CycleTrigger` says a cycle is due, upgrade moves when free room
  grew), with the operator's queue order (`engine.basics.queueing`: `--queue-policy mlfq` or `fifo`) and
  completion-time estimates (`engine.queue.completion`: which classes a job takes now, from declared throughput
  and the job's measured speed, and upgrade moves that pay; past the knee the fluid optimum's prices,
  `engine.queue.guidance`, rebuilt every `guide_s`); it places, takes lent room back from grown
  jobs and preempts exactly as the operator's scheduler does, so the replay's speed is the operator's
  planning speed. A running job's growth, shrink, upgrade move and move off a failed node are
  `engine.execution.running.decide`'s (`replay.decisions`; the HeteroJob defaults: 600 s cooldown, 3 moves an hour,
  a disruption budget of 5): elastic jobs grow as far as `engine.queue.admission.growth` lends room, and a failed
  node's jobs restart at once off it, from their last periodic checkpoint. The policy never reads a job's total steps or its speed on a class it has not run on; it
  reads what jobs of its type (its `spec.workload`) measured where they ran (`engine.queue.completion.pooled`),
  as the operator does (`replay.knowledge`).

What the operator knows (`Config.knowledge`): `default` (a default deployment): a job's speed on a class
becomes known only once it has trained there for `learn_s` (the SDK's step metric over the operator's
`--steps-window`, plus a monitoring cycle), a job names no workload (`spec.workload` is opt-in:
`workloads=True` names each trace job's type), and jobs checkpoint only on demand (`periodic=True`: every
`checkpoint_s`); `informed`, the bound: every speed known at once where the job runs, every job names its
type as its workload and checkpoints every `checkpoint_s`.

A job with periodic checkpoints saves every `checkpoint_s` (saving takes `save_s`); a resize or preemption
checkpoints on demand (`save_s`) and the job restores (`restore_s`) where it lands. Device failures come at `mtbf_h` per
device, a node is repaired after `repair_h`.

Utilization = device-hours of useful training / (devices x makespan): work redone after a failure,
checkpoint saving and restoring are not useful; a grown job's devices all count (its throughput is Gavel's
measurement, see `traces`). Makespan runs from the first arrival to the last completion. The steady state
leaves out warm-up and drain: utilization between the 10th and 90th percentile arrival (each run's useful
work spread evenly over it) and the JCT of the jobs arriving in that window. With `window=(a, b)`
(Gavel's method: jobs a..b-1 of the trace), the run stops once those jobs are done and the report adds
their average JCT, the busy share and the useful share over their arrival span (useful: device-hours x
the job's speed on that class / its speed on its fastest class), their device-hours per job, and the jobs
in the system when the window opens and closes (`replay.metrics`). Same trace, seed and config: same
numbers.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from heterojob.engine.capacity.fleet import DeviceClass, Fleet, Node
from heterojob.replay.devices import Devices, Run
from heterojob.replay.fifo import Fifo
from heterojob.replay.knowledge import ReplayKnowledge
from heterojob.replay.metrics import Metrics
from heterojob.replay.report import Report
from heterojob.replay.scheduler import ReplayScheduler
from heterojob.replay.config import (
    DECLARED, K8S_EVICTION_S, NAMESPACE, POLICIES, REGIONS, Config,
)
from heterojob.replay.traces import CLASSES, TraceJob

def fleet(config: Config) -> Fleet:
    nodes = {}
    for region in REGIONS[:1 if config.cluster else config.regions]:
        for cls in CLASSES:
            per = config.devices_per_node
            sizes = ([per] * config.nodes_per_class_region if not config.cluster else
                     [min(per, config.per_class.get(cls, 0) - k) for k in range(0, config.per_class.get(cls, 0), per)])
            for i, size in enumerate(sizes):
                name = f"{region}-{cls}-{i:02d}"
                nodes[name] = Node(name, {"class": cls, "topology.kubernetes.io/region": region}, {cls: size})
    classes = {c: DeviceClass(c, c, {"class": c}, throughput=DECLARED[c]) for c in CLASSES}
    return Fleet(nodes, classes)


class _Replay:
    """The event loop: arrivals, completions, failures, repairs and timers in time order; after each event the
    policy's queue looks at what changed (`Fifo.place`, `ReplayScheduler.place`)."""

    namespace = NAMESPACE
    declared = DECLARED

    def __init__(self, jobs: Sequence[TraceJob], policy: str, config: Config) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}")
        self.jobs, self.policy, self.config = jobs, policy, config
        self.rng = random.Random(config.seed)
        self.base = fleet(config)
        self.devices = Devices(self.base)
        self.events: list[tuple[float, int, str, Any]] = []
        self.seq = 0
        self.progress = {j.id: 0.0 for j in jobs}  # steps in the last checkpoint
        self.arrived: list[TraceJob] = []  # since the last event
        self.freed: set[str] = set()  # classes that gained room since the last event (or a growth wake)
        self.metrics = Metrics(jobs, config.devices, self.arrival)
        self.known = ReplayKnowledge(DECLARED, NAMESPACE, pooled=config.named, estimating=policy == "heterojob")
        self.queue: Fifo | ReplayScheduler = ReplayScheduler(self) if policy == "heterojob" else Fifo(self)
        self.batched = policy == "heterojob"  # the baselines look after every event
        self.pending = set(range(*config.window)) if config.window else None
        self.by_position = {j.id: i for i, j in enumerate(jobs)}

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
        for name in sorted(self.base.nodes) if per_node_rate > 0 else ():  # mtbf_h = inf: no failures
            self.push(self.rng.expovariate(per_node_rate), "fail", name)
        first = min((self.arrival(j) for j in self.jobs), default=0.0)
        end = first
        metrics = self.metrics
        while self.events and len(metrics.finished) < len(self.jobs) and self.pending != set():
            now, _, kind, payload = heapq.heappop(self.events)
            if kind == "arrive" or kind == "requeue":
                self.enqueue(payload, now)
            elif kind == "finish":
                run = self.devices.running.get(payload[0])
                if run is None or run.token != payload[1]:
                    continue  # a completion of a run that a failure, resize or preemption ended
                self.credit(run, run.job.total_steps, now)
                self.progress[run.job.id] = run.job.total_steps
                self.stop(run, now)
                metrics.finished[run.job.id] = end = now
                self.known.residual.add(self.known.work_s[run.job.id])
                if self.pending is not None:
                    self.pending.discard(self.by_position[run.job.id])
            elif kind == "fail":
                self.fail(payload, now)
                self.push(now + config.repair_h * 3600, "repair", payload)
            elif kind == "repair":
                self.freed.add(self.devices.repair(payload))
                self.queue.room_freed()
                self.push(now + self.rng.expovariate(per_node_rate), "fail", payload)
            elif kind == "learn":  # the job's step rate on its class reached its status
                run = self.devices.running.get(payload[0])
                if run is not None and run.token == payload[1]:
                    self.known.learned(run.job, run.cls, run.replicas, run.raw, self.others)
                    self.freed.add(run.cls)  # its growth is judged on the measured figure (its status changed)
                    self.queue.room_freed()  # what the policy knows changed: the scheduler's trigger plans again
            elif kind == "wake":
                self.freed.update(CLASSES)  # a job's growth cooldown ended: look at growing it again
            # "timer": a waiting job's promotion; the scheduler's trigger says whether a cycle is due
            if self.batched and self.events and self.events[0][0] == now:
                continue  # events at one instant (a node's jobs restarting, a preemption's victims) are
                # planned in one cycle, as the operator's scheduler plans the events of one batch
            self.queue.place(now)
            self.freed.clear()
            self.arrived.clear()
            metrics.busy(now, self.devices.busy)
        metrics.promotions = self.known.promotions
        return metrics.report(self.policy, first, end, config.window)

    # --- jobs -----------------------------------------------------------------------------------------

    def enqueue(self, job: TraceJob, now: float) -> None:
        run_s = self.known.waits(job, now)
        self.queue.add(job, now, run_s)
        self.arrived.append(job)

    def start(self, job: TraceJob, cls: str, region: str, nodes: Sequence[str], per: int, now: float,
              pause: float = 0.0) -> None:
        per_node: dict[str, int] = defaultdict(int)
        for n in nodes:
            per_node[n] += per
        devices = sum(per_node.values())
        if self.progress[job.id] > 0:
            pause += self.config.restore_s
        raw = job.rate(cls, devices)
        period = self.config.period_s
        eff = raw if math.isinf(period) else raw * period / (period + self.config.save_s)
        self.seq += 1
        run = Run(job, cls, region, len(nodes), dict(per_node), now, now + pause, self.progress[job.id], raw, eff,
                  self.seq)
        self.devices.take(run)
        self.queue.remove(job)
        learn = self.config.learn_after_s if self.policy == "heterojob" else 0.0  # the baselines read none of it
        self.known.starts(job, cls, len(nodes), raw, now, self.config.queue if self.policy == "heterojob" else None,
                          self.others, learned=learn <= 0)
        if learn > 0:
            self.push(run.started + learn, "learn", (job.id, run.token))
        self.push(run.started + (job.total_steps - run.steps_at_start) / eff, "finish", (job.id, run.token))

    def others(self) -> list[TraceJob]:
        """The jobs a new measured speed of their workload refreshes (waiting and running)."""
        return [*self.queue.waiting.values(), *(r.job for r in self.devices.running.values())]

    def credit(self, run: Run, steps: float, now: float) -> None:
        """Count the run's training up to `steps` as useful; the job's work and attained service grow."""
        trained = self.metrics.trained(run, steps, now)
        if trained > 0:
            self.known.trained(run.job, run.cls, trained, run.devices)

    def stop(self, run: Run, now: float) -> None:
        self.known.stopped(run.job, now)
        self.devices.give_back(run)
        self.metrics.held(run, now)
        self.freed.add(run.cls)
        if isinstance(self.queue, ReplayScheduler):
            self.queue.stopped(run)
            self.queue.room_freed()

    def checkpoint_and_stop(self, run: Run, now: float) -> None:
        """An on-demand checkpoint (resize, preemption, upgrade): nothing is lost, the save takes `save_s`."""
        done = run.done(now)
        self.credit(run, done, now)
        self.progress[run.job.id] = done
        self.stop(run, now)

    def fail(self, node: str, now: float) -> None:
        self.metrics.failures += 1
        config = self.config
        for run in self.devices.fail(node):
            if isinstance(self.queue, ReplayScheduler) and not self.queue.running.fault(run, node, now):
                continue  # `engine.execution.running.decide` keeps it there (it cannot: a NotReady node moves its jobs)
            ran = max(0.0, now - run.started)
            done = run.done(now)
            period = config.period_s
            periods = 0 if math.isinf(period) else math.floor(ran / (period + config.save_s))
            saved = min(done, run.steps_at_start + periods * period * run.raw) if periods else run.steps_at_start
            self.credit(run, saved, now)
            self.metrics.lost((done - saved) / run.raw, run.devices)
            self.progress[run.job.id] = saved
            self.stop(run, now)
            self.metrics.restarts += 1
            delay = config.recovery_s if self.policy == "heterojob" else K8S_EVICTION_S
            self.push(now + delay, "requeue", run.job)
        self.queue.room_freed()  # the fleet changed


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


def replay(jobs: Sequence[TraceJob], policy: str, config: Config) -> Report:
    """Replay `jobs` under `policy` ("static", "kueue" or "heterojob"). A job whose gang cannot fit one region
    of a class is refused up front (it would wait forever while failures keep the clock running)."""
    most = config.largest_gang
    too_big = [j.id for j in jobs if j.gpus > most]
    if too_big:
        raise ValueError(f"jobs {too_big[:5]}{'...' if len(too_big) > 5 else ''} ask for more than the {most} devices "
                         f"a region holds of a class (nodes_per_class_region x devices_per_node): drop them "
                         f"from the trace or replay a larger fleet")
    return _Replay(jobs, policy, config).run()
