"""Alertmanager webhook payloads of the shapes real deployments send, through the receiver and the mapping.

Payload: Alertmanager 0.25-0.28 `notify/webhook` Message (version "4", groupKey, truncatedAlerts, plus
template.Data: receiver, status, alerts, groupLabels, commonLabels, commonAnnotations, externalURL); each alert
status, labels, annotations, startsAt/endsAt (Go's RFC 3339 with nanoseconds, in the Alertmanager's time zone),
generatorURL, fingerprint. Labels: what Prometheus attaches to a dcgm-exporter or npu-exporter series scraped
through the prometheus-operator (ServiceMonitor/PodMonitor, honorLabels false: the target's
container/endpoint/instance/job/namespace/pod/service, the workload's as exported_*), dcgm-exporter's Hostname
without NODE_NAME (the exporter pod's name), kube-state-metrics' `node` as `exported_node`, and node names that
are IPs (as some managed Kubernetes services name them).
"""

from __future__ import annotations

from typing import Any

from heterojob.alerts.mapping import jobs_for, locatable, node_of
from heterojob.state.cache import Placed
from tests.harness.test_alerts_http import AUTH, alert, body, exchange, notification

RUNNING = {"team-a/train": Placed("team-a", "train", 2, ("gpu-1", "gpu-2")),
           "team-b/npu": Placed("team-b", "npu", 1, ("npu-1", "npu-2")),
           "team-c/ip": Placed("team-c", "ip", 1, ("10.0.3.17",))}

# dcgm-exporter 3.3.x through the GPU operator's ServiceMonitor, NODE_NAME unset: Hostname is the exporter pod
DCGM_SM = {"UUID": "GPU-7c1d5e2a-93b4-4f6e-a1c2-00000000b001", "gpu": "1", "device": "nvidia1",
           "modelName": "NVIDIA H100 80GB HBM3", "pci_bus_id": "00000000:28:00.0",
           "DCGM_FI_DRIVER_VERSION": "550.90.07",
           "Hostname": "nvidia-dcgm-exporter-cmhft", "container": "nvidia-dcgm-exporter", "endpoint": "gpu-metrics",
           "instance": "10.244.1.23:9400", "job": "nvidia-dcgm-exporter", "namespace": "gpu-operator",
           "pod": "nvidia-dcgm-exporter-cmhft", "service": "nvidia-dcgm-exporter", "err_code": "79",
           "err_msg": "GPU has fallen off the bus"}


def hits(labels: dict[str, str], device_nodes: dict[str, str] | None = None) -> list[tuple[str, tuple[str, ...]]]:
    return [(h.job, h.nodes) for h in jobs_for(labels, RUNNING, device_nodes)]


def test_a_workload_pod_names_the_node_its_rank_runs_on_not_the_exporter_pod() -> None:
    # before: the Hit's node was the Hostname (the exporter pod's name), which names no node of the job, so the
    # recorded symptom matched none of its nodes and nothing moved
    labels = {**DCGM_SM, "exported_namespace": "team-a", "exported_pod": "train-g2-1", "exported_container": "main"}
    assert hits(labels) == [("team-a/train", ("gpu-2",))]
    # the same with only a pod IP as instance and no host label at all
    bare = {k: v for k, v in labels.items() if k != "Hostname"}
    assert hits(bare) == [("team-a/train", ("gpu-2",))]


def test_a_relabelled_node_wins_over_a_hostname_that_is_the_exporter_pod() -> None:
    # before: Hostname was read first: "nvidia-dcgm-exporter-cmhft" named no job and the alert was dropped
    labels = {**DCGM_SM, "node": "gpu-1"}  # idle GPU: no exported_pod
    assert node_of(labels) == "gpu-1"
    assert hits(labels) == [("team-a/train", ("gpu-1",))]


def test_kube_state_metrics_node_arrives_as_exported_node() -> None:
    # kube_node_status_condition{node=...} scraped with the target's node relabelled: `node` is the scraper's
    labels = {"alertname": "KubeNodeNotReady", "exported_node": "npu-2", "node": "gpu-1", "condition": "Ready",
              "instance": "10.244.0.9:8080", "job": "kube-state-metrics", "namespace": "monitoring",
              "pod": "kube-state-metrics-6d4f8b7c9-xk2lp"}
    assert node_of(labels) == "npu-2"
    assert hits(labels) == [("team-b/npu", ("npu-2",))]


def test_npu_exporter_through_a_pod_monitor_names_its_pod_by_pod_name() -> None:
    labels = {"id": "3", "model_name": "Ascend910B3", "vdie_id": "6a2f0c1d-3b3e-4c5d-8e9f-0a1b2c3d4e5f",
              "pcie_bus_info": "0000:04:00.0", "container_name": "trainer", "pod_name": "npu-g1-1",
              "exported_namespace": "team-b", "namespace": "npu-exporter", "pod": "npu-exporter-7kq2x",
              "container": "npu-exporter", "instance": "10.244.3.17:8082", "job": "npu-exporter/npu-exporter"}
    assert hits(labels) == [("team-b/npu", ("npu-2",))]


def test_instance_hosts_ipv6_and_urls_and_node_names_that_are_ips() -> None:
    assert hits({"instance": "10.0.3.17:9100", "job": "node-exporter"}) == [("team-c/ip", ("10.0.3.17",))]
    assert node_of({"instance": "[fd00::5]:9400"}) == "fd00::5"
    assert node_of({"instance": "https://gpu-1:9400/metrics"}) == "gpu-1"
    # federation: the original target is exported_instance, `instance` is the federating Prometheus
    assert hits({"exported_instance": "gpu-2:9400", "instance": "prometheus-global:9090"}) == [
        ("team-a/train", ("gpu-2",))]
    # a UUID alone resolves through the telemetry snapshot's device -> node; a MIG instance's is <UUID>/mig-<id>
    assert hits({"UUID": "GPU-x", "Hostname": "nvidia-dcgm-exporter-cmhft"}, {"GPU-x": "gpu-1"}) == [
        ("team-a/train", ("gpu-1",))]
    assert hits({"UUID": "GPU-m", "GPU_I_ID": "2", "GPU_I_PROFILE": "3g.40gb"}, {"GPU-m/mig-2": "gpu-2"}) == [
        ("team-a/train", ("gpu-2",))]


def am_028(*alerts: dict[str, Any]) -> dict[str, Any]:
    """A notification as Alertmanager 0.28 sends it (grouped by alertname and node, some alerts truncated)."""
    return notification(*alerts, receiver="heterojob", truncatedAlerts=3,
                        groupKey='{}/{alertname=~"HeteroJob.*"}:{alertname="HeteroJobGPUFatalXID", node="gpu-1"}',
                        groupLabels={"alertname": "HeteroJobGPUFatalXID", "node": "gpu-1"},
                        commonLabels={"alertname": "HeteroJobGPUFatalXID", "severity": "critical"},
                        commonAnnotations={"heterojob_action": "migrate-now"})


def test_an_alertmanager_028_group_with_nanoseconds_and_time_zones_is_ordered_by_instant() -> None:
    firing = {**alert("fa11", node="gpu-1", UUID="GPU-1"), "startsAt": "2026-11-21T11:00:00.123456789+08:00"}
    other = {**alert("fa12", node="gpu-1", UUID="GPU-2"), "startsAt": "2026-11-21T03:00:01.5Z"}
    # the same episode resolved, sent by an Alertmanager writing UTC: the same instant, so it is no new episode
    resolved = {**alert("fa11", status="resolved", node="gpu-1", UUID="GPU-1"),
                "startsAt": "2026-11-21T03:00:00.123456789Z", "endsAt": "2026-11-21T03:10:00.5Z"}
    late = {**alert("fa11", node="gpu-1", UUID="GPU-1"), "startsAt": "2026-11-21T11:00:00.123456789+08:00"}
    answers, handled, _ = exchange([(AUTH, body(am_028(firing, other))), (AUTH, body(am_028(resolved))),
                                    (AUTH, body(am_028(late)))])
    assert [a[0] for a in answers] == [200, 200, 200]
    assert answers[0][1] == {"accepted": 2, "alerts": 2}
    assert [(a.fingerprint, a.status) for a in handled] == [("fa11", "firing"), ("fa12", "firing"),
                                                             ("fa11", "resolved")]  # the late firing is stale


def test_an_alert_that_names_no_pod_node_or_device_is_delivered_with_a_warning_naming_the_labels() -> None:
    vague = {"status": "firing", "labels": {"alertname": "GPUClusterHot", "severity": "warning"},
             "annotations": {"heterojob_action": "migrate"}, "startsAt": "2026-11-21T03:00:00Z",
             "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "", "fingerprint": "0f1e2d3c4b5a6978"}
    placed = alert("fa21", node="gpu-1")
    assert not locatable(vague["labels"]) and locatable(placed["labels"])
    answers, handled, _ = exchange([(AUTH, body(am_028(vague, placed)))])
    code, answer = answers[0]
    assert code == 200 and answer["accepted"] == 2  # a 4xx would make Alertmanager drop the whole group
    assert answer["unlocated"] == [{"fingerprint": "0f1e2d3c4b5a6978", "alertname": "GPUClusterHot"}]
    assert "no label naming a pod, node or device" in answer["warning"] and "Hostname" in answer["warning"]
    assert len(handled) == 2


def test_other_wrong_shapes_are_400_naming_the_field() -> None:
    """Beyond test_alerts_http's: a time that is no RFC 3339, a number as a label value (another sender than
    Alertmanager), `alerts: null`."""
    cases = [
        (notification({**alert("x"), "startsAt": "yesterday"}), "alerts.0.startsAt"),
        (notification({**alert("x"), "labels": {"gpu": 3}}), "alerts.0.labels.gpu"),
        ({**notification(alert("x")), "alerts": None}, "alerts"),
        # before: accepted, then compared with an earlier episode's aware time: TypeError, a 500 that
        # Alertmanager retries forever
        (notification({**alert("x"), "startsAt": "2026-11-21T03:00:00"}), "alerts.0.startsAt"),
    ]
    answers, handled, _ = exchange([(AUTH, body(notification(alert("x"))))] + [(AUTH, body(data)) for data, _ in cases])
    assert answers.pop(0)[0] == 200 and len(handled) == 1
    handled.clear()
    for (code, answer), (_, field) in zip(answers, cases, strict=True):
        assert code == 400 and field in answer["error"], (field, answer)
    assert handled == []


def test_the_dead_node_an_alert_marks_is_a_known_node_not_the_exporter_pod() -> None:
    """A firing dead-device alert keeps new work off its node (`AlertState.node_alert`): the node is the most
    trusted label that names a Node, so dcgm-exporter's Hostname (the exporter pod's name unless NODE_NAME is
    set) does not win over the scrape target's host when Hostname names no Node."""
    labels = {**{k: v for k, v in DCGM_SM.items() if k != "instance"}, "instance": "gpu-1:9400"}
    assert node_of(labels) == "nvidia-dcgm-exporter-cmhft"  # most trusted label, whatever it names
    assert node_of(labels, {"gpu-1", "gpu-2"}) == "gpu-1"
    assert node_of({"Hostname": "not-a-node"}, {"gpu-1"}) == "not-a-node"  # nothing known: the label as it is
