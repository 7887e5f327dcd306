"""Telemetry on real deployment shapes (issue 33, item 11), as classes rather than one fixture:

- where a device's node comes from: the label a chart's or a documented scrape configuration's relabelling adds
  (dcgm-exporter's Helm chart `serviceMonitor.relabelings` example: `nodename`; kube-prometheus-stack's exporters:
  `nodename`; stable/prometheus: `kubernetes_node`; ...), the exporter pod through kube-state-metrics' kube_pod_info
  (dcgm-exporter's own dcgm-exporter.yaml + service-monitor.yaml: no relabelling, Hostname the pod's name),
  npu-exporter's documented Prometheus job (the node in `job`), Hostname/hostname, and the scrape target's host
  by name or Node address;
- the partial series a broken device leaves: a GPU that fell off the bus has nothing but its XID (dcgm-exporter
  skips fields DCGM cannot read), an Ascend chip the driver cannot read has nothing but its health (npu-exporter
  drops -1 / 4294967295 values). Only fault series: a failed row; no series at all, or no fault: never failed.

The answers are what Prometheus returns for the adapters' queries (identity labels kept where the query keeps them).
"""

from __future__ import annotations

from typing import Any

import pytest

from heterojob.alerts.mapping import node_of
from heterojob.telemetry.adapters import AscendAdapter, DcgmAdapter
from heterojob.telemetry.family import ParseReport
from heterojob.telemetry.labels import Context, node_of_series
from heterojob.telemetry.model import DEFAULT_FATAL_XIDS, Health, HealthPolicy
from heterojob.telemetry.snapshot import (
    POD_NODE, Availability, JobRef, NodeFacts, SourceResult, build, job_telemetry,
)

POLICY = HealthPolicy()
T0 = 1_763_740_800.0
NODES = {"gpu-a": NodeFacts("cn-east", "nvidia-h100", 8, ("10.0.0.7", "gpu-a.corp.example")),
         "gpu-b": NodeFacts("cn-east", "nvidia-h100", 8, ("10.0.0.8",)),
         "npu-c": NodeFacts("cn-north", "ascend-910b", 8, ("10.0.1.9",))}
EXPORTER = {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-cmhft"}  # a ServiceMonitor's target labels


def s(value: Any, at: float = T0, **labels: str) -> dict[str, Any]:
    return {"metric": labels, "value": [at, str(value)]}


def kept(adapter: DcgmAdapter | AscendAdapter, query: str, metric: str, labels: dict[str, str]) -> dict[str, str]:
    """What Prometheus keeps of a series of `metric` in the adapter's `query`: the labels of its `max by (...)`
    (and the metric's name where the grouping keeps `__name__`)."""
    q = adapter.queries(60)[query]
    start = q.rindex("max by (", 0, q.index(metric)) + len("max by (")
    by = {label.strip() for label in q[start:q.index(")", start)].split(",")}
    return {k: v for k, v in {"__name__": metric, **labels}.items() if k in by}


def ctx(**extra: Any) -> Context:
    return Context(is_node=NODES.__contains__, node_at={a: n for n, f in NODES.items() for a in f.addresses},
                   **extra)


# --- 1. where a series' node comes from ---------------------------------------------------------------------

# (label, where it comes from): each set from __meta_kubernetes_pod_node_name by a published configuration
RELABELLED = [
    ("nodename", "dcgm-exporter chart serviceMonitor.relabelings example; kube-prometheus-stack exporters"),
    ("node", "manifests/telemetry; prometheus-community/prometheus kubernetes-pods job"),
    ("kubernetes_node", "stable/prometheus kubernetes-service-endpoints job; GPU operator docs"),
    ("node_name", "promtail / Grafana Agent kubernetes-pods configs"),
    ("kubernetes_pod_node_name", "example kubernetes-pods jobs (Prometheus 2.x era)"),
    ("k8s_node_name", "OpenTelemetry k8s.node.name written to Prometheus"),
    ("exported_node", "a series' own `node` renamed by a second scrape with honor_labels: false"),
]


@pytest.mark.parametrize("label", [label for label, _ in RELABELLED])
@pytest.mark.parametrize("with_nodes", [True, False], ids=["node-list", "labels-only"])
def test_a_relabelled_node_label_wins_over_a_hostname_naming_the_exporter_pod(label: str, with_nodes: bool) -> None:
    """dcgm-exporter without NODE_NAME: Hostname is its pod's name. The chart's relabelling puts the node in
    `nodename` (and so on): the device row names the node, not the exporter pod (before: no row with a Node list,
    the pod's name without one)."""
    labels = {"UUID": "GPU-a0", "gpu": "0", "modelName": "NVIDIA H100 80GB HBM3",
              "Hostname": "nvidia-dcgm-exporter-cmhft", "instance": "10.244.3.17:9400", label: "gpu-a", **EXPORTER}
    report = ParseReport()
    [d] = DcgmAdapter().parse({"util": [s(88, **labels)]}, POLICY, report, ctx=ctx() if with_nodes else Context())
    assert d.node == "gpu-a" and not report.degraded
    # the alert receiver reads the same labels
    assert node_of(labels, {"gpu-a"}) == "gpu-a"


# labels -> the node they name, with the Node list NODES (addresses included) and one exporter pod on gpu-b
PRECEDENCE = [
    ({"Hostname": "gpu-a"}, "gpu-a"),  # the chart sets NODE_NAME: Hostname is the Node
    ({"hostname": "gpu-a"}, "gpu-a"),  # renamed after 4.5.3-4.8.2
    ({"Hostname": "gpu-a.corp.example"}, "gpu-a"),  # hostNetwork: the host's name, one of the Node's addresses
    ({**EXPORTER, "Hostname": EXPORTER["pod"], "instance": "10.244.3.17:9400"}, "gpu-b"),  # the pod, kube_pod_info
    ({"job": "npu-c", "instance": "10.244.9.3:8082"}, "npu-c"),  # npu-exporter's documented job: node in `job`
    ({"instance": "10.0.0.8:9400"}, "gpu-b"),  # hostNetwork exporter or static config: the Node's InternalIP
    ({"instance": "http://10.0.0.7:9400/metrics"}, "gpu-a"),
    ({"instance": "gpu-a:9400"}, "gpu-a"),  # kube-prometheus relabels `instance` to the node
    ({"exported_instance": "10.0.0.7:9400", "instance": "prometheus-0:9090"}, "gpu-a"),  # federated
    ({"nodename": "gpu-a", **EXPORTER, "Hostname": "gpu-b", "job": "npu-c"}, "gpu-a"),  # relabelled first
    ({**EXPORTER, "Hostname": "gpu-a"}, "gpu-b"),  # the pod's Node (kube-state-metrics) before Hostname
    ({"Hostname": "gpu-a", "job": "gpu-b", "instance": "10.0.0.8:9400"}, "gpu-a"),  # Hostname, job, instance
    ({"job": "dcgm-exporter", "Hostname": "dcgm-exporter-7xk2p", "instance": "10.244.0.5:9400"}, ""),  # none
    ({"namespace": "team-a", "pod": "train-g1-0", "instance": "10.244.0.5:9400"}, ""),  # a pod of no target
]


@pytest.mark.parametrize("labels, node", PRECEDENCE)
def test_the_node_of_a_series_by_precedence(labels: dict[str, str], node: str) -> None:
    assert node_of_series(labels, ctx(pod_nodes={(EXPORTER["namespace"], EXPORTER["pod"]): "gpu-b"})) == node


@pytest.mark.parametrize("labels, node", [
    ({"job": "dcgm-exporter", "instance": "10.244.0.5:9400"}, "10.244.0.5"),  # `job` only ever names a known Node
    ({"Hostname": "nvidia-dcgm-exporter-cmhft", "nodename": "gpu-a"}, "gpu-a"),
    ({"kubernetes_pod_node_name": "gpu-b", "instance": "gpu-a:9400"}, "gpu-b"),
])
def test_without_a_node_list_labels_alone_decide(labels: dict[str, str], node: str) -> None:
    assert node_of_series(labels) == node


def up_with_pod_nodes(*pods: tuple[str, str, str]) -> list[dict[str, Any]]:
    """The `up` query's answer: the scrape targets, and kube_pod_info's Node of each target pod."""
    targets = [s(1, job="dcgm-exporter", instance=f"10.244.{i}.17:9400", namespace=ns, pod=pod)
               for i, (ns, pod, _) in enumerate(pods)]
    return targets + [s(1, namespace=ns, pod=pod, node=node, heterojob_metric=POD_NODE) for ns, pod, node in pods]


def test_dcgm_exporters_own_manifests_place_devices_through_kube_state_metrics() -> None:
    """dcgm-exporter.yaml + service-monitor.yaml (no relabelling; NODE_NAME only since 2026): Hostname is the
    pod's name, `instance` a pod IP. kube_pod_info names each exporter pod's Node: rows on the nodes, region
    joined, nothing degraded (before: every device unresolved, the region DEGRADED)."""
    pods = [("gpu-operator", "nvidia-dcgm-exporter-cmhft", "gpu-a"), ("gpu-operator", "nvidia-dcgm-exporter-x2v9q", "gpu-b")]
    util = [s(90, UUID=f"GPU-{i}", gpu="0", Hostname=pod, instance=f"10.244.{i}.17:9400", namespace=ns, pod=pod,
              exported_namespace="team-a", exported_pod=f"train-g1-{i}") for i, (ns, pod, _) in enumerate(pods)]
    answers = {"dcgm:util": util, "up": up_with_pod_nodes(*pods)}
    snap = build([SourceResult("p", frozenset({"*"}), answers)], NODES, {}, POLICY)
    assert {d: (x.node, x.region, x.pod) for d, x in snap.devices.items()} == {
        "GPU-0": ("gpu-a", "cn-east", "train-g1-0"), "GPU-1": ("gpu-b", "cn-east", "train-g1-1")}
    assert snap.region("cn-east").availability == Availability.OK, snap.region("cn-east").message
    # a pod kube_pod_info puts on two Nodes names none: reported, not guessed
    twice = up_with_pod_nodes(pods[0]) + [s(1, namespace=pods[0][0], pod=pods[0][1], node="gpu-b",
                                            heterojob_metric=POD_NODE)]
    snap = build([SourceResult("p", frozenset({"*"}), {"dcgm:util": util[:1], "up": twice})], NODES, {}, POLICY)
    assert not snap.devices and snap.region("cn-east").availability == Availability.DEGRADED


def test_npu_exporter_through_its_documented_service_monitor_is_placed_by_its_pod() -> None:
    """mind-cluster's servicemonitor.yaml has no relabelling: chips carry the exporter's pod and namespace
    (npu-exporter's own `namespace` becomes exported_namespace) and a pod IP."""
    chip = {"id": "0", "model_name": "Ascend910B3", "instance": "10.244.9.3:8082", "namespace": "npu-exporter",
            "pod": "npu-exporter-5xv7d", "exported_namespace": "team-n", "pod_name": "dist-g1-0"}
    pod_nodes = {("npu-exporter", "npu-exporter-5xv7d"): "npu-c"}
    [d] = AscendAdapter().parse({"util": [s(71, **chip)], "health": [s(1, **chip)]}, POLICY, ctx=ctx(
        pod_nodes=pod_nodes, exporter_pods=frozenset(pod_nodes)))
    assert (d.device_id, d.node, d.namespace, d.pod, d.health) == ("npu-c/npu-0", "npu-c", "team-n", "dist-g1-0",
                                                                 Health.HEALTHY)


# --- 2. the partial series a broken device leaves ----------------------------------------------------------

GPU = {"gpu": "1", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "gpu-a", "nodename": "gpu-a",
       "namespace": "team-b", "pod": "xid-train-g1-0", "instance": "10.244.3.17:9400"}
JOB = JobRef("team-b", "xid-train", "cn-east", generation=1, replicas=1, per_replica=2)


def healthy_gpu() -> list[dict[str, Any]]:
    """GPU-ok, the job's other GPU, reporting everything."""
    labels = {**GPU, "gpu": "0", "UUID": "GPU-ok"}
    return [s(97, **labels)]


def fault_only(shape: str, code: int) -> dict[str, list[dict[str, Any]]]:
    """The answers for a GPU, GPU-bad, that reports nothing but its XID, in each exporter generation's names."""
    def xid(value: float, metric: str, **labels: str) -> dict[str, Any]:
        return s(value, **kept(DcgmAdapter(), "instant", metric, {**GPU, **labels}))

    if shape == "xid-errors":  # 2.x-4.x; since 3.3.6-3.4.2 with err_code / err_msg (dropped by the grouping)
        return {"instant": [xid(code, "DCGM_FI_DEV_XID_ERRORS", UUID="GPU-bad", err_code=str(code))]}
    if shape == "1.x-names":  # 1.x, or 2.3.0+ with 1.x-compatibility-metrics.csv: `uuid`
        return {"instant": [xid(code, "dcgm_xid_errors", uuid="GPU-bad")]}
    # DCGM_EXP_XID_ERRORS_COUNT enabled (custom counters CSV): per XID over its window, beside the last XID
    return {"instant": [xid(code, "DCGM_FI_DEV_XID_ERRORS", UUID="GPU-bad"),
                        xid(2, "DCGM_EXP_XID_ERRORS_COUNT", UUID="GPU-bad", xid=str(code), window_size_in_ms="300000")]}


def answers(extra: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {"dcgm:util": healthy_gpu(), "up": []}
    for role, vector in extra.items():
        out[f"dcgm:{role}"] = out.get(f"dcgm:{role}", []) + vector
    return out


SHAPES = ["xid-errors", "1.x-names", "xid-count"]
FATAL = [48, 62, 64, 74, 79, 95]  # in NVIDIA's catalogue: reset the GPU or reboot the node


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("code", FATAL)
def test_a_gpu_with_nothing_but_a_fatal_xid_is_a_failed_row_of_its_job(shape: str, code: int) -> None:
    assert code in DEFAULT_FATAL_XIDS
    snap = build([SourceResult("p", frozenset({"*"}), answers(fault_only(shape, code)))], NODES, {}, POLICY)
    bad = snap.devices["GPU-bad"]
    assert (bad.node, bad.namespace, bad.pod, bad.health) == ("gpu-a", "team-b", "xid-train-g1-0", Health.FAILED)
    assert f"XID {code}" in bad.reason and bad.model == "NVIDIA H100 80GB HBM3" and bad.utilization is None
    assert snap.failed_devices["gpu-a"] == frozenset({"GPU-bad"})
    t = job_telemetry(JOB, snap)
    assert [(rank, d.device_id, d.health) for rank, d in t.unhealthy] == [(0, "GPU-bad", Health.FAILED)]
    assert t.seen == 2 and snap.region("cn-east").availability == Availability.OK


@pytest.mark.parametrize("shape", ["xid-errors", "1.x-names"])
def test_a_gpu_that_fell_off_the_bus_stays_failed_past_the_xid_hold(shape: str) -> None:
    """A sticky fatal XID counts as recovered after `xid_hold_s` only on a GPU that reports again; one that
    reports nothing but the XID never came back."""
    first = build([SourceResult("p", frozenset({"*"}), answers(fault_only(shape, 79)))], NODES, {}, POLICY)
    later = {k: [{**x, "value": [T0 + POLICY.xid_hold_s + 60, x["value"][1]]} for x in v]
             for k, v in answers(fault_only(shape, 79)).items()}
    snap = build([SourceResult("p", frozenset({"*"}), later)], NODES, first.devices, POLICY)
    bad = snap.devices["GPU-bad"]
    assert bad.health == Health.FAILED and "no other series" in bad.reason
    # the same XID on a GPU that reports its temperature again has recovered (unchanged)
    back = dict(later)
    back["dcgm:temp"] = [s(55, at=T0 + POLICY.xid_hold_s + 60, UUID="GPU-bad", **GPU)]
    assert build([SourceResult("p", frozenset({"*"}), back)], NODES, first.devices,
                 POLICY).devices["GPU-bad"].health == Health.HEALTHY


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("code", [0, 13, 31, 43, 63, 92, 94])
def test_a_gpu_with_nothing_but_a_harmless_xid_is_unknown_never_failed(shape: str, code: int) -> None:
    """Application XIDs, page retirement (63), the single-bit ECC rate (92), a contained ECC error (94) and no
    XID at all: with no reading beside, nothing says the GPU is broken. Missing telemetry is never a fault."""
    snap = build([SourceResult("p", frozenset({"*"}), answers(fault_only(shape, code)))], NODES, {}, POLICY)
    bad = snap.devices["GPU-bad"]
    assert (bad.node, bad.pod, bad.health) == ("gpu-a", "xid-train-g1-0", Health.UNKNOWN)
    assert "gpu-a" not in snap.failed_nodes and job_telemetry(JOB, snap).unhealthy == ()


def test_a_device_with_no_series_at_all_is_unknown_not_failed() -> None:
    """Its node's exporter went silent: the device's last row is kept UNKNOWN ("exporter not reporting")."""
    before = build([SourceResult("p", frozenset({"*"}), answers(fault_only("xid-errors", 0)))], NODES, {}, POLICY)
    snap = build([SourceResult("p", frozenset({"*"}), {"dcgm:util": [], "up": []})], NODES, before.devices, POLICY)
    assert {d: x.health for d, x in snap.devices.items()} == {"GPU-ok": Health.UNKNOWN, "GPU-bad": Health.UNKNOWN}
    assert not snap.failed_nodes


CHIP = {"id": "1", "model_name": "Ascend910B3", "node": "npu-c", "instance": "10.244.9.3:8082",
        "namespace": "team-n", "pod_name": "dist-g1-0"}
DIST = JobRef("team-n", "dist", "cn-north", generation=1, replicas=1, per_replica=2)


def npu_answers(*health: tuple[float, dict[str, str]], error_code: float | None = None) -> dict[str, Any]:
    ok = {**CHIP, "id": "0"}
    out: dict[str, Any] = {"npu-exporter:util": [s(88, **ok)], "npu-exporter:health": [s(1, **ok)], "up": []}
    out["npu-exporter:health"] += [s(v, **kept(AscendAdapter(), "health", "npu_chip_info_health_status", labels))
                                   for v, labels in health]
    if error_code is not None:
        code = kept(AscendAdapter(), "instant", "npu_chip_info_error_code", CHIP)
        out["npu-exporter:instant"] = [s(error_code, heterojob_metric="npu_chip_info_error_code", **code)]
    return out


@pytest.mark.parametrize("extra", [{}, {"container_name": "trainer"}, {"exported_namespace": "team-n"}])
def test_an_npu_chip_with_nothing_but_an_unhealthy_status_fails_its_job(extra: dict[str, str]) -> None:
    """npu-exporter drops a metric whose value is -1 / 4294967295: a chip the driver cannot read keeps only its
    health (0) and error codes, with the pod's labels. Its job sees it failed (before: a row without a pod)."""
    labels = {**CHIP, **extra}
    snap = build([SourceResult("p", frozenset({"*"}), npu_answers((0, labels), error_code=0x80E01801))],
                 NODES, {}, POLICY)
    bad = snap.devices["npu-c/npu-1"]
    assert (bad.pod, bad.health, bad.utilization) == ("dist-g1-0", Health.FAILED, None)
    assert "0x80E01801" in bad.reason
    assert [(r, d.device_id) for r, d in job_telemetry(DIST, snap).unhealthy] == [(0, "npu-c/npu-1")]


@pytest.mark.parametrize("health", [2147483647, -1, 4294967295, 1])
def test_an_npu_chip_with_nothing_but_an_unknown_or_healthy_status_is_not_failed(health: float) -> None:
    snap = build([SourceResult("p", frozenset({"*"}), npu_answers((health, CHIP)))], NODES, {}, POLICY)
    chip = snap.devices["npu-c/npu-1"]
    assert chip.pod == "dist-g1-0" and chip.health in (Health.UNKNOWN, Health.HEALTHY)
    assert "npu-c" not in snap.failed_nodes


def test_a_health_split_by_a_pod_change_is_unhealthy_only_when_both_halves_say_so() -> None:
    """The health query keeps the pod labels now: a chip whose pod changed in the window has two health series;
    the window's max across both (0 only when every sample said so)."""
    old, new = {**CHIP, "pod_name": "dist-g0-0"}, CHIP
    snap = build([SourceResult("p", frozenset({"*"}), npu_answers((1, old), (0, new)))], NODES, {}, POLICY)
    assert snap.devices["npu-c/npu-1"].health == Health.HEALTHY
    snap = build([SourceResult("p", frozenset({"*"}), npu_answers((0, old), (0, new)))], NODES, {}, POLICY)
    assert snap.devices["npu-c/npu-1"].health == Health.FAILED


@pytest.mark.parametrize("labels, known, node", [
    ({"job": "npu-c", "instance": "10.244.9.3:8082"}, {"npu-c"}, "npu-c"),  # mind-cluster's documented job
    ({"job": "kubernetes-npu-exporter", "instance": "npu-c:8082"}, {"npu-c"}, "npu-c"),
    ({"job": "npu-c", "instance": "10.244.9.3:8082"}, None, "10.244.9.3"),  # `job` only when it names a node
    ({"kubernetes_pod_node_name": "gpu-b", "Hostname": "nvidia-dcgm-exporter-cmhft"}, None, "gpu-b"),
])
def test_an_alert_names_its_node_by_the_same_labels(labels: dict[str, str], known: set[str] | None,
                                                    node: str) -> None:
    assert node_of(labels, known) == node


def test_the_monitor_reads_node_addresses_so_an_instance_ip_names_its_node() -> None:
    """An exporter on the host network (or a static config) is scraped at the Node's InternalIP: the Node's
    `status.addresses` reach the snapshot through the operator's Node view (kube/convert.py)."""
    from heterojob import defaults
    from heterojob.controller.monitor import Monitor, TelemetryConfig
    from heterojob.sim.cluster.nodes import node
    from heterojob.state.views import FleetSource

    obj = node("gpu-x", "cn-east", "nvidia-h100", devices=8)
    obj["status"]["addresses"] = [{"type": "InternalIP", "address": "172.18.0.5"},
                                  {"type": "Hostname", "address": "gpu-x"}]
    facts = Monitor(None, FleetSource.from_objects([obj, *defaults.all_objects()]), dict,
                    TelemetryConfig()).node_facts()
    assert facts["gpu-x"].addresses == ("172.18.0.5", "gpu-x")
    answers = {"dcgm:util": [s(50, UUID="GPU-x0", gpu="0", Hostname="dcgm-exporter-x", instance="172.18.0.5:9400")],
               "up": []}
    snap = build([SourceResult("p", frozenset({"*"}), answers)], facts, {}, POLICY)
    assert (snap.devices["GPU-x0"].node, snap.devices["GPU-x0"].region) == ("gpu-x", "cn-east")
