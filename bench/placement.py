"""1,000 pending jobs onto 10,000 devices (1,250 nodes, 5 regions, 4 classes), against first-fit.

The engine places the queue in priority order with its full pipeline (software, region, quota and
capacity filters; preference, throughput, packing, balance and preferred-region scorers; best-fit
packing). The baseline, on the same input and in the same order, takes the first alternative and the
first region (by name) where the gang fits, each replica on the first node (by name) with room.
The fleet is mid-life: a third of the nodes already run something (1 to 7 devices used), as after
hours of churn; the queue asks for about 80% of the free devices (a busy but not saturated fleet), so
packing decides how many jobs fit and how many whole nodes stay free for the next large gang. Seeded: every run is the same.

Per-node software checks are on: every node publishes its own driver/CUDA (or driver/CANN) versions, a
class mixes stacks (a fleet mid-upgrade: about one node in four runs an older stack), and about half of the
jobs require a version range (`cuda >=12.4`, `driver >=550`, `cann >=8.0.0`); the baseline honours the same
requirements per node. `--no-software` drops them (the pre-issue-21 workload).

fragmentation = free devices stranded on partly used nodes (room a whole-node replica cannot use).
Last line: one JSON object. Targets (issue 4): wall_s <= 2, rss_mb <= 200, placed >= baseline_placed,
fragmentation < baseline_fragmentation.
"""

from __future__ import annotations

import json
import random
import resource
import sys
import time


from heterojob.engine.basics import versions
from heterojob.engine.capacity.fleet import DeviceClass, Fleet, Node
from heterojob.engine.placing.placement import Alternative, Request, schedule

REGIONS = ("cn-east", "cn-north", "eu-west", "us-west", "ap-south")
# class -> (nodes per region, throughput); 8 devices per node; 250 nodes per region
CLASSES = {"nvidia-h100": (80, 1.0), "nvidia-a100": (60, 0.45), "ascend-910b": (70, 0.6), "nvidia-l40s": (40, 0.35)}
RESOURCE = {"nvidia-h100": "nvidia.com/gpu", "nvidia-a100": "nvidia.com/gpu", "nvidia-l40s": "nvidia.com/gpu",
            "ascend-910b": "huawei.com/Ascend910"}
JOBS = 1000
DEVICES_PER_NODE = 8
SOFTWARE = "--no-software" not in sys.argv
# class -> stacks its nodes run (the first three quarters run the first; the rest one of the others)
STACKS = {
    "nvidia-h100": [{"driver": "550.54.15", "cuda": "12.4"}, {"driver": "535.183.06", "cuda": "12.2"},
                    {"driver": "560.35.03", "cuda": "12.6"}],
    "nvidia-a100": [{"driver": "550.54.15", "cuda": "12.4"}, {"driver": "535.161.08", "cuda": "12.2"}],
    "nvidia-l40s": [{"driver": "550.107.02", "cuda": "12.4"}, {"driver": "535.183.06", "cuda": "12.2"}],
    "ascend-910b": [{"driver": "24.1.0", "cann": "8.0.0"}, {"driver": "24.1.rc2", "cann": "8.0.RC3"}],
}
NEEDS = [{"cuda": ">=12.4"}, {"driver": ">=550"}, {"cuda": ">=12.4, <13"}]
NPU_NEEDS = [{"cann": ">=8.0.0"}, {"cann": ">=8.0.RC1"}]


def fleet(seed: int = 7) -> Fleet:
    rng = random.Random(seed)
    classes = {name: DeviceClass(name, RESOURCE[name], {"class": name}, throughput,
                                 STACKS[name][0] if SOFTWARE else {})
               for name, (_, throughput) in CLASSES.items()}
    soft = random.Random(seed + 1)
    nodes = {}
    for region in REGIONS:
        for name, (count, _) in CLASSES.items():
            for i in range(count):
                n = f"{region}-{name}-{i:03d}"
                stack = STACKS[name][0] if soft.random() < 0.75 else soft.choice(STACKS[name][1:])
                nodes[n] = Node(n, {"class": name, "topology.kubernetes.io/region": region},
                                {RESOURCE[name]: DEVICES_PER_NODE}, software=stack if SOFTWARE else {})
    used = {(n, next(iter(nodes[n].allocatable))): rng.randint(1, 7) for n in sorted(nodes) if rng.random() < 1 / 3}
    return Fleet(nodes, classes, used=used)


def jobs(seed: int = 42) -> list[Request]:
    rng = random.Random(seed)
    soft = random.Random(seed + 1)
    out = []
    for j in range(JOBS):
        replicas = rng.choices([1, 2, 4], [0.6, 0.3, 0.1])[0]
        per = rng.choices([1, 2, 4, 8], [0.15, 0.2, 0.3, 0.35])[0]
        alts = rng.sample(list(CLASSES), rng.choices([1, 2, 3], [0.3, 0.5, 0.2])[0])
        preferred = tuple(rng.sample(REGIONS, 1)) if rng.random() < 0.4 else ()
        needs = soft.random() < 0.5 and SOFTWARE
        out.append(Request(f"team-{j % 9}/job-{j:04d}",
                           [Alternative(a, per, (soft.choice(NPU_NEEDS) if a.startswith("ascend") else soft.choice(NEEDS))
                                        if needs else {}) for a in alts], replicas,
                           preferred_regions=preferred, priority=rng.choices([3, 2, 1, 0], [0.1, 0.3, 0.4, 0.2])[0],
                           created=float(j)))
    return out


def meets(node: Node, requires: dict[str, str]) -> bool:
    return all(versions.check(k, node.software.get(k), v) is None for k, v in requires.items())


def first_fit(requests: list[Request], f: Fleet) -> dict[str, dict[str, int]]:
    """job -> node -> devices, the simple way (nodes that fail a job's software requirement are skipped)."""
    used: dict[str, int] = {n: c for (n, _), c in f.used.items()}
    by_class_region: dict[tuple[str, str], list[str]] = {}
    for node in sorted(f.nodes.values(), key=lambda n: n.name):
        by_class_region.setdefault((node.labels["class"], node.region or ""), []).append(node.name)
    out = {}
    for r in sorted(requests, key=lambda r: r.order):
        for alt in r.alternatives:
            placed = None
            for region in sorted(REGIONS):
                trial: dict[str, int] = {}
                for _ in range(r.replicas):
                    node = next((n for n in by_class_region[(alt.device_class, region)]
                                 if DEVICES_PER_NODE - used.get(n, 0) - trial.get(n, 0) >= alt.per_replica
                                 and meets(f.nodes[n], dict(alt.requires))), None)
                    if node is None:
                        break
                    trial[node] = trial.get(node, 0) + alt.per_replica
                if sum(trial.values()) == r.replicas * alt.per_replica:
                    placed = trial
                    break
            if placed is not None:
                for n, c in placed.items():
                    used[n] = used.get(n, 0) + c
                out[r.job] = placed
                break
    return out


def fragmentation(per_node_used: dict[str, int]) -> int:
    return sum(DEVICES_PER_NODE - u for u in per_node_used.values() if 0 < u < DEVICES_PER_NODE)


def main() -> int:
    f = fleet()
    requests = jobs()
    demand = sum(r.replicas * r.alternatives[0].per_replica for r in requests)

    started, cpu_started = time.perf_counter(), time.process_time()
    results = schedule(requests, f)
    wall_s = time.perf_counter() - started
    cpu_s = time.process_time() - cpu_started  # on a shared machine, the steadier figure
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ours: dict[str, int] = {n: c for (n, _), c in f.used.items()}
    for result in results.values():
        if result.chosen is not None:
            for n, c in result.chosen.per_node.items():
                ours[n] = ours.get(n, 0) + c
    placed = sum(1 for r in results.values() if r.chosen is not None)

    t0 = time.perf_counter()
    baseline = first_fit(requests, f)
    baseline_s = time.perf_counter() - t0
    theirs: dict[str, int] = {n: c for (n, _), c in f.used.items()}
    for per_node in baseline.values():
        for n, c in per_node.items():
            theirs[n] = theirs.get(n, 0) + c

    result = {
        "jobs": len(requests), "devices": len(f.nodes) * DEVICES_PER_NODE,
        "free_devices": len(f.nodes) * DEVICES_PER_NODE - sum(f.used.values()), "demand_devices": demand,
        "wall_s": round(wall_s, 3), "cpu_s": round(cpu_s, 3), "rss_mb": round(rss_mb, 1), "placed": placed,
        "devices_used": sum(ours.values()), "fragmentation": fragmentation(ours),
        "whole_nodes_free": sum(1 for n in f.nodes if not ours.get(n)),
        "baseline_whole_nodes_free": sum(1 for n in f.nodes if not theirs.get(n)),
        "baseline_wall_s": round(baseline_s, 3), "baseline_devices_used": sum(theirs.values()),
        "baseline_placed": len(baseline), "baseline_fragmentation": fragmentation(theirs),
        "software_checks": SOFTWARE,
        "jobs_with_requirements": sum(1 for r in requests if any(a.requires for a in r.alternatives)),
        "targets": {"wall_s": 2.0, "rss_mb": 200},
    }
    result["meets_targets"] = (wall_s <= 2.0 and rss_mb <= 200 and placed >= len(baseline)
                               and result["fragmentation"] < result["baseline_fragmentation"])
    print(json.dumps(result))
    return 0 if result["meets_targets"] else 1


if __name__ == "__main__":
    sys.exit(main())
