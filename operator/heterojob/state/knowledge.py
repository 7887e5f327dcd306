"""What the operator knows of each job for `engine.queue.policy`, read from the jobs' statuses.

Step of the pipeline: before admission plans (`engine.queue.admission.plan_one` with the queue policy), this
builds `engine.queue.policy.Knowledge` from the cache, which follows each job's `status.scheduling`:
- attained service and the starvation clock (`queueing.Service`): device-seconds over its ended
  placements plus, for a running job, its current placement since `placement.since`; so a restarted
  operator, or a job's next run, counts on from where it was and running jobs may be displaced by level;
- the job's relative speed per class (`completion.speeds`): its own measured steps/s where it ran
  (`status.scheduling.speeds`, from its checkpoint acks); elsewhere what the fleet measured
  (`engine.queue.estimates`, `fleet_estimates`): the jobs of its namespace alike (its `spec.workload`, else the
  fingerprint of its template and size, `Entry.fingerprint`), finished jobs included while they exist, and
  the low-rank model over every fingerprint for the classes none of them ran on; each with a confidence (a
  sure class is not probed, `Facts.sure`). Nothing measured: the AcceleratorClasses' declared throughput;
- its work done: seconds run per class times its relative speed there (reference seconds);
- the completed jobs' work (`completion.Residual`): every Succeeded HeteroJob this operator has seen, the
  newest `HISTORY_MAX`. It is kept in memory and rebuilt at start from the Succeeded jobs still in the API
  server (the controller syncs every job before placing any), so what survives a restart is exactly the
  completed jobs not yet deleted.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from heterojob.api.scheduling import Scheduling
from heterojob.engine.basics import queueing
from heterojob.engine.queue import allocation, completion, estimates, guidance, ranking
from heterojob.engine.disruption.holders import Holder
from heterojob.engine.capacity.fleet import Fleet
from heterojob.engine.placing.placement import Request
from heterojob.engine.queue.facts import Facts
from heterojob.engine.queue.policy import Knowledge, devices_by_class
from heterojob.state.cache import Cache, Entry
from heterojob.api.times import timestamp

HISTORY_MAX = 5000  # completed jobs' work kept for the residual estimate
GUIDE_S = 600.0  # past the knee the guide (`engine.queue.guidance`) is built again once this long has passed


def measured_rates(scheduling: Scheduling | None) -> dict[str, float]:
    """Steps/s per device class from the job's measurements, at one size so classes compare: the size
    measured on the most classes (then the smallest); a class measured only at other sizes is scaled to it
    linearly by replicas."""
    if scheduling is None or not scheduling.speeds:
        return {}
    by_size: dict[int, dict[str, float]] = {}
    for m in scheduling.speeds:
        by_size.setdefault(m.replicas, {})[m.device_class] = m.steps_per_second
    size = min(by_size, key=lambda r: (-len(by_size[r]), r))
    out = dict(by_size[size])
    for r, rates in sorted(by_size.items()):
        for cls, rate in rates.items():
            out.setdefault(cls, rate * size / r)
    return out


def sizes_on(scheduling: Scheduling | None, device_class: str) -> dict[int, float]:
    """Measured steps/s per replica count on one class (what `completion.growth_limit` reads)."""
    if scheduling is None:
        return {}
    return {m.replicas: m.steps_per_second for m in scheduling.speeds if m.device_class == device_class}


def per_device(scheduling: Scheduling | None, devices: Mapping[str, int]) -> dict[str, float]:
    """One job's measured steps/s per device on each class it ran on (the mean over its sizes there), so
    jobs of one workload at different sizes compare; `devices`: its devices per replica on each class."""
    if scheduling is None:
        return {}
    by_class: dict[str, list[float]] = {}
    for m in scheduling.speeds:
        by_class.setdefault(m.device_class, []).append(
            m.steps_per_second / (m.replicas * max(1, devices.get(m.device_class, 1))))
    return {c: sum(vs) / len(vs) for c, vs in by_class.items()}


def samples_of(entries: Mapping[str, Entry | Seen], memo: dict[str, tuple[object, dict[str, float]]] | None = None
               ) -> dict[str, list[dict[str, float]]]:
    """namespace/fingerprint -> its jobs' measured steps/s per device per class (`per_device`); `memo`: job ->
    (its status.scheduling object, its sample), so an unchanged status is not read again."""
    samples: dict[str, list[dict[str, float]]] = {}
    for key, e in entries.items():
        if e.fingerprint and e.scheduling is not None and e.scheduling.speeds:
            known = memo.get(key) if memo is not None else None
            if known is not None and known[0] is e.scheduling:
                sample = known[1]
            else:
                sample = per_device(e.scheduling, e.per_replica)
                if memo is not None:
                    memo[key] = (e.scheduling, sample)
            if sample:
                samples.setdefault(f"{key.split('/', 1)[0]}/{e.fingerprint}", []).append(sample)
    return samples


def fleet_estimates(entries: Mapping[str, Entry | Seen], declared: Mapping[str, float]) -> estimates.Estimates:
    """What the fleet measured (`engine.queue.estimates.build` over `samples_of`)."""
    return estimates.build(declared, samples_of(entries))


def estimate_of(key: str, e: Entry | Seen | None, known: estimates.Estimates) -> estimates.Estimate:
    """A job's estimate: its fingerprint's row, else the model's guess for a job nothing is known of."""
    return known.of(f"{key.split('/', 1)[0]}/{e.fingerprint}" if e is not None and e.fingerprint else None)


def facts_of(scheduling: Scheduling | None, classes: Iterable[str], declared: Mapping[str, float],
             created: float, sure: frozenset[str] = frozenset()) -> Facts:
    """One job's `Facts` from its status.scheduling; `classes`: those it may run on; `declared`: the classes'
    declared throughput, or its estimated speeds (`estimate_of`); `sure`: the classes whose estimate is
    trusted."""
    measured = measured_rates(scheduling)
    classes = [c for c in dict.fromkeys(classes)]
    rel = completion.speeds(declared, measured, classes)
    sure = frozenset(c for c in sure if c in rel)
    if scheduling is None:
        return Facts(queueing.Service(0.0, created), rel, sure=sure)
    work = sum(seconds * rel.get(cls, 0.0) for cls, seconds in scheduling.run_seconds.items())
    service = queueing.Service(scheduling.attained_device_seconds,
                               timestamp(scheduling.waiting_since) or created, scheduling.promoted)
    return Facts(service, rel, work, frozenset(c for c in measured if c in rel), scheduling.preemptions, sure)


class Seen(NamedTuple):
    """What `Knower` reads of a cache entry, copied (`Knower.view`) so a plan in another thread reads a
    snapshot while the cache moves on."""

    scheduling: Scheduling | None
    classes: tuple[str, ...]
    fingerprint: str | None
    per_replica: Mapping[str, int]
    created: float
    succeeded: bool


class Knower:
    """Builds `Knowledge` for each plan; keeps the completed jobs' work between plans, and each job's `Facts`
    while what they are made of is unchanged (the same object: `engine.queue.ranking.Memo` keeps per object)."""

    def __init__(self, cache: Cache, history_max: int = HISTORY_MAX) -> None:
        self.cache = cache
        self.history_max = history_max
        self._done: OrderedDict[str, float] = OrderedDict()  # job -> its total work (reference seconds)
        self._residual: completion.Residual | None = None
        self._facts: dict[str, tuple[tuple[object, ...], Facts]] = {}  # job -> what its facts were made of, them
        self.last: Knowledge | None = None  # the last `knowledge`
        self._guide: tuple[float, guidance.Guide | None] | None = None  # when the last guide was built, and it
        # the fleet's estimates and the measurements they were built of (built again when those change)
        self._estimates: tuple[dict[str, list[dict[str, float]]], Mapping[str, float], estimates.Estimates] | None \
            = None
        self._samples: dict[str, tuple[object, dict[str, float]]] = {}  # `samples_of`'s memo

    def speeds(self, entries: Mapping[str, Entry | Seen], declared: Mapping[str, float]) -> estimates.Estimates:
        """`fleet_estimates`, the same object while the measurements and the declared throughput are unchanged."""
        samples = samples_of(entries, self._samples)
        if len(self._samples) > 2 * len(entries) + 1000:
            self._samples = {k: v for k, v in self._samples.items() if k in entries}
        last = self._estimates
        if last is not None and last[0] == samples and last[1] == declared:
            return last[2]
        built = estimates.build(declared, samples, (last[2].version + 1) if last else 0)
        self._estimates = (samples, dict(declared), built)
        return built

    def view(self) -> dict[str, Seen]:
        """What `knowledge` reads of every entry, copied now (cheap: on the event loop, before a plan)."""
        return {k: Seen(e.scheduling, e.classes, e.fingerprint, e.per_replica, e.created, e.succeeded)
                for k, e in self.cache.entries.items()}

    def residual(self, declared: Mapping[str, float], known: estimates.Estimates | None = None,
                 entries: Mapping[str, Seen | Entry] | None = None) -> completion.Residual:
        """The completed jobs' work, with any job that succeeded since the last call added (`known`: the
        fleet's estimates, else the declared throughput; `entries`: a `view`, else the cache's)."""
        for key, e in (self.cache.entries if entries is None else entries).items():
            if e.succeeded and key not in self._done:
                sheet = estimate_of(key, e, known).speed if known is not None else declared
                self._done[key] = facts_of(e.scheduling, e.classes, sheet, e.created).work_s
                self._residual = None
                while len(self._done) > self.history_max:
                    self._done.popitem(last=False)
        if self._residual is None:
            self._residual = completion.Residual(self._done.values())
        return self._residual

    def knowledge(self, fleet: Fleet, waiting: Iterable[Request], holders: Iterable[Holder],
                  queue: queueing.QueueSettings, entries: Mapping[str, Seen | Entry] | None = None,
                  now: float | None = None, memo: ranking.Memo | None = None) -> Knowledge:
        """`Knowledge` for one plan; whether promoted jobs displace (`queueing.promoted_displacing`) is
        judged on the devices the whole waiting queue asks for against the fleet's. `entries`: a `view` taken
        before (the plan's thread reads that), else the cache's entries now. `now`: the plan's time; with it,
        past the knee, the fluid optimum's prices (`engine.queue.guidance`, over the waiting and running jobs) guide
        which classes each waiting job takes, built again every `GUIDE_S`. `memo`: the plan's (the devices per
        class are counted once per fleet, not on every node at every cycle)."""
        entries = self.cache.entries if entries is None else entries
        waiting = list(waiting)
        asked = sum(r.replicas * r.alternatives[0].per_replica for r in waiting if r.alternatives)
        _, capacity = devices_by_class(fleet, memo)
        declared = {name: cls.throughput for name, cls in fleet.classes.items()}
        known = self.speeds(entries, declared)

        facts: dict[str, Facts] = {}
        for r in waiting:
            e = entries.get(r.job)
            classes = (e.classes if e is not None and e.classes else ()) or [a.device_class for a in r.alternatives]
            facts[r.job] = self._of(r.job, e.scheduling if e else None, classes, estimate_of(r.job, e, known),
                                    r.created)
        for h in holders:
            if h.job in facts:
                continue
            e = entries.get(h.job)
            classes = (e.classes if e is not None and e.classes else ()) or [h.allocation.device_class]
            facts[h.job] = self._of(h.job, e.scheduling if e else None, classes, estimate_of(h.job, e, known),
                                    e.created if e else 0.0)
        for job in [j for j in self._facts if j not in facts]:
            del self._facts[job]
        self.last = Knowledge(facts, self.residual(declared, known, entries), displace_by_level=True,
                              promoted_displace=queueing.promoted_displacing(asked, sum(capacity.values()), queue),
                              saturated=allocation.saturated(asked, sum(capacity.values()), queue.fill_above))
        if self.last.saturated and now is not None:  # past the knee: the fluid optimum's prices guide classes
            if self._guide is None or now - self._guide[0] >= GUIDE_S:
                self._guide = (now, guidance.guide(guidance.in_system(waiting, holders, now, self.last), capacity))
            self.last.guide = self._guide[1]
        return self.last

    def of_running(self, key: str, holder: Holder, fleet: Fleet) -> Knowledge | None:
        """What `knowledge` would say of one running job now (its facts from its entry; the completed jobs'
        work as the last `knowledge` counted it), for its own upgrade check on its pass; None before any
        `knowledge`. Cheap: one job, not the fleet's."""
        last = self.last
        if last is None:
            return None
        e = self.cache.entries.get(key)
        declared = {name: cls.throughput for name, cls in fleet.classes.items()}
        known = self._estimates[2] if self._estimates is not None and self._estimates[1] == declared else \
            estimates.build(declared, {})  # the last plan's estimates (one job's check reads no fleet)
        est = estimate_of(key, e, known)
        classes = (e.classes if e is not None and e.classes else ()) or [holder.allocation.device_class]
        facts = facts_of(e.scheduling if e else None, classes, est.speed, e.created if e else 0.0, est.sure())
        return Knowledge({key: facts}, last.residual, last.displace_by_level, last.promoted_displace,
                         saturated=last.saturated)

    def _of(self, job: str, scheduling: Scheduling | None, classes: Iterable[str], est: estimates.Estimate,
            created: float) -> Facts:
        """`facts_of`, the same `Facts` object as last time when made of equal inputs."""
        made = (scheduling, tuple(classes), est, created)
        known = self._facts.get(job)
        if known is not None:
            was = known[0]
            if (was[0] is scheduling or was[0] == scheduling) and (was[2] is est or was[1:] == made[1:]):
                return known[1]
        out = facts_of(scheduling, made[1], est.speed, created, est.sure())
        self._facts[job] = (made, out)
        return out
