"""The console's one vocabulary: every headline figure, computed in one place from the same objects.

Pages only format what these functions return; each figure's definition is its tooltip (`HELP`), so a
number means the same on the Overview, the Devices and the Jobs page, and what kubectl would give.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

HELP = {
    "accelerators": "GPUs and NPUs: the sum over Nodes of status.allocatable of their AcceleratorClass's "
                    "resource (nvidia.com/gpu, huawei.com/Ascend910). CPU cores are counted apart.",
    "allocated": "Accelerators held by pods / accelerators: what the scheduled, non-terminated pods request "
                 "of each node's class resource (kubectl describe node: Allocated resources).",
    "cpu": "CPU cores of the cpu-class nodes held by pods / their allocatable cores.",
    "utilization": "What the exporters measure (DCGM_FI_DEV_GPU_UTIL, npu_chip_info_utilization), averaged "
                   "over the accelerators that report now; devices without data are left out, never taken as 0.",
    "reporting": "Accelerators of existing Nodes with a sample in this read of Prometheus, their exporter up "
                 "(not those behind an exporter that is down, nor a device whose series vanished); at most the "
                 "accelerators the Nodes declare (status.capacity: a failed one too, which `Accelerators`, counting "
                 "allocatable, leaves out once its device plugin reports it unhealthy).",
    "failed": "Accelerators whose exporter reports a fault (fatal XID, NPU health unhealthy), or whose series "
              "vanished while their node's exporter still reports (fell off the bus).",
    "degraded": "Accelerators that work but need attention (over the temperature limit, non-fatal errors).",
    "unknown": "Accelerators the Nodes declare but no exporter reports (no telemetry is not a fault), and "
               "reporting ones whose health the exporter cannot tell; a device whose series vanished counts "
               "as failed instead.",
    "nodes": "Nodes Ready and schedulable (not cordoned) / all Nodes. The nodes of a member cluster that does "
             "not answer count as not ready (as the operator sees them), not as gone; a member that has not "
             "answered since the console started is named under the figure, its nodes unknown.",
    "jobs_running": "HeteroJobs in phase Running (kubectl get hj -A).",
    "jobs_waiting": "HeteroJobs waiting for room: no placement, phase new, Pending, Preempted, or Migrating/Resizing "
                    "between two placements, with a spec the operator can read (the jobs it plans).",
}


@dataclass(frozen=True)
class Capacity:
    accelerators: int
    accelerators_held: int
    gpus: int
    npus: int
    cpu_cores: int
    cpu_held: int
    nodes: int
    nodes_ready: int
    nodes_unreachable: int = 0  # in member clusters that do not answer now (counted, not ready)
    declared: int = 0  # accelerators the Nodes' status.capacity declares, failed ones too (what reports count against)

    @property
    def allocated_pct(self) -> float | None:
        return 100 * self.accelerators_held / self.accelerators if self.accelerators else None

    @property
    def cpu_pct(self) -> float | None:
        return 100 * self.cpu_held / self.cpu_cores if self.cpu_cores else None


def capacity(nodes: pd.DataFrame) -> Capacity:
    acc = nodes[nodes["kind"] == "accelerator"]
    cpu = nodes[nodes["kind"] == "cpu"]
    return Capacity(
        accelerators=int(acc["capacity"].sum()), accelerators_held=int(acc["held"].sum()),
        gpus=int(acc.loc[acc["resource"] == "nvidia.com/gpu", "capacity"].sum()),
        npus=int(acc.loc[acc["resource"] != "nvidia.com/gpu", "capacity"].sum()),
        cpu_cores=int(cpu["capacity"].sum()), cpu_held=int(cpu["held"].sum()),
        nodes=len(nodes), nodes_ready=int((nodes["ready"] & nodes["schedulable"]).sum()),
        nodes_unreachable=int(nodes["unreachable"].fillna(False).astype(bool).sum()) if "unreachable" in nodes else 0,
        declared=int(acc["declared"].where(acc["declared"].notna(), acc["capacity"]).sum()) if "declared" in acc
        else int(acc["capacity"].sum()))


@dataclass(frozen=True)
class FleetHealth:
    reporting: int
    utilization: float | None  # mean over reporting devices
    failed: int
    degraded: int
    unknown: int  # declared, not reporting


def health(devices: pd.DataFrame, accelerators: int, nodes: Iterable[str] | None = None,
           counted: pd.DataFrame | None = None) -> FleetHealth:
    """From the telemetry table (one row per device the monitor lists: `utilization`, `health`, `reporting`),
    counting only devices of `nodes` (the accelerator Nodes that exist; None: every row). `counted`: an aggregate
    read's devices counted per node and not listed (`devices.COUNTED_COLUMNS`: reporting and healthy, how many
    have a utilization and its sum), added in."""
    keep = set(nodes) if nodes is not None else None
    if keep is not None and not devices.empty:
        devices = devices[devices["node"].isin(keep)]
    if counted is not None and keep is not None and not counted.empty:
        counted = counted[counted["node"].isin(keep)]
    now = devices[devices["reporting"].astype(bool)] if not devices.empty else devices
    util = now["utilization"].dropna() if not now.empty else pd.Series(dtype=float)
    counts = devices["health"].value_counts() if not devices.empty else pd.Series(dtype=int)
    # a remembered device is not reporting; a failed one (its series vanished) is counted as failed, not unknown
    silent_failed = int((~devices["reporting"].astype(bool) & (devices["health"] == "failed")).sum()) \
        if not devices.empty else 0
    unknown_now = int((now["health"] == "unknown").sum()) if not now.empty else 0
    reporting, util_n, util_sum = len(now), len(util), float(util.sum()) if len(util) else 0.0
    if counted is not None and not counted.empty:
        reporting += int(counted["devices"].sum())
        util_n += int(counted["util_n"].sum())
        util_sum += float(counted["util_sum"].sum())
    return FleetHealth(reporting=reporting, utilization=util_sum / util_n if util_n else None,
                       failed=int(counts.get("failed", 0)), degraded=int(counts.get("degraded", 0)),
                       unknown=max(0, accelerators - reporting - silent_failed) + unknown_now)


def by_region(nodes: pd.DataFrame, regions: pd.DataFrame) -> pd.DataFrame:
    """region -> accelerators, held, allocated %, cpu cores; every Region on the map, even empty ones."""
    acc = nodes[nodes["kind"] == "accelerator"]
    per = acc.groupby("region").agg(accelerators=("capacity", "sum"), held=("held", "sum"))
    mix = acc.groupby(["region", "class"])["capacity"].sum().reset_index()
    mix_text = mix.groupby("region").apply(lambda g: ", ".join(f"{c} {n}" for c, n in zip(g["class"], g["capacity"])),
                                           include_groups=False).rename("mix")
    cpu = nodes[nodes["kind"] == "cpu"].groupby("region")["capacity"].sum().rename("cpu_cores")
    out = regions.set_index("region").join(per, how="outer").join(mix_text).join(cpu)
    out = out.fillna({"accelerators": 0, "held": 0, "cpu_cores": 0, "mix": ""})
    out["allocated_pct"] = (100 * out["held"] / out["accelerators"].where(out["accelerators"] > 0)).round(0)
    return out.reset_index().rename(columns={"index": "region"})


def members_unknown(members: pd.DataFrame) -> list[str]:
    """Member clusters that do not answer and never did since the console started: their nodes are unknown."""
    if members.empty:
        return []
    return sorted(members.loc[~members["reachable"].astype(bool) & members["seen"].isna(), "member"])


def nodes_note(cap: Capacity, unknown: list[str]) -> str | None:
    """What "Nodes ready" leaves unsaid, short enough for the tile (the Overview's warnings say it in full):
    nodes counted not ready because their member cluster is unreachable, members whose nodes are unknown."""
    parts = []
    if cap.nodes_unreachable:
        parts.append(f"{cap.nodes_unreachable} unreachable")
    if unknown:
        parts.append(f"? in {', '.join(unknown)}")
    return " · ".join(parts) or None


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"
