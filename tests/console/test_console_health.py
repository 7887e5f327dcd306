"""The health tiles count what exists and reports now (kpis.health), not every device the monitor remembers."""

from __future__ import annotations

import pandas as pd

from heterojob_console import kpis
from heterojob_console.devices import COLUMNS


def table(*rows: tuple[str, str, float | None, str, bool]) -> pd.DataFrame:
    return pd.DataFrame([{"device": d, "node": n, "utilization": u, "health": h, "reporting": r}
                         for d, n, u, h, r in rows], columns=COLUMNS)


def test_reporting_leaves_out_remembered_devices_and_devices_of_nodes_that_are_gone() -> None:
    """g0 reports 2 GPUs (one fell off the bus: its series vanished, the monitor keeps it as failed); g1's
    exporter is down (up == 0): its 2 GPUs are remembered as unknown; old0 is a Node that no longer exists."""
    devices = table(("a", "g0", 40.0, "healthy", True), ("b", "g0", None, "failed", False),
                    ("c", "g1", 90.0, "unknown", False), ("d", "g1", 90.0, "unknown", False),
                    ("e", "old0", 10.0, "healthy", True))
    health = kpis.health(devices, accelerators=4, nodes=["g0", "g1"])
    assert health.reporting == 1  # not 5: only a's sample is of this read, from an exporter that is up
    assert health.utilization == 40.0  # the down exporter's last samples are not averaged in
    assert health.failed == 1 and health.degraded == 0
    assert health.unknown == 2  # g1's two; b is counted as failed, not also as unknown
    assert health.reporting + health.failed + health.unknown == 4  # each declared accelerator once


def test_every_row_counts_without_a_node_list_and_an_empty_table_is_all_unknown() -> None:
    devices = table(("a", "g0", 50.0, "healthy", True), ("b", "g0", 70.0, "degraded", True))
    assert kpis.health(devices, accelerators=3) == kpis.FleetHealth(reporting=2, utilization=60.0, failed=0,
                                                                    degraded=1, unknown=1)
    assert kpis.health(table(), accelerators=3) == kpis.FleetHealth(0, None, 0, 0, 3)


def test_a_failed_gpu_still_reporting_is_counted_against_what_the_node_declares_not_its_allocatable() -> None:
    """A GPU with a fatal XID leaves the Node's allocatable (its device plugin reports it unhealthy: 8 -> 7) but its
    exporter still reports it: Reporting stays within what the Nodes declare (status.capacity, 8), and no
    accelerator is both failed and unknown (the console showed Accelerators 302, Reporting 304)."""
    from heterojob_console.data import NODE_COLUMNS

    nodes = pd.DataFrame([{**{c: "" for c in NODE_COLUMNS}, "node": "g0", "kind": "accelerator",
                           "resource": "nvidia.com/gpu", "capacity": 7, "declared": 8, "held": 0, "ready": True,
                           "schedulable": True, "unreachable": False}], columns=NODE_COLUMNS)
    cap = kpis.capacity(nodes)
    assert (cap.accelerators, cap.declared) == (7, 8)
    devices = table(*((f"gpu{i}", "g0", 50.0, "failed" if i == 0 else "healthy", True) for i in range(8)))
    health = kpis.health(devices, cap.declared, ["g0"])
    assert health.reporting == 8 <= cap.declared and health.failed == 1 and health.unknown == 0
