"""Member telemetry end to end (docs/multicluster.md, "Telemetry"): two member clusters, each with its own
simulated exporters scraped by its own Prometheus (Debian's `prometheus`, 1 s), named by its Region's
`prometheusURL`, as a site runs the Prometheus next to its nodes. The operator has no Prometheus of its
own (no --prometheus-url): it reads each member's. A fatal XID on a GPU in one member reaches the job in
the manager's status (DevicesHealthy=False naming the device) and moves it to the other member (the
failed member has no other node: a member with room left would keep it, as the planner prefers its
region)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from heterojob.controller.monitor import TelemetryConfig
from heterojob.kube.members import MembersConfig
from heterojob.sim.cluster.harness import Emulator, OperatorRunner
from heterojob.sim.cluster.nodes import node
from heterojob.sim.members import join
from heterojob.sim.telemetry.exporters import ExporterFleet
from heterojob.sim.telemetry.prometheus import PrometheusServer
from heterojob.telemetry.prometheus import PrometheusReader
from tests.conftest import Cluster, eventually
from tests.harness.members import Member

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(os.environ.get("HETEROJOB_SKIP_E2E") == "1",
                                                  reason="HETEROJOB_SKIP_E2E=1")]
SITES = {"cn-wuhu": 1, "cn-zhongwei": 2}  # region -> its 8-GPU nodes: a fault in cn-wuhu leaves no room there
FAST = MembersConfig(poll_seconds=0.5, loss_timeout_s=30.0, request_timeout_s=1.0, secret_refresh_s=2.0,
                     contact_write_s=5.0)


class Site:
    """One member cluster with its nodes' exporters and the Prometheus that scrapes them (and only them)."""

    def __init__(self, region: str, tmp: Any) -> None:
        self.region = region
        self.nodes = [node(f"{region}-h100-{i}", region, "nvidia-h100") for i in range(SITES[region])]
        self.emulator = Emulator().start()
        self.exporters = ExporterFleet(self.nodes, seed=list(SITES).index(region))  # GPU UUIDs differ between sites
        host, port = self.exporters.serve()
        self.prometheus = PrometheusServer(self.exporters.targets(), f"{host}:{port}", scrape_interval_s=1.0,
                                           workdir=tmp / region).start()

    def stop(self) -> None:
        self.prometheus.stop()
        self.exporters.stop()
        self.emulator.stop()


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Site]]:
    out: dict[str, Site] = {}
    try:
        for region in SITES:
            out[region] = Site(region, tmp_path_factory.mktemp("prometheus"))
        yield out
    finally:
        for site in out.values():
            site.stop()


def test_a_gpu_failing_in_one_member_reaches_the_job_in_the_manager_and_moves_it(
        cluster: Cluster, emulator: Emulator, sites: dict[str, Site]) -> None:
    cluster.seed([])
    members: dict[str, Member] = {}
    for region, site in sites.items():
        members[region] = Member(site.emulator)
        join(cluster.api, site.emulator.client(), region, site.emulator.kubeconfig.read_text(), nodes=site.nodes,
             namespaces=("team-a",), prometheus_url=site.prometheus.url)
    # each Prometheus sees its own member's nodes, and only them
    for region, site in sites.items():
        reader = PrometheusReader(site.prometheus.url, timeout_s=3)
        mine = {n["metadata"]["name"] for n in site.nodes}
        try:
            eventually(lambda r=reader, m=mine: {s["metric"].get("node") for s in r.query(
                {"util": "DCGM_FI_DEV_GPU_UTIL"})["util"]} == m, timeout=30, what=f"{region} scraped")
        finally:
            reader.close()

    spec = {"priority": "high", "replicas": {"min": 1}, "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
            "regions": {"preferred": ["cn-wuhu"], "allowed": list(SITES)}, "policy": {"allowCrossRegion": True},
            "checkpoint": {"timeoutSeconds": 600, "storage": "s3://ckpt"},
            "template": {"spec": {"containers": [{"name": "main", "image": "train:cuda12"}]}}}
    telemetry = TelemetryConfig(prometheus_url=None, interval_s=0.5, window_s=3, timeout_s=3)
    with OperatorRunner(emulator.kubeconfig, members=FAST, telemetry=telemetry) as runner:
        cluster.create_job("far", spec)
        [pod] = eventually(lambda: members["cn-wuhu"].pods("far"), what="the pod in cn-wuhu")
        members["cn-wuhu"].core.patch_namespaced_pod_status(pod.metadata.name, "team-a",
                                                             {"status": {"phase": "Running"}})
        eventually(lambda: (cluster.job("far").get("status") or {}).get("phase") == "Running", what="Running")
        [where] = cluster.job("far")["status"]["placement"]["nodes"]
        sites["cn-wuhu"].exporters.bind({where: [("team-a", pod.metadata.name, 8)]})

        def conditions() -> dict[str, dict[str, Any]]:
            return {c["type"]: c for c in (cluster.job("far").get("status") or {}).get("conditions", [])}

        # the member's Prometheus measures the job: utilization and health reach the manager's status
        eventually(lambda: conditions().get("DevicesHealthy", {}).get("status") == "True"
                   and ((cluster.job("far")["status"].get("utilization") or {}).get("average") or 0) > 50,
                   timeout=30, interval=0.3, what="the member's telemetry in the job's status")
        assert conditions()["TelemetryUnavailable"]["status"] == "False"

        sites["cn-wuhu"].exporters.inject("fatal-xid", where, 3, 79)

        def moved() -> dict[str, Any] | None:
            s = cluster.job("far").get("status") or {}
            return s if (s.get("placement") or {}).get("region") == "cn-zhongwei" else None

        s = eventually(moved, timeout=45, interval=0.3, what="moved to the other member after the fault")
        entry = next(h for h in s["history"] if h["action"] == "migrate")
        assert "fatal XID 79" in entry["reason"] and entry["reason"].startswith("deviceFailed: rank 0:")
        assert s["placement"]["cluster"] == "cn-zhongwei"
        eventually(lambda: len(members["cn-zhongwei"].pods("far")) == 1, what="its pod in cn-zhongwei")
        eventually(lambda: not members["cn-wuhu"].pods("far"), timeout=20, what="the old pod removed")
        sites["cn-wuhu"].exporters.clear()
    assert "Traceback" not in runner.output
