"""Alert sequences through the operator's receiver (Alertmanager webhook v4 shapes, as in
test_alerts_http.py): an alert that fires and resolves before the job's next pass, the same alert from two
Alertmanagers of an HA pair (Alertmanager's `fingerprint` is a hash of the label set, so both send the same
one, with the same `startsAt` from Prometheus' ALERTS series), an alert naming a node no job uses.

Alertmanager sends a resolved notification once (`send_resolved: true`) and repeats firing ones every
`repeat_interval` (4h by default): a resolve lost inside the operator leaves a symptom that nothing clears.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import requests

from heterojob.sim.cluster.harness import Emulator, OperatorRunner
from heterojob.sim.cluster.nodes import node
from heterojob.sim.telemetry.prometheus import free_port
from tests.conftest import Cluster, eventually
from tests.harness.test_alerts_http import TOKEN, alert, notification
from tests.harness.test_migration import live_pods, run, spec, status

pytestmark = pytest.mark.harness
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def overheat(fingerprint: str, node_name: str, state: str = "firing", starts: str = "2026-11-21T03:00:00.000Z"
             ) -> dict[str, Any]:
    a = alert(fingerprint, state, Hostname=node_name, gpu="0")
    a["labels"]["alertname"] = "HeteroJobGPUOverheat"  # the table's MIGRATE: a symptom kept in status.alerts
    a["startsAt"] = starts
    return a


def test_alerts_that_fire_and_resolve_at_once_leave_no_symptom_behind(cluster: Cluster, emulator: Emulator
                                                                      ) -> None:
    """Each pair (firing, then resolved, in one notification) is queued in order; the receiver's workers
    must not let the resolve overtake the firing it resolves (a symptom no resolve will ever clear)."""
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    port = free_port()
    with OperatorRunner(emulator.kubeconfig, alerts_port=port, alert_token=TOKEN) as operator:
        # "alert" is not among its triggers: a symptom is recorded and weighed, never acted on here
        cluster.create_job("hot", spec(replicas={"min": 1}, policy={"triggers": ["nodeNotReady"]}))
        [pod] = run(cluster, "hot", 1)
        where = status(cluster, "hot")["placement"]["nodes"][0]
        url = f"http://127.0.0.1:{port}/alerts"
        for i in range(12):
            pair = notification(overheat(f"fp{i}", where), overheat(f"fp{i}", where, "resolved"))
            assert requests.post(url, json=pair, headers=AUTH, timeout=5).status_code == 200
        time.sleep(2)
        assert status(cluster, "hot").get("alerts", []) == []
        assert [p.metadata.name for p in live_pods(cluster, "hot", 1)] == [pod.metadata.name]
    assert "Traceback" not in operator.output


def test_the_same_alert_from_two_alertmanagers_is_one_symptom_and_one_move(cluster: Cluster, emulator: Emulator
                                                                           ) -> None:
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(3)])
    port = free_port()
    with OperatorRunner(emulator.kubeconfig, alerts_port=port, alert_token=TOKEN) as operator:
        cluster.create_job("hit", spec(replicas={"min": 1}))
        run(cluster, "hit", 1)
        where = status(cluster, "hit")["placement"]["nodes"][0]
        url = f"http://127.0.0.1:{port}/alerts"
        xid = alert("xid79", Hostname=where, gpu="3")
        for peer in ("http://alertmanager-0:9093", "http://alertmanager-1:9093"):
            r = requests.post(url, json=notification(xid, externalURL=peer), headers=AUTH, timeout=5)
            assert r.status_code == 200
        [new] = run(cluster, "hit", 1, generation=2)
        assert new.metadata.annotations["heterojob.io/node"] != where
        time.sleep(2)
        s = status(cluster, "hit")
        assert [h["action"] for h in s["history"]].count("migrate") == 1 and s["placement"]["generation"] == 2
        # the dead node stays out of placements while the alert fires, for a job that never ran there too
        cluster.create_job("next", spec(replicas={"min": 1}))
        [other] = run(cluster, "next", 1)
        assert other.metadata.annotations["heterojob.io/node"] != where
        resolved = alert("xid79", "resolved", Hostname=where, gpu="3")
        assert requests.post(url, json=notification(resolved), headers=AUTH, timeout=5).status_code == 200
        cluster.create_job("third", spec(replicas={"min": 1}))
        [third] = run(cluster, "third", 1)
        assert third.metadata.annotations["heterojob.io/node"] == where  # back once resolved
    assert "Traceback" not in operator.output


def test_an_alert_heard_again_after_a_restart_keeps_when_it_was_first_heard(cluster: Cluster, emulator: Emulator
                                                                           ) -> None:
    """After a restart the receiver remembers no episode, so the same firing alert (read back from
    Alertmanager at start, or its repeat) is handled again: the symptom it recorded keeps its `since` (a
    migration's hold time counts from it), and nothing is written."""
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    port = free_port()
    url, metrics = f"http://127.0.0.1:{port}/alerts", f"http://127.0.0.1:{port}/metrics"
    acted = 'heterojob_alerts_acted_total{action="migrate"} 1.0'
    with OperatorRunner(emulator.kubeconfig, alerts_port=port, alert_token=TOKEN):
        cluster.create_job("hot", spec(replicas={"min": 1}, policy={"triggers": ["nodeNotReady"]}))
        run(cluster, "hot", 1)
        where = status(cluster, "hot")["placement"]["nodes"][0]
        hot = notification(overheat("fp-hot", where))
        assert requests.post(url, json=hot, headers=AUTH, timeout=5).status_code == 200
        [first] = eventually(lambda: status(cluster, "hot").get("alerts"), what="the symptom recorded")
    time.sleep(1.1)  # `since` has a resolution of one second
    version = cluster.job("hot")["metadata"]["resourceVersion"]
    with OperatorRunner(emulator.kubeconfig, alerts_port=port, alert_token=TOKEN) as operator:
        def post() -> Any:
            try:
                return requests.post(url, json=hot, headers=AUTH, timeout=5).json()
            except requests.ConnectionError:
                return None  # not listening yet

        assert eventually(post, what="the receiver up")["accepted"] == 1  # new to this receiver
        eventually(lambda: acted in requests.get(metrics, timeout=5).text, what="the alert handled")
        assert status(cluster, "hot")["alerts"] == [first]
        assert cluster.job("hot")["metadata"]["resourceVersion"] == version
    assert "Traceback" not in operator.output
