"""High availability: two operator processes with `--leader-elect`, one active; kill -9 the active one and
the other places a new job within 30 s. Liveness and readiness as the Deployment probes them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from heterojob.sim.cluster.harness import Emulator, accounts_ready, apply
from heterojob.sim.cluster.nodes import node
from tests.conftest import Cluster, eventually
from tests.harness.test_harness_lifecycle import job_spec

pytestmark = pytest.mark.harness
LEASE_NS, LEASE = "heterojob-system", "heterojob-operator"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Replica:
    """`heterojob operator run --leader-elect` as its own process (also the flow tier's operator: tests/tier)."""

    def __init__(self, kubeconfig: Path, name: str, log: Path, args: tuple[str, ...] = ()) -> None:
        self.name, self.port = name, free_port()
        self.log = log
        env = {**os.environ, "POD_NAME": name, "POD_NAMESPACE": LEASE_NS, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "heterojob", "operator", "run", "--kubeconfig", str(kubeconfig),
             "--leader-elect", LEASE, "--liveness", f"http://127.0.0.1:{self.port}/healthz",
             "--resync-seconds", "5", *args], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)

    def probe(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                return int(r.status)
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return -1

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def replicas(emulator: Emulator, cluster: Cluster, tmp_path: Path) -> Iterator[list[Replica]]:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("h100-b", "cn-east", "nvidia-h100")])
    apply(cluster.api, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NS}}])
    accounts_ready(cluster.api, [LEASE_NS])
    # the replicas' own pods, which they label with their role (the Service selects role=leader)
    apply(cluster.api, [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"op-{i}", "namespace": LEASE_NS},
                         "spec": {"containers": [{"name": "operator", "image": "heterojob"}]}} for i in range(2)])
    started = [Replica(emulator.kubeconfig, f"op-{i}", tmp_path / f"op-{i}.log") for i in range(2)]
    try:
        yield started
    finally:
        for r in started:
            r.stop()


def holder(api: kubernetes.client.ApiClient) -> str | None:
    try:
        return kubernetes.client.CoordinationV1Api(api).read_namespaced_lease(LEASE, LEASE_NS).spec.holder_identity
    except kubernetes.client.ApiException:
        return None


def role(cluster: Cluster, pod: str) -> str | None:
    return (cluster.core.read_namespaced_pod(pod, LEASE_NS).metadata.labels or {}).get("heterojob.io/role")


def placed(cluster: Cluster, name: str) -> Any:
    return (cluster.job(name).get("status") or {}).get("placement")


def test_the_standby_takes_over_within_30s_of_the_leaders_death(cluster: Cluster, replicas: list[Replica]) -> None:
    by_name = {r.name: r for r in replicas}
    leader = by_name[eventually(lambda: holder(cluster.api), timeout=30, what="a Lease holder")]
    standby = next(r for r in replicas if r is not leader)
    eventually(lambda: leader.probe("/readyz") == 200, timeout=30, what="the leader ready")
    eventually(lambda: standby.probe("/healthz") == 200, timeout=30, what="the standby up and healthy")
    assert standby.probe("/readyz") == 503  # standing by: not the one that acts
    eventually(lambda: role(cluster, leader.name) == "leader" and role(cluster, standby.name) == "standby",
               what="the pods labelled with their roles")

    cluster.create_job("before", job_spec(replicas=1))
    eventually(lambda: placed(cluster, "before"), timeout=20, what="the first job placed by the leader")
    assert "leading" in leader.log.read_text() and "leading" not in standby.log.read_text()
    # the standby lists and follows the fleet and the jobs while it stands by: its takeover starts warm
    eventually(lambda: "caches synced" in standby.log.read_text(), timeout=20, what="the standby's caches synced")

    leader.proc.send_signal(signal.SIGKILL)  # no clean shutdown: the Lease must expire
    leader.proc.wait()
    died = time.monotonic()
    cluster.create_job("after", job_spec(replicas=1))
    eventually(lambda: placed(cluster, "after"), timeout=30, what="the new job placed by the standby")
    took = time.monotonic() - died
    assert holder(cluster.api) == standby.name and took < 30, took
    assert standby.probe("/readyz") == 200
    eventually(lambda: role(cluster, standby.name) == "leader", what="the new leader's pod labelled")
    text = standby.log.read_text()
    assert "Traceback" not in text and "succeeded." not in text  # readable logs: no tracebacks, no Kopf chatter
    assert text.count("caches synced") == 1  # the leader's startup took the standby's caches, listed no fleet again


def test_a_clean_stop_hands_over_at_once(cluster: Cluster, replicas: list[Replica]) -> None:
    by_name = {r.name: r for r in replicas}
    leader = by_name[eventually(lambda: holder(cluster.api), timeout=30, what="a Lease holder")]
    standby = next(r for r in replicas if r is not leader)
    eventually(lambda: leader.probe("/readyz") == 200, timeout=30, what="the leader ready")
    # Kopf reads the API's groups once at its start (its resource scan, a few requests): a stop in that second
    # still waits 5 s for those requests (Kopf's hung-task wait); a leader that has run a moment stops at once
    time.sleep(2.0)
    stopped = time.monotonic()
    leader.stop()  # SIGTERM: Kopf stops, the Lease is released
    assert leader.proc.returncode == 0
    # no wait on the way out: Kopf's own signal path waited 5 s for a task it left pending, with no leader meanwhile
    assert time.monotonic() - stopped < 4.5, "the leader took Kopf's 5 s hung-task wait to stop"
    eventually(lambda: holder(cluster.api) == standby.name, timeout=15, what="the standby holding the Lease")
    assert time.monotonic() - stopped < 15  # released, not expired (15 s lease)
