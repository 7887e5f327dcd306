"""Server-side render time of the console's Overview and Devices pages: 10,000 devices, 1,000 jobs.

The fleet of bench/telemetry.py (1,250 nodes x 8 devices in 5 regions, NVIDIA and Ascend) is seeded in the
API emulator with 1,000 HeteroJobs placed on it (status written as the operator would), and served by the
simulated exporters to a real Prometheus. Each page is rendered by Streamlit's AppTest (the script run the
server does for a browser), cold (caches cleared) and warm, three times; the median is reported.

Last line: one JSON object. Target (issue 7): overview_s and devices_page_s <= 2 each (cold).
"""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from importlib.resources import files
from pathlib import Path

import kubernetes
import streamlit as st
from streamlit.testing.v1 import AppTest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from heterojob.constants import GROUP, VERSION  # noqa: E402
from heterojob.sim.telemetry.exporters import ExporterFleet  # noqa: E402
from heterojob.sim.cluster.harness import Emulator, seed  # noqa: E402
from heterojob.sim.telemetry.prometheus import PrometheusServer, free_port  # noqa: E402

_spec = importlib.util.spec_from_file_location("bench_telemetry", Path(__file__).with_name("telemetry.py"))
assert _spec is not None and _spec.loader is not None
fleet_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fleet_bench)

RUNS = 3


def render(page: str) -> tuple[float, float]:
    """(cold, warm) seconds of one page's script run."""
    st.cache_data.clear()
    t0 = time.perf_counter()
    at = AppTest.from_file(page, default_timeout=120).run()
    cold = time.perf_counter() - t0
    assert not at.exception, at.exception
    t0 = time.perf_counter()
    at.run()
    return cold, time.perf_counter() - t0


def main() -> int:
    nodes = fleet_bench.fleet()
    watched, bindings = fleet_bench.jobs(nodes)
    port = free_port()
    child = multiprocessing.get_context("fork").Process(target=fleet_bench.serve_exporters,
                                                         args=(nodes, bindings, port), daemon=True)
    child.start()
    prom = PrometheusServer(ExporterFleet(nodes).targets(), f"127.0.0.1:{port}",
                            scrape_interval_s=fleet_bench.SCRAPE_S).start(60)
    try:
        with Emulator() as emu:
            api = emu.client()
            seed(api, namespaces=sorted({j.ref.namespace for j in watched.values()}), nodes=nodes)
            custom = kubernetes.client.CustomObjectsApi(api)

            def create(job: object) -> None:
                ref = job.ref  # type: ignore[attr-defined]
                body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "HeteroJob",
                        "metadata": {"name": ref.name, "namespace": ref.namespace},
                        "spec": {"priority": "medium", "replicas": {"min": ref.replicas},
                                 "devices": [{"deviceClass": job.device_class,  # type: ignore[attr-defined]
                                              "perReplica": ref.per_replica}],
                                 "template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}}}
                custom.create_namespaced_custom_object(GROUP, VERSION, ref.namespace, "heterojobs", body)
                nodes_of = [n for n, pods in bindings.items() for (_, pod, _) in pods
                            if pod.startswith(f"{ref.name}-g1-")]
                custom.patch_namespaced_custom_object_status(GROUP, VERSION, ref.namespace, "heterojobs", ref.name, {
                    "status": {"phase": "Running", "placement": {
                        "region": ref.region, "deviceClass": job.device_class,  # type: ignore[attr-defined]
                        "replicas": ref.replicas, "perReplica": ref.per_replica, "nodes": nodes_of,
                        "generation": 1}, "utilization": {"average": 90.0}}})

            with ThreadPoolExecutor(16) as pool:
                list(pool.map(create, watched.values()))
            while fleet_bench.scalar(prom.url, "count(DCGM_FI_DEV_GPU_UTIL) + count(npu_chip_info_utilization)") \
                    < len(nodes) * 8:
                time.sleep(1)
            time.sleep(2 * fleet_bench.SCRAPE_S)

            os.environ["HETEROJOB_KUBECONFIG"] = str(emu.kubeconfig)
            os.environ["HETEROJOB_PROMETHEUS_URL"] = prom.url
            root = files("heterojob_console")
            overview = [render(str(root / "Home.py")) for _ in range(RUNS)]
            devices = [render(str(root / "pages" / "1_Devices.py")) for _ in range(RUNS)]
    finally:
        prom.stop()
        child.terminate()
    result = {
        "devices": len(nodes) * 8, "jobs": len(watched),
        "overview_s": round(statistics.median(c for c, _ in overview), 3),
        "devices_page_s": round(statistics.median(c for c, _ in devices), 3),
        "overview_warm_s": round(statistics.median(w for _, w in overview), 3),
        "devices_page_warm_s": round(statistics.median(w for _, w in devices), 3),
        "targets": {"overview_s": 2.0, "devices_page_s": 2.0},
    }
    result["meets_targets"] = result["overview_s"] <= 2.0 and result["devices_page_s"] <= 2.0
    print(json.dumps(result))
    return 0 if result["meets_targets"] else 1


if __name__ == "__main__":
    sys.exit(main())
