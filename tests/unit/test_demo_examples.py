"""Every examples/ job the demo seeds (as showcase-<name>) fits the demo's empty fleet: its allowed
regions hold enough nodes of one of its device classes for the whole gang, one replica per node share."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from heterojob.sim.demo.fleet import FLEET, fleet_nodes

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RESOURCE = {"nvidia-h100": "nvidia.com/gpu", "nvidia-a100": "nvidia.com/gpu",
            "ascend-910b": "huawei.com/Ascend910", "cpu": "cpu"}  # manifests/defaults/accelerator-classes.yaml


def jobs() -> list[tuple[str, dict]]:
    found = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "HeteroJob":
                found.append((path.name, doc))
    return found


def replicas_that_fit(region: str, cls: str, per_replica: int) -> int:
    fit = 0
    for n in fleet_nodes((region,)):
        if n["metadata"]["name"].startswith(f"{region}-{cls}-"):
            fit += int(n["status"]["allocatable"].get(RESOURCE[cls], 0)) // per_replica
    return fit


@pytest.mark.parametrize(("name", "job"), jobs(), ids=[n for n, _ in jobs()])
def test_example_job_fits_the_demo_fleet(name: str, job: dict) -> None:
    spec = job["spec"]
    allowed = (spec.get("regions") or {}).get("allowed") or list(FLEET)
    need = (spec.get("replicas") or {}).get("min", 1)  # the CRD default
    best = {(r, d["deviceClass"]): replicas_that_fit(r, d["deviceClass"], d["perReplica"])
            for r in allowed for d in spec["devices"]}
    assert max(best.values()) >= need, f"{name}: room for {best} replicas, needs {need}"


def test_readme_inject_examples_name_demo_nodes() -> None:
    readme = "".join((EXAMPLES.parent / page).read_text() for page in (
        "README.md", "docs/quickstart.md", "docs/multicluster.md"))
    named = re.findall(r"demo inject [a-z-]+ (cn-[a-z0-9-]+)", readme)
    assert named, "docs/quickstart.md shows `heterojob demo inject FAULT NODE`"
    nodes = {n["metadata"]["name"] for n in fleet_nodes()}
    assert set(named) <= nodes, f"not in the demo fleet: {set(named) - nodes}"


def test_workload_pauses_while_the_queue_is_full(tmp_path: Path) -> None:
    from heterojob.sim.demo.fleet import WAITING_CAP, waiting
    from heterojob.sim.demo.run import Demo
    assert waiting([{}, {"status": {"phase": "Pending"}}, {"status": {"phase": "Preempted"}},
                    {"status": {"phase": "Running"}}, {"status": {"phase": "Succeeded"}}]) == 3
    demo = Demo(workdir=tmp_path)
    queue = iter([0, WAITING_CAP, WAITING_CAP + 3, WAITING_CAP - 1, 0])
    submitted: list[str] = []

    def look(api: object) -> int:
        try:
            return next(queue)
        except StopIteration:
            demo._stop.set()
            return WAITING_CAP

    demo._waiting = look  # type: ignore[method-assign]
    demo._submit = lambda api, body: submitted.append(body["metadata"]["name"])  # type: ignore[method-assign]
    demo._workload(None, 0.001)  # type: ignore[arg-type]
    assert len(submitted) == 3  # not while WAITING_CAP or more wait
