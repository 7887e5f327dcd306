"""End to end: the simulated exporters, scraped by a real Prometheus (1 s), read by the monitor.

The snapshot must say what the exporters were told to emit, injected faults included, and losing
Prometheus must make telemetry unavailable (no fault) until it comes back.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from heterojob import defaults
from heterojob.controller import FleetSource
from heterojob.controller.monitor import Monitor, TelemetryConfig
from heterojob.sim.telemetry.exporters import ExporterFleet
from heterojob.sim.cluster.nodes import node
from heterojob.sim.telemetry.prometheus import PrometheusServer
from heterojob.telemetry.model import Health
from heterojob.telemetry.snapshot import Availability, JobRef, Snapshot, WatchedJob, job_telemetry
from heterojob.sim.cluster.harness import Emulator, OperatorRunner
from tests.conftest import Cluster, eventually
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from heterojob.telemetry.model import HealthPolicy
from heterojob.sim.telemetry.devices import ExporterProfile, realistic_mix

# scripts/install-deps installs Prometheus; only an explicit opt-out skips (never a silent skip in CI)
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(os.environ.get("HETEROJOB_SKIP_E2E") == "1",
                                                  reason="HETEROJOB_SKIP_E2E=1")]

NODES = [node("g0", "cn-east", "nvidia-h100", devices=4), node("g1", "cn-east", "nvidia-h100", devices=4),
         node("n0", "cn-north", "ascend-910b", devices=4), node("n1", "cn-north", "ascend-910b", devices=4),
         node("c0", "cn-east", "cpu")]
TRAIN = JobRef("team-a", "train", "cn-east", generation=1, replicas=2, per_replica=4)
NPU = JobRef("team-b", "npu", "cn-north", generation=3, replicas=2, per_replica=2)


def monitor(url: str) -> Monitor:
    source = FleetSource.from_objects([*NODES, *defaults.all_objects()])
    jobs = {"team-a/train": WatchedJob(TRAIN, "nvidia-h100", "1"), "team-b/npu": WatchedJob(NPU, "ascend-910b", "1")}
    return Monitor(None, source, lambda: jobs, TelemetryConfig(prometheus_url=url, window_s=4, timeout_s=3))


def collect(m: Monitor) -> Snapshot:
    import time

    snapshot = m.collect(time.time())
    assert snapshot is not None
    m.snapshot = snapshot
    return snapshot


def by_place(s: Snapshot) -> dict[tuple[str, str], Any]:
    return {(d.node, d.index): d for d in s.devices.values()}


def test_snapshot_matches_what_the_exporters_emit_faults_included(fleet: tuple[ExporterFleet, PrometheusServer]
                                                                  ) -> None:
    exporters, prom = fleet
    exporters.inject("fatal-xid", "g0", 1, 79)
    exporters.inject("application-xid", "g1", 0, 13)
    exporters.inject("overheat", "g1", 2, 96)
    exporters.inject("npu-unhealthy", "n0", 0)
    exporters.inject("npu-unknown", "n0", 3)
    exporters.inject("straggle", "g1", 1, 0.2)
    exporters.inject("straggle", "g1", 3, 0.2)
    m = monitor(prom.url)

    def settled() -> Snapshot | None:
        s = collect(m)
        d = by_place(s)
        ok = (len(s.devices) == 16 and d[("g0", "1")].health == Health.FAILED
              and d[("g1", "2")].health == Health.DEGRADED and d[("n0", "0")].health == Health.FAILED
              and (d[("g1", "1")].utilization or 100) < 40)
        return s if ok else None

    s = eventually(settled, timeout=30, interval=0.5, what="16 devices with the injected faults")
    d = by_place(s)
    assert m.stats.queries == 9  # DCGM: identity, temp, grouped, FB total; Ascend: identity, temp, health, grouped; `up`
    assert d[("g0", "1")].reason == "fatal XID 79"
    assert d[("g1", "0")].health == Health.HEALTHY and d[("g1", "0")].reason == "application XID 13 (no action)"
    assert d[("g1", "2")].reason.startswith("overheat 96°C")
    assert d[("n0", "3")].health == Health.UNKNOWN and "2147483647" in d[("n0", "3")].reason
    assert d[("n0", "1")].health == Health.HEALTHY
    # both dcgm-exporter hostname spellings (g0: Hostname, g1: hostname) resolve to the node
    assert {d[("g0", "0")].node, d[("g1", "0")].node} == {"g0", "g1"}
    # joined from the Node objects
    assert (d[("g0", "0")].region, d[("g0", "0")].device_class) == ("cn-east", "nvidia-h100")
    assert (d[("n1", "0")].region, d[("n1", "0")].device_class) == ("cn-north", "ascend-910b")
    # workload-driven values and the pods' labels
    assert 80 <= (d[("g0", "0")].utilization or 0) <= 100 and d[("g0", "0")].pod == "train-g1-0"
    assert d[("n1", "3")].utilization == 0 and d[("n1", "3")].pod is None
    assert d[("g0", "0")].memory_total_mib == 80 * 1024 and d[("n0", "0")].memory_total_mib == 64 * 1024

    train = job_telemetry(TRAIN, s)
    assert train.availability == Availability.OK and train.seen == 8
    # rank 1 has two devices at a fifth of the pace: slower, but above half its peer's median
    assert 40 < (train.per_replica[1] or 0) < 70 and train.stragglers == ()
    assert [(rank, dev.node, dev.index) for rank, dev in train.unhealthy] == [(0, "g0", "1"), (1, "g1", "2")]
    npu = job_telemetry(NPU, s)
    assert npu.seen == 4 and [(r, dev.index) for r, dev in npu.unhealthy] == [(0, "0")]


def test_a_straggling_replica_is_named(fleet: tuple[ExporterFleet, PrometheusServer]) -> None:
    exporters, prom = fleet
    exporters.clear()
    for device in range(4):
        exporters.inject("straggle", "g1", device, 0.15)
    m = monitor(prom.url)
    # once the window holds only slow samples (the window average is the hysteresis)
    t = eventually(lambda: (t := job_telemetry(TRAIN, collect(m))).stragglers and (t.per_replica[1] or 100) < 25
                   and t, timeout=30, interval=0.5, what="rank 1 straggling")
    assert t.stragglers == (1,) and "rank 1" in t.straggler_message
    assert (t.per_replica[0] or 0) > 80 and (t.per_replica[1] or 100) < 25


def test_vanished_device_fails_but_a_down_exporter_is_unknown(fleet: tuple[ExporterFleet, PrometheusServer]
                                                              ) -> None:
    exporters, prom = fleet
    exporters.clear()
    m = monitor(prom.url)
    eventually(lambda: len(collect(m).devices) == 16, timeout=30, interval=0.5, what="all devices")
    exporters.inject("vanish", "g0", 3)
    exporters.inject("exporter-down", "n1")

    def both() -> Snapshot | None:
        s = collect(m)
        d = by_place(s)
        return s if d[("g0", "3")].health == Health.FAILED and d[("n1", "0")].health == Health.UNKNOWN else None

    s = eventually(both, timeout=30, interval=0.5, what="g0/3 vanished and n1's exporter down")
    d = by_place(s)
    assert "vanished" in d[("g0", "3")].reason
    assert all(d[("n1", str(i))].reason == "exporter down (up == 0)" for i in range(4))
    assert s.exporters_down == {"n1"}
    npu = job_telemetry(NPU, s)
    assert not [dev for _, dev in npu.unhealthy if dev.node == "n1"]  # missing telemetry is never a fault
    exporters.clear()


def test_prometheus_gone_is_unavailable_and_recovers_by_itself(fleet: tuple[ExporterFleet, PrometheusServer]
                                                               ) -> None:
    exporters, prom = fleet
    exporters.clear()
    m = monitor(prom.url)
    eventually(lambda: len(collect(m).devices) == 16, timeout=30, interval=0.5, what="all devices")
    prom.stop()
    try:
        s = collect(m)
        region = s.region("cn-east")
        assert region.availability == Availability.UNAVAILABLE and "cannot reach Prometheus" in region.message
        t = job_telemetry(TRAIN, s)
        assert t.availability == Availability.UNAVAILABLE and t.unhealthy == ()
    finally:
        prom.start()
    s = eventually(lambda: (s := collect(m)).region("cn-east").availability == Availability.OK and s,
                   timeout=30, interval=0.5, what="telemetry back")
    assert job_telemetry(TRAIN, s).availability == Availability.OK


@pytest.mark.harness
def test_operator_writes_utilization_and_device_health_to_the_job(
        fleet: tuple[ExporterFleet, PrometheusServer], emulator: Emulator, cluster: Cluster) -> None:
    exporters, prom = fleet
    exporters.clear()
    cluster.seed(NODES, namespaces=("team-a", "team-b"))
    spec = {"priority": "high", "replicas": {"min": 2}, "devices": [{"deviceClass": "nvidia-h100", "perReplica": 4}],
            "template": {"spec": {"containers": [{"name": "main", "image": "train:cuda12"}]}}}
    telemetry = TelemetryConfig(prometheus_url=prom.url, interval_s=0.5, window_s=3, timeout_s=3)
    with OperatorRunner(emulator.kubeconfig, telemetry=telemetry) as operator:
        cluster.create_job("train", spec)
        pods = eventually(lambda: (p := cluster.pods("train")) and len(p) == 2 and p, what="2 pods")
        for pod in pods:
            cluster.set_pod_phase(pod.metadata.name, "Running")
        nodes = cluster.job("train")["status"]["placement"]["nodes"]
        exporters.bind({n: [("team-a", f"train-g1-{rank}", 4)] for rank, n in enumerate(nodes)})

        def conditions() -> dict[str, dict[str, Any]]:
            return {c["type"]: c for c in (cluster.job("train").get("status") or {}).get("conditions", [])}

        def measured() -> dict[str, Any] | None:
            status = cluster.job("train").get("status") or {}
            util = status.get("utilization") or {}
            healthy = conditions().get("DevicesHealthy", {}).get("status") == "True"
            return util if healthy and (util.get("average") or 0) > 80 and len(util["perReplica"]) == 2 else None

        util = eventually(measured, timeout=30, interval=0.3, what="utilization in status")
        assert util["stragglers"] == [] and util["time"]
        assert conditions()["TelemetryUnavailable"]["status"] == "False"

        exporters.inject("fatal-xid", nodes[1], 2, 79)
        failed = eventually(lambda: (c := conditions().get("DevicesHealthy", {})).get("status") == "False" and c,
                            timeout=30, interval=0.3, what="DevicesHealthy=False")
        assert failed["reason"] == "DeviceFailed" and "rank 1:" in failed["message"] and "XID 79" in failed["message"]
        exporters.clear()
    assert "Traceback" not in operator.output


@pytest.mark.harness
def test_operator_without_reachable_prometheus_says_unavailable(emulator: Emulator, cluster: Cluster) -> None:
    cluster.seed(NODES)
    spec = {"priority": "high", "replicas": {"min": 1}, "devices": [{"deviceClass": "nvidia-h100", "perReplica": 4}],
            "template": {"spec": {"containers": [{"name": "main", "image": "train:cuda12"}]}}}
    telemetry = TelemetryConfig(prometheus_url="http://127.0.0.1:9", interval_s=0.5, window_s=3, timeout_s=1)
    with OperatorRunner(emulator.kubeconfig, telemetry=telemetry) as operator:
        cluster.create_job("lonely", spec)
        [pod] = eventually(lambda: cluster.pods("lonely"), what="pod")
        cluster.set_pod_phase(pod.metadata.name, "Running")

        def unavailable() -> dict[str, Any] | None:
            conds = {c["type"]: c for c in (cluster.job("lonely").get("status") or {}).get("conditions", [])}
            c = conds.get("TelemetryUnavailable", {})
            return conds if c.get("status") == "True" else None

        conds = eventually(unavailable, timeout=30, interval=0.3, what="TelemetryUnavailable=True")
        assert conds["TelemetryUnavailable"]["reason"] == "PrometheusUnavailable"
        assert "cannot reach Prometheus" in conds["TelemetryUnavailable"]["message"]
        assert conds["DevicesHealthy"]["status"] == "Unknown"
        assert cluster.job("lonely")["status"]["phase"] == "Running"  # no action on missing data
    assert "Traceback" not in operator.output


@pytest.mark.harness
def test_a_fatal_xid_migrates_the_job_off_the_node_without_waiting(
        fleet: tuple[ExporterFleet, PrometheusServer], emulator: Emulator, cluster: Cluster) -> None:
    exporters, prom = fleet
    exporters.clear()
    cluster.seed(NODES, namespaces=("team-a", "team-b"))
    spec = {"priority": "high", "replicas": {"min": 1}, "devices": [{"deviceClass": "nvidia-h100", "perReplica": 4}],
            "checkpoint": {"timeoutSeconds": 600, "intervalSeconds": 1, "storage": "s3://ckpt"},
            "template": {"spec": {"containers": [{"name": "main", "image": "train:cuda12"}]}}}
    telemetry = TelemetryConfig(prometheus_url=prom.url, interval_s=0.5, window_s=3, timeout_s=3)
    with OperatorRunner(emulator.kubeconfig, telemetry=telemetry) as operator:
        cluster.create_job("victim", spec)
        [pod] = eventually(lambda: cluster.pods("victim"), what="pod")
        cluster.set_pod_phase(pod.metadata.name, "Running")
        eventually(lambda: (cluster.job("victim").get("status") or {}).get("phase") == "Running", what="Running")
        first = cluster.job("victim")["status"]["placement"]["nodes"][0]
        # a periodic checkpoint the SDK acknowledges: what the job resumes from after the fault
        ckpt = eventually(lambda: (cluster.core.read_namespaced_pod(pod.metadata.name, "team-a").metadata.annotations
                                   or {}).get("heterojob.io/checkpoint-request"), what="periodic request")
        cluster.core.patch_namespaced_pod(pod.metadata.name, "team-a", {"metadata": {"annotations": {
            "heterojob.io/checkpoint-ack": f"{ckpt};300;s3://ckpt/victim/{ckpt}/"}}})
        eventually(lambda: ((cluster.job("victim")["status"].get("checkpoint") or {}).get("last") or {}).get("step")
                   == 300, what="checkpoint recorded")
        exporters.bind({first: [("team-a", "victim-g1-0", 4)]})
        eventually(lambda: ((cluster.job("victim")["status"].get("utilization") or {}).get("average") or 0) > 80,
                   timeout=30, interval=0.3, what="the first gang's utilization")
        exporters.inject("fatal-xid", first, 1, 79)

        def moved() -> Any:
            s = cluster.job("victim").get("status") or {}
            p = s.get("placement") or {}
            return s if p.get("generation") == 2 else None

        s = eventually(moved, timeout=30, interval=0.3, what="placed again after the fault")
        assert s["placement"]["nodes"] != [first]
        # the figure measured the first gang's devices: the new one, not reported yet, has none (kubectl's Util
        # empty), not the last one's
        assert "utilization" not in s
        [new] = eventually(lambda: [p for p in cluster.pods("victim")
                                    if p.metadata.labels["heterojob.io/generation"] == "2"], what="the new pod")
        env = {e.name: e.value for e in new.spec.containers[0].env}
        assert env["HETEROJOB_RESUME_FROM"] == f"s3://ckpt/victim/{ckpt}/"
        entry = next(h for h in s["history"] if h["action"] == "migrate")
        assert entry["reason"].startswith("deviceFailed: rank 0:") and "fatal XID 79" in entry["reason"]
        assert entry["durationSeconds"] < 5  # a dead device is not waited on (the timeout is 600 s)
        exporters.clear()
    assert "Traceback" not in operator.output


@pytest.mark.harness
def test_overheat_must_persist_before_the_job_moves(
        fleet: tuple[ExporterFleet, PrometheusServer], emulator: Emulator, cluster: Cluster) -> None:
    import time

    exporters, prom = fleet
    exporters.clear()
    cluster.seed(NODES, namespaces=("team-a", "team-b"))
    spec = {"priority": "high", "replicas": {"min": 1}, "devices": [{"deviceClass": "nvidia-h100", "perReplica": 4}],
            "checkpoint": {"timeoutSeconds": 1}, "policy": {"overheatForSeconds": 6},
            "template": {"spec": {"containers": [{"name": "main", "image": "train:cuda12"}]}}}
    telemetry = TelemetryConfig(prometheus_url=prom.url, interval_s=0.5, window_s=2, timeout_s=3)
    with OperatorRunner(emulator.kubeconfig, telemetry=telemetry) as operator:
        cluster.create_job("warm", spec)
        [pod] = eventually(lambda: cluster.pods("warm"), what="pod")
        cluster.set_pod_phase(pod.metadata.name, "Running")
        eventually(lambda: (cluster.job("warm").get("status") or {}).get("phase") == "Running", what="Running")
        first = cluster.job("warm")["status"]["placement"]["nodes"][0]
        exporters.bind({first: [("team-a", "warm-g1-0", 4)]})
        exporters.inject("overheat", first, 0, 97)

        def hot_since() -> Any:
            conds = {c["type"]: c for c in cluster.job("warm")["status"].get("conditions", [])}
            c = conds.get("DevicesHealthy", {})
            return c if c.get("reason") == "DeviceDegraded" else None

        eventually(hot_since, timeout=30, interval=0.3, what="DevicesHealthy=False (overheat)")
        seen = time.monotonic()
        time.sleep(3)  # half the holding time: nothing moves
        assert cluster.job("warm")["status"]["placement"]["generation"] == 1
        s = eventually(lambda: (s := cluster.job("warm").get("status") or {}).get("placement", {}).get("generation")
                       == 2 and s, timeout=30, interval=0.3, what="moved once the overheat persisted")
        assert time.monotonic() - seen >= 3
        assert s["history"][-1]["reason"].startswith("overheat:")
        exporters.clear()
    assert "Traceback" not in operator.output


# --- recorded shapes of real exporters (tests/fixtures/exporters), served to the real Prometheus ------------



FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "exporters"
STAMPED = re.compile(r"^([^#].*\}|[^#{ ]+) (\S+) (\d{12,})$")  # a sample with an explicit ms timestamp
EXPORTER_POD = {"pod": "nvidia-dcgm-exporter-cmhft", "namespace": "gpu-operator", "container": "nvidia-dcgm-exporter",
                "endpoint": "gpu-metrics", "service": "nvidia-dcgm-exporter"}
# node -> (fixture, family, target labels as the shipped relabelling gives them, relabelled node label?)
RECORDED = {
    "node-a": ("dcgm-2.4.6-2.6.10-servicemonitor.prom", "dcgm", EXPORTER_POD, True),
    "gpu-node-b": ("dcgm-3.3.9-3.6.1-nodename-xid.prom", "dcgm", {}, False),  # plain static config: Hostname only
    "gpu-node-c": ("dcgm-3.3.5-3.4.1-mig.prom", "dcgm", {}, True),
    "gpu-node-d": ("dcgm-4.5.3-4.8.2-head-hostname-xidcount.prom", "dcgm", {}, True),
    "gpu-node-e": ("dcgm-2.3.2-2.6.3-old-namespace.prom", "dcgm", {}, True),
    "npu-node-f": ("npu-exporter-20210330-V2.0.1.prom", "npu-exporter", {}, True),
    "npu-node-g": ("npu-exporter-v5.0.0-RC3.prom", "npu-exporter", {}, True),
    "npu-node-h": ("npu-exporter-v6.0.0-mindcluster.prom", "npu-exporter", {}, True),
}
RECORDED_NODES = [node(n, "cn-east" if f == "dcgm" else "cn-north", "nvidia-h100" if f == "dcgm" else "ascend-910b",
                       devices=4) for n, (_, f, _, _) in RECORDED.items()]


class RecordedExporters:
    """Serves each fixture as its node's /metrics; npu-exporter's explicit timestamps become the scrape time.
    `drop[node]` removes the sample lines containing that text (a chip that stopped reporting)."""

    def __init__(self, recorded: dict[str, tuple[str, str, dict[str, str], bool]] | None = None) -> None:
        self.drop: dict[str, str] = {}
        self.recorded = RECORDED if recorded is None else recorded
        bodies = {n: (FIXTURES / f).read_text() for n, (f, _, _, _) in self.recorded.items()}
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
                name = self.path.strip("/").split("/")[0]
                if name not in bodies:
                    self.send_response(404)
                    self.end_headers()
                    return
                now_ms = str(int(time.time() * 1000))
                lines = []
                for line in bodies[name].splitlines():
                    if owner.drop.get(name) and not line.startswith("#") and owner.drop[name] in line:
                        continue
                    lines.append(STAMPED.sub(lambda m: f"{m.group(1)} {m.group(2)} {now_ms}", line))
                body = ("\n".join(lines) + "\n").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def targets(self) -> list[dict[str, Any]]:
        host, port = self.server.server_address[:2]
        return [{"node": n, "family": fam, "region": "", "path": f"/{n}/metrics", "labels": labels,
                 "relabel_node": relabel, "address": f"{host}:{port}"}
                for n, (_, fam, labels, relabel) in self.recorded.items()]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def recorded() -> Iterator[tuple[RecordedExporters, PrometheusServer]]:
    exporters = RecordedExporters()
    prom = PrometheusServer(exporters.targets(), "unused:0", scrape_interval_s=1.0).start()
    yield exporters, prom
    prom.stop()
    exporters.stop()


def recorded_monitor(url: str, window_s: int = 4) -> Monitor:
    source = FleetSource.from_objects([*RECORDED_NODES, *defaults.all_objects()])
    return Monitor(None, source, lambda: {}, TelemetryConfig(prometheus_url=url, window_s=window_s, timeout_s=3,
                                                             policy=HealthPolicy()))


def test_recorded_exporter_shapes_through_a_real_prometheus(recorded: tuple[RecordedExporters, PrometheusServer]
                                                            ) -> None:
    _, prom = recorded
    m = recorded_monitor(prom.url)
    s = eventually(lambda: (s := collect(m)) and len(s.devices) == 26 and s, timeout=30, interval=0.5,
                   what="26 devices from eight recorded exporters")
    d = s.devices
    # every device is placed on its Node, so region and class join (case 2), whatever its host label said
    assert {x.node for x in d.values()} == set(RECORDED)
    assert all(x.region in ("cn-east", "cn-north") for x in d.values())
    # case 3: ServiceMonitor honorLabels false: exported_pod is the workload, `pod` the exporter
    a0 = d["GPU-1f2e3d4c-0a0b-4c5d-8e9f-000000000a00"]
    assert (a0.node, a0.namespace, a0.pod) == ("node-a", "team-a", "sm-train-g1-0")
    assert d["GPU-1f2e3d4c-0a0b-4c5d-8e9f-000000000a02"].pod is None  # idle: not the exporter's own pod
    # Hostname names the Node (NODE_NAME set); XID 79 with err_code/err_msg labels; FB_RESERVED in the total
    b1 = d["GPU-7c1d5e2a-93b4-4f6e-a1c2-00000000b001"]
    assert b1.node == "gpu-node-b" and b1.health == Health.FAILED and b1.reason == "fatal XID 79"
    assert b1.memory_total_mib == 69087 + 11545 + 527
    assert s.failed_nodes.keys() == {"gpu-node-b"}
    # case 1: MIG instances, utilization from the graphics engine
    mig = {k: v for k, v in d.items() if "/mig-" in k}
    assert sorted(mig) == [f"GPU-3e9a0c44-2b1f-4d8e-9a67-00000000c000/mig-{i}" for i in (1, 2, 3)]
    assert mig["GPU-3e9a0c44-2b1f-4d8e-9a67-00000000c000/mig-1"].utilization == pytest.approx(81.24)
    assert mig["GPU-3e9a0c44-2b1f-4d8e-9a67-00000000c000/mig-2"].pod == "mig-job-g1-1"
    # case 6 with the count enabled: the sticky 79 is old news
    d2 = d["GPU-a51c0f9e-6d21-4b0a-8c3e-00000000d002"]
    assert d2.node == "gpu-node-d" and d2.health == Health.HEALTHY and d2.last_error == "XID 79"
    assert d["GPU-0d4f7a10-8c2e-4b39-b1aa-00000000e000"].pod == "old-ns-g1-0"
    # case 5: -1 and 4294967295 are not readings
    assert d["npu-node-f/npu-2"].utilization is None and d["npu-node-f/npu-0"].utilization == 93
    assert d["npu-node-g/npu-3"].utilization is None
    # 2023 npu-exporter: the pod comes from container_npu_utilization
    assert (d["npu-node-g/npu-1"].namespace, d["npu-node-g/npu-1"].pod) == ("team-f", "npu23-g1-0")
    # 2024: health -1 is unknown; a chip shared by pods belongs to none
    assert d["npu-node-h/npu-1"].health == Health.UNKNOWN and d["npu-node-h/npu-0"].health == Health.HEALTHY
    assert d["npu-node-h/npu-2"].pod is None and d["npu-node-h/npu-2"].shared
    assert s.region("cn-east").availability == Availability.OK, s.region("cn-east").message
    assert m.stats.queries <= 12


def test_the_console_finds_every_recorded_device_history(recorded: tuple[RecordedExporters, PrometheusServer]
                                                         ) -> None:
    """The console's device page (Prometheus range queries) names devices as the adapters do: a MIG instance
    (engine activity), `uuid` of --use-old-namespace, NPUs by a relabelled `node` or by Hostname."""
    from heterojob_console.devices import history

    _, prom = recorded
    s = eventually(lambda: (s := collect(recorded_monitor(prom.url))) and len(s.devices) == 26 and s, timeout=30,
                   interval=0.5, what="26 devices from eight recorded exporters")
    time.sleep(2)  # a few points in the range
    for device, sample in s.devices.items():
        charts = history(prom.url, device, 5)
        if sample.utilization is not None:
            values = charts["Utilization"]["value"]
            assert len(values) and values.iloc[-1] == pytest.approx(sample.utilization, abs=25), device
        if sample.memory_used_mib is not None:
            assert len(charts["Memory used"]), device


def test_a_chip_that_stops_reporting_vanishes_within_the_window(
        recorded: tuple[RecordedExporters, PrometheusServer]) -> None:
    """Case 4: npu-exporter's timestamps mean no staleness markers; the window, not 5 minutes, decides."""
    exporters, prom = recorded
    m = recorded_monitor(prom.url, window_s=3)
    eventually(lambda: "npu-node-h/npu-3" in collect(m).devices, timeout=30, interval=0.5, what="chip 3")
    exporters.drop["npu-node-h"] = 'id="3"'
    try:
        s = eventually(lambda: (s := collect(m)).devices["npu-node-h/npu-3"].health == Health.FAILED and s,
                       timeout=20, interval=0.5, what="chip 3 vanished")
        assert "vanished" in s.devices["npu-node-h/npu-3"].reason
    finally:
        exporters.drop.clear()


def test_the_snapshot_command_prints_what_heterojob_sees(recorded: tuple[RecordedExporters, PrometheusServer],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from heterojob.cli import main

    _, prom = recorded
    eventually(lambda: len(collect(recorded_monitor(prom.url)).devices) == 26, timeout=30, interval=0.5,
               what="all devices")
    assert main(["telemetry", "snapshot", "--prometheus-url", prom.url, "--json", "--window", "4"]) == 0
    captured = capsys.readouterr()
    rows = {r["device"]: r for r in json.loads(captured.out)}
    # without a kubeconfig, nodes come from labels only: the relabelled node, else Hostname as is
    assert rows["GPU-7c1d5e2a-93b4-4f6e-a1c2-00000000b001"]["node"] == "gpu-node-b"
    assert rows["GPU-7c1d5e2a-93b4-4f6e-a1c2-00000000b001"]["health"] == "failed"
    assert {"device", "node", "region", "class", "utilization", "memory_used_mib", "memory_total_mib",
            "temperature_c", "power_w", "health", "reason", "namespace", "pod"} <= set(rows["npu-node-h/npu-0"])
    assert "region *: telemetry" in captured.err  # the parse report, on stderr with --json
    assert main(["telemetry", "snapshot", "--prometheus-url", prom.url]) == 0
    table = capsys.readouterr().out
    assert "npu-node-h/npu-1" in table and "unknown" in table


# --- the simulated exporters in the demo's realistic mix, with pod churn -----------------------------------


MIX_NODES = [node(f"mg{i}", "cn-east", "nvidia-h100", devices=2) for i in range(4)] + \
            [node(f"mn{i}", "cn-north", "ascend-910b", devices=2) for i in range(4)] + \
            [node("mig0", "cn-east", "nvidia-a100", devices=4)]


def test_the_realistic_mix_reads_cleanly_and_pod_churn_raises_no_false_degraded() -> None:
    profiles = {**realistic_mix(MIX_NODES), "mig0": ExporterProfile("3.3.9-3.6.1", mig=2, service_monitor=True)}
    exporters = ExporterFleet(MIX_NODES, seed=3, profiles=profiles)
    host, port = exporters.serve()
    prom = PrometheusServer(exporters.targets(), f"{host}:{port}", scrape_interval_s=1.0).start()
    try:
        source = FleetSource.from_objects([*MIX_NODES, *defaults.all_objects()])
        m = Monitor(None, source, lambda: {}, TelemetryConfig(prometheus_url=prom.url, window_s=6, timeout_s=3))

        def bind(generation: int) -> None:
            exporters.bind({n["metadata"]["name"]: [("team-a", f"j{i}-g{generation}-0", 4)]
                            for i, n in enumerate(MIX_NODES)})

        bind(1)

        def placed(generation: int) -> Snapshot | None:
            s = collect(m)
            pods = {d.pod for d in s.devices.values()}
            return s if len(s.devices) == 20 and pods == {f"j{i}-g{generation}-0" for i in range(9)} else None

        s = eventually(lambda: placed(1), timeout=30, interval=0.5, what="every device on its generation-1 pod")
        assert all(r.availability == Availability.OK for r in s.regions.values()), s.regions
        assert {d.node for d in s.devices.values()} == {n["metadata"]["name"] for n in MIX_NODES}
        assert len([d for d in s.devices.values() if "/mig-" in d.device_id]) == 4
        assert all(d.health == Health.HEALTHY for d in s.devices.values()), [
            (d.device_id, d.reason) for d in s.devices.values() if d.health != Health.HEALTHY]
        time.sleep(7)  # one window (6 s) on: no device changed pods within it, so no second round
        collect(m)
        calm = m.stats.queries
        # pod churn: every device changes hands; within the window both pods have samples
        bind(2)
        degraded, asked = [], set()
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            s = collect(m)
            asked.add(m.stats.queries)
            degraded += [r.message for r in s.regions.values() if r.availability != Availability.OK]
            time.sleep(0.5)
        assert degraded == []  # not "N duplicate series"
        # the second round (`seen`) for DCGM too while both pods were in the window (calm: only for the 2023
        # npu-exporter, whose chips always have two identity series: chip_info without a pod, container_* with)
        assert calm == 10 and max(asked) == 11, asked
        assert placed(2) is not None
    finally:
        prom.stop()
        exporters.stop()


def test_the_shipped_scrape_configs_relabel_the_node_in_a_real_prometheus(
        recorded: tuple[RecordedExporters, PrometheusServer]) -> None:
    """manifests/telemetry/prometheus-scrape-configs.yaml's relabel_configs, run by a real Prometheus on targets
    that carry the meta labels Kubernetes service discovery would give (Debian's Prometheus has no kubernetes_sd):
    a dcgm-exporter whose Hostname is its own pod name and an npu-exporter with no host label are placed."""
    import yaml

    exporters, _ = recorded
    shipped = yaml.safe_load((FIXTURES.parents[2] / "manifests" / "telemetry" / "prometheus-scrape-configs.yaml")
                             .read_text())["scrape_configs"]
    host, port = exporters.server.server_address[:2]
    meta = {"dcgm-exporter": ("node-a", "nvidia-dcgm-exporter", "9400", "gpu-operator"),
            "npu-exporter": ("npu-node-h", "npu-exporter", "8082", "npu-exporter")}
    jobs = []
    for job in shipped:
        if job["job_name"] not in meta:  # the training pods' step metric: tests/e2e/test_step_metric_e2e.py
            continue
        node_name, app, container_port, _ = meta[job["job_name"]]
        static = {"targets": [f"{host}:{port}"],
                  "labels": {"__metrics_path__": f"/{node_name}/metrics", "__meta_kubernetes_pod_node_name": node_name,
                             "__meta_kubernetes_pod_label_app": app,
                             "__meta_kubernetes_pod_container_port_number": container_port}}
        # a decoy on another node that the keep rules must drop
        decoy = {"targets": [f"{host}:{port}"],
                 "labels": {**static["labels"], "__meta_kubernetes_pod_label_app": "other",
                            "__metrics_path__": "/gpu-node-b/metrics"}}
        jobs.append({**{k: v for k, v in job.items() if k != "kubernetes_sd_configs"},
                     "static_configs": [static, decoy]})
    prom = PrometheusServer([], "unused:0", scrape_interval_s=1.0)
    prom.config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
                   "scrape_configs": [{**j, "scrape_interval": "1s", "scrape_timeout": "1s"} for j in jobs]}
    prom.start()
    try:
        m = recorded_monitor(prom.url)
        s = eventually(lambda: (s := collect(m)) and len(s.devices) == 7 and s, timeout=30, interval=0.5,
                       what="node-a's 3 GPUs and npu-node-h's 4 chips")
        assert {d.node for d in s.devices.values()} == {"node-a", "npu-node-h"}
        assert s.devices["GPU-1f2e3d4c-0a0b-4c5d-8e9f-000000000a00"].pod == "sm-train-g1-0"
        assert s.region("cn-east").availability == Availability.OK
    finally:
        prom.stop()


@pytest.mark.harness
def test_the_snapshot_command_joins_the_cluster_nodes_with_a_kubeconfig(
        recorded: tuple[RecordedExporters, PrometheusServer], emulator: Emulator, cluster: Cluster,
        capsys: pytest.CaptureFixture[str]) -> None:
    """With --kubeconfig the rows carry each Node's region and class, and a host label must name a Node."""
    import json

    from heterojob.cli import main

    _, prom = recorded
    cluster.seed([n for n in RECORDED_NODES if n["metadata"]["name"] != "gpu-node-b"])  # one Node missing
    eventually(lambda: len(collect(recorded_monitor(prom.url)).devices) == 26, timeout=30, interval=0.5,
               what="all devices")
    assert main(["telemetry", "snapshot", "--prometheus-url", prom.url, "--kubeconfig", str(emulator.kubeconfig),
                 "--json", "--window", "4"]) == 0
    captured = capsys.readouterr()
    rows = {r["device"]: r for r in json.loads(captured.out)}
    assert (rows["npu-node-h/npu-0"]["region"], rows["npu-node-h/npu-0"]["class"]) == ("cn-north", "ascend-910b")
    assert rows["GPU-1f2e3d4c-0a0b-4c5d-8e9f-000000000a00"]["class"] == "nvidia-h100"
    # gpu-node-b is scraped without a node label and is no Node here: its Hostname places nothing
    assert not [d for d in rows if d.startswith("GPU-7c1d5e2a")]
    assert "host label(s) gpu-node-b name no Node" in captured.err
