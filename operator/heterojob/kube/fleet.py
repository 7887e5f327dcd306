"""The fleet of the cluster a kubeconfig names, read once (tools such as `heterojob telemetry snapshot`)."""

from __future__ import annotations

from typing import Any

from heterojob import constants, defaults
from heterojob.engine.capacity.fleet import Fleet
from heterojob.kube import convert


def read_fleet(kubeconfig: str) -> Fleet:
    """Nodes, with the AcceleratorClass and Region objects when the CRDs are installed, else the built-in
    defaults."""
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=kubeconfig)
    nodes = api_client.sanitize_for_serialization(client.CoreV1Api(api_client).list_node().items)
    custom = client.CustomObjectsApi(api_client)

    def listed(plural: str, kind: str) -> list[dict[str, Any]]:
        try:
            found = custom.list_cluster_custom_object(constants.GROUP, constants.VERSION, plural)
        except client.ApiException:
            found = {}
        items = found.get("items") if isinstance(found, dict) else None
        return items or [o for o in defaults.all_objects() if o.get("kind") == kind]

    classes = {c.name: c for o in listed("acceleratorclasses", "AcceleratorClass")
               if (c := convert.device_class(o)) is not None}
    regions = {r.name: r for o in listed("regions", "Region") if (r := convert.region_info(o)) is not None}
    return Fleet(nodes={n["metadata"]["name"]: convert.node_view(n) for n in nodes}, classes=classes,
                 regions=regions)
