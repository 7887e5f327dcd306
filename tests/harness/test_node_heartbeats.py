"""Node heartbeats and the node lifecycle controller of the emulated cluster, on clocks of the test's own.

- The stand-in kubelet renews each node's Lease in kube-node-lease (holderIdentity the node, owned by the Node,
  leaseDurationSeconds 40) every renew interval, and posts a Ready heartbeat every report interval
  (sim/cluster/heartbeats.py, after pkg/kubelet/nodelease and kubelet_node_status.go).
- kube-controller-manager's node lifecycle controller (sim/cluster/nodelifecycle.py) marks a node whose Lease and
  Ready heartbeat stay unchanged for its grace period (50 s) Ready Unknown, NodeStatusUnknown, tainted
  node.kubernetes.io/unreachable NoSchedule and NoExecute; once the kubelet answers again (Ready True, Lease
  renewed) the taints go.
- A fault injected with `nodes.set_node_lost` stops that node's kubelet: no renewal, no revival, until
  `set_node_ready`.
"""

from __future__ import annotations

from typing import Any

import kubernetes
import pytest

from heterojob.sim.cluster.kubelet import Kubelet
from heterojob.sim.cluster.nodelifecycle import NodeLifecycle
from heterojob.sim.cluster.nodes import UNREACHABLE_TAINT, node, set_node_lost, set_node_ready
from tests.conftest import Cluster, eventually

pytestmark = pytest.mark.harness

T0 = 10_000.0  # the kubelet's clock
C0 = 5_000.0  # the controller's


def lease(cluster: Cluster, name: str) -> Any:
    return kubernetes.client.CoordinationV1Api(cluster.api).read_namespaced_lease(name, "kube-node-lease")


def ready(cluster: Cluster, name: str) -> Any:
    return next(c for c in cluster.core.read_node(name).status.conditions if c.type == "Ready")


def taints(cluster: Cluster, name: str) -> set[tuple[str, str]]:
    return {(t.key, t.effect) for t in cluster.core.read_node(name).spec.taints or []}


def test_a_node_whose_kubelet_stops_renewing_goes_unknown_after_the_grace_period_and_back(cluster: Cluster
                                                                                          ) -> None:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100")])
    kubelet = Kubelet(cluster.api, schedule=False, renew_s=10, report_s=60)
    controller = NodeLifecycle(cluster.api, grace_s=50)
    kubelet.step(T0)
    kubelet.step(T0 + 10)  # each node renews at its own phase within the interval: by now it has
    held = lease(cluster, "h100-a")
    assert (held.spec.holder_identity, held.spec.lease_duration_seconds) == ("h100-a", 40)
    assert [(o.kind, o.name) for o in held.metadata.owner_references] == [("Node", "h100-a")]
    first = held.spec.renew_time
    controller.step(C0)
    kubelet.step(T0 + 21)
    assert lease(cluster, "h100-a").spec.renew_time > first  # renewed every 10 s
    beat = ready(cluster, "h100-a").last_heartbeat_time
    kubelet.step(T0 + 71)  # the Ready heartbeat, every 60 s here
    assert ready(cluster, "h100-a").last_heartbeat_time >= beat
    controller.step(C0 + 40)  # something new seen: the grace period starts again
    kubelet.silence("h100-a")
    for t in (80, 90, 100, 110):
        kubelet.step(T0 + t)
    controller.step(C0 + 89)
    assert ready(cluster, "h100-a").status == "True" and not taints(cluster, "h100-a")  # 49 s: not yet
    controller.step(C0 + 91)
    gone = ready(cluster, "h100-a")
    assert (gone.status, gone.reason, gone.message) == ("Unknown", "NodeStatusUnknown",
                                                        "Kubelet stopped posting node status.")
    assert taints(cluster, "h100-a") == {(UNREACHABLE_TAINT, "NoSchedule"), (UNREACHABLE_TAINT, "NoExecute")}
    assert any(e.reason == "NodeNotReady" and e.involved_object.name == "h100-a"
               for e in cluster.core.list_namespaced_event("default").items)
    kubelet.answer("h100-a")
    kubelet.step(T0 + 120)  # a kubelet that answers again posts Ready and renews its Lease at once
    assert ready(cluster, "h100-a").status == "True"
    controller.step(C0 + 95)
    assert not taints(cluster, "h100-a") and ready(cluster, "h100-a").status == "True"


def test_a_node_lost_by_a_fault_stays_silent_until_it_is_ready_again(cluster: Cluster) -> None:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100")])
    kubelet = Kubelet(cluster.api, schedule=False, renew_s=10, report_s=60)
    kubelet.step(T0)
    kubelet.step(T0 + 10)
    set_node_lost(cluster.core, "h100-a")
    renewed = lease(cluster, "h100-a").spec.renew_time
    for t in (20, 30, 40):
        kubelet.step(T0 + t)
    assert ready(cluster, "h100-a").status == "Unknown"  # not revived by the running kubelet
    assert lease(cluster, "h100-a").spec.renew_time == renewed
    set_node_ready(cluster.core, "h100-a")
    kubelet.step(T0 + 41)
    assert lease(cluster, "h100-a").spec.renew_time > renewed


def test_running_on_its_own_thread_it_watches_and_marks_a_node_no_kubelet_heartbeats(cluster: Cluster) -> None:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("h100-b", "cn-east", "nvidia-h100")])
    kubelet = Kubelet(cluster.api, schedule=False, renew_s=0.2, interval=0.1)
    kubelet.silence("h100-b")
    kubelet.start()
    controller = NodeLifecycle(cluster.api, interval=0.2, grace_s=2).start()
    try:
        eventually(lambda: ready(cluster, "h100-b").status == "Unknown", timeout=10, what="h100-b Unknown")
        assert ready(cluster, "h100-a").status == "True" and not taints(cluster, "h100-a")
        assert (UNREACHABLE_TAINT, "NoExecute") in taints(cluster, "h100-b")
    finally:
        controller.stop()
        kubelet.stop()
