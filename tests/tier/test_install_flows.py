"""Install and first jobs, on both sites (tests/tier/conftest.py): README's install lines as written, every example
job to Running under the operator's own account, each first gang made at its first attempt."""

from __future__ import annotations

import pytest
import yaml

from heterojob.sim.cluster.nodes import node
from tests.harness.test_install import readme_install_lines
from tests.tier.conftest import ROOT, Flow, Site

pytestmark = pytest.mark.tier


def test_readme_install_lines_pass_in_order(site: Site) -> None:
    lines = readme_install_lines()
    assert [line for line, _ in site.installed] == lines
    for line, done in site.installed:
        assert done.returncode == 0, f"{line}: {done.stdout}{done.stderr}"
    assert "llama-finetune" in site.installed[-1][1].stdout  # `kubectl get heterojob-all -A` lists the job


def test_every_example_job_runs_with_its_first_gang(flow: Flow) -> None:
    """The examples as a user applies them (to namespaces of this test), on nodes that fit them; the operator
    under its shipped role places each, its pods (made as the job's own ServiceAccount) are bound by the cluster's
    scheduler and run; nothing is refused on the way (every gang is generation 1, no PodsRefused Event)."""
    a, b = flow.namespace("team-a"), flow.namespace("team-b")
    flow.nodes([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)]
               + [node(f"a910-{i}", "cn-hohhot", "ascend-910b") for i in range(2)]
               + [node("cpu-0", "cn-east", "cpu")])
    jobs = []
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "HeteroJob":
                ns = {"team-a": a, "team-b": b}[doc["metadata"]["namespace"]]
                flow.create_job(doc["metadata"]["name"], doc["spec"], ns)
                jobs.append((doc["metadata"]["name"], ns))
    assert len(jobs) == 3
    flow.operator()
    for name, ns in jobs:
        flow.phase(name, ns, "Running", timeout=90)
    for name, ns in jobs:
        pods = flow.pods(name, ns)
        assert pods and all(p.status.phase == "Running" and p.spec.node_name for p in pods)
        assert {p.metadata.labels["heterojob.io/generation"] for p in pods} == {"1"}, name
        assert all(p.spec.service_account_name == f"{name}-heterojob" for p in pods)
        reasons = [e.reason for e in flow.events(name, ns)]
        assert "PodsRefused" not in reasons, (name, reasons)
        s = flow.status(name, ns)
        assert s["placement"]["generation"] == 1 and not s.get("backoff")
        conditions = {c["type"]: c for c in s["conditions"]}
        assert conditions.get("PodsCreated", {}).get("status", "True") == "True"
        assert conditions["Admitted"]["status"] == "True" and conditions["Ready"]["status"] == "True"
