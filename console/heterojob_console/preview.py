"""Every question the console asks the operator's planner, in one module: the console keeps no copy of
placement or quota policy. A job's request is built by the operator's own code from its spec and status,
and answered by the operator's `placement.schedule` / `place` on a Fleet built from the same objects the
operator watches (Nodes, AcceleratorClasses, Regions, HeteroQuotas, and the placements in job statuses).

When the planner's entry point moves (engine/admission.py), only this module changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from heterojob.api.common import SpecError, parse_spec
from heterojob.api.job import HeteroJobSpec, HeteroJobStatus, HistoryEntry, MigrationState, Phase
from heterojob.controller import _request, _where  # the operator's own request builder
from heterojob.engine import placement
from heterojob.engine.fleet import Allocation, Fleet, Limit, holdings, usage
from heterojob.kube import convert

from heterojob_console.data import DONE, WAITING, Cluster


def _spec(obj: Mapping[str, Any]) -> HeteroJobSpec | None:
    try:
        return parse_spec(HeteroJobSpec, obj.get("spec"))
    except SpecError:
        return None


def _status(obj: Mapping[str, Any]) -> HeteroJobStatus:
    try:
        return HeteroJobStatus.model_validate(obj.get("status") or {})
    except ValueError:
        return HeteroJobStatus()


def _key(obj: Mapping[str, Any]) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


def allocations(cluster: Cluster) -> dict[str, Allocation]:
    """job -> the devices its placement holds (as the operator's ledger follows job statuses)."""
    out = {}
    for obj in cluster.job_objects:
        p = (obj.get("status") or {}).get("placement")
        if not p or (obj.get("status") or {}).get("phase") in DONE:
            continue
        cls = cluster.classes.get(p.get("deviceClass", ""))
        per_node: dict[str, int] = {}
        for node in p.get("nodes") or []:
            per_node[node] = per_node.get(node, 0) + int(p.get("perReplica", 0))
        key = _key(obj)
        out[key] = Allocation(cls.resource_name if cls else p.get("deviceClass", ""), per_node,
                              key.split("/", 1)[0], p.get("deviceClass", ""), p.get("region", ""))
    return out


def quotas(cluster: Cluster, replace: tuple[str, str, list[Limit]] | None = None) -> dict[str, list[Limit]]:
    """namespace -> every limit of its HeteroQuotas; `replace` = (namespace, quota, limits) edits one."""
    out: dict[str, list[Limit]] = {}
    for obj in cluster.objects.get("HeteroQuota", []):
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        if replace is not None and (ns, name) == replace[:2]:
            continue
        limits, _ = convert.quota_limits(obj)
        out.setdefault(ns, []).extend(limits)
    if replace is not None:
        out.setdefault(replace[0], []).extend(replace[2])
    return out


def fleet(cluster: Cluster, exclude: Sequence[str] = (), quota: Mapping[str, list[Limit]] | None = None) -> Fleet:
    held = {k: a for k, a in allocations(cluster).items() if k not in exclude}
    regions = {o["metadata"]["name"]: r for o in cluster.objects.get("Region", [])
               if (r := convert.region_info(o)) is not None}
    nodes = {o["metadata"]["name"]: convert.node_view(o) for o in cluster.objects.get("Node", [])}
    foreign: dict[tuple[str, str], int] = {}  # what pods heterojob does not manage hold, as the operator counts it
    for pod in cluster.objects.get("Pod", []):
        for key, n in convert.pod_usage(pod).items():
            foreign[key] = foreign.get(key, 0) + n
    return Fleet(nodes=nodes, classes=cluster.classes, regions=regions, used=usage(held.values(), foreign),
                 quotas=dict(quota) if quota is not None else quotas(cluster), held=holdings(held.values()))


def waiting_requests(cluster: Cluster) -> dict[str, placement.Request]:
    out = {}
    for obj in cluster.job_objects:
        status = obj.get("status") or {}
        if status.get("placement") or status.get("phase") not in WAITING:
            continue
        spec = _spec(obj)
        if spec is not None:
            out[_key(obj)] = _request(_key(obj), obj, spec, _status(obj))
    return out


@dataclass(frozen=True)
class Effect:
    job: str
    before: str  # the planner's answer with the current limits
    after: str  # ... with the edited ones
    change: str  # "admitted", "blocked", "blocker changed"


def quota_change(cluster: Cluster, namespace: str, quota: str, limits: Sequence[Mapping[str, Any]]
                 ) -> list[Effect]:
    """The waiting jobs of `namespace` whose planner answer the edited limits change.

    The whole queue is scheduled in the operator's order with the current and with the edited limits; a
    job's allowed regions are what its spec says (none listed: every region, each checked on its own)."""
    requests = waiting_requests(cluster)
    current = quotas(cluster)
    edited = quotas(cluster, (namespace, quota, [Limit(str(r["deviceClass"]), str(r.get("region") or "*"),
                                                       int(r["devices"]), quota) for r in limits]))
    before = placement.schedule(requests.values(), fleet(cluster, quota=current))
    after = placement.schedule(requests.values(), fleet(cluster, quota=edited))
    out = []
    for key in sorted(requests, key=lambda k: requests[k].order):
        if not key.startswith(f"{namespace}/"):
            continue
        a, b = before[key], after[key]
        if a.explain() == b.explain():
            continue
        change = ("admitted" if b.chosen is not None and a.chosen is None else
                  "blocked" if a.chosen is not None and b.chosen is None else "blocker changed")
        out.append(Effect(key, a.explain(), b.explain(), change))
    return out


@dataclass(frozen=True)
class Move:
    origin: str
    result: placement.Result

    @property
    def target(self) -> str | None:
        c = self.result.chosen
        return f"{c.region}/{c.device_class} x{len(c.nodes)} on {', '.join(sorted(set(c.nodes)))}" if c else None


def migration_target(cluster: Cluster, namespace: str, name: str) -> Move | None:
    """Where the planner would put a running job asked to move now, or None when it is not placed.

    The request is the one the operator builds for a migrating job: it avoids the nodes it leaves and
    stays in its region and class unless spec.policy allows crossing; the job's own devices are free, and
    the waiting jobs ahead of it in the queue are placed first."""
    obj = cluster.job(namespace, name)
    spec = _spec(obj) if obj else None
    status = _status(obj) if obj else HeteroJobStatus()
    p = status.placement
    if obj is None or spec is None or p is None:
        return None
    origin = _where(status) or ""
    entry = HistoryEntry.model_validate({"time": "1970-01-01T00:00:00Z", "action": "migrate",
                                         "reason": "preview", "from": origin})
    moving = status.model_copy(update={
        "phase": Phase.MIGRATING, "history": [*status.history, entry],
        "migration": MigrationState(exclude=sorted(set(p.nodes)), replicas=p.replicas)})
    request = _request(_key(obj), obj, spec, moving)
    ahead = [r for r in waiting_requests(cluster).values() if r.order < request.order]  # as the operator's queue
    return Move(origin, placement.schedule([*ahead, request], fleet(cluster, exclude=[_key(obj)]))[request.job])

