"""The fleet's devices at one monitoring cycle, and what they say about each job.

Pure: built from query results (plain vectors) and node facts; no Prometheus client, no clock.
A source is one Prometheus serving some regions. Its failure makes those regions' telemetry
unavailable, which is reported and never acted on; nonsense in its answers makes them degraded.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from heterojob.telemetry import sources as region_sources
from heterojob.telemetry import steps
from heterojob.telemetry.adapters import ADAPTERS
from heterojob.telemetry.family import FALLBACK, ROLE_LABEL, SEEN, Adapter, ParseReport, Vector
from heterojob.telemetry.labels import Context, node_of_series
from heterojob.telemetry.model import DeviceSample, Health, HealthPolicy, number, settle_xid, vanished

UP = "up"
# `up`, and the Node of each scrape target pod where kube-state-metrics is scraped too (kube_pod_info, one series
# per DaemonSet pod that is a target): a device series whose scrape configuration relabels no node label is
# placed by its exporter pod (`Context.pod_nodes`). One query still; without kube-state-metrics, just `up`.
POD_NODE = "pod_node"
UP_QUERY = (f'up or label_replace(max by (namespace, pod, node) (kube_pod_info{{created_by_kind="DaemonSet", '
            f'node!=""}} and on (namespace, pod) up), "{ROLE_LABEL}", "{POD_NODE}", "", "")')
# The training pods' step rates (`telemetry.steps`) ride on the same query: still one.


@dataclass(frozen=True)
class NodeFacts:
    """What the Node object says, joined onto every device sample of that node."""

    region: str | None
    device_class: str | None
    devices: int = 0  # allocatable devices of its class
    addresses: tuple[str, ...] = ()  # status.addresses (InternalIP, ExternalIP, Hostname): what `instance` may say


@dataclass(frozen=True)
class PodFigures:
    """A pod's devices as Prometheus grouped them (an aggregate read, `telemetry.digest`): how many report, their
    mean utilization (None: none says)."""

    node: str
    devices: int
    utilization: float | None


@dataclass(frozen=True)
class SourceResult:
    """What one Prometheus answered this cycle, or why it did not."""

    name: str  # its URL, for messages
    regions: frozenset[str]  # the regions it serves ("*" = every region without a source of its own)
    results: Mapping[str, Vector] | None  # query name -> vector; None when unavailable
    error: str = ""


def queries(window_s: int, adapters: Iterable[Adapter] = ADAPTERS.values(),
            steps_window_s: int = steps.STEPS_WINDOW_S) -> dict[str, str]:
    """The whole cycle's queries, named `<family>:<query>`, plus `up` for exporters that are down (and, in the
    same query, the training pods' step rates over `steps_window_s`)."""
    out = {f"{a.family}:{name}": q for a in adapters for name, q in a.queries(window_s).items()}
    out[UP] = f"{UP_QUERY} or {steps.query(steps_window_s)}"
    return out


# past this many scrape targets with a doubled device, `seen` is asked for all of them (a regex that long costs
# Prometheus more than the plain query)
SEEN_TARGETS_MAX = 256


def followups(results: Mapping[str, Vector], adapters: Iterable[Adapter] = ADAPTERS.values(),
              window_s: int = 60) -> dict[str, str]:
    """The second round of a cycle: for each family whose identity answer holds a device twice (its pod
    changed within the window, or two exporters report it), `seen` for those devices' scrape targets only;
    and where some devices have no identity series, their fallback identity (`Adapter.fallback_query`)."""
    out = {}
    for a in adapters:
        mine = {q[len(a.family) + 1:]: v for q, v in results.items() if q.startswith(f"{a.family}:")}
        targets = a.doubled(mine)
        if targets:
            out[f"{a.family}:{SEEN}"] = a.seen_query(targets if len(targets) <= SEEN_TARGETS_MAX else ())
        if fallback := a.fallback_query(mine, window_s, SEEN_TARGETS_MAX):
            out[f"{a.family}:{FALLBACK}"] = fallback
    return out


def gather(ask: Callable[[Mapping[str, str]], Mapping[str, Vector]], window_s: int,
           adapters: Iterable[Adapter] = ADAPTERS.values(), steps_window_s: int = steps.STEPS_WINDOW_S
           ) -> tuple[dict[str, Vector], int]:
    """One source's answers for a cycle, through `ask` (query name -> PromQL, all at one instant), and how
    many queries that took: the fixed set, then `followups` when the first answers need them."""
    adapters = list(adapters)
    first = queries(window_s, adapters, steps_window_s)
    answered = dict(ask(first))
    more = followups(answered, adapters, window_s)
    if more:
        answered.update(ask(more))
    return answered, len(first) + len(more)


class Availability(StrEnum):
    OK = "ok"
    DEGRADED = "degraded"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True)
class RegionTelemetry:
    availability: Availability
    message: str = ""
    devices: Mapping[Health, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Snapshot:
    devices: Mapping[str, DeviceSample]  # device id -> sample
    regions: Mapping[str, RegionTelemetry]  # region -> availability of its telemetry
    exporters_down: frozenset[str] = frozenset()  # nodes whose exporter scrape fails (up == 0)
    by_pod: Mapping[tuple[str, str], tuple[DeviceSample, ...]] = field(default_factory=dict)
    # node -> "<device>: <reason>" of a failed device on it (placement keeps new work off these nodes)
    failed_nodes: Mapping[str, str] = field(default_factory=dict)
    failed_devices: Mapping[str, frozenset[str]] = field(default_factory=dict)  # node -> its failed devices' ids
    # node -> its devices whose series vanished while its exporter answers (remembered FAILED while the Node exists)
    vanished_devices: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # node -> physical devices its exporter reports now (MIG instances of one GPU count once)
    reported: Mapping[str, int] = field(default_factory=dict)
    # node -> "<device>: <reason>" of an overheating (clock-throttled) device on it: nothing new goes there
    hot_nodes: Mapping[str, str] = field(default_factory=dict)
    # node -> "<device>: <why>" of a chip whose network or RoCE link is down (kept off for gangs of >1 replica)
    network_down: Mapping[str, str] = field(default_factory=dict)
    node_of: Mapping[str, str] = field(default_factory=dict)  # device id -> node (alerts name devices)
    reports: Mapping[str, ParseReport] = field(default_factory=dict)  # source name -> what its answers lacked
    # (namespace, pod) -> steps/s of a training pod serving the SDK's step counter (`telemetry.steps`)
    step_rates: Mapping[tuple[str, str], float] = field(default_factory=dict)
    # an aggregate read (`telemetry.digest`): the pods of nodes not read per device, as Prometheus grouped them
    # (their devices are healthy: anything else flags the node for a per-device read), and how many devices
    # were counted that way rather than listed in `devices`
    pods: Mapping[tuple[str, str], PodFigures] = field(default_factory=dict)
    aggregated: int = 0

    def region(self, name: str) -> RegionTelemetry:
        return self.regions.get(name) or self.regions.get("*") or RegionTelemetry(
            Availability.UNAVAILABLE, "no Prometheus serves this region")


def _targets(up: Vector) -> tuple[list[Mapping[str, Any]], dict[tuple[str, str], str]]:
    """The `up` answer's exporter scrape targets, and each target pod's Node (from kube_pod_info; a pod two Nodes
    claim names none). A training pod scraped for its steps is no exporter (`steps.is_training_target`, or it
    serves a step rate): its pod is the workload devices report, and its `up` says nothing of a node."""
    targets: list[Mapping[str, Any]] = []
    nodes: dict[tuple[str, str], str] = {}
    twice: set[tuple[str, str]] = set()
    training = set(steps.rates(up))
    for series in up or ():
        labels = series.get("metric") or {}
        role = labels.get(ROLE_LABEL)
        if role != POD_NODE:
            if not role and not steps.is_training_target(labels) \
                    and (labels.get("namespace") or "", labels.get("pod") or "") not in training:
                targets.append(series)
            continue
        key, node = (labels.get("namespace") or "", labels.get("pod") or ""), labels.get("node") or ""
        if node and nodes.setdefault(key, node) != node:
            twice.add(key)
    return targets, {k: v for k, v in nodes.items() if k not in twice}


def _exporters_down(up: Vector, ctx: Context = Context()) -> frozenset[str]:
    down = set()
    for series in up or ():
        node = node_of_series(series.get("metric") or {}, ctx)
        value = number((series.get("value") or [None, None])[1])
        if node and value == 0:
            down.add(node)
    return frozenset(down)


def _exporter_pods(up: Vector) -> frozenset[tuple[str, str]]:
    """(namespace, pod) of every scrape target: on a device series these name the exporter, not a workload."""
    return frozenset((labels.get("namespace") or "", labels["pod"]) for series in up or ()
                     if (labels := series.get("metric") or {}).get("pod"))


def context(up: Vector, nodes: Mapping[str, NodeFacts]) -> Context:
    """What placing a source's series needs beyond their labels, from its `up` answer and the Nodes: with a Node
    list, a host label counts only when it names a Node; without one, labels alone decide."""
    targets, pod_nodes = _targets(up)
    node_at = {address: name for name, facts in nodes.items() for address in facts.addresses if address != name}
    return Context(is_node=nodes.__contains__ if nodes else None, exporter_pods=_exporter_pods(targets),
                   node_at=node_at, pod_nodes=pod_nodes)


def build(sources: Sequence[SourceResult], nodes: Mapping[str, NodeFacts], previous: Mapping[str, DeviceSample],
          policy: HealthPolicy, adapters: Iterable[Adapter] = ADAPTERS.values(),
          digests: Mapping[str, Any] | None = None) -> Snapshot:
    """One snapshot from every source's answers, joined with the Node facts.

    Devices of a source that did not answer keep no sample (their jobs' telemetry is unavailable).
    A device that was in `previous` and is gone while its node's exporter still answers has vanished.
    `digests`: source name -> its `telemetry.digest.Digest` where it was read in aggregate (its answers then hold
    the devices of the nodes it read per device, `Digest.drilled`; the other nodes' pods are figures).
    """
    adapters = list(adapters)
    digests = digests or {}
    pods: dict[tuple[str, str], PodFigures] = {}
    aggregated = 0

    def where(node: str) -> tuple[str | None, str | None]:
        facts = nodes.get(node)
        return (facts.region, facts.device_class) if facts else (None, None)

    devices: dict[str, DeviceSample] = {}
    counted: dict[str, int] = defaultdict(int)  # node -> devices of an aggregate read, counted and not listed
    regions: dict[str, RegionTelemetry] = {}
    reports: dict[str, ParseReport] = {}
    step_rates: dict[tuple[str, str], float] = {}
    down: set[str] = set()
    fell_off: dict[str, set[str]] = defaultdict(set)
    reported: dict[str, set[str]] = defaultdict(set)
    own_regions = region_sources.own((source.name, source.regions) for source in sources)
    for source in sources:
        if source.results is None:
            for region in source.regions:
                regions[region] = RegionTelemetry(Availability.UNAVAILABLE, f"{source.name}: {source.error}")
            continue
        report = reports[source.name] = ParseReport()
        for key, rate in steps.rates(source.results.get(UP) or ()).items():
            step_rates[key] = max(rate, step_rates.get(key, 0.0))
        found: list[DeviceSample] = []
        up, _ = _targets(source.results.get(UP) or ())
        ctx = context(source.results.get(UP) or (), nodes)
        digest = digests.get(source.name)
        remembered = previous
        if digest is not None:  # only the nodes read per device are compared with the last snapshot
            remembered = {k: v for k, v in previous.items() if v.node in digest.drilled}
            remembered.update({d.device_id: d for d in digest.vanished if d.device_id not in remembered})
        for adapter in adapters:
            prefix = f"{adapter.family}:"
            mine = {k[len(prefix):]: v for k, v in source.results.items() if k.startswith(prefix)}
            found += [settle_xid(d, previous.get(d.device_id), policy)
                      for d in adapter.parse(mine, policy, report, where, ctx)]
        source_down = _exporters_down(up, ctx)
        down |= source_down
        # whether this source speaks for a node, asked once per node (not per device)
        speaks = {node: _serves(source, nodes.get(node), own_regions)
                  for node in {d.node for d in found} | {v.node for v in remembered.values() if v.node in nodes}}
        served = {d.device_id: d for d in found if speaks[d.node]}
        # a device is remembered while its Node exists; one missing while its exporter answers vanished
        before = {k: v for k, v in remembered.items() if v.node in nodes and speaks[v.node]}
        reporting = [d for d in served.values() if d.node not in source_down]
        for d in reporting:
            reported[d.node].add(d.device_id.partition("/mig-")[0])
        for gone in vanished(before, reporting):
            if gone.device_id not in served and gone.health == Health.FAILED:
                fell_off[gone.node].add(gone.device_id)
            served.setdefault(gone.device_id, gone)
        for device_id, sample in served.items():
            if sample.node in source_down:
                sample = replace(sample, health=Health.UNKNOWN, reason="exporter down (up == 0)")
            if sample.region is None and sample.node in nodes:  # a vanished one, rebuilt from the last sample
                sample = replace(sample, region=nodes[sample.node].region,
                                 device_class=nodes[sample.node].device_class)
            devices[device_id] = sample
        if digest is not None:
            for node, n in digest.idle.items():
                if _serves(source, nodes.get(node), own_regions):
                    counted[node] += n
                    aggregated += n
            for key, figures in digest.pods.items():
                if _serves(source, nodes.get(figures.node), own_regions):
                    pods[key] = figures
                    counted[figures.node] += figures.devices
                    aggregated += figures.devices
        availability = Availability.DEGRADED if report.degraded else Availability.OK
        message = _describe(report)
        for region in source.regions:
            regions[region] = RegionTelemetry(availability, message)

    counts: dict[str, dict[Health, int]] = defaultdict(lambda: defaultdict(int))
    by_pod: dict[tuple[str, str], list[DeviceSample]] = defaultdict(list)
    failed: dict[str, str] = {}
    failed_ids: dict[str, set[str]] = defaultdict(set)
    hot: dict[str, str] = {}
    network: dict[str, str] = {}
    for sample in sorted(devices.values(), key=lambda d: d.device_id):
        counts[sample.region or "*"][sample.health] += 1
        if sample.health == Health.FAILED:
            failed.setdefault(sample.node, f"{sample.device_id}: {sample.reason}")
            failed_ids[sample.node].add(sample.device_id)
        elif sample.health == Health.DEGRADED:
            hot.setdefault(sample.node, f"{sample.device_id}: {sample.reason}")
        if sample.network_fault and sample.health != Health.FAILED:
            network.setdefault(sample.node, f"{sample.device_id}: {sample.network_fault}")
        if sample.namespace and sample.pod and not sample.shared:
            by_pod[(sample.namespace, sample.pod)].append(sample)
    for node, n in counted.items():  # devices counted, not listed: healthy (anything else is listed)
        facts = nodes.get(node)
        counts[(facts.region if facts else None) or "*"][Health.HEALTHY] += n
    regions = {name: replace(r, devices=dict(counts.get(name, {}))) for name, r in regions.items()}
    for name, per_health in counts.items():
        if name not in regions and "*" in regions:
            regions[name] = replace(regions["*"], devices=dict(per_health))
    return Snapshot(devices=devices, regions=regions, exporters_down=frozenset(down),
                    by_pod={k: tuple(sorted(v, key=lambda d: d.device_id)) for k, v in by_pod.items()},
                    failed_nodes=failed, failed_devices={n: frozenset(ids) for n, ids in failed_ids.items()},
                    vanished_devices={n: frozenset(ids) for n, ids in fell_off.items()},
                    reported={n: len(reported.get(n, ())) + counted.get(n, 0) for n in {*reported, *counted}},
                    hot_nodes=hot, network_down=network, node_of={d: s.node for d, s in devices.items()}, reports=reports,
                    step_rates=step_rates, pods=pods, aggregated=aggregated)


def _serves(source: SourceResult, facts: NodeFacts | None, own_regions: frozenset[str]) -> bool:
    """Whether `source` speaks for a node: a region's own Prometheus for its nodes, the default for the rest
    (`telemetry.sources.serves`, the rule the console shares)."""
    return region_sources.serves(source.regions, facts.region if facts is not None else None, own_regions)


def _describe(report: ParseReport) -> str:
    parts = []
    if report.missing_labels:
        parts.append(f"{report.missing_labels} series without a device or node label")
    if report.duplicates:
        parts.append(f"{report.duplicates} duplicate series")
    if report.bad_values:
        parts.append(f"{report.bad_values} values that are not numbers")
    if report.unresolved_nodes:
        parts += report.notes[:1] or [f"{report.unresolved_nodes} host labels that name no Node"]
    return "; ".join(parts)


# --- what the devices say about one job ---------------------------------------------------------

@dataclass(frozen=True)
class JobRef:
    """A running job's placement, enough to find its pods' devices."""

    namespace: str
    name: str
    region: str
    generation: int
    replicas: int
    per_replica: int

    def pod(self, rank: int) -> str:
        return f"{self.name}-g{self.generation}-{rank}"


@dataclass(frozen=True)
class WatchedJob:
    """A running job and the telemetry part of its status, as last seen (to write only changes)."""

    ref: JobRef
    device_class: str
    resource_version: str
    utilization: Mapping[str, Any] | None = None
    conditions: tuple[Mapping[str, Any], ...] = ()
    stragglers: StragglerPolicy = field(default_factory=lambda: StragglerPolicy())  # the job's spec.policy
    speeds: tuple[Mapping[str, Any], ...] = ()  # status.scheduling.speeds as read (cleaned): what a new rate is news to
    overheat_celsius: float | None = None  # spec.policy.overheatCelsius: an aggregate read lists devices this hot


@dataclass(frozen=True)
class StragglerPolicy:
    ratio: float = 0.5  # a replica below this fraction of its peers' median utilization straggles
    min_peer_utilization: float = 20.0  # peers idler than this say nothing about a straggler


@dataclass(frozen=True)
class JobTelemetry:
    availability: Availability
    message: str
    average: float | None = None
    per_replica: tuple[float | None, ...] = ()
    stragglers: tuple[int, ...] = ()
    straggler_message: str = ""
    unhealthy: tuple[tuple[int, DeviceSample], ...] = ()  # (rank, device) failed or degraded
    seen: int = 0  # devices reported for the job's pods
    expected: int = 0
    unknown: tuple[tuple[int, DeviceSample], ...] = ()  # (rank, device) whose health nothing tells
    # Prometheus answers, but no device of the job's pods is reported (none yet, its pods are gone, or their
    # nodes' exporters are down): the condition says NoSeries; the last figure stays (missing data wipes nothing)
    no_series: bool = False


def job_telemetry(job: JobRef, snapshot: Snapshot, stragglers: StragglerPolicy = StragglerPolicy()
                  ) -> JobTelemetry:
    region = snapshot.region(job.region)
    expected = job.replicas * job.per_replica
    if region.availability == Availability.UNAVAILABLE:
        return JobTelemetry(Availability.UNAVAILABLE, region.message or "telemetry unavailable", expected=expected)
    per_replica: list[float | None] = []
    unhealthy: list[tuple[int, DeviceSample]] = []
    unknown: list[tuple[int, DeviceSample]] = []
    silent: list[DeviceSample] = []  # exporter down or not reporting: their figures are not current
    seen = 0
    for rank in range(job.replicas):
        devices = snapshot.by_pod.get((job.namespace, job.pod(rank)), ())
        seen += len(devices)
        silent += [d for d in devices if d.node in snapshot.exporters_down or d.reason == "exporter not reporting"]
        utils = [d.utilization for d in devices if d.utilization is not None and d.node not in snapshot.exporters_down]
        grouped = snapshot.pods.get((job.namespace, job.pod(rank)))  # an aggregate read: healthy, reporting
        if grouped is not None and not devices:
            seen += grouped.devices
            per_replica.append(round(grouped.utilization, 1) if grouped.utilization is not None else None)
            continue
        per_replica.append(round(statistics.fmean(utils), 1) if utils else None)
        if job.replicas > 1:
            devices = tuple(_network_failed(d, job.replicas) for d in devices)
        unhealthy += [(rank, d) for d in devices if d.health in (Health.FAILED, Health.DEGRADED)]
        unknown += [(rank, d) for d in devices if d.health == Health.UNKNOWN]
    known = [u for u in per_replica if u is not None]
    average = round(statistics.fmean(known), 1) if known else None
    slow, why = _stragglers(per_replica, stragglers)
    no_series = seen == 0
    if no_series:
        availability, message = Availability.UNAVAILABLE, "no exporter reports a device of this job's pods yet"
    elif seen < expected or silent or region.availability == Availability.DEGRADED:
        availability = Availability.DEGRADED
        nodes = sorted({d.node for d in silent})
        message = "; ".join(m for m in (
            f"{seen} of {expected} devices reported" if seen < expected else "",
            f"exporter not reporting on {', '.join(nodes)}" if nodes else "", region.message) if m)
    else:
        availability, message = Availability.OK, f"{seen} devices reported"
    return JobTelemetry(availability, message, average, tuple(per_replica), slow, why, tuple(unhealthy),
                        seen, expected, tuple(unknown), no_series)


def _network_failed(device: DeviceSample, replicas: int) -> DeviceSample:
    """A device whose own network is down, failed for a job of several replicas: their collectives cross it
    (mind-cluster's Volcano plugin likewise drops network-unhealthy chips only for jobs of more than one task,
    `GetUsableTopFromNode(node, NPUTaskNum > 1)`). A single replica does not need it: nothing changes."""
    if not device.network_fault or device.health == Health.FAILED:
        return device
    return replace(device, health=Health.FAILED, last_error="npu network down",
                   reason=f"{device.network_fault}: breaks the collectives of a job of {replicas} replicas")


def _stragglers(per_replica: Sequence[float | None], policy: StragglerPolicy) -> tuple[tuple[int, ...], str]:
    """Ranks far below their peers' median utilization; a replica without data never straggles."""
    slow, notes = [], []
    for rank, util in enumerate(per_replica):
        peers = [u for r, u in enumerate(per_replica) if r != rank and u is not None]
        if util is None or not peers:
            continue
        median = statistics.median(peers)
        if median >= policy.min_peer_utilization and util < policy.ratio * median:
            slow.append(rank)
            notes.append(f"rank {rank} at {util:.0f}% vs peers' median {median:.0f}%")
    return tuple(slow), "; ".join(notes)
