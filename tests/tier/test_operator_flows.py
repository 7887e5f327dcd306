"""The operator's own life on both sites (tests/tier/conftest.py): killed with SIGKILL mid-flight and started again,
and two replicas under leader election where the leader dies."""

from __future__ import annotations

import signal

import kubernetes
import pytest

from heterojob.sim.cluster.nodes import node
from tests.conftest import eventually
from tests.tier.conftest import LEASE, SYSTEM_NS, Flow
from tests.tier.test_job_flows import job_spec

pytestmark = pytest.mark.tier


def test_kill_9_mid_placement_and_restart_leaves_one_gang_per_job(flow: Flow) -> None:
    ns = flow.namespace("team")
    flow.nodes([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(4)])
    for i in range(4):
        flow.create_job(f"j{i}", job_spec(replicas=2, per_replica=4), ns)
    first = flow.operator()
    eventually(lambda: any((flow.status(f"j{i}", ns).get("placement")) for i in range(4)), timeout=60,
               what="a first placement")
    first.proc.send_signal(signal.SIGKILL)  # mid-flight: some placed, some with pods, some not yet looked at
    first.proc.wait(10)
    flow.operator()
    for i in range(4):
        s = flow.phase(f"j{i}", ns, "Running", timeout=90)
        pods = flow.pods(f"j{i}", ns, live=False)
        assert len(pods) == 2 and {p.metadata.labels["heterojob.io/generation"] for p in pods} == {
            str(s["placement"]["generation"])}, [p.metadata.name for p in pods]
        assert "PodsRefused" not in [e.reason for e in flow.events(f"j{i}", ns)]


def test_the_standby_takes_over_when_the_leader_dies(flow: Flow) -> None:
    ns = flow.namespace("team")
    flow.nodes([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    a, b = flow.operator(), flow.operator()
    coordination = kubernetes.client.CoordinationV1Api(flow.api)

    def holder() -> str | None:
        try:
            return str(coordination.read_namespaced_lease(LEASE, SYSTEM_NS).spec.holder_identity or "") or None
        except kubernetes.client.ApiException:
            return None

    leader_name = eventually(lambda: holder() in (a.name, b.name) and holder(), timeout=60, what="a leader")
    flow.create_job("before", job_spec(replicas=1), ns)
    flow.phase("before", ns, "Running")
    leader, standby = (a, b) if leader_name == a.name else (b, a)
    assert eventually(lambda: standby.probe("/healthz") == 200, timeout=30, what="the standby is live")
    leader.proc.send_signal(signal.SIGKILL)
    leader.proc.wait(10)
    flow.create_job("after", job_spec(replicas=1), ns)
    flow.phase("after", ns, "Running", timeout=60)  # the Lease lasts 15 s: the standby acts within about 17 s
    assert holder() == standby.name
    assert flow.status("before", ns)["phase"] == "Running"
    assert [p.metadata.labels["heterojob.io/generation"] for p in flow.pods("before", ns)] == ["1"]
