"""What a reconcile pass reads of a job's status, its pods and the fleet before it decides (`controller.reconcile`):
the nodes of its placement that are cordoned, the pods still running after it finished, what its spec asks that the
fleet can never give."""

from __future__ import annotations

from collections.abc import Mapping

from heterojob.api.job import HeteroJobSpec
from heterojob.api.job_status import HeteroJobStatus
from heterojob.engine.capacity.fleet import Node
from heterojob.engine.execution import lifecycle
from heterojob.engine.placing import validation
from heterojob.state.views import FleetSource


def cordoned(status: HeteroJobStatus, nodes: Mapping[str, Node]) -> frozenset[str]:
    """The job's nodes that are cordoned (spec.unschedulable: kubectl cordon, the first step of a drain)."""
    if status.placement is None:
        return frozenset()
    return frozenset(n for n in status.placement.nodes if n in nodes and not nodes[n].schedulable)


def still_running(status: HeteroJobStatus, pods: list[lifecycle.PodView]) -> list[lifecycle.PodView]:
    """The placement's pods that still run while the status says the job finished (`Controller._repair`'s case)."""
    p = status.placement
    if p is None or not (status.phase and status.phase.terminal):
        return []
    return [v for v in pods if v.generation == p.generation and not v.deleting and v.phase in ("Pending", "Running")]


def fleet_problems(source: FleetSource, capacities: validation.Capacities, spec: HeteroJobSpec
                   ) -> list[validation.SpecProblem]:
    """What this spec asks that the fleet can never give (engine.placing.validation)."""
    nodes = source.nodes()
    return validation.job_problems(
        [(a.device_class, a.per_replica) for a in spec.devices], spec.regions.allowed, spec.regions.preferred,
        source.classes(), set(source.regions()), nodes.values(), lambda cls: capacities(cls, nodes))
