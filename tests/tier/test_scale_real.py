"""The scale benchmark in miniature on a real control plane (`bench/scale.py --kubeconfig`): a kit's cluster
(`HETEROJOB_KUBE_ASSETS`; without it the test is skipped and says why) installed as README says, then the bench
with the operator under its own ServiceAccount, the cluster's kube-scheduler binding, its node lifecycle
controller reading the stand-in's Leases, and the operator's writes counted by kube-apiserver (APF FlowSchemas).
Figures are not asserted against targets; that every one is there, from the sources the run says, is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import kubernetes
import pytest

from heterojob.sim import controlplane
from tests.tier.conftest import kubectl_line, readme_install_lines

pytestmark = [pytest.mark.scale, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[2]


def test_quick_scale_run_on_a_real_control_plane(tmp_path: Path) -> None:
    try:
        assets = controlplane.kit()
    except controlplane.KitMissing as exc:
        pytest.skip(f"the real-control-plane tier is off: {exc}")
    with controlplane.ControlPlane(assets, tmp_path / "cluster") as plane:
        home = tmp_path / "home"
        home.mkdir()
        for line in readme_install_lines()[:5]:  # namespace, alert token, CRDs, Established, overlays/plain
            done = kubectl_line(line, plane.kubeconfig, home)
            assert done.returncode == 0, (line, done.stderr)
        apps = kubernetes.client.AppsV1Api(plane.client())
        for name in ("heterojob-operator", "heterojob-console"):  # the bench runs the operator itself
            apps.patch_namespaced_deployment_scale(name, "heterojob-system", {"spec": {"replicas": 0}})
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "operator"), os.environ.get("PYTHONPATH", "")])}
        out = subprocess.run([sys.executable, str(ROOT / "bench" / "scale.py"), "--kubeconfig", str(plane.kubeconfig),
                              "--devices", "160", "--jobs", "16", "--backlog", "4", "--admit-probes", "1",
                              "--fault-probes", "1", "--idle-seconds", "5", "--probe-timeout", "60",
                              "--cycle-window-max", "10", "--no-restart", "--workdir", str(tmp_path / "bench")],
                             capture_output=True, text=True, env=env, timeout=540)
        assert out.returncode == 0, out.stderr[-3000:]
        result = json.loads(out.stdout.strip().splitlines()[-1])
        assert "aborted" not in result, result
        assert result["operator_credentials"].startswith("ServiceAccount heterojob-system/heterojob-operator"), result
        assert result["writes_source"].startswith("kube-apiserver API Priority and Fairness"), result
        assert result["fill_placed"] == result["fill_jobs"] and result["operator_alive"], result
        for key in ("admit_free_p95_s", "fault_to_pods_p95_s", "idle_writes_per_s", "probe_p99_s", "apiserver_cpu_s"):
            assert isinstance(result.get(key), int | float), (key, result)
        # what the run made is gone: its namespaces are being deleted, its Nodes and write counters are
        core = kubernetes.client.CoreV1Api(plane.client())
        assert not core.list_node(label_selector="heterojob.io/bench").items
        flow = kubernetes.client.FlowcontrolApiserverV1Api(plane.client())
        assert not flow.list_flow_schema(label_selector="heterojob.io/bench-write-counter").items
