"""The aggregate read's pure parts: the packed per-pod value, the restriction of the per-device queries to some
nodes' series, the merged query's split, and a job's figures from Prometheus' per-pod figures."""

from __future__ import annotations

import re

import pytest

from heterojob.telemetry import digest
from heterojob.telemetry import snapshot as snap
from heterojob.telemetry.adapters import ADAPTERS
from heterojob.telemetry.snapshot import PodFigures
from heterojob.telemetry.model import DeviceSample, Health, HealthPolicy
from heterojob.telemetry.snapshot import Availability, JobRef, RegionTelemetry, Snapshot, job_telemetry


def packed(utils: list[float | None]) -> float:
    """What `pods_query` sums for these devices, as Prometheus would."""
    return sum(1 + (digest.PACK + u / digest.PACK_SUM if u is not None else 0) for u in utils)


@pytest.mark.parametrize("utils", [[90.0, 80.5, None], [None, None], [0.0], [100.0] * 16, [12.345, 99.99, 0.0, 57.0]])
def test_a_pods_value_gives_back_its_devices_and_their_mean_utilization(utils: list[float | None]) -> None:
    devices, mean = digest.pack_decode(packed(utils))
    known = [u for u in utils if u is not None]
    assert devices == len(utils)
    assert mean == (pytest.approx(sum(known) / len(known), abs=1e-3) if known else None)


def test_restricted_queries_select_only_the_named_nodes_series() -> None:
    queries = snap.queries(60)
    metrics = digest.metrics(ADAPTERS.values())
    for name, query in queries.items():
        if name == snap.UP:
            continue
        out = digest.restrict(query, metrics, {"node": {"g0", "g1"}})
        # every selector of a metric the per-device read asks carries the matcher, in braces of its own or merged
        for m in re.finditer(r'(?<![\w"|])([A-Za-z_][\w:]*)(\{[^}]*\})?(?=\[|\)|\s|$)', out):
            if m.group(1) in metrics:
                assert m.group(2) and 'node=~"g0|g1"' in m.group(2), (name, m.group(0))
        for m in re.finditer(r'\{__name__=~"[^"]*"[^}]*\}', out):
            assert 'node=~"g0|g1"' in m.group(0)
        # strings (label_replace's arguments, regexes of names) are left alone
        assert re.findall(r'"[A-Za-z_]\w*"', query) == [s for s in re.findall(r'"[A-Za-z_]\w*"', out)]
    two = digest.restrict(queries["dcgm:util"], metrics, {"node": {"g0"}, "Hostname": {"h1"}})
    assert 'node=~"g0"' in two and 'Hostname=~"h1"' in two and ") or (" in two


def test_a_merged_query_splits_back_by_name() -> None:
    merged = digest.merged({"a": "up", "b": "up == 0"})
    assert merged.count(digest.QUERY_LABEL) == 2
    vector = [{"metric": {"__name__": "up", digest.QUERY_LABEL: "a", "node": "g0"}, "value": [1.0, "1"]},
              {"metric": {digest.QUERY_LABEL: "b", "node": "g1"}, "value": [1.0, "0"]},
              {"metric": {digest.QUERY_LABEL: "other"}, "value": [1.0, "0"]}]
    split = digest.split_merged(vector, ["a", "b"])
    assert split == {"a": [{"metric": {"__name__": "up", "node": "g0"}, "value": [1.0, "1"]}],
                     "b": [{"metric": {"node": "g1"}, "value": [1.0, "0"]}]}


def test_a_job_reads_prometheus_figures_beside_device_rows() -> None:
    job = JobRef("team-a", "train", "r1", generation=2, replicas=2, per_replica=4)
    failed = DeviceSample("GPU-1", "n2", "dcgm", utilization=10.0, health=Health.FAILED, reason="fatal XID 79",
                          namespace="team-a", pod=job.pod(1))
    healthy = [DeviceSample(f"GPU-{i}", "n2", "dcgm", utilization=30.0, health=Health.HEALTHY,
                            namespace="team-a", pod=job.pod(1)) for i in (2, 3, 4)]
    s = Snapshot(devices={d.device_id: d for d in (failed, *healthy)},
                 regions={"r1": RegionTelemetry(Availability.OK)},
                 by_pod={("team-a", job.pod(1)): (failed, *healthy)},
                 pods={("team-a", job.pod(0)): PodFigures("n1", 4, 88.25)}, aggregated=4)
    t = job_telemetry(job, s)
    assert t.availability == Availability.OK and t.seen == 8
    assert t.per_replica == (88.2, 25.0)  # rank 0 from Prometheus' figures, rank 1 from its device rows
    assert [(r, d.device_id) for r, d in t.unhealthy] == [(1, "GPU-1")]
    assert t.stragglers == (1,)
    partial = Snapshot(devices={}, regions={"r1": RegionTelemetry(Availability.OK)},
                       pods={("team-a", job.pod(0)): PodFigures("n1", 3, None)}, aggregated=3)
    t = job_telemetry(job, partial)
    assert t.availability == Availability.DEGRADED and t.seen == 3 and t.per_replica == (None, None)
    assert "3 of 8 devices reported" in t.message


class Source:
    """A Prometheus as `digest.read` sees it: canned answers per query name, every question kept."""

    def __init__(self, pods: dict[tuple[str, str], int], rules: bool = False) -> None:
        self.pods, self.rules = pods, rules
        self.asked: list[dict[str, str]] = []

    def __call__(self, queries: dict[str, str]) -> dict[str, list[dict[str, object]]]:
        self.asked.append(dict(queries))
        out: dict[str, list[dict[str, object]]] = {name: [] for name in queries}
        if digest.PODS in queries:
            out[digest.PODS] = [{"metric": {digest.NODE_LABEL: node, digest.POD_LABEL: f"||team|{pod}|||"},
                                 "value": [0, str(n + n * digest.PACK + n * 50 / digest.PACK_SUM)]}
                                for (node, pod), n in self.pods.items()]
        if self.rules and digest.RULES in queries:
            out[digest.RULES] = [{"metric": {digest.WINDOW_LABEL: "60", digest.HOT_LABEL: "90"}, "value": [0, "1"]}]
        return out


def test_vanished_devices_are_asked_only_when_a_node_reports_fewer_than_last_time() -> None:
    nodes = {n: snap.NodeFacts("r1", "nvidia-h100", 8) for n in ("g0", "g1")}
    source = Source({("g0", "a-0"): 8, ("g1", "b-0"): 8})
    _, first, _ = digest.read(source, 60, HealthPolicy(), nodes, {}, {})
    assert first is not None and first.counts == {"g0": 8, "g1": 8}
    assert "vanished" in source.asked[0][digest.FLAGS]  # no earlier counts: asked at once
    source.asked.clear()
    _, same, n = digest.read(source, 60, HealthPolicy(), nodes, {}, {}, shaped=(), counts=first.counts)
    assert same is not None and n == 4 and "vanished" not in source.asked[0][digest.FLAGS]
    assert [list(q) for q in source.asked] == [[digest.PODS, digest.FLAGS, digest.RULES, snap.UP]]
    source.pods[("g1", "b-0")] = 7  # a device of g1 stopped reporting
    source.asked.clear()
    _, fewer, n = digest.read(source, 60, HealthPolicy(), nodes, {}, {}, shaped=(), counts=same.counts)
    assert fewer is not None and n == 5 and list(source.asked[1]) == [digest.VANISHED]
    assert fewer.pods[("team", "b-0")].devices == 7 and fewer.pods[("team", "b-0")].utilization == 50.0


def test_recorded_series_are_read_where_the_rules_are_and_computed_when_they_go() -> None:
    nodes = {"g0": snap.NodeFacts("r1", "nvidia-h100", 8)}
    source = Source({("g0", "a-0"): 8}, rules=True)
    _, learnt, _ = digest.read(source, 60, HealthPolicy(), nodes, {}, {})
    assert learnt is not None and learnt.rules == digest.Recorded(60, 90.0)
    assert source.asked[0][digest.PODS] == digest.pods_query(60)  # not known yet: computed
    source.asked.clear()
    _, read, _ = digest.read(source, 60, HealthPolicy(), nodes, {}, {}, shaped=(), counts=learnt.counts,
                             rules=learnt.rules)
    assert read is not None and read.pods == learnt.pods
    assert digest.PODS_RECORD in source.asked[0][digest.PODS] and "avg_over_time" not in source.asked[0][digest.PODS]
    flags = source.asked[0][digest.FLAGS]  # recorded, but a fatal XID is asked now
    assert flags.startswith(digest.FLAGS_RECORD + '{heterojob_window_s="60", heterojob_hot_celsius="90"} or ')
    assert "DCGM_FI_DEV_XID_ERRORS" in flags
    assert "npu_chip_info_health_status" not in flags and "GPU_TEMP" not in flags
    source.asked.clear()
    _, cooler, _ = digest.read(source, 60, HealthPolicy(), nodes, {}, {}, hot_celsius=80, shaped=(),
                               counts=learnt.counts, rules=learnt.rules)  # a job calls 80 °C hot: asked beside
    assert source.asked[0][digest.FLAGS].startswith(digest.FLAGS_RECORD) and ">= 80" in source.asked[0][digest.FLAGS]
    source.rules = False  # the rules were unloaded: this read computes its figures after all
    source.asked.clear()
    _, gone, _ = digest.read(source, 60, HealthPolicy(), nodes, {}, {}, shaped=(), counts=learnt.counts,
                             rules=learnt.rules)
    assert gone is not None and gone.rules is None and gone.pods == learnt.pods
    assert [digest.PODS_RECORD in q[digest.PODS] for q in source.asked] == [True, False]
    assert source.asked[1][digest.PODS] == digest.pods_query(60)


class Reader:
    """A PrometheusReader stand-in answering from a `Source`."""

    def __init__(self, source: Source) -> None:
        self.source, self.bytes_read = source, 0

    def query(self, queries: dict[str, str], at: float | None = None) -> dict[str, list[dict[str, object]]]:
        return self.source(queries)


def test_the_pods_figures_are_asked_once_a_window_and_sooner_for_a_running_pod_they_lack() -> None:
    from heterojob.telemetry.collect import Collector

    nodes = {n: snap.NodeFacts("r1", "nvidia-h100", 8) for n in ("g0", "g1")}
    source = Source({("g0", "a-0"): 8, ("g1", "b-0"): 8})
    collector = Collector("http://prom:9090", 60, 5, HealthPolicy(), device_rows_max=0)
    collector._reader = lambda url: Reader(source)  # type: ignore[method-assign,assignment,return-value]

    def read(at: float, *running: str, named: bool = True) -> bool:
        source.asked.clear()
        pods = {"r1": {("team", p): 8 for p in running}} if named else None
        out = collector.collect(at, {"r1": None}, nodes, {}, pods=pods)
        assert out is not None and out[0].pods[("team", "a-0")].devices == 8
        assert all(digest.FLAGS in q for q in source.asked[:1])  # the fault flags: every read
        return digest.PODS in source.asked[0]

    assert read(0, "a-0", "b-0")  # nothing to reuse
    assert not read(15, "a-0", "b-0") and not read(45, "a-0")  # within the window, every running pod in them
    # a running pod they lack: asked now, and every read while it is younger than SETTLE_S (its exporter may not
    # have scraped it yet), then not again within the window (this changed: it was asked once, then not for a window)
    assert read(50, "a-0", "c-0") and read(65, "a-0", "c-0")
    assert not read(80, "a-0", "c-0") and not read(110, "a-0", "c-0")
    source.pods[("g1", "d-0")] = 5  # a pod not running yet, 5 of its 8 devices reporting
    assert read(125, "a-0", "c-0")  # a window after the last ask
    assert read(130, "a-0", "d-0") and read(135, "a-0", "d-0") and read(155, "a-0", "d-0")  # running, short, young
    assert not read(160, "a-0", "d-0") and not read(175, "a-0", "d-0")
    assert read(112, "a-0", named=False)  # no running pods named (a read without the jobs): asked every read


def test_a_new_pod_its_exporter_has_not_scraped_yet_is_asked_again_at_the_next_read() -> None:
    from heterojob.telemetry.collect import Collector

    nodes = {n: snap.NodeFacts("r1", "nvidia-h100", 8) for n in ("g0", "g1")}
    source = Source({("g0", "a-0"): 8})
    collector = Collector("http://prom:9090", 60, 5, HealthPolicy(), device_rows_max=0)
    collector._reader = lambda url: Reader(source)  # type: ignore[method-assign,assignment,return-value]

    def read(at: float, *running: str) -> tuple[bool, Snapshot]:
        source.asked.clear()
        out = collector.collect(at, {"r1": None}, nodes, {}, pods={"r1": {("team", p): 8 for p in running}})
        assert out is not None
        return digest.PODS in source.asked[0], out[0]

    assert read(0, "a-0")[0] and not read(15, "a-0")[0]
    assert read(30, "a-0", "b-0")[0]  # b-0 turned Running before its exporter's first scrape: short, asked
    source.pods[("g1", "b-0")] = 8  # scraped now
    asked, snapshot = read(45, "a-0", "b-0")  # asked again at once (it was a window later before), and found
    assert asked and snapshot.pods[("team", "b-0")].devices == 8
    assert not read(60, "a-0", "b-0")[0]  # all there: reused again


class Vanishing:
    """A source over time: node g1's device 7 (pod b-0) has its last sample at `gone`; `vanished` names it when
    the query's lookback (`[Ns] offset 60s`) covers that sample, as Prometheus would; a drill of g1 finds its other
    seven devices."""

    def __init__(self, gone: float) -> None:
        self.gone = gone

    def query(self, queries: dict[str, str], at: float) -> dict[str, list[dict[str, object]]]:
        out: dict[str, list[dict[str, object]]] = {name: [] for name in queries}
        b = 8 if self.gone > at - 60 else 7  # counted while a sample is in the window
        if digest.PODS in queries:
            out[digest.PODS] = [{"metric": {digest.NODE_LABEL: node, digest.POD_LABEL: f"||team|{pod}|||"},
                                 "value": [0, str(n + n * digest.PACK + n * 50 / digest.PACK_SUM)]}
                                for node, pod, n in (("g0", "a-0", 8), ("g1", "b-0", b))]
        for name in (digest.FLAGS, digest.VANISHED):
            if name in queries and (m := re.search(r"\[(\d+)s\] offset 60s", queries[name])):
                if at - 60 - int(m.group(1)) < self.gone <= at - 60:
                    out[name] = [{"metric": {"node": "g1", "gpu": "7", "UUID": "GPU-7", "namespace": "team",
                                             "pod": "b-0", digest.FLAG_LABEL: digest.VANISHED,
                                             snap.ROLE_LABEL: "dcgm"}, "value": [0, "1"]}]
        if "drill" in queries:
            out["drill"] = [{"metric": {digest.QUERY_LABEL: "dcgm:util", "node": "g1", "gpu": str(i),
                                        "UUID": f"GPU-{i}", "namespace": "team", "pod": "b-0"}, "value": [0, "50"]}
                            for i in range(7)]
        return out


@pytest.mark.parametrize("period", [15.0, 22.0, 19.5])
def test_a_device_that_vanishes_while_the_figures_are_reused_is_failed_at_the_next_ask(period: float) -> None:
    from heterojob.telemetry.collect import Collector

    nodes = {n: snap.NodeFacts("r1", "nvidia-h100", 8) for n in ("g0", "g1")}
    running = {"r1": {("team", "a-0"): 8, ("team", "b-0"): 8}}
    for gone in [period * k + d for k in range(1, 6) for d in (0.5, period / 2, period - 0.5)]:
        fleet = Vanishing(gone)
        collector = Collector("http://prom:9090", 60, 5, HealthPolicy(), device_rows_max=0)
        collector._reader = lambda url: fleet  # type: ignore[method-assign,assignment,return-value]
        previous: dict[str, DeviceSample] = {}
        failed_at = None
        for k in range(int(400 // period)):
            out = collector.collect(k * period, {"r1": None}, nodes, previous, pods=running)
            assert out is not None
            previous = dict(out[0].devices)
            if (d := previous.get("GPU-7")) is not None and d.health == Health.FAILED:
                assert "series vanished" in d.reason and d.pod == "b-0"
                failed_at = k * period
                break
        # FAILED at the first `pods` ask after it left the window (gone + 60): less than a window and a period later
        assert failed_at is not None, (period, gone)
        assert failed_at < gone + 60 + 60 + period, (period, gone, failed_at)


def test_hot_now_is_confirmed_over_the_window_for_its_nodes_only() -> None:
    nodes = {n: snap.NodeFacts("r1", "nvidia-h100", 8) for n in ("g0", "g1")}
    source = Source({("g0", "a-0"): 8, ("g1", "b-0"): 8})
    hot_now = {"metric": {"node": "g1", "gpu": "2", "UUID": "GPU-2", digest.FLAG_LABEL: digest.NOW["hot"],
                          snap.ROLE_LABEL: "dcgm"}, "value": [0, "95"]}

    def ask(queries: dict[str, str]) -> dict[str, list[dict[str, object]]]:
        out = source(queries)
        if digest.FLAGS in queries:
            out[digest.FLAGS] = [hot_now]
        return out

    _, read, n = digest.read(ask, 60, HealthPolicy(), nodes, {}, {}, shaped=(), counts={"g0": 8, "g1": 8})
    flags, confirm = source.asked[0][digest.FLAGS], source.asked[1][digest.CONFIRM]
    assert "min_over_time(DCGM_FI_DEV_GPU_TEMP" not in flags and "DCGM_FI_DEV_GPU_TEMP >= 90" in flags
    assert 'min_over_time(DCGM_FI_DEV_GPU_TEMP{node=~"g1"}[60s]) >= 90' in confirm and "g0" not in confirm
    # hot now but not over the window (the confirmation found nothing): no node read per device
    assert read is not None and read.drilled == frozenset() and n == 5
