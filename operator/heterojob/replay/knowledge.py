"""What the operator knows of each job in the replay, as its status would carry it: attained service and when
it last waited (`engine.basics.queueing.Service`), the speeds it measured where it ran, its work done, and what the
fleet measured (`engine.queue.estimates`: the jobs alike pooled, by `spec.workload` where jobs name their type, else
by the fingerprint of their spec, which for a trace job is its command line, i.e. its type, and its size;
the cells nobody measured filled by the low-rank model, each with a confidence). The policy never reads a
job's total steps or its speed on a class it has not run on."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from heterojob.engine.basics import queueing
from heterojob.engine.queue import completion, estimates
from heterojob.engine.queue import policy as engine_policy
from heterojob.replay.traces import TraceJob
from heterojob.engine.queue.facts import Facts


class ReplayKnowledge:
    """`pooled`: jobs name their type as their workload (`spec.workload`), so a type's jobs share measured
    speeds at every size; without it jobs are pooled by their spec's fingerprint (type and size)."""

    def __init__(self, declared: dict[str, float], namespace: str, pooled: bool = True, estimating: bool = True
                 ) -> None:
        self.declared, self.namespace, self.pooled = declared, namespace, pooled
        self.estimating = estimating  # the fleet's estimates are built (heterojob; the baselines read none)
        self.promotions = 0  # runs a starvation promotion started
        self.turns: dict[int, int] = defaultdict(int)  # times each job was preempted (status.scheduling.preemptions)
        self.service: dict[int, queueing.Service] = {}
        self.measured: dict[int, dict[str, float]] = defaultdict(dict)
        # fingerprint (`engine.queue.estimates.fingerprint`) -> job -> its steps/s per device where it ran
        self.samples: dict[str, dict[int, dict[str, float]]] = defaultdict(dict)
        self.sizes: dict[int, int] = {}  # job -> its devices (its `row` of a workload's samples)
        self.sample_counts: dict[tuple[str, str], int] = defaultdict(int)
        self.total = 0  # samples taken in
        self.estimates = estimates.build(declared, {})
        self.measured_sizes: dict[tuple[int, str], dict[int, float]] = defaultdict(dict)  # steps/s per replicas
        self.work_s: dict[int, float] = defaultdict(float)  # reference seconds trained (estimated speeds)
        self.residual = completion.Residual()
        self.rels: dict[int, tuple[tuple[int, int], dict[str, float]]] = {}
        self.facts: dict[str, Facts] = {}  # what each job's status tells the operator
        self.knowledge = engine_policy.Knowledge(self.facts, self.residual)

    def rel(self, job: TraceJob) -> dict[str, float]:
        """Relative speed per class the job runs on: measured where it ran, elsewhere scaled by its workload's
        sheet (what the jobs of its type measured, `completion.sheet`), else by the declared throughput."""
        measured = self.measured.get(job.id, {})
        version = self.estimates.version
        cached = self.rels.get(job.id)
        if cached is None or cached[0] != (len(measured), version):
            sheet = self.estimates.of(self.row(job)).speed
            cached = self.rels[job.id] = ((len(measured), version), completion.speeds(sheet, measured, job.classes))
        return cached[1]

    def key(self, job: TraceJob) -> str:
        """What pools the job with others (`engine.queue.estimates.fingerprint`): its type as its workload, or its
        command line (a trace job's command is its type's) and size."""
        return estimates.fingerprint(job.job_type if self.pooled else None, command=(job.job_type,), size=job.gpus)

    def row(self, job: TraceJob) -> str:
        """The job's row of the estimates: its `key`, a workload's at the job's size (`estimates.sized`: a model's
        speed ratios depend on its size; another size's measurements stand in until its own are taken)."""
        return estimates.sized(self.key(job), job.gpus)

    def waits(self, job: TraceJob, now: float) -> float:
        """The job (re)enters the queue: its starvation clock starts; its run time since its last promotion."""
        old = self.service.get(job.id) or queueing.Service()
        self.service[job.id] = queueing.Service(old.attained_device_s, now, run_s=old.run_s)
        self.refresh(job)
        return old.run_s

    def stopped(self, job: TraceJob, now: float) -> None:
        """A placement of the job ended (done, moved, resized, preempted, failed): its starvation clock starts
        there, as status.scheduling.waitingSince does, so a move that lands at once is no promotion."""
        svc = self.service.get(job.id)
        if svc is not None:
            self.service[job.id] = queueing.Service(svc.attained_device_s, now, svc.promoted, svc.run_s)

    def preempted(self, job: TraceJob) -> None:
        """The job was preempted (a turn: `QueueSettings.max_turns`)."""
        self.turns[job.id] += 1
        self.refresh(job)

    def starts(self, job: TraceJob, cls: str, replicas: int, raw: float, now: float,
               queue: queueing.QueueSettings | None, others: Callable[[], Iterable[TraceJob]],
               learned: bool = True) -> None:
        """The job starts on `cls` at `replicas` (steps/s `raw`); `queue`: heterojob's order (its service
        counts), else None; `others`: the jobs a new sample of its type refreshes; `learned`: its speed there
        is known at once (the informed mode), else only through `learned` once it has trained a while."""
        if queue is not None:
            self.service[job.id] = queueing.on_start(self.service[job.id], now, queue)
            self.promotions += int(self.service[job.id].promoted)
        if learned:
            self.learned(job, cls, replicas, raw, others)
        else:
            self.refresh(job)

    def learned(self, job: TraceJob, cls: str, replicas: int, raw: float,
                others: Callable[[], Iterable[TraceJob]]) -> None:
        """The job's steps/s on `cls` at `replicas` reaches what the operator knows (the SDK's step metric)."""
        if cls not in self.measured[job.id] and self.estimating:
            self.pool(job, cls, others)
        self.measured[job.id][cls] = job.rate(cls)  # the SDK reports steps/s once it trains there
        self.measured_sizes[(job.id, cls)][replicas] = raw  # ... at the size it runs at
        self.refresh(job)

    def trained(self, job: TraceJob, cls: str, seconds: float, devices: int) -> None:
        """The job trained `seconds` on `devices` of `cls`: its work and attained service grow."""
        rel = self.rel(job)
        self.work_s[job.id] += seconds * rel.get(cls, 0.0)
        svc = self.service.get(job.id, queueing.Service())
        self.service[job.id] = queueing.Service(svc.attained_device_s + seconds * devices, svc.waiting_since,
                                                svc.promoted, svc.run_s + seconds)
        self.refresh(job)

    def pool(self, job: TraceJob, cls: str, others: Callable[[], Iterable[TraceJob]]) -> None:
        """A job measured its speed on a class for the first time: the fleet's estimates take it in. They are
        built again (and the facts of the jobs in the system with them) when a cell (fingerprint x class) gets
        its first sample or the fleet's sample count reaches a power of two: a cell is a median, which later
        samples barely move (the operator builds them afresh when its jobs' measurements change)."""
        key = self.key(job)
        self.samples[key].setdefault(job.id, {})[cls] = job.rate(cls) / job.gpus  # per device
        self.sizes[job.id] = job.gpus
        n = self.sample_counts[(self.row(job), cls)] = self.sample_counts[(self.row(job), cls)] + 1
        self.total += 1
        if n > 1 and self.total & (self.total - 1):
            return  # a cell's first sample, or the fleet's sample count at a power of two: O(cells + log n) fits
        rows: dict[str, list[dict[str, float]]] = defaultdict(list)  # each job's samples in its `row`
        for k, jobs in self.samples.items():
            for j, sample in jobs.items():
                rows[estimates.sized(k, self.sizes[j])].append(sample)
        self.estimates = estimates.build(self.declared, rows, self.estimates.version + 1)
        for other in others():
            if other.id != job.id:
                self.refresh(other)

    def refresh(self, job: TraceJob) -> None:
        """The job's facts as its status would carry them (attained service, speeds, work done)."""
        self.facts[f"{self.namespace}/{job.id}"] = Facts(
            self.service.get(job.id, queueing.Service()), self.rel(job), self.work_s[job.id],
            frozenset(self.measured.get(job.id, ())), self.turns.get(job.id, 0),
            self.estimates.of(self.row(job)).sure())
