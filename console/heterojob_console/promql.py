"""The console's PromQL (`devices` reads through it): selectors of a device or of nodes by any node label, the
per-node grouping that reads a relabelled `node` label directly and joins the rest (`by_node`), and the recording
rule of per-node utilization (`recording_rules`, `python -m heterojob_console.rules`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from heterojob.telemetry import digest as aggregate
from heterojob.telemetry.adapters import ADAPTERS, DCGM_1X
from heterojob.telemetry.labels import (
    HOST_LABELS, JOB_LABELS, LOCATION_LABELS, NODE_LABEL, NODE_LABELS, RELABELLED_NODE_LABELS, with_node_label,
)

UTIL_PACK = 1e6  # a `node_utilization` value: devices with a utilization + their sum / UTIL_PACK
UTIL = {"dcgm": "DCGM_FI_DEV_GPU_UTIL", "npu": "npu_chip_info_utilization"}


NODE_MATCH_LABELS = (*RELABELLED_NODE_LABELS, *HOST_LABELS, *JOB_LABELS)


def device_matchers(device: str) -> tuple[list[str], bool]:
    """(label matchers, is a MIG instance) for one device id as the adapters name it: `<UUID>` (UUID or, with
    --use-old-namespace, uuid), `<UUID>/mig-<GPU_I_ID>`, `<node>/npu-<id>`."""
    if "/npu-" in device:
        node, chip = device.split("/npu-", 1)
        return [f'{{{label}="{node}",id="{chip}"}}' for label in NODE_MATCH_LABELS], False
    uuid, _, instance = device.partition("/mig-")
    return [f'{{{label}="{uuid}",GPU_I_ID="{instance}"}}' for label in ("UUID", "uuid")], bool(instance)


def select(metric: str, nodes: list[str] | None, extra: str = "") -> str:
    """`metric` on `nodes` (any node label) or everywhere, with an `extra` label matcher."""
    matchers = [f'{label}=~"{"|".join(nodes)}"' for label in NODE_MATCH_LABELS] if nodes is not None else [""]
    sets = [", ".join(m for m in (one, extra) if m) for one in matchers]
    return " or ".join(f"{metric}{{{s}}}" if s else metric for s in sets)


# Where a series carries a relabelled `node` label and no `exported_node` (the project's manifests/telemetry, the
# prometheus-community charts), that label is its node, as `with_node_label` would read it: such series are
# grouped by it directly, and only the others go through `with_node_label`'s joins and regex over every location
# label (at 100,000 devices that machinery was most of a fleet-wide query's cost).
NAMED = 'exported_node="", node!=""'
UNNAMED = ('node=""', 'exported_node!=""')  # together, every series NAMED leaves out (they may overlap: `or` dedups)


def narrow(query: str, matcher: str) -> str:
    """`query` with `matcher` added to every selector of a metric the adapters read (and every `{__name__=~...}`)."""
    names = "|".join(re.escape(m) for m in sorted(aggregate.metrics(ADAPTERS.values()), key=len, reverse=True))
    token = re.compile(rf'(?<![\w"|])({names})(?![\w"|])(\{{[^}}]*\}})?')

    def add(m: re.Match[str]) -> str:
        inner = (m.group(2) or "{}")[1:-1].strip()
        return m.group(1) + "{" + (f"{inner}, " if inner else "") + matcher + "}"

    named = re.sub(r'\{(__name__=~"[^"]*")([^}]*)\}', lambda m: "{" + m.group(1) + m.group(2) + f", {matcher}}}", query)
    return token.sub(add, named)


def by_node(per_device: Callable[[Callable[[str], str], str], str]) -> str:
    """PromQL: `per_device(label, keys)` (series keeping the location labels `keys` and NODE_LABEL set by `label`)
    over every series: those NAMED by their `node` label, then the others through `with_node_label`."""
    def named(expr: str) -> str:
        return f'label_replace({expr}, "{NODE_LABEL}", "$1", "node", "(.+)")'

    parts = [narrow(per_device(named, "node"), NAMED)]
    parts += [narrow(per_device(with_node_label, ", ".join(NODE_LABELS)), m) for m in UNNAMED]
    return " or ".join(f"({p})" for p in parts)


def gpu_utilization(nodes: list[str] | None, keys: str) -> str:
    """Each whole GPU's utilization as the operator's adapter reads it (and the device history charts it):
    DCGM_FI_DEV_GPU_UTIL, or dcgm-exporter 1.x's name for it, else (2.2.9-2.4.1 ship GPU_UTIL commented out)
    the engine activity x 100. MIG instances (GPU_I_ID) are not whole GPUs: the heat map leaves them out."""
    by = f"max by (UUID, uuid, {keys})"
    util = f"{by} ({select(UTIL['dcgm'], nodes)} or {select(DCGM_1X[UTIL['dcgm']], nodes)})"
    whole = 'GPU_I_ID=""'  # a series without the label: a whole GPU
    engine = f"{by} (100 * ({select('DCGM_FI_PROF_GR_ENGINE_ACTIVE', nodes, whole)}))"
    return f"{util} or {engine}"


# The recording rule the console reads per-node utilization from when a Prometheus has it (`recording_rules`): the
# `node_utilization_query` of every node, evaluated every minute, so the Devices tiles and the fleet's heat map read
# 12,500 recorded series instead of aggregating 100,000 devices' at every read (a fleet-wide range query over raw
# series took Prometheus about 50 s at 100,000 devices here). Without it, the same figures are computed at each read.
RECORDED = "heterojob:node_utilization:packed"
RULE_INTERVAL = "1m"


def node_utilization_query(window_s: int = 60) -> str:
    """PromQL: one series a node (NODE_LABEL), value = devices with a utilization in 0..100 + their sum / UTIL_PACK:
    each adapter's utilization over the window as the operator's aggregate read takes it (`digest.pods_query`:
    grouped by the raw location labels first, a few groups a node, then by the node those labels name)."""
    raw = ", ".join(dict.fromkeys(LOCATION_LABELS))
    parts = []
    for a in ADAPTERS.values():
        u = aggregate.identity_series(a, window_s)

        def grouped(label: Callable[[str], str], _: str, u: str = u) -> str:
            return label(f"sum by ({raw}) (({u} >= 0 <= 100) / {UTIL_PACK:g} + 1)")

        parts.append(f"sum by ({NODE_LABEL}) ({by_node(grouped)})")
    return " or ".join(parts)


def recording_rules(window_s: int = 60, interval: str = RULE_INTERVAL) -> dict[str, Any]:
    """A Prometheus rule file (as a dict: yaml.safe_dump it) recording RECORDED every `interval`."""
    return {"groups": [{"name": "heterojob-console", "interval": interval,
                        "rules": [{"record": RECORDED, "expr": node_utilization_query(window_s)}]}]}


def unpack(value: float) -> tuple[int, float]:
    """(devices, utilization sum) of a RECORDED / `node_utilization_query` value."""
    whole = int(value)
    return whole, round((value - whole) * UTIL_PACK, 3)
