"""End to end: a restarted operator reads the firing alerts back from a real Alertmanager (Debian's
prometheus-alertmanager 0.25.0, API v2) and keeps new work off a node with a dead GPU without any webhook
(Alertmanager's webhook points nowhere here); with Alertmanager down it starts and places jobs as before,
and says what to fix."""

from __future__ import annotations

import datetime
import os
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from heterojob.sim.cluster.harness import Emulator, OperatorRunner
from heterojob.sim.cluster.nodes import node
from heterojob.sim.telemetry.prometheus import AlertmanagerServer, free_port
from tests.conftest import Cluster, eventually
from tests.harness.test_migration import live_pods, run, spec

pytestmark = [pytest.mark.e2e, pytest.mark.harness,
              pytest.mark.skipif(os.environ.get("HETEROJOB_SKIP_E2E") == "1", reason="HETEROJOB_SKIP_E2E=1")]
TOKEN = "e2e-token"


def dead_gpu(node_name: str, starts: str) -> dict[str, Any]:
    """A fatal-XID alert as Prometheus posts it to Alertmanager (`POST /api/v2/alerts`, nanoseconds)."""
    return {"labels": {"alertname": "HeteroJobGPUFatalXID", "Hostname": node_name, "UUID": f"GPU-{node_name}-3",
                       "severity": "critical"},
            "annotations": {"summary": f"GPU on {node_name}: fatal XID 79", "heterojob_action": "migrate-now"},
            "startsAt": starts, "generatorURL": "http://prometheus:9090/graph?g0.expr=DCGM_FI_DEV_XID_ERRORS"}


def test_a_restarted_operator_keeps_new_work_off_a_node_alertmanager_says_has_a_dead_gpu(
        emulator: Emulator, cluster: Cluster, tmp_path: Path) -> None:
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    starts = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.123456789Z")
    nowhere = f"http://127.0.0.1:{free_port()}/alerts"  # no webhook reaches the operator
    with AlertmanagerServer(nowhere, TOKEN, workdir=tmp_path / "am") as am:
        # a silenced alert about the other node: the webhook would not send it, so it must not count either
        silence = {"matchers": [{"name": "Hostname", "value": "h100-1", "isRegex": False}],
                   "startsAt": "2026-01-01T00:00:00Z", "endsAt": "2099-01-01T00:00:00Z", "createdBy": "test",
                   "comment": "maintenance"}
        assert requests.post(f"{am.url}/api/v2/silences", json=silence, timeout=5).status_code == 200
        r = requests.post(f"{am.url}/api/v2/alerts", json=[dead_gpu("h100-0", starts), dead_gpu("h100-1", starts)],
                          timeout=5)
        assert r.status_code == 200, r.text
        alerts_port = free_port()
        with OperatorRunner(emulator.kubeconfig, alerts_port=alerts_port, alert_token=TOKEN,
                            alertmanager_url=am.url) as operator:
            cluster.create_job("first", spec(replicas={"min": 1}))
            cluster.create_job("second", spec(replicas={"min": 1}))
            placed = eventually(lambda: [p for j in ("first", "second") for p in live_pods(cluster, j, 1)],
                                what="a job placed")
            time.sleep(2)  # the other job would be placed by now if the dead node were free
            pods = [p for j in ("first", "second") for p in live_pods(cluster, j, 1)]
            assert [p.metadata.annotations["heterojob.io/node"] for p in pods] == ["h100-1"], placed
            metrics = requests.get(f"http://127.0.0.1:{alerts_port}/metrics", timeout=5).text
            assert 'heterojob_alerts_restored_total{verdict="new"} 1.0' in metrics
            # the webhook of the same episode (nanoseconds where the API wrote milliseconds) changes nothing
            hook = {**dead_gpu("h100-0", starts), "status": "firing", "endsAt": "0001-01-01T00:00:00Z",
                    "fingerprint": requests.get(f"{am.url}/api/v2/alerts", params={"silenced": "false"},
                                                timeout=5).json()[0]["fingerprint"]}
            note = {"version": "4", "groupKey": "{}:{}", "status": "firing", "receiver": "heterojob", "alerts": [hook]}
            answer = requests.post(f"http://127.0.0.1:{alerts_port}/alerts", json=note,
                                   headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
            assert answer.status_code == 200 and answer.json()["accepted"] == 0
        assert "restored the firing alerts from Alertmanager" in operator.output
        assert "Traceback" not in operator.output


def test_with_alertmanager_down_the_operator_starts_places_jobs_and_says_what_to_fix(
        emulator: Emulator, cluster: Cluster) -> None:
    cluster.seed([node("h100-0", "cn-east", "nvidia-h100")])
    down = f"http://127.0.0.1:{free_port()}"
    with OperatorRunner(emulator.kubeconfig, alerts_port=free_port(), alert_token=TOKEN,
                        alertmanager_url=down) as operator:
        cluster.create_job("job", spec(replicas={"min": 1}))
        run(cluster, "job", 1)
    assert f"cannot read the firing alerts from Alertmanager at {down}: connection refused" in operator.output
    assert "--alertmanager-url" in operator.output and "Traceback" not in operator.output


def test_an_alert_read_back_while_the_controller_is_slow_to_start_is_taken_once_it_runs(
        emulator: Emulator, cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller is built on the first watch event and may take longer than an alert waits for it (here
    1.5 s against 0.3 s; 30 s by default). Before, the restored alert was then dropped yet remembered as seen:
    the dead node took work, and the webhook's re-send of the same episode was ignored as a duplicate. Now it
    is forgotten, handed in again once the controller runs, before the first placement."""
    from heterojob.controller import Controller

    load = Controller.load

    async def slow_load(self: Controller) -> None:
        import asyncio
        await asyncio.sleep(1.5)
        await load(self)

    monkeypatch.setattr(Controller, "load", slow_load)
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    starts = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.123456789Z")
    nowhere = f"http://127.0.0.1:{free_port()}/alerts"
    with AlertmanagerServer(nowhere, TOKEN, workdir=tmp_path / "am") as am:
        r = requests.post(f"{am.url}/api/v2/alerts", json=[dead_gpu("h100-0", starts)], timeout=5)
        assert r.status_code == 200, r.text
        alerts_port = free_port()
        with OperatorRunner(emulator.kubeconfig, alerts_port=alerts_port, alert_token=TOKEN,
                            alertmanager_url=am.url, alert_wait_s=0.3) as operator:
            cluster.create_job("first", spec(replicas={"min": 1}))
            cluster.create_job("second", spec(replicas={"min": 1}))
            eventually(lambda: [p for j in ("first", "second") for p in live_pods(cluster, j, 1)],
                       what="a job placed")
            time.sleep(2)  # the other job would be placed by now if the dead node were free
            pods = [p for j in ("first", "second") for p in live_pods(cluster, j, 1)]
            assert [p.metadata.annotations["heterojob.io/node"] for p in pods] == ["h100-1"]
            metrics = requests.get(f"http://127.0.0.1:{alerts_port}/metrics", timeout=5).text
            assert "heterojob_alerts_deferred_total 1.0" in metrics
        assert "not taken yet (the controller is not running" in operator.output
        assert "Traceback" not in operator.output


def overheat(node_name: str, starts: str, ends: str | None = None) -> dict[str, Any]:
    """An alert asking for a (held) move, as Prometheus posts it; with `ends` in the past, its resolve."""
    a = {"labels": {"alertname": "HeteroJobGPUOverheat", "Hostname": node_name, "gpu": "0"},
         "annotations": {"summary": f"GPU 0 on {node_name} too hot", "heterojob_action": "migrate"},
         "startsAt": starts}
    return {**a, "endsAt": ends} if ends else a


def test_an_alert_that_resolved_and_fired_again_while_the_operator_was_down_is_a_new_firing(
        emulator: Emulator, cluster: Cluster, tmp_path: Path) -> None:
    """Alertmanager 0.25.0 (Debian's; provider/mem `Put`): an alert is named by its label set's fingerprint; a
    firing that overlaps the stored one's [startsAt, endsAt] is merged into it (the earlier startsAt kept), one
    that begins after the stored one resolved replaces it, with its own startsAt: a new firing episode of the
    same fingerprint. The operator down across resolve and re-fire reads that episode back at start: its
    symptom counts from the new startsAt, not from when the old episode was first heard."""
    from heterojob.api.times import timestamp

    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    now = datetime.datetime.now(datetime.UTC)
    fmt = "%Y-%m-%dT%H:%M:%S.%fZ"
    first = (now - datetime.timedelta(minutes=10)).strftime(fmt)
    hook_port = free_port()
    with AlertmanagerServer(f"http://127.0.0.1:{hook_port}/alerts", TOKEN, workdir=tmp_path / "am") as am:
        with OperatorRunner(emulator.kubeconfig, alerts_port=hook_port, alert_token=TOKEN,
                            alertmanager_url=am.url) as operator:
            cluster.create_job("hot", spec(replicas={"min": 1}, policy={"triggers": ["nodeNotReady"]}))
            run(cluster, "hot", 1)
            where = cluster.job("hot")["status"]["placement"]["nodes"][0]
            assert requests.post(f"{am.url}/api/v2/alerts", json=[overheat(where, first)], timeout=5).ok
            [heard] = eventually(lambda: cluster.job("hot")["status"].get("alerts"), what="the webhook's symptom")
        assert timestamp(heard["since"]) == int(timestamp(first) or 0)  # the episode began then
        [before] = requests.get(f"{am.url}/api/v2/alerts", timeout=5).json()
        # while no operator runs: the alert resolves, then fires again
        ended = (now - datetime.timedelta(minutes=5)).strftime(fmt)
        assert requests.post(f"{am.url}/api/v2/alerts", json=[overheat(where, first, ended)], timeout=5).ok
        assert requests.get(f"{am.url}/api/v2/alerts", timeout=5).json() == []
        again = (now - datetime.timedelta(minutes=1)).strftime(fmt)
        assert requests.post(f"{am.url}/api/v2/alerts", json=[overheat(where, again)], timeout=5).ok
        [after] = requests.get(f"{am.url}/api/v2/alerts", timeout=5).json()
        assert after["fingerprint"] == before["fingerprint"] and after["startsAt"] != before["startsAt"]
        # the next operator hears no webhook (another port): only what it reads back at start
        with OperatorRunner(emulator.kubeconfig, alerts_port=free_port(), alert_token=TOKEN,
                            alertmanager_url=am.url) as operator:
            new = eventually(lambda: [a for a in cluster.job("hot")["status"].get("alerts") or []
                                      if a["since"] != heard["since"]], what="the new firing recorded")
        assert [a["fingerprint"] for a in new] == [heard["fingerprint"]]
        assert timestamp(new[0]["since"]) == int(timestamp(again) or 0)
        assert timestamp(new[0]["startsAt"]) == timestamp(after["startsAt"])
        assert "Traceback" not in operator.output
