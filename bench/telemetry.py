"""One monitoring cycle over 10,000 devices and 1,000 jobs against a real Prometheus, and the naive way.

Fleet: 1,250 nodes x 8 devices in 5 regions (NVIDIA H100/A100 through dcgm-exporter, Ascend 910B through
npu-exporter), served by the simulated exporters in a child process and scraped by Debian's Prometheus.
1,000 running jobs (1 or 2 replicas of 4 devices). The cycle is what the operator does every interval:
the fleet-wide queries, the snapshot, and every job's utilization, stragglers and health (status writes
excluded: they depend on the API server, not on telemetry). The baseline in the same run asks the same
Prometheus per job and per metric, as an operator without a fleet snapshot would.

Last line: one JSON object. Targets (issue 3): cycle_s <= 1.0, queries_per_cycle <= 12 whatever the
job count, rss_mb <= 300, speedup >= 10. Where a cycle's time goes, per cycle (medians): `cycle_cpu_s`, this
process's CPU (decoding the answers, the snapshot, the jobs' figures), and `prometheus_cpu_s`, Prometheus'
(evaluating and encoding the answers, plus its scrapes meanwhile); on a shared machine the wall time follows
their sum.
"""

from __future__ import annotations

import json
import multiprocessing
import re
import resource
import statistics
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from heterojob import defaults  # noqa: E402 - after the sys.path entry above (run as a script)
from heterojob.controller import FleetSource  # noqa: E402 - after the sys.path entry above (run as a script)
from heterojob.controller.monitor import Monitor, TelemetryConfig  # noqa: E402 - after the sys.path entry above (run as a script)
from heterojob.sim.telemetry.exporters import ExporterFleet  # noqa: E402 - after the sys.path entry above (run as a script)
from heterojob.sim.cluster.nodes import node  # noqa: E402 - after the sys.path entry above (run as a script)
from heterojob.sim.process import cpu_seconds  # noqa: E402 - after the sys.path entry above (run as a script)
from heterojob.sim.telemetry.prometheus import PrometheusServer, free_port  # noqa: E402 - after the sys.path entry above (run as a script)
from heterojob.telemetry.adapters import ADAPTERS  # noqa: E402 - after the sys.path entry above (run as a script)
from heterojob.telemetry.prometheus import PrometheusReader  # noqa: E402 - after the sys.path entry above (run as a script)
from heterojob.telemetry.snapshot import JobRef, WatchedJob  # noqa: E402 - after the sys.path entry above (run as a script)

REGIONS = ("cn-east", "cn-north", "eu-west", "us-west", "ap-south")
NODES_PER_REGION = 250  # 100 H100, 50 A100, 100 Ascend 910B; 8 devices each
JOBS = 1000
PER_REPLICA = 4
SCRAPE_S = 15.0  # a common production interval (dcgm-exporter collects every 30 s by default)
WINDOW_S = 60
CYCLES = 5


def fleet() -> list[dict[str, Any]]:
    out = []
    for region in REGIONS:
        for i in range(NODES_PER_REGION):
            cls = "nvidia-h100" if i < 100 else "nvidia-a100" if i < 150 else "ascend-910b"
            out.append(node(f"{region}-{cls}-{i:03d}", region, cls, devices=8))
    return out


def jobs(nodes: list[dict[str, Any]]) -> tuple[dict[str, WatchedJob], dict[str, list[tuple[str, str, int]]]]:
    """1,000 jobs: every 4th has 2 replicas; two replicas of 4 devices share each 8-device node."""
    slots = [(n["metadata"]["name"], k) for n in nodes for k in range(2)]
    by_name = {n["metadata"]["name"]: n for n in nodes}
    watched: dict[str, WatchedJob] = {}
    bindings: dict[str, list[tuple[str, str, int]]] = {}
    cursor = 0
    for j in range(JOBS):
        replicas = 2 if j % 4 == 0 else 1
        namespace, name = f"team-{j % 7}", f"job-{j:04d}"
        placed = slots[cursor:cursor + replicas]
        cursor += replicas
        region = by_name[placed[0][0]]["metadata"]["labels"]["topology.kubernetes.io/region"]
        labels = by_name[placed[0][0]]["metadata"]["labels"]
        cls = "ascend-910b" if "accelerator" in labels else (
            "nvidia-h100" if "H100" in labels.get("nvidia.com/gpu.product", "") else "nvidia-a100")
        ref = JobRef(namespace, name, region, generation=1, replicas=replicas, per_replica=PER_REPLICA)
        watched[f"{namespace}/{name}"] = WatchedJob(ref, cls, "1")
        for rank, (node_name, _) in enumerate(placed):
            bindings.setdefault(node_name, []).append((namespace, ref.pod(rank), PER_REPLICA))
    return watched, bindings


def serve_exporters(nodes: list[dict[str, Any]], bindings: dict[str, Any], port: int) -> None:
    exporters = ExporterFleet(nodes, seed=1)
    exporters.bind(bindings)
    exporters.serve("127.0.0.1", port)
    while True:
        time.sleep(3600)


def scalar(url: str, query: str) -> float:
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': query})}", timeout=30) as r:
        result = json.load(r)["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


def naive_queries(watched: dict[str, WatchedJob]) -> dict[str, str]:
    """Per job, one query per metric the cycle reads, selected by the job's pods."""
    out = {}
    for key, job in watched.items():
        ref = job.ref
        adapter = ADAPTERS["npu-exporter" if job.device_class.startswith("ascend") else "dcgm"]
        pod_label = "pod_name" if adapter.family == "npu-exporter" else "pod"
        selector = f'{{namespace="{ref.namespace}",{pod_label}=~"{ref.name}-g{ref.generation}-[0-9]+"}}'
        for role, r in adapter.roles.items():
            if not r.fn and r.param:  # a figure Prometheus computes: ask each metric it reads, once
                read = {m for _, (m, _) in adapter.metrics.items()}
                for metric in sorted(set(re.findall(r"DCGM_FI_DEV_\w+|npu_\w+", r.param)) - read):
                    out[f"{key}:{role}:{metric}"] = f"{metric}{selector}"
                continue
            out[f"{key}:{role}"] = r.expr(selector, WINDOW_S)
    return out


def main() -> int:
    started = time.perf_counter()
    nodes = fleet()
    watched, bindings = jobs(nodes)
    port = free_port()
    child = multiprocessing.get_context("fork").Process(target=serve_exporters, args=(nodes, bindings, port),
                                                         daemon=True)
    child.start()
    exporters = ExporterFleet(nodes)  # only for its target list
    prom = PrometheusServer(exporters.targets(), f"127.0.0.1:{port}", scrape_interval_s=SCRAPE_S).start(60)
    try:
        devices = 0.0
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            devices = scalar(prom.url, "count(DCGM_FI_DEV_GPU_UTIL) + count(npu_chip_info_utilization)")
            if devices >= len(nodes) * 8:
                break
            time.sleep(1)
        time.sleep(3 * SCRAPE_S)  # a few samples in every window

        source = FleetSource.from_objects([*nodes, *(defaults.accelerator_class(c) for c in defaults.ACCELERATOR_CLASSES)])
        monitor = Monitor(None, source, lambda: watched, TelemetryConfig(prometheus_url=prom.url, window_s=WINDOW_S,
                                                                         timeout_s=30))
        cycles, own_cpu, prom_cpu = [], [], []
        reported = 0
        for _ in range(CYCLES):
            t0, c0, p0 = time.perf_counter(), time.process_time(), cpu_seconds(prom.pid)
            snapshot = monitor.collect(time.time())
            assert snapshot is not None
            monitor.snapshot = snapshot
            patches = monitor.job_patches(snapshot, "2026-11-21T00:00:00Z")
            cycles.append(time.perf_counter() - t0)
            own_cpu.append(time.process_time() - c0)
            prom_cpu.append(cpu_seconds(prom.pid) - p0)
            reported = len(snapshot.devices)
        assert len(patches) == JOBS, f"{len(patches)} jobs measured"  # every job had something to write
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

        reader = PrometheusReader(prom.url, timeout_s=30)
        naive = naive_queries(watched)
        t0 = time.perf_counter()
        answered = reader.query(naive, at=time.time())
        naive_s = time.perf_counter() - t0
        reader.close()
        naive_series = sum(len(v) for v in answered.values())

        cycle_s = statistics.median(cycles)
        result = {
            "devices": reported, "jobs": JOBS, "cycle_s": round(cycle_s, 3),
            "cycle_s_each": [round(c, 3) for c in cycles],
            "cycle_cpu_s": round(statistics.median(own_cpu), 3), "prometheus_cpu_s": round(statistics.median(prom_cpu), 2),
            "queries_per_cycle": monitor.stats.queries,
            "rss_mb": round(rss_mb, 1), "naive_cycle_s": round(naive_s, 3), "naive_queries": len(naive),
            "naive_series": naive_series, "speedup": round(naive_s / cycle_s, 1),
            "targets": {"cycle_s": 1.0, "queries_per_cycle": 12, "rss_mb": 300, "speedup": 10},
            "wall_s": round(time.perf_counter() - started, 1),
        }
        result["meets_targets"] = (result["devices"] == len(nodes) * 8 and cycle_s <= 1.0
                                   and result["queries_per_cycle"] <= 12 and rss_mb <= 300
                                   and result["speedup"] >= 10)
    finally:
        prom.stop()
        child.terminate()
    print(json.dumps(result))
    return 0 if result["meets_targets"] else 1


if __name__ == "__main__":
    sys.exit(main())
