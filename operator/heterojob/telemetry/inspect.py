"""`heterojob telemetry snapshot`: what heterojob sees in a Prometheus, for an SRE, read-only.

The same queries, adapters and snapshot as the operator's monitoring cycle, once. With a kubeconfig the
devices are joined with the Nodes (region, class; a host label counts only when it names a Node); without
one, nodes come from the series' labels alone. Prints one row per device and the parse report, or with
`--json` a list of device objects on stdout (the report goes to stderr). Exit 0 when Prometheus answered,
2 when it could not be read, 3 when the kubeconfig could not be used.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from heterojob.engine.capacity.fleet import Fleet
from heterojob.telemetry.facts import node_facts
from heterojob.telemetry.model import DeviceSample, HealthPolicy
from heterojob.telemetry.prometheus import PrometheusReader, TelemetryError
from heterojob.telemetry.snapshot import NodeFacts, Snapshot, SourceResult, build, gather

FIELDS = ("device", "node", "region", "class", "model", "utilization", "memory_used_mib", "memory_total_mib",
          "temperature_c", "power_w", "health", "reason", "namespace", "pod")


@dataclass(frozen=True)
class Options:
    prometheus_url: str
    kubeconfig: str | None = None
    as_json: bool = False
    window_s: int = 60
    timeout_s: float = 10.0


def take(options: Options, facts: Mapping[str, NodeFacts]) -> Snapshot:
    """Query once and build the snapshot; TelemetryError when Prometheus could not be read."""
    reader = PrometheusReader(options.prometheus_url, timeout_s=options.timeout_s)
    try:
        at = time.time()
        reader.query({"up": "up"}, at=at)  # one error for an unreachable Prometheus, not one per query
        answered, _ = gather(lambda q: reader.query(q, at=at), options.window_s)
    finally:
        reader.close()
    return build([SourceResult(options.prometheus_url, frozenset({"*"}), answered)], facts, {}, HealthPolicy())


def row(d: DeviceSample) -> dict[str, Any]:
    return {"device": d.device_id, "node": d.node, "region": d.region, "class": d.device_class, "model": d.model,
            "utilization": d.utilization, "memory_used_mib": d.memory_used_mib,
            "memory_total_mib": d.memory_total_mib, "temperature_c": d.temperature_c, "power_w": d.power_w,
            "health": d.health.value, "reason": d.reason, "namespace": d.namespace, "pod": d.pod}


def report_lines(snapshot: Snapshot) -> list[str]:
    out = []
    for name, region in sorted(snapshot.regions.items()):
        counts = ", ".join(f"{n} {h.value}" for h, n in sorted(region.devices.items(), key=lambda kv: kv[0].value))
        out.append(f"region {name}: telemetry {region.availability.value}"
                   + (f" ({region.message})" if region.message else "") + (f"; devices: {counts}" if counts else ""))
    for name, rep in snapshot.reports.items():
        out.append(f"{name}: {rep.missing_labels} series without a device or node label, {rep.duplicates} "
                   f"duplicates, {rep.bad_values} non-numbers, {rep.unresolved_nodes} unresolved host labels, "
                   f"{rep.uncollected} not-collected values, {rep.pod_changes} pod changes in the window, "
                   f"{rep.shared} devices shared by several pods")
        out += [f"  {note}" for note in rep.notes]
    if snapshot.exporters_down:
        out.append(f"exporters down (up == 0): {', '.join(sorted(snapshot.exporters_down))}")
    return out


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}" if value != int(value) else f"{value:.0f}"
    return str(value)


def table(rows: list[dict[str, Any]]) -> str:
    columns = ("device", "node", "region", "class", "utilization", "memory_used_mib", "memory_total_mib",
               "temperature_c", "power_w", "health", "reason", "namespace", "pod")
    headers = ("DEVICE", "NODE", "REGION", "CLASS", "UTIL%", "MEM USED", "MEM TOTAL", "TEMP", "POWER", "HEALTH",
               "REASON", "NAMESPACE", "POD")
    cells = [headers] + [tuple(_cell(r[c]) for c in columns) for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in cells)


def run(options: Options, out: TextIO | None = None, err: TextIO | None = None,
        read_fleet: Callable[[str], Fleet] | None = None) -> int:
    """`read_fleet` reads the kubeconfig's cluster (`kube.fleet.read_fleet`, passed in by the CLI)."""
    out, err = out or sys.stdout, err or sys.stderr
    facts: dict[str, NodeFacts] = {}
    if options.kubeconfig and read_fleet is not None:
        try:
            facts = node_facts(read_fleet(options.kubeconfig))
        except Exception as exc:  # noqa: BLE001 - any failure to use the kubeconfig is reported, not raised
            print(f"heterojob telemetry snapshot: cannot read Nodes with --kubeconfig {options.kubeconfig}: "
                  f"{' '.join(str(exc).split())[:300]}", file=err)
            return 3
    try:
        snapshot = take(options, facts)
    except TelemetryError as exc:
        why = str(exc)
        if why.startswith("cannot reach Prometheus"):  # the connection itself failed: the details are noise
            why = "cannot reach Prometheus: connection failed"
        print(f"heterojob telemetry snapshot: Prometheus at {options.prometheus_url} could not be read ({why}); "
              "check --prometheus-url and that Prometheus is up (GET /-/ready)", file=err)
        return 2
    rows = [row(d) for _, d in sorted(snapshot.devices.items())]
    if options.as_json:
        json.dump(rows, out, indent=1)
        out.write("\n")
        for line in report_lines(snapshot):
            print(line, file=err)
    else:
        print(table(rows) if rows else "no device series found", file=out)
        print("", file=out)
        for line in report_lines(snapshot):
            print(line, file=out)
    return 0
