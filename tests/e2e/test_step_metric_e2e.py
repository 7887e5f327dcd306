"""Issue 34's acceptance, end to end: a job running the SDK's step metric is scraped by the demo's Prometheus
(Debian's `prometheus`, sim/telemetry/prometheus.py, beside the simulated exporters) through the shipped scrape
configuration (manifests/telemetry/prometheus-scrape-configs.yaml, job heterojob-training-steps), and its
measured speed appears in status.scheduling.speeds without any checkpoint.

The stand-in kubelet runs no containers, so the training process is this test: a real `Checkpointer` serving
the metric on the port the operator passed to the pod ($HETEROJOB_METRICS_PORT, from the template's port
`heterojob-steps`), stepping at a known pace. Its target carries the meta labels Kubernetes service discovery
gives that pod (Debian's Prometheus has no kubernetes_sd); the shipped relabelling turns them into `namespace`,
`pod` and `heterojob_job`."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from heterojob.controller.monitor import TelemetryConfig
from heterojob.sim.cluster.harness import Emulator, OperatorRunner
from heterojob.sim.cluster.nodes import node
from heterojob.sim.telemetry.exporters import ExporterFleet
from heterojob.sim.telemetry.prometheus import PrometheusServer, free_port
from heterojob_sdk import Checkpointer
from heterojob_sdk import metrics as step_metrics
from tests.conftest import Cluster, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(os.environ.get("HETEROJOB_SKIP_E2E") == "1",
                                                  reason="HETEROJOB_SKIP_E2E=1")]
ROOT = Path(__file__).resolve().parents[2]
PACE_S = 0.05  # the training loop's step time: 20 steps/s
STEPS_WINDOW_S = 6


class NoRequests:
    """The pod as the SDK reads it: no checkpoint is ever asked for (and none may be acknowledged)."""

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return {"metadata": {"annotations": {}}}

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> Any:
        raise AssertionError(f"no checkpoint was asked for, yet an ack was written: {patch}")


def steps_scrape_job(address: str, namespace: str, pod: str, job: str) -> dict[str, Any]:
    """The shipped heterojob-training-steps job, its pod discovery replaced by a static target with the meta
    labels Kubernetes' pod discovery gives, plus a decoy (a heterojob pod's other port) the keep rules drop."""
    [shipped] = [j for j in yaml.safe_load((ROOT / "manifests" / "telemetry" / "prometheus-scrape-configs.yaml")
                                           .read_text())["scrape_configs"]
                 if j["job_name"] == "heterojob-training-steps"]
    meta = {"__meta_kubernetes_namespace": namespace, "__meta_kubernetes_pod_name": pod,
            "__meta_kubernetes_pod_container_port_name": "heterojob-steps",
            "__meta_kubernetes_pod_label_app_kubernetes_io_managed_by": "heterojob",
            "__meta_kubernetes_pod_label_heterojob_io_job": job}
    decoy = {**meta, "__meta_kubernetes_pod_container_port_name": "rendezvous", "__metrics_path__": "/nothing"}
    return {**{k: v for k, v in shipped.items() if k != "kubernetes_sd_configs"},
            "scrape_interval": "500ms", "scrape_timeout": "500ms",
            "static_configs": [{"targets": [address], "labels": meta}, {"targets": [address], "labels": decoy}]}


def test_a_jobs_step_metric_reaches_status_scheduling_without_any_checkpoint(
        cluster: Cluster, emulator: Emulator, tmp_path: Path) -> None:
    nodes = [node("cn-east-h100-0", "cn-east", "nvidia-h100")]
    cluster.seed(nodes)
    exporters = ExporterFleet(nodes, seed=5)
    host, port = exporters.serve()
    prom = PrometheusServer(exporters.targets(), f"{host}:{port}", scrape_interval_s=0.5, workdir=tmp_path / "prom")
    metrics_port = free_port()
    spec = {"priority": "high", "replicas": {"min": 1}, "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
            "template": {"spec": {"containers": [{"name": "main", "image": "train:cuda12", "ports": [
                {"name": "rendezvous", "containerPort": 29500},
                {"name": "heterojob-steps", "containerPort": metrics_port}]}]}}}
    telemetry = TelemetryConfig(prometheus_url=prom.url, interval_s=0.5, window_s=3, timeout_s=3,
                                steps_window_s=STEPS_WINDOW_S)
    stop = threading.Event()
    trainer: threading.Thread | None = None
    try:
        with OperatorRunner(emulator.kubeconfig, telemetry=telemetry) as runner:
            cluster.create_job("fast", spec)
            [pod] = eventually(lambda: cluster.pods("fast"), what="the job's pod")
            name = pod.metadata.name
            env = {e.name: e.value for e in pod.spec.containers[0].env}
            assert env["HETEROJOB_METRICS_PORT"] == str(metrics_port)  # the operator passes the declared port on
            cluster.set_pod_phase(name, "Running")
            eventually(lambda: (cluster.job("fast").get("status") or {}).get("phase") == "Running", what="Running")
            exporters.bind({"cn-east-h100-0": [("team-a", name, 8)]})

            # the training process: a real Checkpointer on the pod's metric port, 20 steps a second
            ckpt = Checkpointer(directory="file:///ckpt/fast", pod=name, namespace="team-a",
                                podinfo=tmp_path / "podinfo", api=NoRequests(), poll_s=0.2,
                                metrics_port=int(env["HETEROJOB_METRICS_PORT"]), metrics_host="127.0.0.1")

            def train() -> None:
                step = 0
                while not stop.is_set():
                    time.sleep(PACE_S)
                    step += 1
                    assert ckpt.maybe_checkpoint(step, lambda uri: 0) is None  # never asked: never saves

            trainer = threading.Thread(target=train, daemon=True)
            trainer.start()
            started = time.time()
            prom.config["scrape_configs"].append(
                steps_scrape_job(f"127.0.0.1:{metrics_port}", "team-a", name, "fast"))
            prom.start()

            def speed() -> dict[str, Any] | None:
                speeds = ((cluster.job("fast").get("status") or {}).get("scheduling") or {}).get("speeds") or []
                return next((s for s in speeds if s["deviceClass"] == "nvidia-h100" and s["replicas"] == 1), None)

            measured = eventually(speed, timeout=60, interval=0.3, what="the measured speed in status.scheduling")
            # known only once the rank has stepped for a whole window (a pod's start never reads as slow steps)
            assert time.time() - started >= STEPS_WINDOW_S
            # the pace the loop keeps (sleep + overhead: a little under 20 steps/s on a loaded machine)
            assert 12.0 <= measured["stepsPerSecond"] <= 21.0, measured
            status = cluster.job("fast")["status"]
            assert not (status.get("checkpoint") or {}).get("last") and not (status.get("checkpoint") or {}).get(
                "pending"), status.get("checkpoint")  # no checkpoint at all
            assert not any(h.get("action") == "checkpoint" for h in status.get("history") or [])
            # the training pod, now a scrape target, is still the workload of its GPUs (never taken for an exporter)
            eventually(lambda: ((cluster.job("fast")["status"].get("utilization") or {}).get("average") or 0) > 50,
                       timeout=30, interval=0.3, what="the job's device utilization")
            # a steady pace is no news: the recorded figure is not rewritten cycle after cycle
            time.sleep(3)
            assert speed() == measured
    finally:
        stop.set()
        if trainer is not None:
            trainer.join(timeout=5)
        step_metrics.stop(metrics_port)
        prom.stop()
        exporters.stop()
    assert "Traceback" not in runner.output
