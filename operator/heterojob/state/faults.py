"""What placement's health filter reads of the fleet (pure): per node, the failed, overheating and network-down
devices the monitor's last telemetry snapshot shows and the firing alerts name, merged into `Faults`.

A device both sources name counts once (alerts name it as the snapshot does: `alerts.mapping.device_of`); an
alert naming no device (`""`, e.g. the shipped `HeteroJobDeviceVanished`, `count by (node)`) means "at least one":
it counts one only on a node where neither the snapshot nor another alert names a failed device. How placement
uses each: `engine.capacity.fleet.Fleet.keep_off` (failed, overheating) and `engine.placing.placement.place` (network down, for
gangs of more than one replica).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from heterojob.engine.capacity.fleet import Failed
from heterojob.telemetry.snapshot import Snapshot


@dataclass(frozen=True)
class Faults:
    unhealthy: Mapping[str, str] = field(default_factory=dict)  # node -> why nothing new goes there
    failed: Mapping[str, Failed] = field(default_factory=dict)  # node -> its failed devices
    network_down: Mapping[str, str] = field(default_factory=dict)  # node -> a chip whose network is down


NONE = Faults()


def faults(snapshot: Snapshot | None, dead: Mapping[str, Mapping[str, str]] | None = None,
           hot: Mapping[str, str] | None = None) -> Faults:
    """`dead`: node -> device ("" none named) -> why, firing alerts saying a device is dead; `hot`: node -> why,
    firing alerts asking to move off a node (an overheating device). A failed device whose series vanished counts
    only while its node's capacity still includes it (`engine.capacity.fleet.Failed.counted`)."""
    dead, hot = dead or {}, hot or {}
    if snapshot is None and not dead and not hot:
        return NONE
    failed_ids: dict[str, set[str]] = {}
    why: dict[str, str] = {}
    fell_off: dict[str, int] = {}
    if snapshot is not None:
        for node, ids in snapshot.failed_devices.items():
            failed_ids[node] = set(ids)
            why[node] = snapshot.failed_nodes.get(node, "")
            fell_off[node] = len(ids & snapshot.vanished_devices.get(node, frozenset()))
    unnamed: set[str] = set()  # nodes an alert naming no device says have at least one dead device
    for node, devices in dead.items():
        failed_ids.setdefault(node, set()).update(d for d in devices if d)
        if "" in devices:
            unnamed.add(node)
        why.setdefault(node, next(iter(devices.values()), ""))
    unhealthy = {**hot, **(snapshot.hot_nodes if snapshot is not None else {})}
    return Faults(unhealthy=unhealthy,
                  failed={node: Failed(max(len(ids), int(node in unnamed)), why.get(node) or "failed device",
                                       fell_off.get(node, 0), snapshot.reported.get(node, 0) if snapshot else 0)
                          for node, ids in failed_ids.items()},
                  network_down=dict(snapshot.network_down) if snapshot is not None else {})
