"""The adapters and the snapshot on three more real exporter shapes (the fixtures in tests/fixtures/exporters
name each version and its source; tests/e2e/test_telemetry_new_shapes_e2e.py serves them to a real Prometheus).
The answers here are what Prometheus returns for the adapters' queries on those series.
"""

from __future__ import annotations

from typing import Any

from heterojob.telemetry.adapters import AscendAdapter, DcgmAdapter
from heterojob.telemetry.family import FALLBACK, ParseReport
from heterojob.telemetry.model import Health, HealthPolicy
from heterojob.telemetry.snapshot import Availability, JobRef, NodeFacts, SourceResult, build, followups, job_telemetry

POLICY = HealthPolicy()
T0 = 1_763_740_800.0


def s(value: Any, at: float = T0, **labels: str) -> dict[str, Any]:
    return {"metric": labels, "value": [at, str(value)]}


# --- dcgm-exporter 2.2.9-2.4.1: DCGM_FI_DEV_GPU_UTIL commented out of both counters CSVs ------------------

OLD = {"gpu": "0", "modelName": "A100-SXM4-40GB", "Hostname": "nvidia-dcgm-exporter-5k8fq", "node": "gpu-node-i"}
BUSY = {**OLD, "UUID": "GPU-i0", "namespace": "team-i", "pod": "dcp-train-g1-0"}
IDLE = {**OLD, "gpu": "1", "UUID": "GPU-i1"}


def old_answers(**extra: Any) -> dict[str, Any]:
    """The first round: no utilization; the temperature keeps the identity labels."""
    return {"dcgm:util": [], "dcgm:temp": [s(61, **BUSY), s(33, **IDLE)],
            "dcgm:instant": [s(35198, __name__="DCGM_FI_DEV_FB_USED", UUID="GPU-i0"),
                             s(0, __name__="DCGM_FI_DEV_XID_ERRORS", UUID="GPU-i0"),
                             s(0, __name__="DCGM_FI_DEV_XID_ERRORS", UUID="GPU-i1")],
            "up": [], **extra}


def test_gpus_without_gpu_util_are_placed_and_measured_by_engine_activity() -> None:
    # before: the identity answer was empty, every other role is grouped by UUID only, so both GPUs had no node:
    # dropped as "series without a device or node label" and the region DEGRADED
    more = followups(old_answers(), window_s=60)
    q = more["dcgm:fallback"]
    assert q.startswith("max by (UUID, uuid, GPU_I_ID, GPU_I_PROFILE, gpu, modelName, exported_node, node,")
    assert '100 * avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{UUID=~"GPU\\\\-i0|GPU\\\\-i1"}[60s])' in q
    answers = old_answers(**{"dcgm:fallback": [s(87.3412, **BUSY), s(0, **IDLE)]})
    snap = build([SourceResult("p", frozenset({"*"}), answers)], {"gpu-node-i": NodeFacts("cn-east", "nvidia-a100", 2)},
                 {}, POLICY)
    busy, idle = snap.devices["GPU-i0"], snap.devices["GPU-i1"]
    assert (busy.node, busy.pod, busy.utilization, busy.temperature_c) == ("gpu-node-i", "dcp-train-g1-0", 87.3412, 61)
    assert busy.health == Health.HEALTHY and (idle.utilization, idle.pod) == (0, None)
    assert snap.region("cn-east").availability == Availability.OK, snap.region("cn-east").message


def test_without_any_utilization_metric_a_gpu_is_still_placed_its_utilization_unknown() -> None:
    # 2.2.9-2.4.1 with default-counters.csv: neither GPU_UTIL nor the profiling fields
    snap = build([SourceResult("p", frozenset({"*"}), old_answers(**{"dcgm:fallback": []}))],
                 {"gpu-node-i": NodeFacts("cn-east", "nvidia-a100", 2)}, {}, POLICY)
    busy = snap.devices["GPU-i0"]
    assert (busy.node, busy.pod, busy.utilization, busy.memory_used_mib) == ("gpu-node-i", "dcp-train-g1-0", None,
                                                                             35198)
    assert busy.health == Health.HEALTHY and snap.region("cn-east").availability == Availability.OK


def test_the_fallback_is_asked_only_for_gpus_without_utilization_and_fleet_wide_past_256() -> None:
    fleet = old_answers()
    fleet["dcgm:util"] = [s(50, **BUSY)]
    q = followups(fleet, window_s=30)["dcgm:fallback"]
    assert 'UUID=~"GPU\\\\-i1"' in q and "GPU\\\\-i0" not in q  # GPU-i0 has its GPU_UTIL
    assert "dcgm:fallback" not in followups({**fleet, "dcgm:util": [s(50, **BUSY), s(0, **IDLE)]})
    many = {"dcgm:temp": [s(40, **{**OLD, "UUID": f"GPU-{i}"}) for i in range(300)]}
    assert "=~" not in followups(many, window_s=30)["dcgm:fallback"]
    # old-namespace exporters say `uuid`
    lower = {"dcgm:temp": [s(40, uuid="GPU-u0", gpu="0", node="g0")]}
    assert 'uuid=~"GPU\\\\-u0"' in followups(lower)["dcgm:fallback"]
    assert FALLBACK not in AscendAdapter().queries(60)


def test_a_gpu_without_utilization_whose_pod_changed_asks_seen_of_its_temperature() -> None:
    old = {**BUSY, "pod": "dcp-train-g1-0"}
    new = {**BUSY, "pod": "dcp-train-g2-0"}
    first = {"dcgm:util": [], "dcgm:temp": [s(60, **old), s(61, **new)], "up": []}
    more = followups(first)
    assert "timestamp(DCGM_FI_DEV_GPU_TEMP{" in more["dcgm:seen"]
    answers = {**first, "dcgm:fallback": [s(40, **old), s(90, **new)],
               "dcgm:seen": [s(T0 - 30, UUID="GPU-i0", namespace="team-i", pod="dcp-train-g1-0"),
                             s(T0 - 1, UUID="GPU-i0", namespace="team-i", pod="dcp-train-g2-0")]}
    report = ParseReport()
    [d] = DcgmAdapter().parse({k.split(":", 1)[1]: v for k, v in answers.items() if ":" in k}, POLICY, report)
    assert (d.pod, d.utilization) == ("dcp-train-g2-0", 90) and report.pod_changes == 1 and not report.degraded


# --- dcgm-exporter --kubernetes-virtual-gpus: a time-sliced GPU repeated per pod ---------------------------

SLICED = {"UUID": "GPU-j0", "gpu": "0", "modelName": "NVIDIA L40S", "Hostname": "gpu-node-j", "container": "infer",
          "namespace": "team-j"}


def test_a_gpu_shared_by_two_pods_at_once_belongs_to_neither_and_is_no_duplicate() -> None:
    a, b = {**SLICED, "pod": "infer-a-6c9f7d-x2k4q"}, {**SLICED, "pod": "infer-b-6c9f7d-p8m2z"}
    first = {"dcgm:util": [s(64, **a), s(64, **b)], "up": []}
    assert "dcgm:seen" in followups(first)
    answers = {**first, "dcgm:seen": [s(T0 - 1, UUID="GPU-j0", namespace="team-j", pod=p["pod"]) for p in (a, b)]}
    snap = build([SourceResult("p", frozenset({"*"}), answers)], {"gpu-node-j": NodeFacts("cn-east", "nvidia-h100", 1)},
                 {}, POLICY)
    d = snap.devices["GPU-j0"]
    assert d.shared and d.pod is None and d.namespace is None and d.utilization == 64
    assert not snap.by_pod and snap.region("cn-east").availability == Availability.OK
    # without sample times nothing says "at once": still reported as duplicates, not taken as shared
    report = ParseReport()
    [d] = DcgmAdapter().parse({"util": first["dcgm:util"]}, POLICY, report)
    assert not d.shared and report.duplicates == 1


def test_a_per_process_copy_beside_the_device_series_names_its_pod() -> None:
    """4.5.3-4.8.2 per-process metrics (PR #594): GPU_UTIL once per device without pod labels, and per pod."""
    device = {k: v for k, v in SLICED.items() if k not in ("container", "namespace")}
    one = {**SLICED, "pod": "infer-a-6c9f7d-x2k4q"}
    seen = [s(T0 - 1, UUID="GPU-j0"), s(T0 - 1, UUID="GPU-j0", namespace="team-j", pod=one["pod"])]
    report = ParseReport()
    [d] = DcgmAdapter().parse({"util": [s(70, **device), s(41, **one)], "seen": seen}, POLICY, report)
    assert (d.pod, d.utilization, d.shared) == ("infer-a-6c9f7d-x2k4q", 41, False) and not report.degraded
    two = {**SLICED, "pod": "infer-b-6c9f7d-p8m2z"}
    seen.append(s(T0 - 1, UUID="GPU-j0", namespace="team-j", pod=two["pod"]))
    report = ParseReport()
    [d] = DcgmAdapter().parse({"util": [s(70, **device), s(41, **one), s(29, **two)], "seen": seen}, POLICY, report)
    assert d.shared and d.utilization == 70 and report.shared == 1 and not report.degraded  # the device's own


# --- npu-exporter on Ascend 310P3: DDR memory, vNPUs ---------------------------------------------------------

CHIP = {"id": "0", "model_name": "310P3-Ascend-V1", "node": "npu-node-k"}


def test_a_310p_reports_ddr_memory_and_a_chip_split_into_vnpus_is_shared() -> None:
    # before: memory was read from npu_chip_info_hbm_* only, which a 310P never has
    assert "npu_chip_info_total_memory" in AscendAdapter().queries(60)["instant"]
    va, vb = ({**CHIP, "namespace": "team-k", "pod_name": p} for p in ("vnpu-a-g1-0", "vnpu-b-g1-0"))
    whole = {**CHIP, "id": "1", "namespace": "team-k", "pod_name": "p310-g1-0"}

    def mem(metric: str, chip: str, v: float) -> dict[str, Any]:
        return s(v, heterojob_metric=metric, id=chip, node="npu-node-k")

    res = {"npu-exporter:util": [s(37, **va), s(37, **vb), s(88, **whole)],
           "npu-exporter:seen": [s(T0 - 2, **p) for p in (va, vb, whole)],
           "npu-exporter:health": [s(1, id=c, node="npu-node-k") for c in "01"],
           "npu-exporter:instant": [mem("npu_chip_info_used_memory", "0", 12890),
                                    mem("npu_chip_info_total_memory", "0", 44280),
                                    mem("npu_chip_info_used_memory", "1", 30240),
                                    mem("npu_chip_info_total_memory", "1", 44280)], "up": []}
    snap = build([SourceResult("p", frozenset({"*"}), res)], {"npu-node-k": NodeFacts("cn-north", "ascend-910b", 2)},
                 {}, POLICY)
    k0, k1 = snap.devices["npu-node-k/npu-0"], snap.devices["npu-node-k/npu-1"]
    assert k0.shared and k0.pod is None and (k0.memory_used_mib, k0.memory_total_mib) == (12890, 44280)
    assert (k1.pod, k1.memory_used_mib, k1.memory_total_mib, k1.model) == ("p310-g1-0", 30240, 44280,
                                                                           "310P3-Ascend-V1")
    assert list(snap.by_pod) == [("team-k", "p310-g1-0")]
    assert snap.region("cn-north").availability == Availability.OK, snap.region("cn-north").message


def test_hbm_wins_over_ddr_on_a_chip_that_has_both() -> None:
    """910A has both collectors: its HBM is the device memory a job uses."""
    res = {"util": [s(50, id="0", node="n0")],
           "instant": [s(v, heterojob_metric=m, id="0", node="n0") for m, v in (
               ("npu_chip_info_hbm_used_memory", 20000), ("npu_chip_info_hbm_total_memory", 32768),
               ("npu_chip_info_used_memory", 3000), ("npu_chip_info_total_memory", 15000))]}
    [d] = AscendAdapter().parse(res, POLICY)
    assert (d.memory_used_mib, d.memory_total_mib) == (20000, 32768)


# --- federation: a global Prometheus scraping /federate with honor_labels: false --------------------------

def test_a_federated_series_is_placed_by_its_exported_instance() -> None:
    """The exporter's own target arrives as `exported_instance`; `instance` is the regional Prometheus. Without
    a relabelled node label the exporter's host names the Node (when it is one), never the Prometheus."""
    from heterojob.telemetry.labels import Context, node_of_series

    labels = {"UUID": "GPU-f0", "gpu": "0", "exported_instance": "gpu-node-f:9400", "instance": "prom-east:9090",
              "exported_job": "dcgm-exporter", "job": "federate"}
    is_node = {"gpu-node-f"}.__contains__
    [d] = DcgmAdapter().parse({"util": [s(77, **labels)]}, POLICY, ctx=Context(is_node=is_node))
    assert d.node == "gpu-node-f"
    assert node_of_series({"instance": "[fd00::7]:9400"}) == "fd00::7"
    report = ParseReport()
    out = DcgmAdapter().parse({"util": [s(77, **labels)]}, POLICY, report, ctx=Context(is_node={"other"}.__contains__))
    assert out == [] and "gpu-node-f:9400" in report.notes[0]  # the exporter's target is what names no Node


# --- npu-exporter (mind-cluster 2026-08): the chip's own network health and RoCE link ---------------------
# tests/fixtures/exporters/npu-exporter-mindcluster-2026-910b-network.prom: network_status 1/0 (dcmi network health
# code 0 or 6 / other), link_status 1 "UP" / 0 "DOWN", 2147483647 when the query failed.

NET = {"model_name": "Ascend910B3", "node": "npu-node-n", "namespace": "team-n"}


def net_answers(network: dict[str, float], link: dict[str, float], pods: dict[str, str]) -> dict[str, Any]:
    def grouped(metric: str, values: dict[str, float]) -> list[dict[str, Any]]:
        return [s(v, heterojob_metric=metric, id=c, node="npu-node-n") for c, v in values.items()]

    return {"npu-exporter:util": [s(90, **NET, id=c, pod_name=p) for c, p in pods.items()],
            "npu-exporter:health": [s(1, id=c, node="npu-node-n") for c in pods],
            "npu-exporter:instant": grouped("npu_chip_info_network_status", network)
            + grouped("npu_chip_info_link_status", link), "up": []}


def test_a_chip_whose_network_or_link_is_down_fails_a_multi_replica_job_only() -> None:
    q = AscendAdapter().queries(30)["instant"]
    assert "max_over_time(npu_chip_info_network_status[30s])" in q  # 0 only when the whole window said so
    assert "max_over_time(npu_chip_info_link_status[30s])" in q and "last_over_time(npu_chip_info_power[30s])" in q
    pods = {"0": "dist-g1-0", "1": "dist-g1-0", "2": "solo-g1-0", "3": "solo-g1-0"}
    res = net_answers({"0": 1, "1": 1, "2": 0, "3": 1}, {"0": 1, "1": 0, "2": 1, "3": 2147483647}, pods)
    snap = build([SourceResult("p", frozenset({"*"}), res)], {"npu-node-n": NodeFacts("cn-north", "ascend-910b", 4)},
                 {}, POLICY)
    d = snap.devices
    # the chip itself is healthy: fleet health and the node's failure are about the chip, not its network
    assert all(x.health == Health.HEALTHY for x in d.values()) and snap.failed_nodes == {}
    assert d["npu-node-n/npu-1"].network_fault == "NPU link status 0 (down)"
    assert d["npu-node-n/npu-2"].network_fault == "NPU network health status 0 (unhealthy)"
    assert d["npu-node-n/npu-0"].network_fault == d["npu-node-n/npu-3"].network_fault == ""  # unknown link: no fault
    dist = job_telemetry(JobRef("team-n", "dist", "cn-north", 1, replicas=2, per_replica=2), snap)
    assert [(rank, x.device_id, x.health) for rank, x in dist.unhealthy] == [(0, "npu-node-n/npu-1", Health.FAILED)]
    assert "link status 0 (down)" in dist.unhealthy[0][1].reason and "2 replicas" in dist.unhealthy[0][1].reason
    solo = job_telemetry(JobRef("team-n", "solo", "cn-north", 1, replicas=1, per_replica=2), snap)
    assert solo.unhealthy == () and solo.unknown == ()  # one replica: its collectives never leave the node


def test_network_status_without_samples_or_with_failed_queries_is_never_a_fault() -> None:
    # 310/310P (not training cards) have no series at all; -1, 2147483647, 4294967295 are no reading
    pods = {"0": "dist-g1-0", "1": "dist-g1-0", "2": "dist-g1-0"}
    res = net_answers({"1": -1, "2": 4294967295}, {"1": 2147483647}, pods)
    snap = build([SourceResult("p", frozenset({"*"}), res)], {"npu-node-n": NodeFacts("cn-north", "ascend-910b", 3)},
                 {}, POLICY)
    assert {x.network_fault for x in snap.devices.values()} == {""}
    assert job_telemetry(JobRef("team-n", "dist", "cn-north", 1, replicas=2, per_replica=3), snap).unhealthy == ()


# --- dcgm-exporter 1.x names (gpu-monitoring-tools 1.0.0; 2.3.0+ with 1.x-compatibility-metrics.csv) ------------

def test_dcgm_exporter_1x_names_are_read_through_the_same_adapter() -> None:
    q = DcgmAdapter().queries(60)
    assert q["util"].endswith("(avg_over_time(dcgm_gpu_utilization[60s]))")
    assert "min_over_time(DCGM_FI_DEV_GPU_TEMP[60s]) or min_over_time(dcgm_gpu_temp[60s])" in q["temp"]
    assert "dcgm_xid_errors" in q["instant"] and "dcgm_fb_used" in q["instant"] and "dcgm_fb_free" in q["fb_total"]
    busy = {"gpu": "0", "uuid": "GPU-m0", "pod_name": "legacy-train-g1-0", "pod_namespace": "team-m",
            "container_name": "trainer", "node": "gpu-node-m"}
    idle = {"gpu": "1", "uuid": "GPU-m1", "node": "gpu-node-m"}
    res = {"dcgm:util": [s(93, **busy), s(0, **idle)], "dcgm:temp": [s(66, **busy), s(31, **idle)],
           "dcgm:fb_total": [s(16160, uuid="GPU-m0"), s(16160, uuid="GPU-m1")],
           "dcgm:instant": [s(12740, __name__="dcgm_fb_used", uuid="GPU-m0"),
                            s(231.5, __name__="dcgm_power_usage", uuid="GPU-m0"),
                            s(0, __name__="dcgm_xid_errors", uuid="GPU-m0"),
                            s(79, __name__="dcgm_xid_errors", uuid="GPU-m1")], "up": []}
    snap = build([SourceResult("p", frozenset({"*"}), res)], {"gpu-node-m": NodeFacts("cn-east", "nvidia-v100", 2)},
                 {}, POLICY)
    m0, m1 = snap.devices["GPU-m0"], snap.devices["GPU-m1"]
    assert (m0.node, m0.namespace, m0.pod, m0.utilization, m0.temperature_c) == ("gpu-node-m", "team-m",
                                                                                  "legacy-train-g1-0", 93, 66)
    assert (m0.memory_used_mib, m0.memory_total_mib, m0.power_w, m0.health) == (12740, 16160, 231.5, Health.HEALTHY)
    assert m1.health == Health.FAILED and m1.xid == 79 and m1.pod is None
    assert snap.region("cn-east").availability == Availability.OK


def test_a_gpu_under_both_name_generations_reads_the_current_name_whatever_the_answers_order() -> None:
    """Two exporters (an upgrade: the old one with the 1.x-compatibility CSV) report one GPU under both names, at
    different scrapes: the grouped answer holds both, the current name's figures are read (Prometheus orders
    a vector as it likes), and the device is one device."""
    labels = {"gpu": "0", "UUID": "GPU-u0", "node": "gpu-node-u", "namespace": "team-u", "pod": "u-g1-0"}
    instant = [s(30500, __name__="dcgm_fb_used", UUID="GPU-u0"), s(310, __name__="dcgm_power_usage", UUID="GPU-u0"),
               s(30112, __name__="DCGM_FI_DEV_FB_USED", UUID="GPU-u0"),
               s(301.5, __name__="DCGM_FI_DEV_POWER_USAGE", UUID="GPU-u0")]
    for answer in (instant, instant[::-1]):
        res = {"dcgm:util": [s(88, **labels), s(86, **{**labels, "instance": "old:9400"})],
               "dcgm:temp": [s(63, **labels)], "dcgm:fb_total": [s(40536, UUID="GPU-u0")], "dcgm:instant": answer,
               "up": []}
        snap = build([SourceResult("p", frozenset({"*"}), res)], {"gpu-node-u": NodeFacts("cn-east", "a100", 1)},
                     {}, POLICY)
        [d] = snap.devices.values()
        assert (d.memory_used_mib, d.memory_total_mib, d.power_w) == (30112, 40536, 301.5)
        assert sum(snap.region("cn-east").devices.values()) == 1
