"""Admission latency and throughput of the real operator on the harness (API emulator + KopfRunner).

After one job that warms the operator up (not measured), 20 two-replica HeteroJobs created one after another
(create -> both pods exist), then 200 created at once. In the same run, a bare Kopf operator that only creates two
pods per object is measured the same way, as the baseline of what Kopf on this emulator and machine can do.

Last line: one JSON object. Targets: seq_p50_s <= 0.05, and the burst at least half of bare Kopf's in the
same run (`ratio_to_bare_kopf` >= 0.5). `cpu_s` is this process's CPU over the measure (the operator, or bare
Kopf, runs in it; the emulator is another process: `emulator_cpu_s`), `calls_per_job` the API calls heterojob's
operator made per admission (by route in `calls`).

`--kubeconfig PATH` (an existing cluster's admin kubeconfig, e.g. a kit's `up DIR`): the same on that cluster
(`sim.existing`): CRDs and defaults where missing, 60 H100 Nodes whose Leases a stand-in renews (`bench/scale.py
--run-heartbeats`, a process of its own) so its node lifecycle controller keeps them Ready, its kube-scheduler binding
the pods (nothing runs them: admission ends when they exist). The operator, and bare Kopf after it, run with the
token of the operator's ServiceAccount when the install made it (`operator_credentials`; else the admin's), in
namespaces `bench` and `bench-bare` (a cluster that has them is refused); `apiserver_cpu_s` replaces `emulator_cpu_s`
(kube-apiserver's own process_cpu_seconds_total). At the end the namespaces and Nodes are deleted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import kopf
import kubernetes
from kopf.testing import KopfRunner


from heterojob.constants import GROUP, LABEL_JOB, VERSION
from heterojob.kube.api import Kube
from heterojob.sim import existing
from heterojob.sim.cluster.harness import Emulator, OperatorRunner, seed
from heterojob.sim.cluster.nodes import node
from heterojob.sim.process import cpu_seconds

SEQUENTIAL = 20
BURST = 200
REPLICAS = 2
NAMESPACE, BARE_NAMESPACE = "bench", "bench-bare"  # bare Kopf's: on the emulator, a fresh one in NAMESPACE
BENCH_LABEL = "heterojob.io/bench"
WARM_UP_S = 300


class PodWatch:
    """Records when the REPLICAS-th pod of each job appeared, from a watch (no polling granularity)."""

    def __init__(self, api: kubernetes.client.ApiClient, namespace: str) -> None:
        self.core = kubernetes.client.CoreV1Api(api)
        self.namespace = namespace
        self.counts: dict[str, int] = {}
        self.complete: dict[str, float] = {}
        self.cond = threading.Condition()
        self._watch = kubernetes.watch.Watch()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PodWatch:
        self._thread.start()
        time.sleep(0.3)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._watch.stop()

    def _run(self) -> None:
        for event in self._watch.stream(self.core.list_namespaced_pod, self.namespace, label_selector=LABEL_JOB,
                                        timeout_seconds=3600):
            if event["type"] != "ADDED":
                continue
            job = event["object"].metadata.labels[LABEL_JOB]
            with self.cond:
                self.counts[job] = self.counts.get(job, 0) + 1
                if self.counts[job] == REPLICAS:
                    self.complete[job] = time.perf_counter()
                    self.cond.notify_all()

    def wait(self, jobs: list[str], timeout: float) -> bool:
        deadline = time.perf_counter() + timeout
        with self.cond:
            while not all(j in self.complete for j in jobs):
                left = deadline - time.perf_counter()
                if left <= 0 or not self.cond.wait(left):
                    return all(j in self.complete for j in jobs)
            return True


class Calls:
    """The API calls heterojob's operator makes, by route (`Kube.send`), while counting."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._send = Kube.send
        counts = self.counts
        send = self._send

        async def counted(kube: Kube, route: str, *args: Any, **kwargs: Any) -> Any:
            counts[route] += 1
            return await send(kube, route, *args, **kwargs)

        Kube.send = counted  # type: ignore[method-assign]

    def close(self) -> None:
        Kube.send = self._send  # type: ignore[method-assign]


class Site:
    """Where a measure runs: a fresh emulator, or an existing cluster (--kubeconfig); its API server's CPU."""

    def __init__(self, api: kubernetes.client.ApiClient, emulator: int | None, namespace: str) -> None:
        self.api, self.emulator, self.namespace = api, emulator, namespace

    def cpu(self) -> float:
        if self.emulator is not None:
            return cpu_seconds(self.emulator)
        return existing.apiserver_cpu_seconds(self.api) or 0.0

    @property
    def cpu_key(self) -> str:
        return "emulator_cpu_s" if self.emulator is not None else "apiserver_cpu_s"


def measure(site: Site, create: Callable[[str], None], prefix: str) -> dict[str, Any]:
    api = site.api
    cpu, server_cpu = time.process_time(), site.cpu()
    with PodWatch(api, site.namespace) as watch:
        seq = []
        for i in range(SEQUENTIAL):
            name = f"{prefix}-seq-{i}"
            t0 = time.perf_counter()
            create(name)
            if not watch.wait([name], 30):
                raise SystemExit(f"{name} got no pods within 30 s")
            seq.append(watch.complete[name] - t0)

        names = [f"{prefix}-burst-{i}" for i in range(BURST)]
        started: dict[str, float] = {}

        def submit(name: str) -> None:
            started[name] = time.perf_counter()
            create(name)

        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(submit, names))
        ok = watch.wait(names, 300)
        done = [watch.complete[n] for n in names if n in watch.complete]
        latencies = sorted(watch.complete[n] - started[n] for n in names if n in watch.complete)
        wall = max(done) - t0 if done else float("inf")
        return {
            "seq_p50_s": round(statistics.median(seq), 4),
            "jobs": len(done),
            "jobs_per_s": round(len(done) / wall, 1) if done else 0.0,
            "p95_s": round(latencies[int(0.95 * (len(latencies) - 1))], 3) if latencies else None,
            "all_admitted": ok,
            "cpu_s": round(time.process_time() - cpu, 2),
            site.cpu_key: round(site.cpu() - server_cpu, 2),
        }


def warm_up(site: Site, create: Callable[[str], None], prefix: str) -> None:
    """One job admitted before the measure: the operator is started (its startup imports the kubernetes client's
    API modules, over a second of CPU) and its first cycle planned, so neither counts as admission."""
    with PodWatch(site.api, site.namespace) as watch:
        create(f"{prefix}-warm")
        if not watch.wait([f"{prefix}-warm"], WARM_UP_S):  # a busy machine: Kopf starts in tens of seconds
            raise SystemExit(f"{prefix}-warm got no pods within {WARM_UP_S} s")


def heterojob_body(name: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "HeteroJob", "metadata": {"name": name},
            "spec": {"replicas": {"min": REPLICAS}, "devices": [{"deviceClass": "nvidia-h100", "perReplica": 1}],
                     "template": {"spec": {"containers": [{"name": "main", "image": "train:1"}]}}}}


def creator(site: Site) -> Callable[[str], None]:
    custom = kubernetes.client.CustomObjectsApi(site.api)
    return lambda name: custom.create_namespaced_custom_object(GROUP, VERSION, site.namespace, "heterojobs",
                                                               heterojob_body(name))


def connection(kubeconfig: Path) -> kopf.ConnectionInfo:
    """Kopf's login from a kubeconfig: server, CA, and a token or a client certificate."""
    cfg = kubernetes.config.new_client_from_config(config_file=str(kubeconfig)).configuration
    token = str((cfg.api_key or {}).get("authorization", "") or (cfg.api_key or {}).get("BearerToken", ""))
    token = token.partition(" ")[2] if " " in token else token
    return kopf.ConnectionInfo(server=cfg.host, ca_path=cfg.ssl_ca_cert, insecure=not cfg.verify_ssl,
                               scheme="Bearer" if token else None, token=token or None,
                               certificate_path=cfg.cert_file, private_key_path=cfg.key_file)


def bare_kopf_registry(kubeconfig: Path) -> kopf.OperatorRegistry:
    """The baseline: create two pods per HeteroJob, nothing else (no placement, status or events)."""
    registry = kopf.OperatorRegistry()
    client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
    core = kubernetes.client.CoreV1Api(client)

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return connection(kubeconfig)

    @kopf.on.event(GROUP, VERSION, "heterojobs", registry=registry)
    def create_pods(type: str, name: str, namespace: str, **_: Any) -> None:
        if type not in (None, "ADDED"):
            return
        for rank in range(REPLICAS):
            try:
                core.create_namespaced_pod(namespace, {
                    "metadata": {"name": f"{name}-{rank}", "labels": {LABEL_JOB: name}},
                    "spec": {"containers": [{"name": "main", "image": "train:1"}]}}, _preload_content=False)
            except kubernetes.client.ApiException as exc:
                if exc.status != 409:
                    raise

    return registry


def fleet() -> list[dict[str, Any]]:
    return [node(f"h100-{i:03d}", "cn-east", "nvidia-h100") for i in range(60)]


@contextmanager
def cluster() -> Iterator[tuple[Site, Path]]:
    """A fresh emulator: (its site, the operator's kubeconfig: the emulator's)."""
    with Emulator() as emu:
        api = emu.client()
        seed(api, namespaces=(NAMESPACE,), nodes=fleet())
        yield Site(api, emu.pid, NAMESPACE), emu.kubeconfig


@contextmanager
def existing_cluster(kubeconfig: Path, notes: dict[str, Any]) -> Iterator[tuple[kubernetes.client.ApiClient, Path]]:
    """An existing cluster made ready (module doc): (the admin's client, the operator's kubeconfig)."""
    api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
    core = kubernetes.client.CoreV1Api(api)
    for ns in (NAMESPACE, BARE_NAMESPACE):
        try:
            core.read_namespace(ns)
            raise SystemExit(f"namespace {ns} exists on {kubeconfig}: use a fresh cluster, or delete it and the "
                             f"Nodes labelled {BENCH_LABEL}")
        except kubernetes.client.ApiException as exc:
            if exc.status != 404:
                raise
    notes["cluster"] = "existing (--kubeconfig): its kube-apiserver, kube-scheduler and controller manager"
    notes.update(existing.prepare(api))
    workdir = Path(os.environ.get("TMPDIR", "/tmp"))
    operator_kubeconfig, why = existing.operator_credentials(api, kubeconfig, workdir / f"admission-{os.getpid()}"
                                                             ".kubeconfig")
    notes["operator_credentials"] = why or \
        f"ServiceAccount {existing.SYSTEM_NS}/{existing.ACCOUNT} token (its ClusterRole; not admin)"
    nodes = fleet()
    for i, n in enumerate(nodes):
        n["metadata"]["labels"][BENCH_LABEL] = "admission"
        n["spec"].update(podCIDR=f"10.200.{i}.0/24", podCIDRs=[f"10.200.{i}.0/24"])
        n["status"]["addresses"].insert(0, {"type": "InternalIP", "address": f"172.31.0.{i + 1}"})
        n["status"]["conditions"][0]["lastHeartbeatTime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    seed(api, namespaces=(NAMESPACE, BARE_NAMESPACE), nodes=nodes, defaults=False)
    beats = subprocess.Popen([sys.executable, str(Path(__file__).with_name("scale.py")), "--run-heartbeats",
                              str(kubeconfig), "0", "1"])
    try:
        yield api, operator_kubeconfig
    finally:
        for ns in (NAMESPACE, BARE_NAMESPACE):
            core.delete_namespace(ns)
        core.delete_collection_node(label_selector=BENCH_LABEL)
        beats.terminate()
        beats.wait(15)
        if operator_kubeconfig != kubeconfig:
            operator_kubeconfig.unlink()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kubeconfig", type=Path, default=None,
                    help="an existing cluster's admin kubeconfig: run there instead of the API emulator")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    notes: dict[str, Any] = {}
    if args.kubeconfig is None:
        with cluster() as (site, kubeconfig):
            ours = ours_measure(site, kubeconfig)
        with cluster() as (site, kubeconfig):
            bare = bare_measure(site, kubeconfig, ["--all-namespaces"])
    else:
        with existing_cluster(args.kubeconfig, notes) as (api, kubeconfig):
            ours = ours_measure(Site(api, None, NAMESPACE), kubeconfig)
            bare = bare_measure(Site(api, None, BARE_NAMESPACE), kubeconfig, ["--namespace", BARE_NAMESPACE])

    ratio = round(ours["jobs_per_s"] / bare["jobs_per_s"], 2) if bare["jobs_per_s"] else 0.0
    result = {
        **ours,
        "baseline_bare_kopf": bare,
        "ratio_to_bare_kopf": ratio,
        "targets": {"seq_p50_s": 0.05, "ratio_to_bare_kopf": 0.5},
        "meets_targets": ours["seq_p50_s"] <= 0.05 and ratio >= 0.5 and ours["all_admitted"],
        "wall_s": round(time.perf_counter() - started, 1),
        **notes,
    }
    print(json.dumps(result))
    return 0 if result["meets_targets"] else 1


def ours_measure(site: Site, kubeconfig: Path) -> dict[str, Any]:
    """heterojob's operator, in this process (`OperatorRunner`), with `kubeconfig`'s credentials."""
    with OperatorRunner(kubeconfig):
        warm_up(site, creator(site), "hj")
        calls = Calls()
        try:
            ours = measure(site, creator(site), "hj")
            time.sleep(1.0)  # the Events written behind the burst
        finally:
            calls.close()
        ours["calls_per_job"] = round(sum(calls.counts.values()) / (SEQUENTIAL + BURST), 2)
        ours["calls"] = dict(calls.counts)
    return ours


def bare_measure(site: Site, kubeconfig: Path, scope: list[str]) -> dict[str, Any]:
    with KopfRunner(["run", *scope, "--standalone"], registry=bare_kopf_registry(kubeconfig), timeout=30):
        warm_up(site, creator(site), "bare")
        return measure(site, creator(site), "bare")


if __name__ == "__main__":
    sys.exit(main())
