"""The replay's baselines, `static` and `kueue`: oldest first within a priority, each waiting job starts on
the first class of its list with room for its whole gang (a job that does not fit does not hold up the
rest); no migration, resize or preemption."""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Any

from heterojob.engine.placing.placement import Alternative, Request, place
from heterojob.replay.devices import fits
from heterojob.replay.traces import TraceJob

from heterojob.replay.simulation import Simulation

FitKey = tuple[tuple[str, ...], int, int]


class Fifo:
    """The waiting jobs in queue order, and grouped by what decides whether a job could start on the free
    room (`fit_key`)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.waiting: dict[int, TraceJob] = {}
        self.order_list: list[tuple[Any, ...]] = []  # the waiting jobs' keys, in queue order
        self.by_fit: dict[FitKey, list[tuple[Any, ...]]] = defaultdict(list)
        self.fit_keys: dict[int, FitKey] = {}
        self.keys: dict[int, tuple[Any, ...]] = {}

    def add(self, job: TraceJob, now: float, run_s: float) -> None:
        self.remove(job)
        self.waiting[job.id] = job
        self.keys[job.id] = k = (-job.priority, self.sim.arrival(job), job.id)
        bisect.insort(self.order_list, k)
        bisect.insort(self.by_fit[self.fit_key(job)], k)

    def remove(self, job: TraceJob) -> None:
        self.waiting.pop(job.id, None)
        k = self.keys.pop(job.id, None)
        if k is not None:
            for keys in (self.order_list, self.by_fit[self.fit_key(job)]):
                i = bisect.bisect_left(keys, k)
                if i < len(keys) and keys[i] == k:
                    del keys[i]

    def room_freed(self) -> None:
        """The classes that gained room are the replay's `freed`."""

    def fit_key(self, job: TraceJob) -> FitKey:
        """(classes it may start on, replicas, devices per replica): what `fits` and a pass's placement
        read of a waiting job, so jobs with equal keys fit, or do not, alike."""
        key = self.fit_keys.get(job.id)
        if key is None:
            key = self.fit_keys[job.id] = (tuple(self.flavors(job)), *self.sim.shape(job))
        return key

    def flavors(self, job: TraceJob) -> list[str]:
        if self.sim.policy == "static":
            return [job.wants]
        rest = sorted((c for c in job.classes if c != job.wants), key=lambda c: (-self.sim.declared[c], c))
        return [job.wants, *rest]

    def place(self, now: float) -> None:
        """Each waiting job starts on the first class in its list with room for the whole gang. A pass looks
        at the queue only as far as some class still has free devices.

        The queue is walked per `fit_key` group, not job by job: the next job in queue order among the
        groups that could fit the free room. Room only shrinks during a pass, so a group that does not fit,
        or whose placement failed, stays out for the rest of the pass (its later jobs would fail alike); a
        pass costs (groups x jobs started), not the queue's length."""
        sim = self.sim
        if not (sim.freed or sim.arrived):
            return
        groups: dict[FitKey, list[tuple[Any, ...]]]
        if sim.freed:
            groups = self.by_fit
        else:  # nothing freed: only the new arrivals can start
            groups = defaultdict(list)
            for k in sorted(self.keys[j.id] for j in sim.arrived if j.id in self.keys):
                groups[self.fit_key(self.waiting[k[2]])].append(k)
        room = sim.devices.room()
        at = dict.fromkeys(groups, 0)
        out: set[FitKey] = set()
        while True:
            best = None
            for g, keys in groups.items():
                if g in out:
                    continue
                if at[g] >= len(keys) or not fits(room, g):
                    out.add(g)
                elif best is None or keys[at[g]] < groups[best][at[best]]:
                    best = g
            if best is None:
                return
            keys = groups[best]
            k = keys[at[best]]
            job = self.waiting[k[2]]
            classes, replicas, per = best
            flavors = [c for c in classes if room[c][0] >= replicas * per and room[c][1] >= per]
            result = place(Request(f"{sim.namespace}/{job.id}", [Alternative(c, per) for c in flavors], replicas),
                           sim.devices.current_fleet())
            if result.chosen is None:
                out.add(best)
                continue
            c = result.chosen
            sim.start(job, c.device_class, c.region, c.nodes, per, now)  # leaves self.by_fit's lists
            if at[best] < len(keys) and keys[at[best]] == k:
                at[best] += 1  # a list of this pass's own
            room = sim.devices.room()
