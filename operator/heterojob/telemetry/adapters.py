"""One adapter per exporter family: NVIDIA dcgm-exporter and Huawei Ascend npu-exporter, each the roles it reads,
the labels that name its devices and how its answers become samples (the shared machinery: `telemetry/family.py`;
which labels place a series: `telemetry/labels.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from heterojob.telemetry.family import Adapter, Role, Where
from heterojob.telemetry.labels import (
    EXPORTER_POD_LABELS, INSTANCE_LABELS, LOCATION_LABELS, POD_LABELS, Context, node_of_series, shared, workload_of,
)
from heterojob.telemetry.model import (
    ASCEND_SENTINELS, DeviceSample, Health, HealthPolicy, classify_gpu, classify_npu, classify_npu_network,
)

# dcgm-exporter 1.x's name of each field heterojob reads (NVIDIA/gpu-monitoring-tools tag 1.0.0,
# exporters/prometheus-dcgm/dcgm-exporter/dcgm-exporter: `dcgm_<field>{gpu, uuid}`; 2.3.0+ emits the same names
# with etc/dcgm-exporter/1.x-compatibility-metrics.csv)
DCGM_1X = {"DCGM_FI_DEV_GPU_UTIL": "dcgm_gpu_utilization", "DCGM_FI_DEV_GPU_TEMP": "dcgm_gpu_temp",
           "DCGM_FI_DEV_FB_USED": "dcgm_fb_used", "DCGM_FI_DEV_FB_FREE": "dcgm_fb_free",
           "DCGM_FI_DEV_POWER_USAGE": "dcgm_power_usage", "DCGM_FI_DEV_XID_ERRORS": "dcgm_xid_errors"}


# One exporter's series of a device: its scrape target (behind a federation, the original target is
# `exported_instance`). Two exporters can report one GPU (an upgrade, or a ServiceMonitor scraping an old and a
# new DaemonSet): a sum per device must first be taken per exporter.
EXPORTER_LABELS = INSTANCE_LABELS


def framebuffer_total(generations: Sequence[tuple[Sequence[str], str]]) -> str:
    """PromQL: each GPU's framebuffer total, used + free (+ reserved where reported), counting the device once.

    `generations`: (metric names, the free one) per naming generation, newest first. Per exporter and metric
    name first (`max`: the copies a per-pod mapping adds, --kubernetes-virtual-gpus or per-process metrics, are
    one figure), summed over the names only where the exporter reports free memory (no total from `used`
    alone), one generation per exporter (the newest it reports), then the largest per device across
    exporters, `uuid` (--use-old-namespace, 1.x) read as `UUID`."""
    device = "UUID, uuid, GPU_I_ID"
    one = f"{device}, {', '.join(EXPORTER_LABELS)}"
    sums = [f'(sum by ({one}) (max by (__name__, {one}) ({{__name__=~"{"|".join(names)}"}})) and on ({one}) {free})'
            for names, free in generations]
    return f'max by (UUID, GPU_I_ID) (label_replace({" or ".join(sums)}, "UUID", "$1", "uuid", "(.+)"))'


class DcgmAdapter(Adapter):
    """NVIDIA dcgm-exporter 1.x-4.x (1.x's `dcgm_*` names as legacy alternatives). `Hostname` became `hostname`
    after 4.5.3-4.8.2: both are read; `UUID` is `uuid` with --use-old-namespace (and in 1.x). A MIG instance is a device of its own (`<UUID>/mig-<GPU_I_ID>`):
    it has no DCGM_FI_DEV_GPU_UTIL, so its utilization is DCGM_FI_PROF_GR_ENGINE_ACTIVE x 100."""

    family = "dcgm"
    key_labels = ("UUID", "uuid", "GPU_I_ID")
    identity_labels = (*key_labels, "GPU_I_PROFILE", "gpu", "modelName", *LOCATION_LABELS, *POD_LABELS)
    group_labels = ("xid",)
    # `legacy`: dcgm-exporter 1.x's names (DCGM_1X; pod_name/pod_namespace/container_name added by its
    # pod-gpu-metrics-exporter)
    roles = {
        "util": Role("DCGM_FI_DEV_GPU_UTIL", "avg_over_time"),
        # held for the window: hysteresis on overheat
        "temp": Role("DCGM_FI_DEV_GPU_TEMP", "min_over_time", legacy=DCGM_1X["DCGM_FI_DEV_GPU_TEMP"]),
        "fb_used": Role("DCGM_FI_DEV_FB_USED", legacy=DCGM_1X["DCGM_FI_DEV_FB_USED"]),
        # used + free + reserved (reserved when present), summed by Prometheus: one series per device, not three,
        # and one device however many exporters or name generations report it
        "fb_total": Role("fb_total", param=framebuffer_total((
            (("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED"), "DCGM_FI_DEV_FB_FREE"),
            ((DCGM_1X["DCGM_FI_DEV_FB_USED"], DCGM_1X["DCGM_FI_DEV_FB_FREE"]), DCGM_1X["DCGM_FI_DEV_FB_FREE"])))),
        "power": Role("DCGM_FI_DEV_POWER_USAGE", legacy=DCGM_1X["DCGM_FI_DEV_POWER_USAGE"]),
        # the code of the last XID, not a count
        "xid": Role("DCGM_FI_DEV_XID_ERRORS", legacy=DCGM_1X["DCGM_FI_DEV_XID_ERRORS"]),
        "xid_count": Role("DCGM_EXP_XID_ERRORS_COUNT"),  # per `xid` over window_size_in_ms, when enabled
    }
    # MIG instances only: whole GPUs have DCGM_FI_DEV_GPU_UTIL (default counters since 2.3.1-2.6.0), and
    # evaluating the profiling field for the whole fleet would double the identity query's cost; then 1.x's name
    identity_alternatives = (Role("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "avg_over_time", scale=100,
                                  selector='{GPU_I_ID!=""}'),
                             Role(DCGM_1X["DCGM_FI_DEV_GPU_UTIL"], "avg_over_time"))
    # 2.2.9-2.4.1 (and earlier 2.x) comment DCGM_FI_DEV_GPU_UTIL out of both counters CSVs: a whole GPU is
    # placed by its temperature's labels, and its utilization is the engine activity, asked in a second round
    # only for such GPUs. A GPU that fell off the bus (XID 79) has no readable field left: dcgm-exporter skips
    # blank values (gpu_collector.go), so only its last XID (and the XID count) remains, with the pod's labels.
    labelled_roles = ("temp", "xid", "xid_count")
    fallback_identity = Role("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "avg_over_time", scale=100)
    fallback_keys = ("UUID", "uuid")

    def device_id(self, labels: Mapping[str, str], ctx: Context = Context()) -> str | None:
        get = labels.get
        uuid = get("UUID") or get("uuid")
        if not uuid:
            return None
        instance = get("GPU_I_ID")
        return f"{uuid}/mig-{instance}" if instance else uuid

    def clean(self, role: str, value: float | None, labels: Mapping[str, str]) -> tuple[float | None, bool]:
        if role == "util" and value is not None and not 0 <= value <= 100:
            return None, True
        return value, False

    def sample(self, device_id: str, node: str, labels: Mapping[str, str], values: Mapping[str, Any],
               policy: HealthPolicy, where: Where = (None, None), ctx: Context = Context()) -> DeviceSample:
        get = values.get
        util, temp, used, total, power, xid = (get("util"), get("temp"), get("fb_used"), get("fb_total"),
                                               get("power"), get("xid"))
        counts = tuple(sorted(xid_counts.items())) if (xid_counts := get("xid_counts")) else ()
        live = util is not None or temp is not None or used is not None or power is not None
        health, reason, error = classify_gpu(xid, temp, policy, None, counts, live)
        model = labels.get("modelName", "")
        if labels.get("GPU_I_PROFILE"):
            model = f"{model} MIG {labels['GPU_I_PROFILE']}".strip()
        namespace, pod = workload_of(labels, ctx.exporter_pods)
        return DeviceSample(
            device_id=device_id, node=node, family=self.family, model=model,
            index=labels.get("gpu", "") + (f"/{labels['GPU_I_ID']}" if labels.get("GPU_I_ID") else ""),
            utilization=util, memory_used_mib=used,
            memory_total_mib=total if used is not None else None,
            temperature_c=temp, power_w=power,
            health=health, reason=reason, last_error=error, namespace=namespace, pod=pod,
            region=where[0], device_class=where[1], xid=int(xid) if xid is not None else None, xid_counts=counts,
            observed_at=values.get("at"),
        )


class AscendAdapter(Adapter):
    """Huawei Ascend npu-exporter, 2021 to 2026 label sets. Every sample carries the exporter's own timestamp
    (no staleness markers), so every role is read over the window. -1, 2147483647 and 4294967295 are the
    exporter's "not collected" values. Utilization is the window's median: a -1 inside it does not drag
    the figure down. Health is the window's max: 0 only when the chip said unhealthy in every sample."""

    family = "npu-exporter"
    # chip ids repeat on every node; the scrape target's pod (a ServiceMonitor's, without relabelling) can name it
    key_labels = ("id", *LOCATION_LABELS, *EXPORTER_POD_LABELS)
    identity_labels = tuple(dict.fromkeys((*key_labels, "model_name", *POD_LABELS)))
    grouped_fn = "last_over_time"
    roles = {
        "util": Role("npu_chip_info_utilization", "quantile_over_time", "0.5"),
        "temp": Role("npu_chip_info_temperature", "min_over_time"),
        # held for the window (0 only when every sample said so) and across a pod change's two series
        "health": Role("npu_chip_info_health_status", "max_over_time", merge="max"),
        "hbm_used": Role("npu_chip_info_hbm_used_memory"),
        "hbm_total": Role("npu_chip_info_hbm_total_memory"),
        # chips without HBM (Ascend 310, 310P: npu-exporter's DdrCollector; the HbmCollector only serves 910A,
        # 910B, 910A3, 910A5) report their DDR instead, in MB as well
        "ddr_used": Role("npu_chip_info_used_memory"),
        "ddr_total": Role("npu_chip_info_total_memory"),
        "power": Role("npu_chip_info_power"),
        # the chip's own RoCE network (training cards only: 910/910B/910A3; 310/310P report none), held for the
        # window like the health: 0 only when every sample said so. A fault only for multi-replica jobs
        # (`snapshot.job_telemetry`), as mind-cluster's scheduler drops network-unhealthy chips only then
        "network": Role("npu_chip_info_network_status", over="max_over_time"),
        "link": Role("npu_chip_info_link_status", over="max_over_time"),
        # the chip's first error code, present only while it has one (2021-era exporters: 0 when none); for the
        # message, the health decides
        "error_code": Role("npu_chip_info_error_code"),
    }
    # 2023-era exporters put the pod only on container_npu_utilization (same value, pod labels)
    identity_alternatives = (Role("container_npu_utilization", "quantile_over_time", "0.5"),)
    # a chip the driver cannot read leaves its health (and error codes) only: npu-exporter drops a metric whose
    # value is -1 or 4294967295 (common_utils.go validateNum), utilization and temperature included
    labelled_roles = ("health",)

    def device_id(self, labels: Mapping[str, str], ctx: Context = Context()) -> str | None:
        node = node_of_series(labels, ctx)
        chip = labels.get("id")
        return f"{node}/npu-{chip}" if node and chip else None

    def clean(self, role: str, value: float | None, labels: Mapping[str, str]) -> tuple[float | None, bool]:
        if value is None or role == "health":
            return value, False
        if role == "error_code":  # codes are 32-bit (0x80E01801): only the "not collected" values are no reading
            return (None, True) if value in ASCEND_SENTINELS else (value, False)
        if value in ASCEND_SENTINELS or value < 0 or value >= 2147483647 or (role == "util" and value > 100):
            return None, True
        return value, False

    def sample(self, device_id: str, node: str, labels: Mapping[str, str], values: Mapping[str, Any],
               policy: HealthPolicy, where: Where = (None, None), ctx: Context = Context()) -> DeviceSample:
        health, reason, error = classify_npu(values.get("health"), values.get("temp"), policy)
        if (code := values.get("error_code")) and health == Health.FAILED:
            reason, error = f"{reason}, error code 0x{int(code):X}", f"{error} (0x{int(code):X})"
        network = classify_npu_network(values.get("network"), values.get("link"))
        namespace, pod = workload_of(labels, ctx.exporter_pods)
        hbm = values.get("hbm_used") is not None or values.get("hbm_total") is not None
        used, total = (values.get("hbm_used"), values.get("hbm_total")) if hbm else \
            (values.get("ddr_used"), values.get("ddr_total"))
        return DeviceSample(
            device_id=device_id, node=node, family=self.family, model=labels.get("model_name", ""),
            index=labels.get("id", ""), utilization=values.get("util"), memory_used_mib=used,
            memory_total_mib=total, temperature_c=values.get("temp"),
            power_w=values.get("power"), health=health, reason=reason, last_error=error,
            namespace=namespace, pod=pod, region=where[0], device_class=where[1], shared=shared(labels),
            observed_at=values.get("at"), network_fault=network,
        )


ADAPTERS: dict[str, Adapter] = {a.family: a for a in (DcgmAdapter(), AscendAdapter())}
