"""Devices for the console, through the operator's own telemetry modules (same adapters, same health)."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kubernetes
import pandas as pd
from prometheus_api_client import PrometheusConnect

from heterojob.constants import GROUP, VERSION
from heterojob.controller import FleetSource
from heterojob.controller.monitor import Monitor, TelemetryConfig
from heterojob.telemetry.adapters import NODE_LABELS

HEAT_ROWS = 300  # beyond this many devices the heat map shows nodes; beyond this many nodes, region/class
HEAT_POINTS = 60  # columns of the heat map, whatever the time range


def fleet_source(api: kubernetes.client.ApiClient) -> FleetSource:
    core, custom = kubernetes.client.CoreV1Api(api), kubernetes.client.CustomObjectsApi(api)
    listed = json.loads(core.list_node(_preload_content=False).data)  # raw: 10x faster than the models
    objects: list[dict[str, Any]] = [{**n, "kind": "Node"} for n in listed.get("items", [])]
    for plural, kind in (("acceleratorclasses", "AcceleratorClass"), ("regions", "Region")):
        objects += [{**o, "kind": kind} for o in custom.list_cluster_custom_object(GROUP, VERSION, plural)["items"]]
    return FleetSource.from_objects(objects)


def current(api: kubernetes.client.ApiClient, prometheus_url: str, minutes: int = 60
            ) -> tuple[pd.DataFrame, dict[str, str], pd.DataFrame]:
    """(one row per device now, region -> why its telemetry is unavailable or degraded, the heat map).

    The heat map's range query runs while the snapshot's queries do: the page waits for the slower one.
    """
    source = fleet_source(api)
    monitor = Monitor(None, source, dict, TelemetryConfig(prometheus_url=prometheus_url, timeout_s=5))
    facts = monitor.node_facts()
    by_node = sum(f.devices for f in facts.values()) > HEAT_ROWS
    with ThreadPoolExecutor(1) as pool:
        later = pool.submit(_heat_series, prometheus_url, minutes, by_node)
        snapshot = monitor.collect(time.time(), facts)
        try:
            series = later.result()
        except Exception:  # noqa: BLE001 - the table still shows; the page says the heat map is missing
            series = None
    rows = [{"device": d.device_id, "node": d.node, "region": d.region, "class": d.device_class,
             "utilization": d.utilization, "temperature": d.temperature_c, "health": d.health.value,
             "reason": d.reason, "pod": f"{d.namespace}/{d.pod}" if d.pod else ""}
            for d in (snapshot.devices.values() if snapshot else [])]
    problems = {name: r.message for name, r in (snapshot.regions.items() if snapshot else [])
                if r.availability.value != "ok"}
    columns = ["device", "node", "region", "class", "utilization", "temperature", "health", "reason", "pod"]
    return pd.DataFrame(rows, columns=columns), problems, series if series is not None else pd.DataFrame()


def _heat_series(prometheus_url: str, minutes: int, by_node: bool, now: float | None = None) -> pd.DataFrame:
    """Every device's (or node's) utilization over the window; a `node` column says where each row is."""
    end = now or time.time()
    step = max(1, int(minutes * 60 / HEAT_POINTS))
    keys = ", ".join(NODE_LABELS)
    queries = ([f"avg by ({keys}) (DCGM_FI_DEV_GPU_UTIL)", f"avg by ({keys}) (npu_chip_info_utilization)"]
               if by_node else [f"max by (UUID, {keys}) (DCGM_FI_DEV_GPU_UTIL)",
                                f"max by (id, {keys}) (npu_chip_info_utilization)"])
    prom = PrometheusConnect(prometheus_url, timeout=10)
    series: dict[str, dict[pd.Timestamp, float]] = {}
    where: dict[str, str] = {}
    for query in queries:
        for s in prom.custom_query_range(query, start_time=_dt(end - minutes * 60), end_time=_dt(end),
                                         step=f"{step}s"):
            labels = s.get("metric") or {}
            node = next((labels[k] for k in ("Hostname", "hostname", "node") if labels.get(k)), "")
            name = node if by_node else (labels.get("UUID") or f"{node}/npu-{labels.get('id', '?')}")
            series[name] = {pd.Timestamp(float(t), unit="s", tz="UTC"): float(v) for t, v in s.get("values", [])}
            where[name] = node
    frame = pd.DataFrame(series).T.sort_index()
    if frame.empty:
        return frame
    frame = frame.reindex(sorted(frame.columns), axis=1)
    frame.insert(0, "node", [where[n] for n in frame.index])
    return frame


def heat(series: pd.DataFrame, devices: pd.DataFrame) -> pd.DataFrame:
    """The heat map of the devices shown: rows are devices, nodes, or region/class on large fleets."""
    if series.empty:
        return series
    per_node = bool((series.index == series["node"]).all())  # fetched per node: a large fleet
    frame = series[series["node"].isin(set(devices["node"]))].drop(columns="node")
    if not per_node:
        frame = frame[frame.index.isin(set(devices["device"]))]
    by_node = per_node
    if by_node and len(frame) > HEAT_ROWS:  # too many nodes to read: average them per region and class
        group = devices.drop_duplicates("node").set_index("node")
        keys = [f"{group.at[n, 'region']}/{group.at[n, 'class']}" if n in group.index else "?" for n in frame.index]
        frame = frame.groupby(keys).mean()
    return frame


def _dt(ts: float) -> Any:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, UTC)
