"""What the snapshot joins to each device: its node's region, class and device count, from the fleet."""

from __future__ import annotations

from heterojob.engine.capacity.fleet import Fleet
from heterojob.telemetry.snapshot import NodeFacts


def node_facts(fleet: Fleet) -> dict[str, NodeFacts]:
    """Region, class and device count of every Node of `fleet`."""
    out = {}
    for name, node in fleet.nodes.items():
        cls = fleet.class_of(node)
        out[name] = NodeFacts(region=fleet.region_of(node), device_class=cls.name if cls else None,
                              devices=node.allocatable.get(cls.resource_name, 0) if cls else 0,
                              addresses=node.addresses)
    return out
