"""The alert receiver over HTTP, with Alertmanager's payload shapes, and the alert-to-job mapping."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from heterojob.alerts.mapping import DEFAULT_TABLE, MIGRATE_NOW, action_for, jobs_for
from heterojob.state.cache import Placed
from heterojob.alerts.payload import Alert
from heterojob.alerts.receiver import AlertReceiver
from heterojob.metrics import OperatorMetrics
import pytest
import requests
from heterojob.sim.cluster.nodes import node
from heterojob.sim.telemetry.prometheus import free_port
from tests.conftest import Cluster, eventually

TOKEN = "s3cret-token"


def alert(fingerprint: str = "a1b2c3", status: str = "firing", **labels: str) -> dict[str, Any]:
    return {"status": status, "labels": {"alertname": "HeteroJobGPUFatalXID", **labels},
            "annotations": {"summary": "GPU fell off the bus"}, "startsAt": "2026-11-21T03:00:00.000Z",
            "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2026-11-21T03:05:00Z",
            "generatorURL": "http://prometheus/graph?g0.expr=...", "fingerprint": fingerprint}


def notification(*alerts: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"version": "4", "groupKey": '{}:{alertname="HeteroJobGPUFatalXID"}', "truncatedAlerts": 0,
            "status": alerts[0]["status"] if alerts else "firing", "receiver": "heterojob",
            "groupLabels": {"alertname": "HeteroJobGPUFatalXID"}, "commonLabels": {}, "commonAnnotations": {},
            "externalURL": "http://alertmanager:9093", "alerts": list(alerts), **extra}


def exchange(requests: list[tuple[dict[str, str], bytes]], token: str | None = TOKEN, max_body: int = 1 << 20
             ) -> tuple[list[tuple[int, dict[str, Any]]], list[Alert], OperatorMetrics]:
    """Start a receiver, send each (headers, body), wait for processing; (answers, handled alerts, metrics)."""
    handled: list[Alert] = []
    metrics = OperatorMetrics()

    async def handle(a: Alert) -> None:
        handled.append(a)

    async def run() -> list[tuple[int, dict[str, Any]]]:
        receiver = AlertReceiver(handle, token, metrics, max_body=max_body)
        port = await receiver.start("127.0.0.1", 0)
        out = []
        async with aiohttp.ClientSession() as session:
            for headers, body in requests:
                async with session.post(f"http://127.0.0.1:{port}/alerts", data=body, headers=headers) as r:
                    out.append((r.status, await r.json(content_type=None)))
        await receiver.queue.join()
        await receiver.stop()
        return out

    return asyncio.run(run()), handled, metrics


AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def body(data: Any) -> bytes:
    return json.dumps(data).encode()


def test_firing_resolved_grouped_and_duplicates() -> None:
    group = notification(alert("f1", Hostname="gpu-1"), alert("f2", Hostname="gpu-2"))
    answers, handled, metrics = exchange([
        (AUTH, body(group)),
        (AUTH, body(group)),  # the group interval re-sends the same alerts: processed once
        (AUTH, body(notification(alert("f1", status="resolved", Hostname="gpu-1")))),
    ])
    assert [a[0] for a in answers] == [200, 200, 200]
    assert answers[0][1] == {"accepted": 2, "alerts": 2} and answers[1][1]["accepted"] == 0
    assert [(a.fingerprint, a.status) for a in handled] == [("f1", "firing"), ("f2", "firing"), ("f1", "resolved")]
    assert metrics.alerts_deduplicated._value.get() == 2


def test_unknown_fields_and_truncated_groups_are_accepted() -> None:
    a = alert("f9")
    a["somethingNew"] = {"x": 1}
    answers, handled, _ = exchange([(AUTH, body(notification(a, truncatedAlerts=3, notification_reason="new")))])
    assert answers[0][0] == 200 and len(handled) == 1


def test_wrong_or_missing_token_is_401() -> None:
    payload = body(notification(alert()))
    answers, handled, metrics = exchange([
        ({"Content-Type": "application/json"}, payload),
        ({"Authorization": "Bearer nope"}, payload),
        ({"Authorization": f"Basic {TOKEN}"}, payload),
    ])
    assert [a[0] for a in answers] == [401, 401, 401] and not handled
    assert "bearer token" in answers[0][1]["error"]
    assert metrics.alerts_rejected.labels("401")._value.get() == 3


def test_malformed_is_400_naming_the_problem() -> None:
    bad_status = notification(alert())
    bad_status["alerts"][0]["status"] = "exploded"
    no_fingerprint = notification(alert())
    del no_fingerprint["alerts"][0]["fingerprint"]
    answers, handled, _ = exchange([
        (AUTH, b"{not json"),
        (AUTH, body([1, 2, 3])),
        (AUTH, body({**notification(alert()), "version": "3"})),
        (AUTH, body(bad_status)),
        (AUTH, body(no_fingerprint)),
    ])
    assert [a[0] for a in answers] == [400] * 5 and not handled
    messages = [a[1]["error"] for a in answers]
    assert messages[0].startswith("not JSON")
    assert "JSON object" in messages[1]
    assert "version: '3' is not supported" in messages[2]
    assert messages[3].startswith("alerts.0.status:")
    assert messages[4].startswith("alerts.0.fingerprint:")


def test_oversized_is_413() -> None:
    big = notification(*[alert(f"f{i}", Hostname="gpu-1", padding="x" * 200) for i in range(100)])
    answers, handled, _ = exchange([(AUTH, body(big))], max_body=4096)
    assert answers[0][0] == 413 and not handled


def test_the_mapping_of_labels_to_jobs_and_actions() -> None:
    running = {"team-a/train": Placed("team-a", "train", 3, ("gpu-1", "gpu-2")),
               "team-b/npu": Placed("team-b", "npu", 1, ("npu-1",))}
    assert jobs_for({"namespace": "team-a", "pod": "train-g3-1"}, running)[0].nodes == ("gpu-2",)
    assert jobs_for({"namespace": "team-a", "pod": "train-g2-1"}, running) == []  # an older generation
    assert jobs_for({"namespace": "team-b", "pod_name": "npu-g1-0", "id": "3"}, running)[0].job == "team-b/npu"
    assert [h.job for h in jobs_for({"hostname": "gpu-1"}, running)] == ["team-a/train"]
    assert [h.job for h in jobs_for({"instance": "gpu-2:9400"}, running)] == ["team-a/train"]
    assert [h.job for h in jobs_for({"UUID": "GPU-9"}, running, {"GPU-9": "npu-1"})] == ["team-b/npu"]
    assert jobs_for({"Hostname": "elsewhere"}, running) == []
    assert action_for({"alertname": "HeteroJobGPUFatalXID"}, {}, DEFAULT_TABLE) == MIGRATE_NOW
    assert action_for({"alertname": "Custom"}, {"heterojob_action": "checkpoint"}, DEFAULT_TABLE) == "checkpoint"
    assert action_for({"alertname": "Custom"}, {}, DEFAULT_TABLE) is None



# --- on the operator (harness) ----------------------------------------------------------------------------




@pytest.mark.harness
def test_an_alert_naming_a_node_migrates_its_job_and_unknown_targets_are_counted(
        cluster: Cluster, emulator: Any) -> None:
    from heterojob.sim.cluster.harness import OperatorRunner

    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("h100-b", "cn-east", "nvidia-h100")])
    port = free_port()
    with OperatorRunner(emulator.kubeconfig, alerts_port=port, alert_token=TOKEN) as operator:
        cluster.create_job("hit", {"priority": "high", "replicas": {"min": 1},
                                   "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
                                   "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}})
        [pod] = eventually(lambda: cluster.pods("hit"), what="pod")
        cluster.set_pod_phase(pod.metadata.name, "Running")
        eventually(lambda: (cluster.job("hit").get("status") or {}).get("phase") == "Running", what="Running")
        where = cluster.job("hit")["status"]["placement"]["nodes"][0]
        url = f"http://127.0.0.1:{port}"
        elsewhere = requests.post(f"{url}/alerts", json=notification(alert("zz", Hostname="not-ours")),
                                  headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
        assert elsewhere.status_code == 200
        r = requests.post(f"{url}/alerts", json=notification(alert("xid79", Hostname=where, gpu="3")),
                          headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
        assert r.status_code == 200 and r.json()["accepted"] == 1
        moved = eventually(lambda: (p := (cluster.job("hit").get("status") or {}).get("placement") or {})
                           .get("generation") == 2 and p, what="moved by the alert")
        assert moved["nodes"] == [n for n in ("h100-a", "h100-b") if n != where]
        entry = cluster.job("hit")["status"]["history"][-1]
        assert entry["reason"].startswith("alert: HeteroJobGPUFatalXID: GPU fell off the bus")
        metrics = requests.get(f"{url}/metrics", timeout=5).text
        assert "heterojob_alerts_unmatched_total 1.0" in metrics
        assert 'heterojob_alerts_acted_total{action="migrate-now"} 1.0' in metrics
        assert 'heterojob_migrations_total{action="migrate",trigger="alert"} 1.0' in metrics
    assert "Traceback" not in operator.output
