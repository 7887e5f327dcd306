"""What admitting a job costs the API server, counted in the emulator's request log."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import unquote

import pytest
import urllib3
from heterojob.constants import LABEL_JOB
from heterojob.sim.cluster.harness import Emulator
from heterojob.sim.cluster.nodes import node

from tests.conftest import Cluster, eventually

pytestmark = pytest.mark.harness

JOBS = ("alpha", "beta", "gamma")


def requests(emulator: Emulator) -> list[tuple[str, str]]:
    log = json.loads(urllib3.request("GET", f"{emulator.url}/_emulator/requests").data)
    return [(method, unquote(path)) for method, path, _, _ in log]


def test_admitting_a_job_reads_nothing_from_the_api_server_and_writes_its_status_once(
        emulator: Emulator, cluster: Cluster, operator: Any) -> None:
    """The pass that places a job reads it from its watch event and its pods from the pods' watch (no GET, no
    list), writes Admitted and creates the gang; the watch events of that status write and of those pods start
    no other pass (each would read the job and its pods again)."""
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(3)])
    for name in JOBS:
        cluster.create_job(name, {"replicas": {"min": 2}, "devices": [{"deviceClass": "nvidia-h100", "perReplica": 1}],
                                  "template": {"spec": {"containers": [{"name": "main", "image": "train:1"}]}}})
        # the namespace's pods, not by the job's label: the operator's own list of its pods is what is counted
        eventually(lambda n=name: sum(p.metadata.labels.get(LABEL_JOB) == n
                                      for p in cluster.core.list_namespaced_pod("team-a").items) == 2,
                   what=f"{name}'s 2 pods")
    time.sleep(1.5)  # the watch events of its writes and pods come, and any pass they start runs
    log = requests(emulator)
    for name in JOBS:
        job = f"/apis/heterojob.io/v1alpha1/namespaces/team-a/heterojobs/{name}"
        calls = {
            "get": sum(1 for m, p in log if m == "GET" and p == job),
            "status writes": sum(1 for m, p in log if m == "PATCH" and p == f"{job}/status"),
            "pod lists": sum(1 for m, p in log if m == "GET" and p.startswith("/api/v1/namespaces/team-a/pods?")
                             and f"labelSelector={LABEL_JOB}={name}" in p),
        }
        assert calls == {"get": 0, "status writes": 1, "pod lists": 0}, (name, calls)


def test_a_resync_round_reads_jobs_from_the_api_server_only_every_tenth_round(
        emulator: Emulator, cluster: Cluster) -> None:
    """Each resync round looks at every running job, on what the watches brought; every tenth round reads each
    from the API server with its pods (the safety net under the informers). Every round used to: at 5,000
    running jobs and 50 a second, a round took 100 s, so the operator made 100 API calls a second for it
    without pause."""
    from heterojob.sim.cluster.harness import OperatorRunner

    cluster.seed([node("h100-0", "cn-east", "nvidia-h100")])
    with OperatorRunner(emulator.kubeconfig, resync_seconds=0.25):
        cluster.create_job("steady", {"replicas": {"min": 1}, "devices": [{"deviceClass": "nvidia-h100",
                                                                             "perReplica": 1}],
                                      "template": {"spec": {"containers": [{"name": "main", "image": "train:1"}]}}})
        pods = eventually(lambda: (p := cluster.pods("steady")) and p, what="its pod")
        cluster.set_pod_phase(pods[0].metadata.name, "Running")
        eventually(lambda: (cluster.job("steady").get("status") or {}).get("phase") == "Running", what="Running")
        job = "/apis/heterojob.io/v1alpha1/namespaces/team-a/heterojobs/steady"
        before = sum(1 for m, p in requests(emulator) if m == "GET" and p == job)
        time.sleep(7.0)  # about 25 rounds (a round's pass takes some time too)
        gets = sum(1 for m, p in requests(emulator) if m == "GET" and p == job) - before
    assert 1 <= gets <= 4, gets  # the tenth rounds' reads, not one a round


def test_a_dead_nodes_job_is_placed_again_in_one_pass_without_reading_it_from_the_api_server(
        emulator: Emulator, cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node of a running job goes NotReady: the pass its Node event starts asks for the urgent checkpoint (onto
    the body it holds, no GET of the job), ends it at once (its pods listed from the API server first), writes
    Migrating, gives the devices back and places the job again, one step after the other in that one pass, not
    a pass for each (each step's status is still written before the next acts)."""
    import contextvars
    import logging

    from heterojob.controller.reconcile import Controller
    from heterojob.sim.cluster.harness import OperatorRunner
    from heterojob.sim.cluster.nodes import set_node_lost

    passes = iter(range(1, 1_000_000))
    current: contextvars.ContextVar[int] = contextvars.ContextVar("test_pass", default=0)
    real = Controller.reconcile_key

    async def counted(self: Controller, key: str) -> None:
        current.set(next(passes))  # each pass runs in its own task's context copy
        await real(self, key)

    decisions: list[tuple[int, str]] = []

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            words = record.getMessage().split(" ")
            if "job=team-a/train" in words:
                action = words[words.index("job=team-a/train") + 1]
                decisions.append((current.get(), action.removeprefix("action=")))

    monkeypatch.setattr(Controller, "reconcile_key", counted)
    seen = Seen()
    logging.getLogger("heterojob.decisions").addHandler(seen)
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(3)])
    try:
        with OperatorRunner(emulator.kubeconfig):
            cluster.create_job("train", {"replicas": {"min": 1}, "devices": [{"deviceClass": "nvidia-h100",
                                                                                "perReplica": 8}],
                                         "template": {"spec": {"containers": [{"name": "main", "image": "train:1"}]}}})
            pod = eventually(lambda: (p := cluster.pods("train")) and p[0], what="its pod")
            cluster.set_pod_phase(pod.metadata.name, "Running")
            eventually(lambda: (cluster.job("train").get("status") or {}).get("phase") == "Running", what="Running")
            lost = cluster.job("train")["status"]["placement"]["nodes"][0]
            time.sleep(0.5)
            before = len(requests(emulator))
            set_node_lost(cluster.core, lost)
            eventually(lambda: any(p.metadata.name != pod.metadata.name for p in cluster.pods("train")),
                       what="its new pod")
            time.sleep(1.0)
            log = requests(emulator)[before:]
    finally:
        logging.getLogger("heterojob.decisions").removeHandler(seen)
    job = "/apis/heterojob.io/v1alpha1/namespaces/team-a/heterojobs/train"
    assert sum(1 for m, p in log if m == "GET" and p == job) == 0, log
    # Checkpointing, Migrating, Admitted, and the move closed once the new gang exists
    assert sum(1 for m, p in log if m == "PATCH" and p == f"{job}/status") == 4, log
    asked = next(n for n, action in decisions if action == "request-checkpoint")
    # the move decided, its urgent checkpoint asked and ended, Migrating written, the request placed and applied
    assert [a for n, a in decisions if n == asked] == ["migrate", "request-checkpoint", "checkpoint-timeout",
                                                       "migrate", "place", "place"], decisions
