"""The snapshot, per-job telemetry and status writes on plain data (no Prometheus)."""

from __future__ import annotations

from typing import Any

from heterojob.telemetry import status
from heterojob.telemetry.model import Health, HealthPolicy
from heterojob.telemetry.snapshot import (
    Availability, JobRef, NodeFacts, SourceResult, build, job_telemetry, queries,
)

POLICY = HealthPolicy()
NODES = {"g0": NodeFacts("cn-east", "nvidia-h100", 2), "g1": NodeFacts("cn-east", "nvidia-h100", 2),
         "n0": NodeFacts("cn-north", "ascend-910b", 1)}
JOB = JobRef("team-a", "train", "cn-east", generation=2, replicas=2, per_replica=2)


def gpu(node: str, i: int, pod: str = "", value: Any = "90", name: str | None = None) -> dict[str, Any]:
    labels = {"UUID": f"GPU-{node}-{i}", "gpu": str(i), "Hostname": node, "namespace": "team-a" if pod else "",
              "pod": pod}
    if name:
        labels["__name__"] = name
    return {"metric": labels, "value": [0, value]}


def results(utils: dict[tuple[str, int], Any], xids: dict[tuple[str, int], int] | None = None,
            up: dict[str, int] | None = None) -> dict[str, list[dict[str, Any]]]:
    pods = {("g0", 0): "train-g2-0", ("g0", 1): "train-g2-0", ("g1", 0): "train-g2-1", ("g1", 1): "train-g2-1"}
    out: dict[str, list[dict[str, Any]]] = {"dcgm:util": [], "dcgm:temp": [], "dcgm:instant": []}
    for (node, i), value in utils.items():
        out["dcgm:util"].append(gpu(node, i, pods.get((node, i), ""), value))
        out["dcgm:temp"].append(gpu(node, i, pods.get((node, i), ""), "50"))
        out["dcgm:instant"].append(gpu(node, i, pods.get((node, i), ""), str((xids or {}).get((node, i), 0)),
                                       "DCGM_FI_DEV_XID_ERRORS"))
    out["up"] = [{"metric": {"node": n, "job": "dcgm-exporter"}, "value": [0, str(v)]} for n, v in (up or {}).items()]
    return out


ALL_BUSY = {("g0", 0): "90", ("g0", 1): "94", ("g1", 0): "88", ("g1", 1): "92"}


def one(res: dict[str, Any], previous: dict[str, Any] | None = None, regions: frozenset[str] = frozenset({"*"})):
    return build([SourceResult("http://prom", regions, res)], NODES, previous or {}, POLICY)


def test_the_cycle_asks_eight_queries_whatever_the_fleet() -> None:
    q = queries(60)
    # bench/telemetry.py holds it to <= 12: 9, and 11 in a cycle with pod changes (`seen`, one per family)
    # `up`, with each target pod's Node from kube_pod_info when Prometheus has it: still one query
    assert len(q) == 9 and q["up"].startswith("up or label_replace(") and "kube_pod_info{" in q["up"]
    # 0 only when held for the whole window: older npu-exporters emit a lone 0 on a failed query
    assert q["npu-exporter:health"].endswith("(max_over_time(npu_chip_info_health_status[60s]))")


def test_job_utilization_per_replica_and_average() -> None:
    t = job_telemetry(JOB, one(results(ALL_BUSY)))
    assert t.availability == Availability.OK and t.seen == 4 and t.expected == 4
    assert t.per_replica == (92.0, 90.0) and t.average == 91.0 and t.stragglers == ()


def test_a_replica_far_below_its_peers_straggles_but_idle_peers_say_nothing() -> None:
    job = JobRef("team-a", "train", "cn-east", generation=2, replicas=2, per_replica=2)
    slow = one(results({**ALL_BUSY, ("g1", 0): "20", ("g1", 1): "22"}))
    t = job_telemetry(job, slow)
    assert t.stragglers == (1,) and "rank 1 at 21%" in t.straggler_message
    idle = one(results({("g0", 0): "5", ("g0", 1): "5", ("g1", 0): "0", ("g1", 1): "1"}))
    assert job_telemetry(job, idle).stragglers == ()


def test_missing_data_is_never_a_straggler_nor_a_fault() -> None:
    partial = one(results({("g0", 0): "90", ("g0", 1): "90"}))
    t = job_telemetry(JOB, partial)
    assert t.per_replica == (90.0, None) and t.stragglers == () and t.unhealthy == ()
    assert t.availability == Availability.DEGRADED and "2 of 4 devices" in t.message


def test_fatal_xid_makes_the_job_unhealthy_at_its_rank() -> None:
    t = job_telemetry(JOB, one(results(ALL_BUSY, xids={("g1", 1): 79})))
    assert [(rank, d.device_id, d.health) for rank, d in t.unhealthy] == [(1, "GPU-g1-1", Health.FAILED)]


def test_vanished_and_exporter_down() -> None:
    first = one(results(ALL_BUSY))
    gone = {k: v for k, v in ALL_BUSY.items() if k != ("g0", 1)}
    second = one(results(gone), previous=first.devices)
    assert second.devices["GPU-g0-1"].health == Health.FAILED
    assert second.devices["GPU-g0-1"].region == "cn-east"  # joined like the others
    silent = {k: v for k, v in ALL_BUSY.items() if k[0] != "g1"}
    third = one(results(silent, up={"g0": 1, "g1": 0}), previous=first.devices)
    assert third.exporters_down == {"g1"}
    assert {third.devices[f"GPU-g1-{i}"].health for i in (0, 1)} == {Health.UNKNOWN}
    assert job_telemetry(JOB, third).unhealthy == ()


def test_a_removed_node_is_forgotten() -> None:
    first = build([SourceResult("p", frozenset({"*"}), results(ALL_BUSY))], NODES, {}, POLICY)
    nodes = {k: v for k, v in NODES.items() if k != "g1"}
    later = build([SourceResult("p", frozenset({"*"}), results({("g0", 0): "1", ("g0", 1): "1"}))], nodes,
                  first.devices, POLICY)
    assert sorted(later.devices) == ["GPU-g0-0", "GPU-g0-1"]


def test_an_unavailable_source_only_affects_its_regions() -> None:
    east = SourceResult("http://east", frozenset({"cn-east"}), None, "connection refused")
    rest = SourceResult("http://default", frozenset({"*", "cn-north"}), results(ALL_BUSY))
    s = build([east, rest], NODES, {}, POLICY)
    assert s.region("cn-east").availability == Availability.UNAVAILABLE
    assert "connection refused" in s.region("cn-east").message
    assert s.region("cn-north").availability == Availability.OK
    assert not s.devices  # the default does not speak for cn-east's nodes: they have their own Prometheus
    t = job_telemetry(JOB, s)
    assert t.availability == Availability.UNAVAILABLE and t.unhealthy == ()


def test_nonsense_degrades_but_keeps_the_good_series() -> None:
    res = results(ALL_BUSY)
    res["dcgm:util"].append({"metric": {"modelName": "no id"}, "value": [0, "1"]})
    res["dcgm:util"][0] = gpu("g0", 0, "train-g2-0", "NaN")
    s = one(res)
    assert s.region("cn-east").availability == Availability.DEGRADED
    assert "without a device or node label" in s.region("cn-east").message
    t = job_telemetry(JOB, s)
    assert t.availability == Availability.DEGRADED and t.per_replica == (94.0, 90.0)


def test_status_is_written_only_when_something_noticeable_changed() -> None:
    t = job_telemetry(JOB, one(results(ALL_BUSY)))
    first = status.patch(None, [], t, "2026-11-21T10:00:00Z")
    assert first is not None and first["utilization"]["average"] == 91.0
    conds = {c["type"]: c for c in first["conditions"]}
    assert conds["TelemetryUnavailable"]["status"] == "False" and conds["DevicesHealthy"]["status"] == "True"
    assert conds["Straggler"]["status"] == "False"
    # half a point of noise: no write
    wobble = job_telemetry(JOB, one(results({**ALL_BUSY, ("g0", 0): "91"})))
    assert status.patch(first["utilization"], first["conditions"], wobble, "2026-11-21T10:00:15Z") is None
    # a failed device: conditions change, transition time moves only for the changed one
    bad = job_telemetry(JOB, one(results(ALL_BUSY, xids={("g0", 0): 79})))
    p = status.patch(first["utilization"], first["conditions"], bad, "2026-11-21T10:00:30Z")
    assert p is not None and "utilization" not in p
    conds = {c["type"]: c for c in p["conditions"]}
    assert conds["DevicesHealthy"]["status"] == "False" and conds["DevicesHealthy"]["reason"] == "DeviceFailed"
    assert "rank 0: GPU-g0-0 on g0: fatal XID 79" in conds["DevicesHealthy"]["message"]
    assert conds["DevicesHealthy"]["lastTransitionTime"] == "2026-11-21T10:00:30Z"
    assert conds["TelemetryUnavailable"]["lastTransitionTime"] == "2026-11-21T10:00:00Z"


def test_unavailable_telemetry_keeps_last_figures_and_says_so() -> None:
    t = job_telemetry(JOB, one(results(ALL_BUSY)))
    first = status.patch(None, [], t, "2026-11-21T10:00:00Z")
    assert first is not None
    down = build([SourceResult("http://prom", frozenset({"*"}), None, "timed out")], NODES, {}, POLICY)
    p = status.patch(first["utilization"], first["conditions"], job_telemetry(JOB, down), "2026-11-21T10:01:00Z")
    assert p is not None and "utilization" not in p
    conds = {c["type"]: c for c in p["conditions"]}
    assert conds["TelemetryUnavailable"]["status"] == "True"
    assert conds["TelemetryUnavailable"]["reason"] == "PrometheusUnavailable"
    assert "no action is taken" in conds["TelemetryUnavailable"]["message"]
    assert conds["DevicesHealthy"]["status"] == "Unknown"


def test_an_exporter_down_since_before_a_restart_wipes_no_figure() -> None:
    """The operator restarts (no previous snapshot) while the exporters of both of a job's nodes answer
    `up == 0`: no device reports its pods, which looks exactly like pods no exporter reports. That is
    missing data: the condition says NoSeries and the last figure stays (only the placement's end removes it,
    `controller/status.py`). A review found it wiped the measured 91%."""
    first = status.patch(None, [], job_telemetry(JOB, one(results(ALL_BUSY))), "2026-11-21T10:00:00Z")
    assert first is not None and first["utilization"]["average"] == 91.0
    after_restart = one(results({}, up={"g0": 0, "g1": 0}))  # no previous snapshot: nothing to carry over
    t = job_telemetry(JOB, after_restart)
    assert t.no_series and t.seen == 0 and t.availability == Availability.UNAVAILABLE
    p = status.patch(first["utilization"], first["conditions"], t, "2026-11-21T10:01:00Z")
    assert p is not None and "utilization" not in p  # kept, not nulled
    conds = {c["type"]: c for c in p["conditions"]}
    assert conds["TelemetryUnavailable"]["status"] == "True" and conds["TelemetryUnavailable"]["reason"] == "NoSeries"
    assert "no action is taken" in conds["TelemetryUnavailable"]["message"]
    assert status.patch(first["utilization"], p["conditions"], t, "2026-11-21T10:01:15Z") is None  # no write loop


# --- the second round: `seen` only for the scrape targets of doubled devices --------------------------------

def test_seen_is_asked_only_for_the_targets_whose_devices_changed_pods() -> None:
    from collections.abc import Mapping

    from heterojob.telemetry.snapshot import followups, gather

    def series(uuid: str, pod: str, instance: str) -> dict[str, Any]:
        return {"metric": {"UUID": uuid, "Hostname": "g0", "namespace": "t", "pod": pod, "instance": instance},
                "value": [0, "50"]}

    calm = {"dcgm:util": [series("GPU-a", "a", "10.0.0.1:9400"), series("GPU-b", "b", "10.0.0.2:9400")]}
    assert followups(calm) == {}
    churn = {"dcgm:util": [*calm["dcgm:util"], series("GPU-a", "c", "10.0.0.1:9400")]}
    more = followups(churn)
    assert list(more) == ["dcgm:seen"]
    assert 'instance=~"10\\\\.0\\\\.0\\\\.1:9400"' in more["dcgm:seen"] and "10.0.0.2" not in more["dcgm:seen"]

    asked: list[list[str]] = []

    def ask(q: Mapping[str, str]) -> dict[str, Any]:
        asked.append(sorted(q))
        return {name: (churn.get(name) or []) for name in q}

    answered, n = gather(ask, 60)
    assert n == len(asked[0]) + 1 and asked[1] == ["dcgm:seen"] and "dcgm:seen" in answered
    assert not any(name.endswith(":seen") for name in asked[0])
