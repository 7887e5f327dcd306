"""What the demo seeds (one step of `heterojob demo`): its regions and nodes, the teams' namespaces and
quotas, the showcase jobs copied from examples/, one job per member region, the random workload's mix, and
which regions are member clusters (`--members`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import kubernetes

from heterojob.constants import API_VERSION
from heterojob.controller.discovery import DiscoveryConfig
from heterojob.sim.cluster.harness import apply, seed
from heterojob.sim.cluster.nodes import node

NAMESPACES = ("team-a", "team-b", "team-c")
OPERATOR_NAMESPACE = DiscoveryConfig().namespace  # the operator's own (heterojob-system), as installed

# region -> (device class, node count): eleven sites, 42 nodes (304 accelerators, 256 CPU cores), light
# enough for CI. The eastern cities run NVIDIA, the western hubs mostly Ascend, some mix both.
FLEET: dict[str, list[tuple[str, int]]] = {
    "cn-north": [("nvidia-h100", 4), ("nvidia-a100", 2), ("cpu", 2)],
    "cn-east": [("nvidia-h100", 4), ("nvidia-a100", 2), ("cpu", 2)],
    "cn-zhangjiakou": [("nvidia-a100", 2), ("ascend-910b", 2)],
    "cn-hohhot": [("ascend-910b", 3)],
    "cn-wuhu": [("nvidia-h100", 2), ("ascend-910b", 1)],
    "cn-shaoguan": [("nvidia-a100", 2), ("ascend-910b", 2)],
    "cn-chengdu": [("ascend-910b", 3)],
    "cn-chongqing": [("nvidia-a100", 2)],
    "cn-guiyang": [("ascend-910b", 3)],
    "cn-qingyang": [("ascend-910b", 2)],
    "cn-zhongwei": [("nvidia-h100", 2)],
}

# A realistic mix: (weight, device alternatives, replicas, per replica, priority)
MIX: list[tuple[int, list[str], int, int, str]] = [
    (4, ["nvidia-h100", "ascend-910b"], 2, 8, "high"),
    (3, ["nvidia-a100", "nvidia-h100"], 1, 4, "medium"),
    (3, ["ascend-910b"], 2, 8, "medium"),
    (2, ["nvidia-h100"], 4, 8, "urgent"),
    (3, ["cpu"], 1, 16, "low"),
]

# The workload generator pauses while this many jobs wait: a job every 8 s running 60-600 s offers about 1.7x
# the fleet's accelerators, so an open loop grows the queue without bound (and preempts the showcase jobs).
WAITING_CAP = 6


def waiting(jobs: Iterable[Mapping[str, Any]]) -> int:
    """Jobs not placed: new (no phase yet), Pending or Preempted."""
    return sum(1 for j in jobs if ((j.get("status") or {}).get("phase") or "Pending") in ("Pending", "Preempted"))


# Member clusters of the default demo: three western hub sites, one region each (a Region names one member);
# the eastern regions stay in the manager's own cluster. A member lost for DEMO_LOSS_TIMEOUT_S (SIGSTOP its
# emulator: `kill -STOP <pid in members/<region>/pid>`) has its jobs placed again elsewhere.
DEFAULT_MEMBERS = ("cn-chengdu", "cn-guiyang", "cn-zhongwei")
DEMO_LOSS_TIMEOUT_S = 60

SHOWCASE_PREFIX = "showcase-"  # the demo's copies of examples/ jobs: applying examples/ never overwrites them
FOREVER = str(10 * 365 * 24 * 3600)  # a showcase job's simulated run time: it runs until the demo stops


def quota(namespace: str) -> dict[str, Any]:
    """Each team may hold 64 H100s anywhere and 160 accelerators of any class in all (CPU cores are not counted)."""
    return {"apiVersion": API_VERSION, "kind": "HeteroQuota",
            "metadata": {"name": f"demo-{namespace}", "namespace": namespace},
            "spec": {"limits": [{"deviceClass": "nvidia-h100", "region": "*", "devices": 64},
                                {"deviceClass": "*", "region": "*", "devices": 160}]}}


def showcase(doc: dict[str, Any]) -> dict[str, Any]:
    """An examples/ job as the demo seeds it: renamed, and simulated to run until the demo stops."""
    job = json.loads(json.dumps(doc))
    job["metadata"]["name"] = SHOWCASE_PREFIX + job["metadata"]["name"]
    for container in ((job["spec"].get("template") or {}).get("spec") or {}).get("containers") or []:
        env = [e for e in container.get("env") or [] if e.get("name") != "HETEROJOB_SIM_DURATION"]
        container["env"] = env + [{"name": "HETEROJOB_SIM_DURATION", "value": FOREVER}]
    return job


def site_job(region: str) -> dict[str, Any]:
    """One job per member that prefers it, so each member's `kubectl get pods -A` shows a job's pods there."""
    cls = FLEET[region][0][0]
    return {"apiVersion": API_VERSION, "kind": "HeteroJob",
            "metadata": {"name": f"{SHOWCASE_PREFIX}{region}", "namespace": "team-c"},
            "spec": {"priority": "medium", "replicas": {"min": 1},
                     "devices": [{"deviceClass": cls, "perReplica": 16 if cls == "cpu" else 8}],
                     "regions": {"preferred": [region]}, "policy": {"allowCrossRegion": True},
                     "template": {"spec": {"containers": [{"name": "main", "image": "example/train:latest",
                                                           "env": [{"name": "HETEROJOB_SIM_DURATION",
                                                                    "value": FOREVER}]}]}}}}


def parse_members(text: str | None) -> tuple[str, ...]:
    """`--members`: comma-separated regions of FLEET, or "none" (one cluster); None: DEFAULT_MEMBERS."""
    if text is None:
        return DEFAULT_MEMBERS
    if text.strip().lower() in ("none", ""):
        return ()
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in FLEET]
    if unknown:
        raise ValueError(f"--members: {', '.join(unknown)} not a demo region; choose among {', '.join(FLEET)} "
                         "(or 'none' for one cluster)")
    return names


def prepare(api: kubernetes.client.ApiClient, members: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Seed the demo's (manager) cluster: CRDs, default classes and regions, the teams' namespaces and quotas, the
    operator's namespace (the compute-discovery report and its Events live there) and the nodes of the regions
    that are not `members`; those nodes."""
    local = fleet_nodes(tuple(r for r in FLEET if r not in members))
    seed(api, namespaces=(*NAMESPACES, OPERATOR_NAMESPACE), nodes=local)
    apply(api, [quota(ns) for ns in NAMESPACES])
    return local


def fleet_nodes(regions: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """The demo's nodes (of `regions` only, when given)."""
    nodes = []
    for region, groups in FLEET.items():
        if regions is not None and region not in regions:
            continue
        for cls, count in groups:
            for i in range(count):
                nodes.append(node(f"{region}-{cls}-{i:02d}", region, cls, stack=i))  # mixed drivers
    return nodes
