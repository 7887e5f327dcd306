"""End to end: simulated exporters -> real Prometheus (rules, 1 s) -> real Alertmanager (1 s group_wait)
-> the operator's /alerts -> the job checkpointed and migrated off the node. Telemetry is off in the
operator: only the alert can move the job."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from heterojob.sim.cluster.harness import Emulator, OperatorRunner
from heterojob.sim.cluster.nodes import node
from heterojob.sim.telemetry.prometheus import alerting_stack, binary
from tests.conftest import Cluster, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(os.environ.get("HETEROJOB_SKIP_E2E") == "1",
                                                  reason="HETEROJOB_SKIP_E2E=1")]
TOKEN = "e2e-token"


def test_shipped_rules_pass_promtool() -> None:
    out = subprocess.run([binary("promtool"), "check", "rules", "manifests/alerts/heterojob-rules.yaml"],
                         capture_output=True, text=True, cwd=Path(__file__).parents[2])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 6 rules found" in out.stdout


@pytest.mark.harness
def test_a_fatal_xid_alert_migrates_the_job_off_the_node(emulator: Emulator, cluster: Cluster,
                                                         tmp_path: Path) -> None:
    nodes = [node("g0", "cn-east", "nvidia-h100", devices=4), node("g1", "cn-east", "nvidia-h100", devices=4)]
    cluster.seed(nodes)
    with alerting_stack(nodes, TOKEN, tmp_path) as stack:
        exporters, alerts_port = stack.exporters, stack.alerts_port
        with OperatorRunner(emulator.kubeconfig, alerts_port=alerts_port, alert_token=TOKEN) as operator:
            cluster.create_job("train", {
                "priority": "high", "replicas": {"min": 1}, "checkpoint": {"timeoutSeconds": 60},
                "devices": [{"deviceClass": "nvidia-h100", "perReplica": 4}],
                "template": {"spec": {"containers": [{"name": "main", "image": "train:cuda12"}]}}})
            [pod] = eventually(lambda: cluster.pods("train"), what="pod")
            cluster.set_pod_phase(pod.metadata.name, "Running")
            eventually(lambda: (cluster.job("train").get("status") or {}).get("phase") == "Running", what="Running")
            where = cluster.job("train")["status"]["placement"]["nodes"][0]
            exporters.bind({where: [("team-a", pod.metadata.name, 4)]})
            exporters.inject("fatal-xid", where, 2, 79)

            def moved() -> Any:
                s = cluster.job("train").get("status") or {}
                return s if (s.get("placement") or {}).get("generation") == 2 else None

            s = eventually(moved, timeout=60, interval=0.5, what="migrated by the alert")
            assert s["placement"]["nodes"] == [n for n in ("g0", "g1") if n != where]
            entry = next(h for h in s["history"] if h["action"] == "migrate")
            assert entry["reason"].startswith("alert: HeteroJobGPUFatalXID") and "fatal XID 79" in entry["reason"]
        assert "Traceback" not in operator.output
