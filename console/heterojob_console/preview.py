"""Every question the console asks the operator's planner, in one module: the console keeps no copy of
placement or quota policy. The jobs are read into the operator's own cache (`state.cache.Cache`, synced
from each job's spec and status as the operator does), the fleet into its views (`state.views.FleetSource`
from the same objects the operator watches), and the questions go to the planner the operator calls:
`engine.queue.admission.plan_with_policy` for "what would this quota edit admit?" (placements, queueing,
reclaim and preemption as the operator would plan them, in its queue policy's order, from what
`state.knowledge` reads of each job's `status.scheduling`; the policy is the operator's default,
`mlfq`, unless HETEROJOB_QUEUE_POLICY names the one its `--queue-policy` was given) and
`engine.queue.relocation.plan_move` for "where would this job go?" (make before break: the destination the
operator would reserve, or why there is none); and `engine.queue.policy.prepare` for "where is this job in the
queue?" (`queue_positions`: the order the planner takes the queue in).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from heterojob.api.common import SpecError, parse_spec
from heterojob.api.job import HeteroJobSpec
from heterojob.engine.queue import admission as planner
from heterojob.engine.queue import relocation
from heterojob.engine.capacity import migration, transfer
from heterojob.engine.queue import policy
from heterojob.engine.queue.admission import Outcome
from heterojob.engine.capacity.fleet import Fleet, Limit, holdings
from heterojob.engine.basics.queueing import QueuePolicy, QueueSettings
from heterojob.kube import convert
from heterojob.state.cache import Cache
from heterojob.state.job_status import read_status, where
from heterojob.state.knowledge import Knower
from heterojob.state.requests import move_request, transfer_move
from heterojob.state.views import FleetSource

from heterojob_console import quotas
from heterojob_console.snapshot import Cluster


def _spec(obj: Mapping[str, Any]) -> HeteroJobSpec | None:
    try:
        return parse_spec(HeteroJobSpec, obj.get("spec"))
    except SpecError:
        return None


def _key(obj: Mapping[str, Any]) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


def cache(cluster: Cluster, now: float) -> Cache:
    """The operator's job cache, rebuilt from the jobs as it rebuilds it at start: once per snapshot, whichever
    page or session asks first (`now` stands in for a start time no status gives; the planner's questions
    take their own `now`). The questions below only read it."""
    def make() -> Cache:
        out = Cache()
        for obj in cluster.job_objects:
            out.sync(_key(obj), obj, read_status(obj), _spec(obj), cluster.classes, now)
        return out

    return cluster.memo.get("cache", make)


def source(cluster: Cluster, replace: tuple[str, str, list[Limit]] | None = None) -> FleetSource:
    """The fleet views from the cluster's objects; `replace` = (namespace, quota, limits) edits one quota."""
    nodes = cluster.views if cluster.views is not None else \
        {o["metadata"]["name"]: convert.node_view(o) for o in cluster.objects.get("Node", [])}
    regions = {o["metadata"]["name"]: r for o in cluster.objects.get("Region", [])
               if (r := convert.region_info(o)) is not None}
    quotas = {(o["metadata"]["namespace"], o["metadata"]["name"]): convert.quota_limits(o)
              for o in cluster.objects.get("HeteroQuota", [])}
    if replace is not None:
        quotas[replace[:2]] = (replace[2], None)
    foreign: dict[tuple[str, str], int] = dict(cluster.foreign or {})  # what pods heterojob does not manage hold,
    for pod in cluster.objects.get("Pod", []):  # as the operator counts it (a hand-built snapshot: from its pods)
        for k, n in convert.pod_usage(pod).items():
            foreign[k] = foreign.get(k, 0) + n
    return FleetSource(nodes=lambda: nodes, classes=lambda: cluster.classes, regions=lambda: regions,
                       foreign_usage=lambda: foreign, quota_objects=lambda: quotas)


@dataclass(frozen=True)
class Effect:
    job: str
    before: str  # the planner's answer with the current limits
    after: str  # ... with the edited ones
    change: str  # "admitted", "blocked", "blocker changed"


ADMITTING = (Outcome.PLACED, Outcome.PREEMPTING, Outcome.RECLAIMING)  # gets the room (at once, or soon)


def queue_settings() -> QueueSettings | None:
    """The operator's queue policy: HETEROJOB_QUEUE_POLICY (`fifo` or `mlfq`, as its --queue-policy), else
    its default; None for fifo (the planner's own order: priority, then age)."""
    named = os.environ.get("HETEROJOB_QUEUE_POLICY", "").strip().lower()
    settings = QueueSettings()
    if named:
        try:
            settings = QueueSettings(policy=QueuePolicy(named))
        except ValueError:
            raise ValueError(f"HETEROJOB_QUEUE_POLICY={named!r}: use one of "
                             f"{', '.join(p.value for p in QueuePolicy)} (the operator's --queue-policy)") from None
    return None if settings.policy == QueuePolicy.FIFO else settings


def plan(jobs: Cache, fleet: Fleet, now: float) -> planner.QueuePlan:
    """The whole queue planned as the operator plans it (its queue policy, when it orders the queue)."""
    waiting, holders = jobs.waiting(), jobs.holders()
    settings = queue_settings()
    if settings is None:
        return planner.plan_queue(waiting, holders, fleet, now)
    knowledge = Knower(jobs).knowledge(fleet, waiting, holders, settings)
    return planner.plan_with_policy(waiting, holders, fleet, now, knowledge, settings)[0]


def queue_positions(cluster: Cluster, now: float) -> dict[str, int]:
    """namespace/name -> 1-based position of each job the operator would plan (its cache's waiting jobs), in
    the order its planner takes the queue (`Request.order`): under its queue policy the effective priorities
    `engine.queue.policy.prepare` gives from what `state.knowledge` reads of each job's status.scheduling (mlfq:
    priority, then level of attained service, level 0 once starved; then age), under fifo priority, then age.
    A HETEROJOB_QUEUE_POLICY that names no policy (the Quotas page says so) is taken as the default."""
    jobs = cache(cluster, now)
    waiting = jobs.waiting()
    if not waiting:
        return {}
    try:
        settings = queue_settings()
    except ValueError:
        settings = QueueSettings()
    if settings is not None:
        holders, fleet = jobs.holders(), jobs.fleet(source(cluster))
        knowledge = Knower(jobs).knowledge(fleet, waiting, holders, settings)
        waiting = policy.prepare(waiting, holders, fleet, now, knowledge, settings,
                                 planner.AdmissionSettings().min_runtime_s).queue
    return {r.job: i for i, r in enumerate(sorted(waiting, key=lambda r: r.order), start=1)}


def quota_change(cluster: Cluster, namespace: str, quota: str, limits: Sequence[Mapping[str, Any]]
                 ) -> list[Effect]:
    """The waiting jobs of `namespace` whose planner answer the edited limits change: the whole queue is
    planned, in the operator's order, with the current and with the edited limits."""
    now = time.time()
    jobs = cache(cluster, now)
    edited = quotas.as_limits(limits, quota)
    before = plan(jobs, jobs.fleet(source(cluster)), now)
    after = plan(jobs, jobs.fleet(source(cluster, (namespace, quota, edited))), now)
    out = []
    for key in sorted(before.admissions, key=lambda k: before[k].job):
        if not key.startswith(f"{namespace}/"):
            continue
        a, b = before[key], after[key]
        if (a.outcome, a.message) == (b.outcome, b.message):
            continue
        change = ("admitted" if b.outcome in ADMITTING and a.outcome not in ADMITTING else
                  "blocked" if a.outcome in ADMITTING and b.outcome not in ADMITTING else "blocker changed")
        out.append(Effect(key, a.message, b.message, change))
    return out


def held(cluster: Cluster, namespace: str) -> dict[tuple[str, str], int]:
    """(class, region) -> devices the namespace's jobs hold, as the operator counts them against every
    HeteroQuota of the namespace (its cache's allocations; `engine.capacity.fleet.holdings`)."""
    return holdings(cache(cluster, time.time()).allocations().values()).get(namespace, {})


@dataclass(frozen=True)
class MovePreview:
    origin: str
    plan: planner.Admission

    @property
    def target(self) -> str | None:
        c = self.plan.candidate
        return f"{c.region}/{c.device_class} x{len(c.nodes)} on {', '.join(sorted(set(c.nodes)))}" if c else None

    @property
    def why(self) -> str:
        return self.plan.message


def migration_target(cluster: Cluster, namespace: str, name: str) -> MovePreview | None:
    """Where the operator would move a running job asked to move now (the destination it would reserve
    before asking for the checkpoint), or None when the job holds no placement."""
    obj = cluster.job(namespace, name)
    spec = _spec(obj) if obj else None
    status = read_status(obj) if obj else None
    p = status.placement if status else None
    if obj is None or spec is None or status is None or p is None:
        return None
    now = time.time()
    jobs = cache(cluster, now)
    key = _key(obj)
    request = move_request(key, obj, spec, p.region, p.device_class, p.nodes, p.replicas)
    # a console request is a manual move: not weighed against what it saves, but it needs a link to another
    # region (the operator's --default-link, when set, is not known here: such a preview says NoLink)
    weigh = transfer_move(spec, status, p.region, p.device_class, p.replicas, cluster.classes, now,
                          transfer.TransferSettings(), migration.MANUAL)
    return MovePreview(where(status) or "", relocation.plan_move(request, jobs.waiting(), jobs.holders(),
                                                              jobs.fleet(source(cluster), exclude=[key]), now,
                                                              move=weigh))
