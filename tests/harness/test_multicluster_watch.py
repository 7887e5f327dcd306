"""A member cluster's changes reach the manager through its watch, not at the next probe (docs/multicluster.md):
with a probe a minute apart, a member pod's phase and a member's new nodes are acted on within seconds, and a member
that stops answering is still found out by its probe."""

from __future__ import annotations

import dataclasses

import pytest

from heterojob.sim.cluster.harness import Emulator, OperatorRunner, apply
from heterojob.sim.cluster.nodes import node
from tests.conftest import Cluster, eventually
from tests.harness.members import FAST, condition, join, spec, status

SLOW_PROBE = dataclasses.replace(FAST, poll_seconds=60.0, loss_timeout_s=600.0, secret_refresh_s=600.0)


@pytest.mark.harness
def test_a_member_pods_phase_and_its_new_nodes_reach_the_manager_without_waiting_for_a_probe(
        cluster: Cluster, emulator: Emulator, members: dict[str, Emulator]) -> None:
    m = join(cluster, members, regions=("m-east",))
    with OperatorRunner(emulator.kubeconfig, members=SLOW_PROBE) as runner:
        eventually(lambda: condition(cluster, "m-east").get("status") == "True", what="m-east reachable")
        cluster.create_job("first", spec(["m-east"], ["m-east"]))
        pods = eventually(lambda: (p := m["m-east"].pods("first")) and len(p) == 2 and p, what="2 pods in m-east")
        for pod in pods:
            m["m-east"].core.patch_namespaced_pod_status(pod.metadata.name, "team-a", {"status": {"phase": "Running"}})
        eventually(lambda: status(cluster, "first").get("phase") == "Running", timeout=10,
                   what="Running, well before the next probe")
        # the member is full: a second job waits until the member gains nodes, then lands there
        cluster.create_job("second", spec(["m-east"], ["m-east"]))
        eventually(lambda: status(cluster, "second").get("phase") == "Pending", what="second waits")
        apply(m["m-east"].api, [node(f"m-east-h100-{i}", "m-east", "nvidia-h100") for i in (2, 3)])
        eventually(lambda: len(m["m-east"].pods("second")) == 2, timeout=10, what="second placed on the new nodes")
    assert "Traceback" not in runner.output


@pytest.mark.harness
def test_a_member_that_stops_answering_is_found_by_its_probe_though_its_watch_says_nothing(
        cluster: Cluster, emulator: Emulator, members: dict[str, Emulator]) -> None:
    m = join(cluster, members, regions=("m-east", "m-west"))
    with OperatorRunner(emulator.kubeconfig, members=FAST) as runner:
        cluster.create_job("far", spec(["m-east"], ["m-east"], replicas={"min": 1}))
        eventually(lambda: m["m-east"].pods("far"), what="the pod in m-east")
        members["m-east"].pause()  # its watches stay open and silent
        try:
            eventually(lambda: condition(cluster, "m-east").get("status") == "False", timeout=10,
                       what="m-east unreachable")
            assert condition(cluster, "m-east")["reason"] == "Unreachable"
            assert condition(cluster, "m-west").get("status") == "True"  # one member's silence stalls no other
        finally:
            members["m-east"].resume()
        eventually(lambda: condition(cluster, "m-east").get("status") == "True", what="m-east back")
        assert [p.metadata.name for p in m["m-east"].pods("far")] == ["far-g1-0"]  # a blip moves nothing
    assert "Traceback" not in runner.output
