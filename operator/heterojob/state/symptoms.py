"""A running job's symptoms, gathered in one place (pure; `now` is an argument).

What may move a job: a NotReady node, a manual request, firing alerts about its nodes, failed devices,
overheating devices and stragglers. Each is judged by the job's own `spec.policy`: a device is overheating
at `overheatCelsius` (the operator's `--overheat-celsius` only keeps new work off a node), a replica
straggles below `stragglerRatio` of its peers' median utilization (the same policy as the monitor's
`Straggler` condition, `telemetry.watched.straggler_policy`). The symptoms that must last before they move
the job (`migration.HOLD`) keep their onset in one place, `status.symptoms` (`api.onsets`), for the current
placement generation: set when the symptom first shows, dropped when it is gone, kept as it is while the
job's telemetry is unavailable (missing telemetry is neither a fault nor the end of one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from heterojob.api.job import HeteroJobSpec
from heterojob.api.job_status import HeteroJobStatus
from heterojob.api.onsets import SymptomOnsets
from heterojob.api.times import iso, timestamp
from heterojob.engine.capacity import migration
from heterojob.engine.capacity.fleet import Node
from heterojob.telemetry.model import DeviceSample, Health
from heterojob.telemetry.snapshot import Availability, JobRef, Snapshot, job_telemetry
from heterojob.telemetry.watched import straggler_policy


@dataclass(frozen=True)
class Gathered:
    symptoms: list[migration.Symptom]
    onsets: SymptomOnsets | None  # what status.symptoms holds after this look (write it when it changed)


def alert_symptoms(status: HeteroJobStatus, nodes: Sequence[str], now: float) -> list[migration.Symptom]:
    """The job's firing alerts that still name a node it runs on."""
    out = []
    for a in status.alerts:
        if set(a.nodes) & set(nodes):
            out.append(migration.Symptom(migration.ALERT, timestamp(a.since) or now, tuple(a.nodes), a.message,
                                         urgent=a.urgent))
    return out


def hot_devices(ref: JobRef, snapshot: Snapshot, celsius: float) -> list[tuple[int, DeviceSample]]:
    """(rank, device) of the job's devices at or above `celsius` that have not failed (a failed one is its
    own symptom); a device whose exporter is down has no current temperature."""
    out = []
    for rank in range(ref.replicas):
        for d in snapshot.by_pod.get((ref.namespace, ref.pod(rank)), ()):
            if (d.temperature_c is not None and d.temperature_c >= celsius and d.health != Health.FAILED
                    and d.node not in snapshot.exporters_down):
                out.append((rank, d))
    return out


def gather(meta: Mapping[str, object], spec: HeteroJobSpec, status: HeteroJobStatus, nodes: Mapping[str, Node],
           snapshot: Snapshot | None, manual: str | None, now: float) -> Gathered:
    """Every symptom of the Running job `meta` names, with the onsets to keep. `manual`: a migrate request
    not yet acted on (its annotation's value), else None."""
    p = status.placement
    assert p is not None
    kept = status.symptoms if status.symptoms is not None and status.symptoms.generation == p.generation else None
    out: list[migration.Symptom] = []
    down = sorted(n for n in set(p.nodes) if n in nodes and not nodes[n].ready)
    if down:
        out.append(migration.Symptom(migration.NODE_NOT_READY, now, tuple(down),
                                     f"node(s) {', '.join(down)} not Ready", urgent=True))
    if manual:
        out.append(migration.Symptom(migration.MANUAL, now, tuple(sorted(set(p.nodes))),
                                     f"migration requested: {manual}"))
    out.extend(alert_symptoms(status, p.nodes, now))
    if snapshot is None:
        return Gathered(out, kept)
    ref = JobRef(str(meta["namespace"]), str(meta["name"]), p.region, p.generation, p.replicas, p.per_replica)
    t = job_telemetry(ref, snapshot, straggler_policy(spec.policy))
    failed = [(r, d) for r, d in t.unhealthy if d.health == Health.FAILED]
    if failed:
        out.append(migration.Symptom(
            migration.DEVICE_FAILED, now, tuple(sorted({d.node for _, d in failed})),
            "; ".join(f"rank {r}: {d.device_id} on {d.node}: {d.reason}" for r, d in failed), urgent=True))
    if t.availability == Availability.UNAVAILABLE:
        return Gathered(out, kept)
    celsius = spec.policy.overheat_celsius
    hot = hot_devices(ref, snapshot, celsius)
    overheat_since = _since(kept.overheat if kept else None, now) if hot else None
    straggler_since = _since(kept.straggler if kept else None, now) if t.stragglers else None
    if hot and overheat_since is not None:
        out.append(migration.Symptom(
            migration.OVERHEAT, overheat_since, tuple(sorted({d.node for _, d in hot})),
            "; ".join(f"rank {r}: {d.device_id} on {d.node}: {d.temperature_c:.0f}°C >= {celsius:.0f}°C "
                      "(spec.policy.overheatCelsius)" for r, d in hot)))
    if t.stragglers and straggler_since is not None:
        out.append(migration.Symptom(
            migration.STRAGGLER, straggler_since, tuple(sorted({p.nodes[r] for r in t.stragglers if r < len(p.nodes)})),
            t.straggler_message))
    onsets = None
    if overheat_since is not None or straggler_since is not None:
        onsets = SymptomOnsets(generation=p.generation,
                               overheat=iso(overheat_since) if overheat_since is not None else None,
                               straggler=iso(straggler_since) if straggler_since is not None else None)
    return Gathered(out, onsets)


def _since(kept: str | None, now: float) -> float:
    """A kept onset (not after now: status is untrusted input), else now."""
    at = timestamp(kept)
    return min(at, now) if at is not None else now


def changed(before: SymptomOnsets | None, after: SymptomOnsets | None) -> bool:
    """Whether status.symptoms must be written."""
    def dump(o: SymptomOnsets | None) -> dict[str, object] | None:
        return o.model_dump(exclude_none=True) if o is not None else None
    return dump(before) != dump(after)
