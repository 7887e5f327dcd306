"""End to end with a real Alertmanager (Debian's prometheus-alertmanager 0.25.0, API v2): a held alert whose
resolve notification never reaches the operator (its webhook points nowhere here) is resolved by the next
periodic re-read of the active alerts (`--alertmanager-sync`, 1 s here), and the node takes work again; an
Alertmanager that is down during the syncs resolves nothing, and says so once."""

from __future__ import annotations

import datetime
import os
import time
from pathlib import Path

import pytest
import requests

from heterojob.sim.cluster.harness import Emulator, OperatorRunner
from heterojob.sim.cluster.nodes import node
from heterojob.sim.telemetry.prometheus import AlertmanagerServer, free_port
from tests.conftest import Cluster, eventually
from tests.e2e.test_alert_restore_e2e import TOKEN, dead_gpu
from tests.harness.test_migration import live_pods, spec

pytestmark = [pytest.mark.e2e, pytest.mark.harness,
              pytest.mark.skipif(os.environ.get("HETEROJOB_SKIP_E2E") == "1", reason="HETEROJOB_SKIP_E2E=1")]
FMT = "%Y-%m-%dT%H:%M:%S.%fZ"


def placed_on(cluster: Cluster) -> list[str]:
    return sorted(p.metadata.annotations["heterojob.io/node"] for j in ("first", "second")
                  for p in live_pods(cluster, j, 1))


def test_a_resolve_never_delivered_is_found_by_the_next_sync_and_the_node_takes_work_again(
        emulator: Emulator, cluster: Cluster, tmp_path: Path) -> None:
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    now = datetime.datetime.now(datetime.UTC)
    starts = (now - datetime.timedelta(minutes=2)).strftime(FMT)
    nowhere = f"http://127.0.0.1:{free_port()}/alerts"  # no webhook, firing or resolved, reaches the operator
    with AlertmanagerServer(nowhere, TOKEN, workdir=tmp_path / "am") as am:
        assert requests.post(f"{am.url}/api/v2/alerts", json=[dead_gpu("h100-0", starts)], timeout=5).ok
        with OperatorRunner(emulator.kubeconfig, alerts_port=free_port(), alert_token=TOKEN,
                            alertmanager_url=am.url, alertmanager_sync_s=1.0) as operator:
            cluster.create_job("first", spec(replicas={"min": 1}))
            cluster.create_job("second", spec(replicas={"min": 1}))
            eventually(lambda: placed_on(cluster), what="a job placed")
            time.sleep(3)  # syncs run meanwhile: the alert is still active, the node stays shut
            assert placed_on(cluster) == ["h100-1"]
            # the GPU recovers: Alertmanager resolves the alert; its resolve goes nowhere
            ended = datetime.datetime.now(datetime.UTC).strftime(FMT)
            resolve = {**dead_gpu("h100-0", starts), "endsAt": ended}
            assert requests.post(f"{am.url}/api/v2/alerts", json=[resolve], timeout=5).ok
            assert requests.get(f"{am.url}/api/v2/alerts", timeout=5).json() == []
            eventually(lambda: placed_on(cluster) == ["h100-0", "h100-1"], what="the node offered again")
        assert "synced the firing alerts with Alertmanager" in operator.output
        assert "1 no longer active, resolved" in operator.output
        assert "Traceback" not in operator.output


def test_with_alertmanager_down_during_the_syncs_nothing_is_resolved_and_the_outage_is_said_once(
        emulator: Emulator, cluster: Cluster, tmp_path: Path) -> None:
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    starts = datetime.datetime.now(datetime.UTC).strftime(FMT)
    nowhere = f"http://127.0.0.1:{free_port()}/alerts"
    am = AlertmanagerServer(nowhere, TOKEN, workdir=tmp_path / "am").start()
    try:
        assert requests.post(f"{am.url}/api/v2/alerts", json=[dead_gpu("h100-0", starts)], timeout=5).ok
        with OperatorRunner(emulator.kubeconfig, alerts_port=free_port(), alert_token=TOKEN,
                            alertmanager_url=am.url, alertmanager_sync_s=1.0, alertmanager_timeout_s=0.5) as operator:
            cluster.create_job("first", spec(replicas={"min": 1}))
            cluster.create_job("second", spec(replicas={"min": 1}))
            eventually(lambda: placed_on(cluster), what="a job placed")  # after the restore (the first placement waits)
            time.sleep(1.5)  # a sync that reads Alertmanager up
            am.stop()
            time.sleep(5)  # several syncs find Alertmanager down
            assert placed_on(cluster) == ["h100-1"]  # the dead node still takes nothing
        assert "restored the firing alerts from Alertmanager" in operator.output
        warned = operator.output.count("cannot read the active alerts from Alertmanager")
        assert warned == 1, operator.output[-3000:]
        assert "no longer active, resolved" not in operator.output and "Traceback" not in operator.output
    finally:
        am.stop()
