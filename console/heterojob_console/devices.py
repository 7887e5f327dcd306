"""Devices for the console, through the operator's own telemetry modules (same adapters, same health):
the current table, the utilization heat map at three levels (region/class, node, device) and one device's
history, all from Prometheus.

Each region is read from the Prometheus the operator reads it from (heterojob.telemetry.sources): its
Region's own `spec.prometheusURL` (a member cluster's site, docs/multicluster.md) or the console's default
(HETEROJOB_PROMETHEUS_URL). Every source is asked at once, each call with the same timeout (`TIMEOUT_S`);
a source that does not answer leaves its regions out with the reason, and the rest renders."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from heterojob.engine.capacity.fleet import Fleet
from heterojob.failures import describe
from heterojob.kube import convert
from heterojob.state.views import FleetSource
from heterojob.telemetry import digest as aggregate
from heterojob.telemetry import snapshot as snap
from heterojob.telemetry import sources as telemetry_sources
from heterojob.telemetry.adapters import ADAPTERS, DCGM_1X
from heterojob.telemetry.labels import (
    HOST_LABELS, JOB_LABELS, NODE_LABEL, NODE_LABELS, RELABELLED_NODE_LABELS, with_node_label,
)
from heterojob.telemetry import collect
from heterojob.telemetry.collect import Collector
from heterojob.telemetry.facts import node_facts
from heterojob.telemetry.model import HealthPolicy
from heterojob.telemetry.prometheus import PrometheusReader, connect
from heterojob.telemetry.snapshot import NodeFacts, Snapshot

from heterojob_console.promql import (  # re-exported: `devices.recording_rules`, `devices.RECORDED` are read too
    RECORDED as RECORDED, UTIL, UTIL_PACK as UTIL_PACK, by_node, device_matchers as device_matchers, gpu_utilization,
    node_utilization_query, recording_rules as recording_rules, select, unpack,
)
from heterojob_console.snapshot import Cluster

log = logging.getLogger("heterojob.console")
TIMEOUT_S = 10.0  # one Prometheus call: the present (the operator's monitor code) and the history alike
# ... in the background (the poller's fleet-wide read, the heat map's cached reads), where no page waits on the call:
# Prometheus's own query timeout (2 min). Prometheus evaluates a query to its end whether or not the client still
# waits, so a shorter client timeout only threw the answer away (at 100,000 devices on one Prometheus here the
# operator's aggregate read took 24 s + 77 s) and asked again, piling queries up; the poller reads again after 3
# times the last read's length.
BACKGROUND_TIMEOUT_S = 120.0
HEAT_TIMEOUT_S = 30.0
Sources = tuple[tuple[str, tuple[str, ...]], ...]  # ((Prometheus URL, regions it serves), ...): hashable
HOLD_S = 30.0  # a source that did not answer is asked again after this long (pages do not wait on it meanwhile)
_held: dict[str, tuple[float, str]] = {}  # URL -> (monotonic time to ask again, why it did not answer)

HEAT_POINTS = 60  # columns of the heat map, whatever the time range
COLUMNS = ["device", "node", "region", "class", "utilization", "memory_used_mib", "temperature", "power",
           "health", "reason", "pod", "job", "reporting"]
# an aggregate read's devices counted per node, not listed (`Reader.counted`): how many report now (healthy: an
# anomaly is listed), and the count and sum of their utilizations (`node_utilization`)
COUNTED_COLUMNS = ["node", "devices", "util_n", "util_sum"]
MIG_UTILIZATION = "100 * DCGM_FI_PROF_GR_ENGINE_ACTIVE{sel}"
# one device's history: (title, unit, GPU query, NPU query); {sel} is the device's label matcher
HISTORY = [
    ("Utilization", "%", "DCGM_FI_DEV_GPU_UTIL{sel}", "npu_chip_info_utilization{sel}"),
    ("Memory used", "MiB", "DCGM_FI_DEV_FB_USED{sel}", "npu_chip_info_hbm_used_memory{sel}"),
    ("Temperature", "°C", "DCGM_FI_DEV_GPU_TEMP{sel}", "npu_chip_info_temperature{sel}"),
    ("Power", "W", "DCGM_FI_DEV_POWER_USAGE{sel}", "npu_chip_info_power{sel}"),
    ("Last XID / NPU health", "", "DCGM_FI_DEV_XID_ERRORS{sel}", "npu_chip_info_health_status{sel}"),
]


def fleet_source(cluster: Cluster) -> FleetSource:
    """The snapshot's nodes, classes and regions as the operator's telemetry reads them (its node views when it
    has them: not converted again at every read)."""
    if cluster.views is not None:
        views, classes = cluster.views, cluster.classes
        regions = {o["metadata"]["name"]: r for o in cluster.objects.get("Region", [])
                   if (r := convert.region_info(o)) is not None}
        return FleetSource(nodes=lambda: views, classes=lambda: classes, regions=lambda: regions, foreign_usage=dict)
    objects: list[dict[str, Any]] = [{**n, "kind": "Node"} for n in cluster.objects.get("Node", [])]
    for kind in ("AcceleratorClass", "Region"):
        objects += [{**o, "kind": kind} for o in cluster.objects.get(kind, [])]
    return FleetSource.from_objects(objects)


def facts(cluster: Cluster) -> dict[str, NodeFacts]:
    """Every Node's region, class and devices as the operator's telemetry joins them (once per snapshot)."""
    def make() -> dict[str, NodeFacts]:
        source = fleet_source(cluster)
        return node_facts(Fleet(nodes=source.nodes(), classes=source.classes(), regions=source.regions()))

    return cluster.memo.get("telemetry-facts", make)


def region_urls(cluster: Cluster) -> dict[str, str | None]:
    """Region -> its own Prometheus URL (None: the default's)."""
    return {r.name: r.prometheus_url for r in fleet_source(cluster).regions().values()}


def _holders(cluster: Cluster) -> tuple[dict[str, list[dict[str, str]]], dict[str, str]]:
    """(node -> the pods holding accelerators on it, pod -> its job), once per snapshot."""
    def make() -> tuple[dict[str, list[dict[str, str]]], dict[str, str]]:
        holders = {node: [p for p in pods if p["held"] != "0"] for node, pods in cluster.pods_by_node.items()}
        return holders, {p["pod"]: p["job"] for pods in holders.values() for p in pods}

    return cluster.memo.get("holders", make)


def rows(snapshot: Snapshot | None, cluster: Cluster, nodes: Collection[str] | None = None) -> pd.DataFrame:
    """One row per device `snapshot` lists (of `nodes`, or all), with its pod and job.

    `reporting` says which rows are a sample of this read; the others are devices the monitor remembers
    (one whose series vanished: failed; one behind an exporter that is down: unknown).

    A device's pod comes from the exporter's pod mapping; when the exporter has none (a GPU that fell
    off the bus stops reporting its pod), from the pods holding accelerators on its node."""
    holders, job_of_pod = _holders(cluster)
    out = []
    down = snapshot.exporters_down if snapshot else frozenset()
    for d in snapshot.devices.values() if snapshot else []:
        if nodes is not None and d.node not in nodes:
            continue
        pod = f"{d.namespace}/{d.pod}" if d.pod else ""
        mine = holders.get(d.node, [])
        if not pod and mine:
            pod = ", ".join(p["pod"] for p in mine)
        job = job_of_pod.get(pod, "") or ", ".join(sorted({p["job"] for p in mine if p["job"]}))
        out.append({"device": d.device_id, "node": d.node, "region": d.region, "class": d.device_class,
                    "utilization": d.utilization, "memory_used_mib": d.memory_used_mib,
                    "temperature": d.temperature_c, "power": d.power_w, "health": d.health.value,
                    "reason": d.reason, "pod": pod, "job": job,
                    # a sample of this read, its exporter up: not one the monitor remembers (a device
                    # whose series vanished, or one behind an exporter that is down)
                    "reporting": d.observed_at is not None and d.node not in down})
    return pd.DataFrame(out, columns=COLUMNS)


class Reader:
    """The devices now, through one telemetry reader kept across reads (the operator's monitor reads through
    the same `telemetry.collect.Collector`): like the operator, it carries a device's last sample over a read
    where its Prometheus does not answer (missing telemetry is not a fault), and says which regions'
    telemetry is unavailable.

    A fleet past the operator's `collect.DEVICE_ROWS_MAX` devices is read as the operator reads it, in aggregate:
    the table lists the devices that need a row (an anomaly, and every device of a node with one); the others,
    healthy, are counted per node (`counted`: how many report and their utilization, grouped by Prometheus,
    `node_utilization`). A page that shows one node's devices reads them then (`node_devices`)."""

    WINDOW_S = 60  # the operator's default --telemetry-window

    def __init__(self, prometheus_url: str | None, timeout_s: float = TIMEOUT_S,
                 device_rows_max: int = collect.DEVICE_ROWS_MAX) -> None:
        self.url = prometheus_url
        self.timeout_s = timeout_s
        self.collector = Collector(prometheus_url, self.WINDOW_S, timeout_s, HealthPolicy(),
                                   device_rows_max=device_rows_max)
        self.snapshot: Snapshot | None = None
        self.counted = pd.DataFrame(columns=COUNTED_COLUMNS)  # the last read's devices counted, not listed

    def current(self, cluster: Cluster) -> tuple[pd.DataFrame, dict[str, str]]:
        """(one row per device the monitor lists, region -> why its telemetry is unavailable or degraded); the
        devices an aggregate read counted without listing them are in `counted` after the call."""
        known = facts(cluster)
        urls = region_urls(cluster)
        at = time.time()
        read = self.collector.collect(at, urls, known, self.snapshot.devices if self.snapshot else {})
        snapshot = read[0] if read is not None else None
        if snapshot is not None:
            self.snapshot = snapshot
        table = rows(snapshot, cluster)
        self.counted = _counted(snapshot, table, self._utilization(urls, known, at)) \
            if snapshot is not None and snapshot.aggregated else pd.DataFrame(columns=COUNTED_COLUMNS)
        problems = {name: r.message for name, r in (snapshot.regions.items() if snapshot else [])
                    if r.availability.value != "ok"}
        return table, problems

    def _utilization(self, urls: Mapping[str, str | None], known: Mapping[str, NodeFacts], at: float
                     ) -> dict[str, tuple[int, float]]:
        """node -> (devices with a utilization, their sum), each node from the source that serves its region."""
        found = self.collector.sources(urls)
        own = telemetry_sources.own(found.items())
        out: dict[str, tuple[int, float]] = {}
        with ThreadPoolExecutor(max_workers=min(8, max(1, len(found))), thread_name_prefix="console-util") as pool:
            answers = {url: pool.submit(node_utilization, url, at, self.timeout_s, self.WINDOW_S) for url in found}
            for url, future in answers.items():
                try:
                    per_node = future.result()
                except Exception as exc:  # noqa: BLE001 - the tiles leave its nodes' utilization out
                    log.warning("utilization by node: Prometheus at %s: %s", url, exc)
                    continue
                for node, figures in per_node.items():
                    facts_ = known.get(node)
                    if facts_ is not None and telemetry_sources.serves(found[url], facts_.region, own):
                        out[node] = figures
        return out


def _counted(snapshot: Snapshot, table: pd.DataFrame, utilization: Mapping[str, tuple[int, float]]
             ) -> pd.DataFrame:
    """Per node, the devices an aggregate read counted without listing them (reporting, healthy) and their
    utilization: every device of a node none of whose devices is listed (a node with a listed device has them
    all listed: it was read per device)."""
    listed = set(table["node"])
    out = []
    for node, n in snapshot.reported.items():
        if node in listed or node in snapshot.exporters_down or n <= 0:
            continue
        util_n, util_sum = utilization.get(node, (0, 0.0))
        out.append({"node": node, "devices": n, "util_n": min(util_n, n), "util_sum": util_sum})
    return pd.DataFrame(out, columns=COUNTED_COLUMNS)


def node_utilization(url: str, at: float | None = None, timeout_s: float = TIMEOUT_S,
                     window_s: int = 60) -> dict[str, tuple[int, float]]:
    """node -> (devices with a utilization in 0..100, their sum) at `at`, grouped by Prometheus: its RECORDED series
    when it records them, else `node_utilization_query` evaluated now."""
    reader = PrometheusReader(url, timeout_s=timeout_s)
    try:
        vector = reader.query({"util": RECORDED}, at=at)["util"]
        if not vector:  # no recording rule here (or not evaluated yet): the same figure computed now
            vector = reader.query({"util": node_utilization_query(window_s)}, at=at)["util"]
    finally:
        reader.close()
    out: dict[str, tuple[int, float]] = {}
    for series in vector:
        node = (series.get("metric") or {}).get(NODE_LABEL) or ""
        value = float((series.get("value") or [0, "nan"])[1])
        if not node or value != value:
            continue
        n, total = unpack(value)
        before = out.get(node, (0, 0.0))
        out[node] = (before[0] + n, before[1] + total)
    return out


def node_devices(cluster: Cluster, node: str, prometheus_url: str | None, timeout_s: float = TIMEOUT_S
                 ) -> tuple[pd.DataFrame, str]:
    """(one node's devices, one row each, as a per-device read of the operator's gives them; why not, or "") from
    the Prometheus that serves its region: the operator's per-device queries restricted to that node's series
    (`telemetry.digest.restrict`), parsed by its adapters. What a page showing one node asks of a national fleet."""
    known = facts(cluster)
    mine = known.get(node)
    if mine is None:
        return pd.DataFrame(columns=COLUMNS), f"no Node {node}"
    urls = region_urls(cluster)
    found = telemetry_sources.sources(urls, prometheus_url)
    own = telemetry_sources.own(found.items())
    url = next((u for u, served in found.items() if telemetry_sources.serves(served, mine.region, own)), None)
    if url is None:
        return pd.DataFrame(columns=COLUMNS), f"no Prometheus serves region {mine.region}"
    adapters = list(ADAPTERS.values())
    names = aggregate.metrics(adapters) | {"up"}
    where = {label: {node} for label in (*RELABELLED_NODE_LABELS, *HOST_LABELS, *JOB_LABELS)}
    queries = {k: aggregate.restrict(q, names, where) for k, q in snap.queries(Reader.WINDOW_S, adapters).items()
               if k != snap.UP}
    queries[snap.UP] = aggregate.restrict("up", names, where)
    reader = PrometheusReader(url, timeout_s=timeout_s)
    at = time.time()
    try:
        answers = dict(reader.query(queries, at=at))
        more = {k: aggregate.restrict(q, names, where)
                for k, q in snap.followups(answers, adapters, Reader.WINDOW_S).items()}
        if more:
            answers.update(reader.query(more, at=at))
    except Exception as exc:  # noqa: BLE001 - said in words by the page
        return pd.DataFrame(columns=COLUMNS), f"Prometheus at {url}: {describe(exc, timeout_s)}"
    finally:
        reader.close()
    built = snap.build([snap.SourceResult(url, found[url], answers)], {node: mine}, {}, HealthPolicy(), adapters)
    return rows(built, cluster, {node}), ""


def forget() -> None:
    """Ask every source again at once (tests; a process that starts over)."""
    _held.clear()


def sources(cluster: Cluster, default_url: str | None) -> Sources:
    """Which Prometheus serves which region, as the operator's monitor decides it."""
    own = {r.name: r.prometheus_url for o in cluster.objects.get("Region", []) if (r := convert.region_info(o))}
    found = telemetry_sources.sources(own, default_url)
    return tuple(sorted((url, tuple(sorted(served))) for url, served in found.items()))


def serving(found: Sources, region: str | None) -> Sources:
    """The source(s) that answer for a node in `region` (one, unless no Prometheus serves it: none)."""
    own = telemetry_sources.own(found)
    return tuple(s for s in found if telemetry_sources.serves(s[1], region, own))


def where(found: Sources, url: str) -> str:
    """The regions a source serves, for people."""
    served = dict(found).get(url, ())
    named = [r for r in served if r != telemetry_sources.DEFAULT]
    if telemetry_sources.DEFAULT in served:
        return "the regions without a Prometheus of their own" if not named or len(named) > 3 else \
            ", ".join(named) + " and the regions without a Prometheus of their own"
    return ", ".join(named)


def heat_sources(found: Sources, minutes: int, nodes: list[str] | None = None, now: float | None = None,
                 fetch: Callable[[str], pd.DataFrame] | None = None, timeout_s: float = TIMEOUT_S
                 ) -> tuple[dict[str, pd.DataFrame], dict[str, str]]:
    """`heat_series` from every source at once: (URL -> its series, URL -> why it did not answer).
    `fetch(url)` reads one source (the console's cached read; default: `heat_series` now)."""
    end = now or time.time()
    if fetch is None:
        def fetch(url: str) -> pd.DataFrame:
            return heat_series(url, minutes, nodes, end, timeout_s)

    frames: dict[str, pd.DataFrame] = {}
    problems: dict[str, str] = {}
    ask = []
    for url, _ in found:
        held = _held.get(url)
        if held is not None and time.monotonic() < held[0]:  # it did not answer a moment ago: not again yet
            problems[url] = held[1]
        else:
            ask.append(url)
    if not ask:
        return frames, problems
    with ThreadPoolExecutor(max_workers=min(8, len(ask)), thread_name_prefix="console-heat") as pool:
        futures = {url: pool.submit(fetch, url) for url in ask}
        for url, future in futures.items():
            try:
                frames[url] = future.result()
                _held.pop(url, None)
            except Exception as exc:  # noqa: BLE001 - this source's regions say why; the others render
                problems[url] = f"Prometheus at {url}: {describe(exc, timeout_s)} ({_dt(end):%H:%M:%S} UTC)"
                if _held.get(url, (0.0, ""))[1] != problems[url]:
                    log.warning("heat map: Prometheus at %s did not answer: %s", url, exc)  # the detail
                _held[url] = (time.monotonic() + HOLD_S, problems[url])
    return frames, problems


def combine(frames: dict[str, pd.DataFrame], found: Sources, nodes: pd.DataFrame) -> pd.DataFrame:
    """One series frame from every source's: each node's rows from the source that serves its region (a
    Prometheus that also scrapes another site's nodes does not count them twice)."""
    region_of = dict(zip(nodes["node"], nodes["region"], strict=False))
    own: Collection[str] = telemetry_sources.own(found)
    served = dict(found)
    parts = []
    for url, frame in frames.items():
        if frame.empty:
            continue
        keep = [telemetry_sources.serves(served.get(url, ()), region_of.get(n), own) for n in frame["node"]]
        parts.append(frame[keep])
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame()
    out = pd.concat(parts) if len(parts) > 1 else parts[0]
    out = out[~out.index.duplicated(keep="first")]
    columns = ["node", *sorted(c for c in out.columns if c != "node")]
    return out[columns].sort_index()


def current(cluster: Cluster, prometheus_url: str) -> tuple[pd.DataFrame, dict[str, str]]:
    """One read with a fresh Reader (nothing carried over)."""
    return Reader(prometheus_url).current(cluster)


# the labels that can name a device's node, in the operator's order (a relabelled label before Hostname; `job`
# as npu-exporter's documented Prometheus job sets it)
def heat_series(prometheus_url: str, minutes: int, nodes: list[str] | None = None,
                now: float | None = None, timeout_s: float = TIMEOUT_S) -> pd.DataFrame:
    """Utilization over the window, one row per node (all nodes), or per device of `nodes`.

    Rows are indexed by node (or device id); a `node` column says where each row is."""
    end = now or time.time()
    step = max(1, int(minutes * 60 / HEAT_POINTS))
    keys = ", ".join(NODE_LABELS)
    # one series per device (a GPU by its UUID, `uuid` read as it; a chip by its node and id) on its node as the
    # operator resolves it, however many exporters or scrape targets report it (an exporter upgrade, two
    # DaemonSets): a node's average counts each device once
    def gpus(label: Callable[[str], str], keys: str) -> str:
        return (f"max by (UUID, {NODE_LABEL}) (label_replace({label(gpu_utilization(nodes, keys))}, "
                f'"UUID", "$1", "uuid", "(.+)"))')

    def npus(label: Callable[[str], str], _: str) -> str:
        return f"max by (id, {NODE_LABEL}) ({label(select(UTIL['npu'], nodes))})"

    if nodes is not None:  # a few nodes' devices: their series only, cheap either way
        queries = [gpus(with_node_label, keys), npus(with_node_label, keys)]
    else:  # every node: grouped per node by Prometheus, the labelled series without the label machinery
        queries = [f"avg by ({NODE_LABEL}) ({by_node(q)})" for q in (gpus, npus)]
    prom = connect(prometheus_url, timeout_s)
    series: dict[str, list[list[Any]]] = {}  # name -> [[time, "value"], ...] as Prometheus sends them
    where: dict[str, str] = {}
    if nodes is None:  # every node: from the recording rule's series where Prometheus has them (the mean of each)
        # the packed series as recorded, unpacked here: the same arithmetic in PromQL (vector matching at every step)
        # took Prometheus 6.6 s at 12,500 nodes x 60 steps where the plain range read takes 0.2 s
        recorded = prom.custom_query_range(RECORDED, start_time=_dt(end - minutes * 60), end_time=_dt(end),
                                           step=f"{step}s")
        if recorded:
            for s in recorded:
                node = (s.get("metric") or {}).get(NODE_LABEL) or ""
                if node:
                    series[node], where[node] = s.get("values") or [], node
            return _mean(_grid(series, where))
    for query in queries:
        for s in prom.custom_query_range(query, start_time=_dt(end - minutes * 60), end_time=_dt(end),
                                         step=f"{step}s"):
            labels = s.get("metric") or {}
            node = labels.get(NODE_LABEL) or ""
            if not node:
                continue  # no label says where it is
            name = node if nodes is None else labels.get("UUID") or f"{node}/npu-{labels.get('id', '?')}"
            series[name] = s.get("values") or []
            where[name] = node
    return _grid(series, where)


def _mean(packed: pd.DataFrame) -> pd.DataFrame:
    """A grid of RECORDED values (devices + utilization sum / UTIL_PACK) as each cell's mean utilization; no value
    where no device had one."""
    if packed.empty:
        return packed
    values = packed.drop(columns="node").to_numpy(dtype=float)
    devices = np.floor(values)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(devices > 0, (values - devices) * UTIL_PACK / devices, np.nan)
    out = pd.DataFrame(mean, index=packed.index, columns=packed.columns[1:])
    out.insert(0, "node", packed["node"])
    return out


def _grid(series: Mapping[str, list[list[Any]]], where: Mapping[str, str]) -> pd.DataFrame:
    """One row per series (sorted by name), one column per sample time (sorted), NaN where a series has none:
    filled as one array (12,500 nodes x 60 points: a dict of Timestamps per series took seconds)."""
    times = sorted({float(t) for values in series.values() for t, _ in values})
    if not times:
        return pd.DataFrame()
    names = sorted(series)
    column = {t: i for i, t in enumerate(times)}
    grid = np.full((len(names), len(times)), np.nan)
    for row, name in enumerate(names):
        for t, v in series[name]:
            grid[row, column[float(t)]] = float(v)
    frame = pd.DataFrame(grid, index=names, columns=pd.to_datetime(times, unit="s", utc=True))
    frame.insert(0, "node", [where[n] for n in names])
    return frame


def heat(series: pd.DataFrame, nodes: pd.DataFrame, level: str, region: str | None = None) -> pd.DataFrame:
    """The heat map's rows at `level`: "region/class" (the fleet), "node" (one region) or "device"."""
    if series.empty:
        return series
    where = nodes.set_index("node")
    frame = series.drop(columns="node")
    if level == "region/class":  # one lookup of the whole column (12,500 nodes one by one took 0.5 s)
        on = series["node"]
        known = on.isin(where.index)
        keys = on[known].map(where["region"]).astype(str) + " · " + on[known].map(where["class"]).astype(str)
        return frame[known.to_numpy()].groupby(keys.to_numpy()).mean().sort_index()
    if level == "node":
        mine = series["node"].isin(set(where.index[where["region"] == region]) if region else set(where.index))
        return frame[mine.to_numpy()].sort_index()
    return frame.sort_index()


def history(prometheus_url: str, device: str, minutes: int, now: float | None = None) -> dict[str, pd.DataFrame]:
    """title -> (time, value) of one device over the window: utilization, memory, temperature, power, XID."""
    end = now or time.time()
    step = max(1, int(minutes * 60 / 240))
    sels, mig = device_matchers(device)
    pick = 3 if "/npu-" in device else 2
    prom = connect(prometheus_url, TIMEOUT_S)
    out: dict[str, pd.DataFrame] = {}
    for entry in HISTORY:
        title = entry[0]
        # a MIG instance has no GPU_UTIL: its utilization is the engine activity (a ratio), as the operator reads it
        pattern = MIG_UTILIZATION if mig and title == "Utilization" else entry[pick]
        if pick == 2 and (old := DCGM_1X.get(pattern.split("{", 1)[0])):  # dcgm-exporter 1.x's name as well
            pattern += f" or {old}{{sel}}"
        expr = f"max({' or '.join(pattern.format(sel=s) for s in sels)})"
        if title == "Utilization" and pick == 2 and not mig:
            # dcgm-exporter 2.2.9-2.4.1 ships GPU_UTIL commented out: the engine activity stands in where it is
            # missing, as the operator reads it (telemetry.adapters)
            expr += f" or max({' or '.join(MIG_UTILIZATION.format(sel=s) for s in sels)})"
        rows = [(pd.Timestamp(float(t), unit="s", tz="UTC"), float(v))
                for s in prom.custom_query_range(expr, start_time=_dt(end - minutes * 60),
                                                 end_time=_dt(end), step=f"{step}s")
                for t, v in s.get("values", [])]
        out[title] = pd.DataFrame(rows, columns=["time", "value"])
    return out


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)
