"""The operator moves a job by its own spec.policy: the straggler ratio and overheat threshold it names, each
symptom's clock started when the operator first sees it (harness; the telemetry a Prometheus would answer is
handed to the monitor's read, `telemetry.collect.Collector.collect`). On plain data: tests/unit/test_symptoms.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from heterojob.controller.monitor import TelemetryConfig
from heterojob.sim.cluster.harness import Emulator, OperatorRunner
from heterojob.sim.cluster.nodes import node
from heterojob.telemetry import collect
from heterojob.telemetry.model import DeviceSample, Health
from heterojob.telemetry.snapshot import Availability, RegionTelemetry, Snapshot
from tests.conftest import Cluster, eventually

JOB = "train"


class Telemetry:
    """What the job's devices report, one per rank (the test changes it as a fleet would)."""

    def __init__(self) -> None:
        self.nodes: list[str] = []
        self.utilization = [90.0, 90.0, 90.0]
        self.temperature = [60.0, 60.0, 60.0]

    def snapshot(self) -> Snapshot:
        devices = [DeviceSample(f"GPU-{rank}", name, "dcgm", utilization=self.utilization[rank],
                                temperature_c=self.temperature[rank], health=Health.HEALTHY,  # < 90 °C: healthy
                                namespace="team-a", pod=f"{JOB}-g1-{rank}", region="cn-east",
                                device_class="nvidia-h100", observed_at=time.time())
                   for rank, name in enumerate(self.nodes)]
        return Snapshot(devices={d.device_id: d for d in devices},
                        regions={"cn-east": RegionTelemetry(Availability.OK, "")},
                        by_pod={("team-a", d.pod or ""): (d,) for d in devices})


@pytest.fixture
def telemetry(monkeypatch: pytest.MonkeyPatch) -> Telemetry:
    fleet = Telemetry()
    monkeypatch.setattr(collect.Collector, "collect", lambda self, *args: (fleet.snapshot(), 0))
    return fleet


@pytest.fixture
def monitored(emulator: Emulator, cluster: Cluster, telemetry: Telemetry) -> Iterator[OperatorRunner]:
    config = TelemetryConfig(prometheus_url="http://127.0.0.1:9", interval_s=0.5)
    with OperatorRunner(emulator.kubeconfig, telemetry=config) as runner:
        yield runner


def status(cluster: Cluster) -> dict[str, Any]:
    return cluster.job(JOB).get("status") or {}


def running(cluster: Cluster, telemetry: Telemetry, **policy: Any) -> None:
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(6)])
    cluster.create_job(JOB, {
        "priority": "high", "replicas": {"min": 3}, "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
        "checkpoint": {"timeoutSeconds": 60, "storage": "s3://ckpt"},
        "template": {"spec": {"containers": [{"name": "main", "image": "train:cuda12"}]}},
        "policy": {"triggers": ["deviceFailed", "nodeNotReady", "overheat", "straggler"], **policy}})
    pods = eventually(lambda: (p := cluster.pods(JOB)) and len(p) == 3 and p, what="3 pods")
    for pod in pods:
        cluster.set_pod_phase(pod.metadata.name, "Running")
    eventually(lambda: status(cluster).get("phase") == "Running", what="Running")
    telemetry.nodes = list(status(cluster)["placement"]["nodes"])


def moving(cluster: Cluster) -> bool:
    pending = (status(cluster).get("checkpoint") or {}).get("pending") or {}
    return status(cluster).get("phase") == "Checkpointing" and pending.get("then") == "migrate"


@pytest.mark.harness
def test_a_straggler_by_the_jobs_ratio_waits_straggler_for_seconds_from_when_it_began(
        cluster: Cluster, telemetry: Telemetry, monitored: OperatorRunner) -> None:
    """Replicas even, then one at 55% of peers at 90%: below the job's stragglerRatio 0.7 (63%), above the
    monitor's old fixed 0.5 (45%), whose Straggler condition stayed False since the job started. The move
    waits stragglerForSeconds from the drop, not from that condition's lastTransitionTime."""
    running(cluster, telemetry, stragglerRatio=0.7, stragglerForSeconds=6)
    eventually(lambda: any(c.get("type") == "Straggler" and c.get("status") == "False"
                           for c in status(cluster).get("conditions") or []), what="Straggler False")
    time.sleep(7)  # the condition is older than stragglerForSeconds
    telemetry.utilization = [90.0, 90.0, 55.0]
    dropped = time.monotonic()
    time.sleep(3)
    assert not moving(cluster), "moved before stragglerForSeconds"
    eventually(lambda: (status(cluster).get("symptoms") or {}).get("straggler"), what="the straggler's onset")
    # the monitor judges by the job's ratio too
    eventually(lambda: any(c.get("type") == "Straggler" and c.get("status") == "True"
                           for c in status(cluster).get("conditions") or []), what="Straggler True")
    eventually(lambda: moving(cluster), timeout=20, what="the move")
    assert time.monotonic() - dropped >= 5
    assert "straggler" in status(cluster)["checkpoint"]["pending"]["reason"]
    assert telemetry.nodes[2] in status(cluster)["checkpoint"]["pending"]["exclude"]


@pytest.mark.harness
def test_overheat_celsius_of_the_job_moves_it_below_the_operators_threshold(
        cluster: Cluster, telemetry: Telemetry, monitored: OperatorRunner) -> None:
    """85 °C: healthy by the operator's --overheat-celsius (90), overheating by the job's overheatCelsius 80."""
    running(cluster, telemetry, overheatCelsius=80, overheatForSeconds=3)
    telemetry.temperature = [60.0, 85.0, 60.0]
    heated = time.monotonic()
    eventually(lambda: moving(cluster), timeout=20, what="the move")
    assert time.monotonic() - heated >= 2.5
    pending = status(cluster)["checkpoint"]["pending"]
    assert "85°C >= 80°C" in pending["reason"] and telemetry.nodes[1] in pending["exclude"]
