"""The adapters and the snapshot on answers shaped as Prometheus returns real exporters' series (issue 20).

Each test is one way the first adapters misread real dcgm-exporter / npu-exporter output; the label sets
are those of the fixtures in tests/fixtures/exporters (which name the exporter version and the source of
the shape), after the Prometheus query the adapter asks (`max by (...)` keeps only the grouped labels).
"""

from __future__ import annotations

from typing import Any

from heterojob.telemetry import status
from heterojob.telemetry.adapters import AscendAdapter, DcgmAdapter
from heterojob.telemetry.family import ParseReport
from heterojob.telemetry.labels import Context
from heterojob.telemetry.model import Health, HealthPolicy
from heterojob.telemetry.snapshot import Availability, JobRef, NodeFacts, SourceResult, build, job_telemetry

POLICY = HealthPolicy()
T0 = 1_763_740_800.0


def s(value: Any, at: float = T0, **labels: str) -> dict[str, Any]:
    return {"metric": labels, "value": [at, str(value)]}


def by_id(samples: list[Any]) -> dict[str, Any]:
    return {d.device_id: d for d in samples}


# --- 1. MIG -----------------------------------------------------------------------------------------------

MIG = {"UUID": "GPU-3e9a", "gpu": "0", "modelName": "NVIDIA A100 80GB PCIe", "Hostname": "gpu-node-c"}


def mig(gi: str, profile: str, **extra: str) -> dict[str, str]:
    return {**MIG, "GPU_I_ID": gi, "GPU_I_PROFILE": profile, **extra}


def test_mig_instances_are_devices_with_engine_activity_as_utilization() -> None:
    # what `max by (identity) (100 * avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE[w]))` returns for 3 instances
    results = {
        "util": [s(81.24, **mig("1", "3g.40gb", namespace="team-c", pod="mig-job-g1-0")),
                 s(43.31, **mig("2", "2g.20gb", namespace="team-c", pod="mig-job-g1-1")),
                 s(0, **mig("3", "1g.10gb"))],
        "temp": [s(47, UUID="GPU-3e9a", GPU_I_ID=g) for g in "123"],
        "instant": [*(s(v, __name__=n, UUID="GPU-3e9a", GPU_I_ID=g) for g in "123"
                      for n, v in (("DCGM_FI_DEV_FB_USED", 27800), ("DCGM_FI_DEV_XID_ERRORS", 0))),
                    *(s(40600, heterojob_metric="fb_total", UUID="GPU-3e9a", GPU_I_ID=g) for g in "123")],
    }
    report = ParseReport()
    d = by_id(DcgmAdapter().parse(results, POLICY, report))
    assert sorted(d) == ["GPU-3e9a/mig-1", "GPU-3e9a/mig-2", "GPU-3e9a/mig-3"]  # not merged by UUID
    assert not report.degraded
    one = d["GPU-3e9a/mig-1"]
    assert one.utilization == 81.24 and one.node == "gpu-node-c" and one.pod == "mig-job-g1-0"
    assert one.model == "NVIDIA A100 80GB PCIe MIG 3g.40gb" and one.health == Health.HEALTHY
    assert one.memory_total_mib == 40600


def test_the_identity_query_falls_back_to_engine_activity_and_keeps_instances_apart() -> None:
    q = DcgmAdapter().queries(60)
    assert "DCGM_FI_DEV_GPU_UTIL[60s]" in q["util"] and " or " in q["util"]
    # the profiling field only for MIG instances (whole GPUs all have GPU_UTIL): not twice the fleet's cost
    assert '100 * avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{GPU_I_ID!=""}[60s])' in q["util"]
    assert all("GPU_I_ID" in q[name] for name in ("util", "temp", "instant"))
    assert "GPU_I_ID" in DcgmAdapter().seen_query()


# --- 2. the node: a relabelled label first, Hostname only when it names a Node ---------------------------

def test_a_relabelled_node_beats_a_hostname_that_is_the_exporter_pod() -> None:
    labels = {"UUID": "GPU-a", "gpu": "0", "Hostname": "nvidia-dcgm-exporter-cmhft", "node": "node-a"}
    [d] = DcgmAdapter().parse({"util": [s(90, **labels)]}, POLICY, ctx=Context(is_node={"node-a"}.__contains__))
    assert d.node == "node-a"


def test_a_hostname_that_names_no_node_is_reported_not_invented() -> None:
    labels = {"UUID": "GPU-a", "gpu": "0", "Hostname": "nvidia-dcgm-exporter-cmhft"}
    report = ParseReport()
    out = DcgmAdapter().parse({"util": [s(90, **labels)]}, POLICY, report, ctx=Context(is_node={"g0"}.__contains__))
    assert out == [] and report.unresolved_nodes == 1 and report.degraded
    assert "nvidia-dcgm-exporter-cmhft" in report.notes[0] and "__meta_kubernetes_pod_node_name" in report.notes[0]
    # a Hostname that does name a Node (the Helm chart sets NODE_NAME) is used
    named = {"UUID": "GPU-b", "gpu": "0", "hostname": "g0"}
    [d] = DcgmAdapter().parse({"util": [s(90, **named)]}, POLICY, ctx=Context(is_node={"g0"}.__contains__))
    assert d.node == "g0"


def test_npu_exporter_has_no_host_label_its_instance_is_a_pod_ip() -> None:
    chip = {"id": "0", "model_name": "Ascend910B3", "instance": "10.244.3.17:8082"}
    report = ParseReport()
    out = AscendAdapter().parse({"util": [s(90, **chip)]}, POLICY, report, ctx=Context(is_node={"n0"}.__contains__))
    assert out == [] and report.unresolved_nodes == 1
    [d] = AscendAdapter().parse({"util": [s(90, **chip, node="n0")]}, POLICY, ctx=Context(is_node={"n0"}.__contains__))
    assert d.device_id == "n0/npu-0" and d.node == "n0"


def test_the_snapshot_joins_region_and_class_through_the_relabelled_node() -> None:
    res = {"dcgm:util": [s(90, UUID="GPU-a", gpu="0", Hostname="dcgm-exporter-x0", node="g0")], "up": []}
    snap = build([SourceResult("p", frozenset({"*"}), res)], {"g0": NodeFacts("cn-east", "nvidia-h100", 8)}, {}, POLICY)
    d = snap.devices["GPU-a"]
    assert (d.node, d.region, d.device_class) == ("g0", "cn-east", "nvidia-h100")


# --- 3. ServiceMonitor honorLabels: false -> exported_pod / exported_namespace --------------------------

EXPORTER = {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x0", "node": "g0"}


def test_workload_labels_arrive_as_exported_and_pod_names_the_exporter() -> None:
    up = [s(1, job="gpu-metrics", **EXPORTER)]
    res = {"dcgm:util": [s(90, UUID="GPU-a", gpu="0", exported_namespace="team-a", exported_pod="train-g2-0",
                           **EXPORTER),
                         s(0, UUID="GPU-b", gpu="1", **EXPORTER)],  # idle: only the exporter's own pod label
           "up": up}
    snap = build([SourceResult("p", frozenset({"*"}), res)], {"g0": NodeFacts("cn-east", "nvidia-h100", 2)}, {},
                 POLICY)
    assert (snap.devices["GPU-a"].namespace, snap.devices["GPU-a"].pod) == ("team-a", "train-g2-0")
    assert snap.devices["GPU-b"].pod is None  # not "gpu-operator/nvidia-dcgm-exporter-x0"
    assert list(snap.by_pod) == [("team-a", "train-g2-0")]


def test_old_namespace_labels_are_the_workload() -> None:
    labels = {"uuid": "GPU-a", "gpu": "0", "Hostname": "g0", "pod_name": "p0", "pod_namespace": "team-e"}
    [d] = DcgmAdapter().parse({"util": [s(88, **labels)]}, POLICY)
    assert (d.device_id, d.namespace, d.pod) == ("GPU-a", "team-e", "p0")


# --- 4. npu-exporter timestamps: no staleness markers ---------------------------------------------------

def test_npu_roles_are_all_read_over_the_window_so_a_gone_chip_vanishes() -> None:
    q = AscendAdapter().queries(60)
    assert "last_over_time(npu_chip_info_hbm_total_memory[60s])" in q["instant"]
    assert "{__name__" not in q["instant"]  # an instant selector would see a gone chip for 5 minutes
    node = {"node": "n0"}
    first = {"npu-exporter:util": [s(90, id=i, **node) for i in "01"], "up": []}
    facts = {"n0": NodeFacts("cn-north", "ascend-910b", 2)}
    snap = build([SourceResult("p", frozenset({"*"}), first)], facts, {}, POLICY)
    later = {"npu-exporter:util": [s(90, id="0", **node)], "up": []}
    again = build([SourceResult("p", frozenset({"*"}), later)], facts, snap.devices, POLICY)
    assert again.devices["n0/npu-1"].health == Health.FAILED and "vanished" in again.devices["n0/npu-1"].reason


# --- 5. npu-exporter -1 / 4294967295 / 0 ----------------------------------------------------------------

NPU_JOB = JobRef("team-b", "npu", "cn-north", generation=1, replicas=2, per_replica=1)


def test_a_failed_collection_is_missing_not_a_straggler_at_minus_one() -> None:
    res = {"npu-exporter:util": [s(-1, id="0", node="n0", namespace="team-b", pod_name="npu-g1-0"),
                                 s(93, id="0", node="n1", namespace="team-b", pod_name="npu-g1-1")],
           "npu-exporter:health": [s(1, id="0", node=n) for n in ("n0", "n1")], "up": []}
    facts = {n: NodeFacts("cn-north", "ascend-910b", 1) for n in ("n0", "n1")}
    snap = build([SourceResult("p", frozenset({"*"}), res)], facts, {}, POLICY)
    t = job_telemetry(NPU_JOB, snap)
    assert t.per_replica == (None, 93.0) and t.average == 93.0 and t.stragglers == ()
    assert snap.devices["n0/npu-0"].utilization is None


def test_every_not_collected_marker_is_none_and_reported_without_degrading() -> None:
    report = ParseReport()
    res = {"util": [s(4294967295, id="0", node="n0"), s(2147483647, id="1", node="n0"), s(55, id="2", node="n0")],
           "temp": [s(-1, id="0", node="n0")],
           "instant": [s(-1, __name__="npu_chip_info_hbm_used_memory", id="2", node="n0")]}
    d = {x.index: x for x in AscendAdapter().parse(res, POLICY, report)}
    assert d["0"].utilization is None and d["1"].utilization is None and d["2"].utilization == 55
    assert d["0"].temperature_c is None and d["2"].memory_used_mib is None
    assert report.uncollected == 4 and not report.degraded


def test_npu_health_minus_one_is_unknown_and_a_lone_zero_is_not_a_fault() -> None:
    # health is max_over_time: a single 0 among 1s (old exporters: a failed query) gives 1
    q = AscendAdapter().queries(30)
    assert q["health"].endswith("(max_over_time(npu_chip_info_health_status[30s]))")
    res = {"health": [s(-1, id="0", node="n0"), s(0, id="1", node="n0"), s(1, id="2", node="n0")]}
    d = {x.index: x for x in AscendAdapter().parse(res, POLICY)}
    assert d["0"].health == Health.UNKNOWN and "-1" in d["0"].reason
    assert d["1"].health == Health.FAILED  # 0 in every sample of the window
    assert d["2"].health == Health.HEALTHY


# --- 6. XID: sticky last value, err_code labels, DCGM_EXP_XID_ERRORS_COUNT ------------------------------

def gpu_res(xid: int, at: float, **extra: Any) -> dict[str, Any]:
    labels = {"UUID": "GPU-x", "gpu": "1", "Hostname": "g0", "namespace": "team-a", "pod": "train-g2-0"}
    return {"dcgm:util": [s(97, at, **labels)], "dcgm:temp": [s(55, at, UUID="GPU-x")],
            "dcgm:instant": [s(xid, at, __name__="DCGM_FI_DEV_XID_ERRORS", UUID="GPU-x"),
                             *extra.get("counts", [])], "up": []}


def cycle(res: dict[str, Any], previous: dict[str, Any], policy: HealthPolicy = POLICY) -> Any:
    return build([SourceResult("p", frozenset({"*"}), res)], {"g0": NodeFacts("cn-east", "nvidia-h100", 8)},
                 previous, policy)


def test_a_fatal_xid_fails_the_gpu_then_counts_as_recovered_when_nothing_newer_comes() -> None:
    policy = HealthPolicy(xid_hold_s=600)
    first = cycle(gpu_res(79, T0), {}, policy)
    assert first.devices["GPU-x"].health == Health.FAILED and first.failed_nodes
    still = cycle(gpu_res(79, T0 + 300), first.devices, policy)
    assert still.devices["GPU-x"].health == Health.FAILED
    later = cycle(gpu_res(79, T0 + 601), still.devices, policy)  # the same sticky value, 10 minutes on
    d = later.devices["GPU-x"]
    assert d.health == Health.HEALTHY and d.reason.startswith("recovered: last XID 79") and not later.failed_nodes
    assert d.last_error == "XID 79"
    # a different XID is a new event: failed again from now
    new = cycle(gpu_res(48, T0 + 700), later.devices, policy)
    assert new.devices["GPU-x"].health == Health.FAILED and new.devices["GPU-x"].reason == "fatal XID 48"


def test_the_xid_count_decides_when_enabled() -> None:
    window = {"window_size_in_ms": "300000"}
    quiet = [s(0, __name__="DCGM_EXP_XID_ERRORS_COUNT", UUID="GPU-x", xid="79", **window)]
    d = cycle(gpu_res(79, T0, counts=quiet), {}).devices["GPU-x"]
    assert d.health == Health.HEALTHY  # the sticky 79 is old news: no XID 79 in the last 5 minutes
    fresh = [s(1, __name__="DCGM_EXP_XID_ERRORS_COUNT", UUID="GPU-x", xid="79", **window),
             s(3, __name__="DCGM_EXP_XID_ERRORS_COUNT", UUID="GPU-x", xid="13", **window)]
    d = cycle(gpu_res(13, T0, counts=fresh), {}).devices["GPU-x"]
    assert d.health == Health.FAILED and "fatal XID 79" in d.reason
    assert "xid" in DcgmAdapter().queries(60)["instant"]  # the count's xid label survives the grouping


# --- also: FB_RESERVED, shared NPUs, pod changed within the window, exporter down -------------------------

def test_memory_total_includes_the_reserved_framebuffer() -> None:
    # Prometheus sums used + free + reserved per device (one series, not three); the e2e test checks the figure
    # (summed per exporter and name generation, then one figure per device: the e2e tests check it, two exporters
    # of one GPU included, tests/e2e/test_telemetry_two_exporters_e2e.py)
    q = DcgmAdapter().queries(60)["fb_total"]
    one = "UUID, uuid, GPU_I_ID, exported_instance, instance"
    assert (f'(sum by ({one}) (max by (__name__, {one}) ({{__name__=~"DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_FB_FREE|'
            f'DCGM_FI_DEV_FB_RESERVED"}})) and on ({one}) DCGM_FI_DEV_FB_FREE) or (sum by ({one}) '
            f'(max by (__name__, {one}) ({{__name__=~"dcgm_fb_used|dcgm_fb_free"}})) and on ({one}) dcgm_fb_free)') in q
    labels = {"UUID": "GPU-a", "gpu": "0", "Hostname": "g0"}
    res = {"util": [s(97, **labels)], "instant": [s(69087, __name__="DCGM_FI_DEV_FB_USED", UUID="GPU-a")],
           "fb_total": [s(81159, UUID="GPU-a")]}
    [d] = DcgmAdapter().parse(res, POLICY)
    assert d.memory_total_mib == 81159 and d.memory_used_mib == 69087


def test_a_chip_shared_by_several_pods_belongs_to_no_job() -> None:
    shared = "not_displayed_for_multi_pod"
    res = {"npu-exporter:util": [s(35, id="2", node="n0", namespace=shared, pod_name=shared, container_name=shared)],
           "up": []}
    snap = build([SourceResult("p", frozenset({"*"}), res)], {"n0": NodeFacts("cn-north", "ascend-910b", 8)}, {},
                 POLICY)
    d = snap.devices["n0/npu-2"]
    assert d.pod is None and d.namespace is None and d.shared and not snap.by_pod


def test_a_device_whose_pod_changed_in_the_window_is_no_duplicate_the_newest_pod_wins() -> None:
    old = {"UUID": "GPU-a", "gpu": "0", "Hostname": "g0", "namespace": "team-a", "pod": "train-g1-0"}
    new = {**old, "pod": "train-g2-0"}
    # avg_over_time sees both series in the window; `seen` (timestamp of the newest sample) only the live one
    res = {"dcgm:util": [s(40, **old), s(96, **new)],
           "dcgm:seen": [s(T0 - 1, UUID="GPU-a", namespace="team-a", pod="train-g2-0")], "up": []}
    snap = build([SourceResult("p", frozenset({"*"}), res)], {"g0": NodeFacts("cn-east", "nvidia-h100", 8)}, {},
                 POLICY)
    assert snap.region("cn-east").availability == Availability.OK  # no "1 duplicate series"
    d = snap.devices["GPU-a"]
    assert (d.pod, d.utilization) == ("train-g2-0", 96)
    # npu-exporter: both series still have samples (no staleness markers): the later timestamp wins
    npu = {"npu-exporter:util": [s(80, id="0", node="n0", namespace="t", pod_name="a"),
                                 s(90, id="0", node="n0", namespace="t", pod_name="b")],
           "npu-exporter:seen": [s(T0 - 20, id="0", node="n0", namespace="t", pod_name="a"),
                                 s(T0 - 2, id="0", node="n0", namespace="t", pod_name="b")], "up": []}
    snap = build([SourceResult("p", frozenset({"*"}), npu)], {"n0": NodeFacts("cn-north", "ascend-910b", 8)}, {},
                 POLICY)
    assert snap.devices["n0/npu-0"].pod == "b" and snap.region("cn-north").availability == Availability.OK


def test_an_exporter_down_makes_device_health_unknown_not_healthy() -> None:
    job = JobRef("team-a", "train", "cn-east", generation=2, replicas=1, per_replica=2)
    labels = [{"UUID": f"GPU-{i}", "gpu": str(i), "Hostname": "g0", "namespace": "team-a", "pod": "train-g2-0"}
              for i in range(2)]
    facts = {"g0": NodeFacts("cn-east", "nvidia-h100", 2)}
    healthy = {"dcgm:util": [s(90, **lab) for lab in labels],
               "dcgm:instant": [s(0, __name__="DCGM_FI_DEV_XID_ERRORS", UUID=lab["UUID"]) for lab in labels],
               "up": [s(1, node="g0")]}
    first = build([SourceResult("p", frozenset({"*"}), healthy)], facts, {}, POLICY)
    t = job_telemetry(job, first)
    conds = {c["type"]: c for c in status.conditions([], t, "2026-11-22T20:00:00Z")}
    assert conds["DevicesHealthy"]["status"] == "True"
    # the exporter stops answering: the window still holds its last samples, `up` is 0
    down = {**healthy, "up": [s(0, node="g0")]}
    second = build([SourceResult("p", frozenset({"*"}), down)], facts, first.devices, POLICY)
    t = job_telemetry(job, second)
    conds = {c["type"]: c for c in status.conditions(list(conds.values()), t, "2026-11-22T20:01:00Z")}
    assert conds["DevicesHealthy"]["status"] == "Unknown" and conds["DevicesHealthy"]["reason"] == "HealthUnknown"
    assert "exporter down" in conds["DevicesHealthy"]["message"]
    assert "exporter not reporting on g0" in t.message
    assert conds["TelemetryDegraded"]["status"] == "Unknown"  # settling: pods start and stop one by one
    later = {c["type"]: c for c in status.conditions(list(conds.values()), t, "2026-11-22T20:01:30Z")}
    assert later["TelemetryDegraded"]["status"] == "True" and later["TelemetryDegraded"]["reason"] == "PartialData"
    assert t.unhealthy == ()  # missing telemetry is never a fault
    # and once the window has emptied, the vanished devices of a silent node are still unknown
    third = build([SourceResult("p", frozenset({"*"}), {"up": [s(0, node="g0")]})], facts, second.devices, POLICY)
    conds = {c["type"]: c for c in status.conditions([], job_telemetry(job, third), "2026-11-22T20:02:00Z")}
    assert conds["DevicesHealthy"]["status"] == "Unknown"



def test_a_pod_placed_on_a_node_whose_exporter_is_down_leaves_device_health_unknown() -> None:
    """Seen in the demo: a job's new pod landed on a node whose dcgm-exporter was already down, so no sample
    ever named that pod; the job read `DevicesHealthy True: 24 devices healthy` beside `TelemetryDegraded True:
    24 of 32 devices reported`. README: an exporter that is down makes the job's DevicesHealthy Unknown."""
    job = JobRef("team-a", "train", "cn-east", generation=2, replicas=2, per_replica=1)
    facts = {n: NodeFacts("cn-east", "nvidia-h100", 1) for n in ("g0", "g1")}
    res = {"dcgm:util": [s(90, UUID="GPU-0", gpu="0", Hostname="g0", namespace="team-a", pod="train-g2-0")],
           "dcgm:instant": [s(0, __name__="DCGM_FI_DEV_XID_ERRORS", UUID="GPU-0")],
           "up": [s(1, node="g0"), s(0, node="g1")]}
    t = job_telemetry(job, build([SourceResult("p", frozenset({"*"}), res)], facts, {}, POLICY))
    assert (t.seen, t.expected) == (1, 2)
    conds = status.conditions([], t, "2026-11-22T20:00:00Z")
    healthy = {c["type"]: c for c in conds}["DevicesHealthy"]
    assert healthy["status"] == "True"  # a gap younger than SETTLE_S: pods start one by one
    later = status.conditions(conds, t, "2026-11-22T20:00:31Z")
    assert {c["type"]: c for c in later}["TelemetryDegraded"]["status"] == "True"
    healthy = {c["type"]: c for c in later}["DevicesHealthy"]
    assert healthy["status"] == "Unknown" and healthy["reason"] == "HealthUnknown"
    assert "1 of 2 devices not reported" in healthy["message"] and t.unhealthy == ()
    # while a gap settles, the condition does not flip back and forth
    whole = status.conditions(later, t, "2026-11-22T20:00:45Z")
    assert {c["type"]: c for c in whole}["DevicesHealthy"]["status"] == "Unknown"

def test_npu_exporter_behind_a_service_monitor_keeps_its_pod_name_and_exported_namespace() -> None:
    exporter = {"namespace": "npu-exporter", "pod": "npu-exporter-7kq2x", "node": "n0"}
    res = {"npu-exporter:util": [s(90, id="0", exported_namespace="team-b", pod_name="npu-g1-0", **exporter),
                                 s(0, id="1", **exporter)],
           "up": [s(1, **exporter)]}
    snap = build([SourceResult("p", frozenset({"*"}), res)], {"n0": NodeFacts("cn-north", "ascend-910b", 2)}, {},
                 POLICY)
    assert (snap.devices["n0/npu-0"].namespace, snap.devices["n0/npu-0"].pod) == ("team-b", "npu-g1-0")
    assert snap.devices["n0/npu-1"].pod is None


def test_partial_data_settles_before_telemetry_degraded_and_a_passing_gap_never_raises_it() -> None:
    job = JobRef("team-a", "train", "cn-east", generation=1, replicas=2, per_replica=1)
    facts = {n: NodeFacts("cn-east", "nvidia-h100", 1) for n in ("g0", "g1")}

    def cycle_(ranks: tuple[int, ...]) -> Any:
        res = {"dcgm:util": [s(90, UUID=f"GPU-{r}", gpu="0", Hostname=f"g{r}", namespace="team-a",
                               pod=f"train-g1-{r}") for r in ranks], "up": []}
        return job_telemetry(job, build([SourceResult("p", frozenset({"*"}), res)], facts, {}, POLICY))

    conds: list[dict[str, Any]] = []
    # rank 1's pod started a moment later: one cycle of partial data, then whole
    for at, ranks in (("20:00:00", (0,)), ("20:00:15", (0, 1)), ("20:00:30", (0, 1))):
        conds = status.conditions(conds, cycle_(ranks), f"2026-11-22T{at}Z")
        degraded = {c["type"]: c for c in conds}["TelemetryDegraded"]
        assert degraded["status"] != "True", (at, degraded)
    # a replica that keeps reporting nothing is degraded once it has lasted SETTLE_S
    for at in ("20:01:00", "20:01:15", "20:01:31"):
        conds = status.conditions(conds, cycle_((0,)), f"2026-11-22T{at}Z")
    degraded = {c["type"]: c for c in conds}["TelemetryDegraded"]
    assert degraded["status"] == "True" and "1 of 2 devices reported" in degraded["message"]
