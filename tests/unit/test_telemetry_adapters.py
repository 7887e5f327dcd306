"""Exporter adapters on Prometheus API results shaped as dcgm-exporter and npu-exporter produce them."""

from __future__ import annotations

from typing import Any

from heterojob.telemetry.adapters import AscendAdapter, DcgmAdapter
from heterojob.telemetry.family import ParseReport
from heterojob.telemetry.model import DeviceSample, Health, HealthPolicy, vanished

POLICY = HealthPolicy()


def series(value: Any, **labels: str) -> dict[str, Any]:
    return {"metric": labels, "value": [1763747000.123, value]}


def gpu(uuid: str, host_label: str = "Hostname", host: str = "gpu-node-1", **extra: str) -> dict[str, str]:
    return {"gpu": "0", "UUID": uuid, "device": "nvidia0", "modelName": "NVIDIA H100 80GB HBM3",
            host_label: host, "DCGM_FI_DRIVER_VERSION": "550.54.15", **extra}


def dcgm(results_for: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """role -> vector, from {uuid: {role: value, "labels": {...}}}."""
    out: dict[str, list[dict[str, Any]]] = {role: [] for role in DcgmAdapter.metrics}
    for uuid, spec in results_for.items():
        labels = spec.get("labels") or gpu(uuid)
        for role in DcgmAdapter.metrics:
            if role in spec:
                out[role].append(series(spec[role], **labels))
    return out


def test_queries_are_fleet_wide_and_windowed() -> None:
    queries = DcgmAdapter().queries(60)
    assert queries["util"].startswith("max by (UUID, uuid, GPU_I_ID, ")
    assert " (avg_over_time(DCGM_FI_DEV_GPU_UTIL[60s])) or " in queries["util"]
    assert "exported_pod" in queries["util"] and "pod_name" in queries["util"]  # what maps a device to a pod
    keys = "UUID, uuid, GPU_I_ID"
    # the temperature keeps the identity labels: it places a GPU that has no utilization metric (2.2.9-2.4.1)
    assert queries["temp"] == (f"max by ({', '.join(DcgmAdapter.identity_labels)}) "
                               "(min_over_time(DCGM_FI_DEV_GPU_TEMP[60s]) or min_over_time(dcgm_gpu_temp[60s]))")
    # the fault series keep the identity labels too: a GPU that fell off the bus has nothing else (issue 33)
    assert queries["instant"] == (f'max by (__name__, {keys}, xid) '
        '({__name__=~"DCGM_FI_DEV_FB_USED|dcgm_fb_used|DCGM_FI_DEV_POWER_USAGE|dcgm_power_usage"}) or '
        f'max by (__name__, {", ".join(DcgmAdapter.identity_labels)}, xid) '
        '({__name__=~"DCGM_FI_DEV_XID_ERRORS|dcgm_xid_errors|DCGM_EXP_XID_ERRORS_COUNT"})')
    assert queries["fb_total"].startswith("max by (UUID, GPU_I_ID) ")  # beside it, not joined to it
    assert AscendAdapter().queries(30)["health"] == (
        "max by (id, exported_node, node, kubernetes_node, node_name, nodename, kubernetes_pod_node_name, "
        "k8s_node_name, Hostname, hostname, job, exported_instance, instance, namespace, pod, model_name, "
        "exported_namespace, exported_pod, pod_namespace, pod_name) "
        "(max_over_time(npu_chip_info_health_status[30s]))")
    # never a per-job or per-device selector: the only matcher is on the metric name
    assert all("=\"" not in q.replace('__name__=~"', "").replace('"heterojob_metric", "', "").replace('!=""', "")
               for a in (DcgmAdapter(), AscendAdapter()) for q in a.queries(60).values())


def test_the_instant_query_is_split_back_by_metric_name() -> None:
    labels = gpu("GPU-a")
    results = {"util": [series("50", **labels)],
               "instant": [series("1000", __name__="DCGM_FI_DEV_FB_USED", **labels),
                           series("80000", heterojob_metric="fb_total", **labels),
                           series("48", __name__="DCGM_FI_DEV_XID_ERRORS", **labels),
                           series("1", __name__="SOMETHING_ELSE", **labels)]}
    [sample] = DcgmAdapter().parse(results, POLICY)
    assert (sample.memory_used_mib, sample.memory_total_mib) == (1000, 80000)
    assert sample.health == Health.FAILED and sample.reason == "fatal XID 48"


def test_xid_79_is_fatal_but_xid_13_is_an_application_error() -> None:
    results = dcgm({
        "GPU-aaa": {"util": "97", "fb_used": "70000", "fb_total": "81559", "temp": "61", "power": "650", "xid": "79"},
        "GPU-bbb": {"util": "95", "temp": "60", "xid": "13"},
        "GPU-ccc": {"util": "90", "temp": "59", "xid": "0"},
    })
    samples = {s.device_id: s for s in DcgmAdapter().parse(results, POLICY)}
    assert samples["GPU-aaa"].health == Health.FAILED and samples["GPU-aaa"].reason == "fatal XID 79"
    assert samples["GPU-aaa"].memory_total_mib == 81559 and samples["GPU-aaa"].utilization == 97
    assert samples["GPU-bbb"].health == Health.HEALTHY
    assert samples["GPU-bbb"].reason == "application XID 13 (no action)"
    assert samples["GPU-ccc"].health == Health.HEALTHY and samples["GPU-ccc"].reason == ""


def test_the_fatal_xid_set_is_configurable() -> None:
    results = dcgm({"GPU-a": {"xid": "109", "temp": "50"}})
    assert DcgmAdapter().parse(results, POLICY)[0].health == Health.HEALTHY
    strict = HealthPolicy(fatal_xids=POLICY.fatal_xids | {109})
    assert DcgmAdapter().parse(results, strict)[0].health == Health.FAILED


def test_both_hostname_spellings_and_pod_labels() -> None:
    results = dcgm({
        "GPU-old": {"util": "10", "labels": gpu("GPU-old", "Hostname", "node-a", pod="p0", namespace="team-a")},
        "GPU-new": {"util": "20", "labels": gpu("GPU-new", "hostname", "node-b", pod_name="p1",
                                                pod_namespace="team-b")},
    })
    samples = {s.device_id: s for s in DcgmAdapter().parse(results, POLICY)}
    assert (samples["GPU-old"].node, samples["GPU-old"].pod, samples["GPU-old"].namespace) == ("node-a", "p0", "team-a")
    assert (samples["GPU-new"].node, samples["GPU-new"].pod, samples["GPU-new"].namespace) == ("node-b", "p1", "team-b")


def test_overheat_held_over_the_window_degrades() -> None:
    samples = DcgmAdapter().parse(dcgm({"GPU-hot": {"temp": "93", "xid": "0"}}), POLICY)
    assert samples[0].health == Health.DEGRADED and samples[0].reason.startswith("overheat 93°C")


def test_ascend_health_values_including_the_2147483647_unknown() -> None:
    def chip(i: str) -> dict[str, str]:
        return {"id": i, "model_name": "Ascend910B3", "vdie_id": "x", "pcie_bus_info": "0000:c1:00.0",
                "node": "npu-node-1", "namespace": "team-a", "pod_name": f"train-{i}"}

    results = {
        "util": [series("88", **chip("0")), series("85", **chip("1")), series("80", **chip("2"))],
        "hbm_total": [series("65536", **chip("0"))],
        "health": [series("1", **chip("0")), series("0", **chip("1")), series("2147483647", **chip("2"))],
    }
    samples = {s.index: s for s in AscendAdapter().parse(results, POLICY)}
    assert samples["0"].health == Health.HEALTHY and samples["0"].memory_total_mib == 65536
    assert samples["1"].health == Health.FAILED and "unhealthy" in samples["1"].reason
    assert samples["2"].health == Health.UNKNOWN and "2147483647" in samples["2"].reason
    assert samples["0"].device_id == "npu-node-1/npu-0" and samples["1"].pod == "train-1"


def test_nonsense_is_reported_and_never_a_fault() -> None:
    report = ParseReport()
    results = {
        "util": [series("NaN", **gpu("GPU-a")), series("banana", **gpu("GPU-b")),
                 series("50", **gpu("GPU-b")), series("10", modelName="no identity")],
        "xid": [series("+Inf", **gpu("GPU-a"))],
    }
    samples = {s.device_id: s for s in DcgmAdapter().parse(results, POLICY, report)}
    assert samples["GPU-a"].utilization is None and samples["GPU-a"].health == Health.UNKNOWN
    assert samples["GPU-b"].health == Health.UNKNOWN  # no XID or temperature: no health signal
    assert (report.bad_values, report.duplicates, report.missing_labels) == (3, 1, 1)
    assert report.degraded


def test_every_kind_of_bad_value_is_tallied_into_the_report_it_is_given() -> None:
    """The per-series values of the windowed and grouped roles: each malformed one counts once, a missing one
    not at all, the exporter's "not collected" markers as uncollected; and the counts add to what the report
    already holds (one report serves every family of a source)."""
    report = ParseReport(missing_labels=2, bad_values=5, uncollected=7)
    results = {
        "util": [series("50", **gpu("GPU-a")), series("50", **gpu("GPU-b"))],
        "temp": [series("NaN", **gpu("GPU-a")), series("-Inf", **gpu("GPU-b"))],
        "fb_used": [series("banana", **gpu("GPU-a")), {"metric": gpu("GPU-b")}],  # no value pair: no reading
        "power": [series(["1", "2"], **gpu("GPU-a")), series(None, **gpu("GPU-b"))],
        "xid": [series("1e400", **gpu("GPU-a")), series("0", device="no uuid")],
    }
    samples = {s.device_id: s for s in DcgmAdapter().parse(results, POLICY, report)}
    assert (report.bad_values, report.missing_labels, report.uncollected) == (5 + 5, 2 + 1, 7)
    assert all(getattr(samples[d], f) is None for d in samples for f in ("temperature_c", "memory_used_mib",
                                                                         "power_w", "xid"))

    def chip(value: Any, role_value: Any) -> dict[str, list[dict[str, Any]]]:
        labels = {"id": "0", "node": "npu-node-1", "model_name": "Ascend910B3"}
        return {"util": [series(value, **labels)], "power": [series(role_value, **labels)],
                "error_code": [series("4294967295", **labels)]}

    report = ParseReport(uncollected=1)
    (npu,) = AscendAdapter().parse(chip("-1", "-1"), POLICY, report)
    assert (report.uncollected, report.bad_values) == (1 + 3, 0) and npu.utilization is None and npu.power_w is None


def test_a_vanished_device_fails_but_a_silent_exporter_is_unknown() -> None:
    before = {s.device_id: s for s in (DeviceSample("GPU-a", "n1", "dcgm"), DeviceSample("GPU-b", "n1", "dcgm"),
                                       DeviceSample("GPU-c", "n2", "dcgm"))}
    now = [DeviceSample("GPU-a", "n1", "dcgm")]
    gone = {s.device_id: s for s in vanished(before, now)}
    assert gone["GPU-b"].health == Health.FAILED and "vanished" in gone["GPU-b"].reason
    assert gone["GPU-c"].health == Health.UNKNOWN


# (instance, the host `host_of` gives): the forms a scrape target's address takes, written out
INSTANCES = [
    ("10.0.0.7:9400", "10.0.0.7"),
    ("gpu-node-x", "gpu-node-x"),
    ("gpu-node-x:9400", "gpu-node-x"),
    ("[fd00::7]:9400", "fd00::7"),
    ("[fd00::7]", "fd00::7"),
    ("fe80::1", "fe80::1"),  # a bare IPv6 address: kept whole
    ("http://h:9400/metrics", "h"),
    ("https://[fd00::8]:9400/metrics", "fd00::8"),
    ("http://fe80::2/metrics", "fe80::2"),
    ("h:9400/metrics", "h"),
]


def _label_replace_node(labels: dict[str, str]) -> str:
    """What Prometheus makes of `with_node_label`'s two steps for one series: label_join with '|' (a missing
    label is ''), then label_replace, its regex anchored at both ends (Go's RE2, leftmost-first as Python's `re`
    for these constructs), `$n` of a group that took no part empty, and an empty result no label. The same cases
    run against the real Prometheus (2.42.0, Debian 12) in tests/e2e/test_telemetry_two_exporters_e2e.py."""
    import re

    from heterojob.telemetry.labels import HOST_LABELS, INSTANCE_LABELS, NODE_FIELD_RE, RELABELLED_NODE_LABELS

    joined = "|".join(labels.get(n, "") for n in (*RELABELLED_NODE_LABELS, *HOST_LABELS, *INSTANCE_LABELS))
    found = re.fullmatch(f"(?:{NODE_FIELD_RE})", joined)
    return joined if found is None else "".join(g or "" for g in found.groups())


def test_the_promql_node_label_reads_an_instance_as_host_of_does() -> None:
    """Before, the PromQL regex cut `instance` at its first ':': `http://h:9400/metrics` gave 'http' and
    `fe80::1` gave 'fe80', other nodes than the operator's `host_of`/`node_of_series` name."""
    from heterojob.telemetry.labels import host_of, node_of_series, with_node_label

    for instance, host in INSTANCES:
        assert host_of(instance) == host, instance
        for labels in ({"instance": instance}, {"exported_instance": instance, "instance": "fed:9090"},
                       {"instance": instance, "gpu": "0"}):
            assert _label_replace_node(labels) == node_of_series(labels) == host, labels
    assert _label_replace_node({"Hostname": "n4", "instance": "http://x:1/m"}) == "n4"
    assert _label_replace_node({"node": "n1", "instance": "fe80::1"}) == "n1"
    assert "$1$2$3" in with_node_label("up")
