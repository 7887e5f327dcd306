"""Member clusters at scale: admission across members against one cluster, and recovery from a member loss.

In one run: (1) the single-cluster figure: the operator on one API emulator holding every node (one region
per would-be member), a burst of JOBS one-replica jobs, each timed from its creation to its pod; (2) the
same burst through a manager emulator to MEMBERS member emulators (separate processes, one per region),
each job timed to its pod in its member; (3) the member holding the most jobs is frozen (SIGSTOP: a
partition); each of its jobs is timed to its pod in another member; (4) it is thawed, and once what
the jobs left there is collected, `duplicates` counts jobs with live pods in two members (must be 0).

Pods are seen through one watch per cluster (no polling granularity), read in a process of their own. Defaults are the issue's figures
(11 members, 1,000 jobs, 10,000 devices); `--members 3 --jobs 60 --devices 800` is a quick run.
Last line: one JSON object. Targets (issue 24): jobs_per_s and p95_place_s within 2x of the single
cluster's, member_loss_recovery_p95_s <= loss timeout + 10 s, duplicates == 0; and (issue 35, at the defaults)
jobs_per_s >= 40 and p95_place_s <= 10 s. `operator_cpu_s` is this process's CPU during the member burst (the
operator runs in it; the emulators are other processes), `per_job_ms` that over the jobs; the emulators' own CPU in
the same window is `manager_emulator_cpu_s` and `member_emulators_cpu_s` (they share the machine's cores).
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kubernetes


from heterojob.constants import GROUP, LABEL_JOB, VERSION
from heterojob.kube.members import MembersConfig
from heterojob.sim.cluster.harness import Emulator, OperatorRunner, apply, seed
from heterojob.sim.cluster.nodes import node
from heterojob.sim.process import cpu_seconds

NAMESPACE = "bench"
PER_NODE = 8  # an nvidia-h100 node of the simulated fleet
PER_JOB = 8  # each job: one replica of one whole node
TIMELINE: str | None = None  # --timeline: each burst's per-job times appended here as JSON lines


class PodWatch:
    """One cluster's pods as `PodWatches` reports them: when each job's pod first appeared (perf_counter), and which
    jobs have live pods."""

    def __init__(self, hub: PodWatches) -> None:
        self.first: dict[str, float] = {}
        self.seen = hub.seen  # jobs with a pod in any cluster watched (shared)
        self.live: dict[str, set[str]] = {}  # job -> its live pod names
        self.cond = hub.cond
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


class PodWatches:
    """Every cluster's pods, watched by one process of their own (this script with `--watch-pods`): the operator runs
    in this process, and reading thousands of pod events here took the interpreter from it (and counted in
    `operator_cpu_s`). Each event comes back as one short line with the time it arrived there (perf_counter is
    CLOCK_MONOTONIC, one clock for both processes)."""

    def __init__(self, clusters: dict[str, Path]) -> None:
        self.cond = threading.Condition()
        self.seen: set[str] = set()
        self.watches = {name: PodWatch(self) for name in clusters}
        self._proc = subprocess.Popen([sys.executable, "-m", f"bench.{Path(__file__).stem}", "--watch-pods",
                                       *(f"{name}={path}" for name, path in clusters.items())],
                                      stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        ready: set[str] = set()
        while ready != set(clusters):  # each watch runs from its listing's resourceVersion before the burst
            line = self._proc.stdout.readline()
            if not line:
                raise RuntimeError("the pod watcher ended before its watches started")
            ready.add(line.split()[1])
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            name, at, kind, job, pod = line.split()
            watch = self.watches[name]
            if watch.stopped:
                continue
            with self.cond:
                if kind == "D":
                    watch.live.get(job, set()).discard(pod)
                else:
                    watch.live.setdefault(job, set()).add(pod)
                    if job not in watch.first:
                        watch.first[job] = float(at)
                        self.seen.add(job)
                self.cond.notify_all()

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait(10)


def watch_pods(clusters: list[str]) -> None:
    """`--watch-pods NAME=KUBECONFIG ...`: print `ready NAME` once each cluster's watch starts, then one line per pod
    event: NAME, the time it arrived (perf_counter), L (live) or D (deleted or being deleted), its job and name."""
    out = threading.Lock()

    def say(line: str) -> None:
        with out:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def run(name: str, kubeconfig: str) -> None:
        core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(config_file=kubeconfig))
        listed = core.list_namespaced_pod(NAMESPACE, label_selector=LABEL_JOB)
        say(f"ready {name}")
        try:
            for event in kubernetes.watch.Watch().stream(
                    core.list_namespaced_pod, NAMESPACE, label_selector=LABEL_JOB, timeout_seconds=7200,
                    resource_version=listed.metadata.resource_version, deserialize=False):
                if event.get("type") not in ("ADDED", "MODIFIED", "DELETED"):
                    continue
                meta = event["object"]["metadata"]
                gone = event["type"] == "DELETED" or meta.get("deletionTimestamp")
                say(f"{name} {time.perf_counter()} {'D' if gone else 'L'} {meta['labels'][LABEL_JOB]} {meta['name']}")
        except Exception:  # noqa: BLE001 - a frozen member's watch breaks; its pods are counted after the thaw
            pass

    threads = [threading.Thread(target=run, args=arg.split("=", 1), daemon=True) for arg in clusters]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def wait_for(cond: threading.Condition, check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.perf_counter() + timeout
    with cond:
        while not check():
            left = deadline - time.perf_counter()
            if left <= 0:
                return False
            cond.wait(min(left, 0.5))
        return True


def p95(values: list[float]) -> float | None:
    values = sorted(values)
    return round(values[int(0.95 * (len(values) - 1))], 3) if values else None


def job_body(name: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "HeteroJob", "metadata": {"name": name},
            "spec": {"replicas": {"min": 1}, "devices": [{"deviceClass": "nvidia-h100", "perReplica": PER_JOB}],
                     "policy": {"allowCrossRegion": True},
                     "template": {"spec": {"containers": [{"name": "main", "image": "train:1"}]}}}}


def burst(api: kubernetes.client.ApiClient, names: list[str], watches: list[PodWatch], cond: threading.Condition,
          timeout: float, manager: Emulator, members: list[Emulator]) -> dict[str, Any]:
    custom = kubernetes.client.CustomObjectsApi(api)
    started: dict[str, float] = {}
    created: dict[str, float] = {}

    def submit(name: str) -> None:
        started[name] = time.perf_counter()
        custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "heterojobs", job_body(name))
        created[name] = time.perf_counter()

    def seen(name: str) -> float | None:
        times = [w.first[name] for w in watches if name in w.first]
        return min(times) if times else None

    t0, cpu = time.perf_counter(), time.process_time()
    emu_cpu = cpu_seconds(manager.pid), sum(cpu_seconds(m.pid) for m in members)
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(submit, names))
    wanted, placed = set(names), watches[0].seen
    assert all(w.seen is placed for w in watches), "the watches of one burst share their set of jobs seen"
    ok = wait_for(cond, lambda: wanted <= placed, timeout)  # one set comparison per event, not a lookup per job
    cpu = time.process_time() - cpu
    emu_cpu = cpu_seconds(manager.pid) - emu_cpu[0], sum(cpu_seconds(m.pid) for m in members) - emu_cpu[1]
    done = {n: t for n in names if (t := seen(n)) is not None}
    if TIMELINE:  # per job, as Unix times to line up with the operator's log: create sent, answered, first pod
        shift = time.time() - time.perf_counter()
        with open(TIMELINE, "a") as out:
            for n in names:
                out.write(json.dumps({"job": n, "sent": started[n] + shift, "created": created.get(n, 0) + shift,
                                      "pod": (done[n] + shift) if n in done else None}) + "\n")
    wall = max(done.values()) - t0 if done else float("inf")
    return {"jobs": len(done), "all_placed": ok, "jobs_per_s": round(len(done) / wall, 1) if done else 0.0,
            "p95_place_s": p95([t - started[n] for n, t in done.items()]), "operator_cpu_s": round(cpu, 2),
            "per_job_ms": round(1000 * cpu / max(1, len(done)), 1), "manager_emulator_cpu_s": round(emu_cpu[0], 2),
            "member_emulators_cpu_s": round(emu_cpu[1], 2)}


def nodes_for(region: str, count: int, prefix: str) -> list[dict[str, Any]]:
    return [node(f"{prefix}-{i:04d}", region, "nvidia-h100") for i in range(count)]


def single_cluster(members: int, nodes_each: int, jobs: int) -> dict[str, Any]:
    with Emulator() as emu:
        api = emu.client()
        seed(api, namespaces=(NAMESPACE,), nodes=[n for m in range(members)
                                                 for n in nodes_for("cn-east", nodes_each, f"m{m}")])
        hub = PodWatches({"one": emu.kubeconfig})
        try:
            with OperatorRunner(emu.kubeconfig):
                time.sleep(1.0)
                return burst(api, [f"one-{i}" for i in range(jobs)], list(hub.watches.values()), hub.cond,
                             timeout=jobs * 2.0 + 60, manager=emu, members=[])
        finally:
            hub.stop()


def multi_cluster(members: int, nodes_each: int, jobs: int, loss_timeout: float, log_path: str | None = None
                  ) -> dict[str, Any]:
    names = [f"m-{i:02d}" for i in range(members)]
    emulators = {n: Emulator() for n in names}
    manager = Emulator()
    hub: PodWatches | None = None
    try:
        manager.start()
        for emu in emulators.values():
            emu.start()
        api = manager.client()
        seed(api, namespaces=(NAMESPACE, "heterojob-members"))
        regions = 0
        for name, emu in emulators.items():
            mapi = emu.client()
            apply(mapi, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                         *nodes_for(name, nodes_each, name)])
            kubeconfig = base64.b64encode(emu.kubeconfig.read_bytes()).decode()
            apply(api, [
                {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "heterojob-members"},
                 "data": {"kubeconfig": kubeconfig}},
                {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Region", "metadata": {"name": name},
                 "spec": {"location": {"city": name, "latitude": 30.0, "longitude": 110.0 + regions},
                          "cluster": {"secretRef": {"name": name}}}}])
            regions += 1
        hub = PodWatches({name: emu.kubeconfig for name, emu in emulators.items()})
        watches, cond = hub.watches, hub.cond
        config = MembersConfig(poll_seconds=1.0, loss_timeout_s=loss_timeout, request_timeout_s=2.0)
        with OperatorRunner(manager.kubeconfig, members=config) as runner:
            time.sleep(2.0)
            placed = burst(api, [f"far-{i}" for i in range(jobs)], list(watches.values()), cond,
                           timeout=jobs * 2.0 + 60, manager=manager, members=list(emulators.values()))

            # the member with the most jobs freezes; each of its jobs is timed to a pod elsewhere
            with cond:
                where = {n: {j for j, pods in w.live.items() if pods} for n, w in watches.items()}
            lost = max(where, key=lambda n: len(where[n]))
            moved = sorted(where[lost])
            others = [w for n, w in watches.items() if n != lost]
            for w in others:
                with cond:
                    for job in moved:
                        w.first.pop(job, None)  # a first appearance there from now on is the recovery
            t0 = time.perf_counter()
            emulators[lost].pause()
            recovered = wait_for(cond, lambda: all(any(j in w.first for w in others) for j in moved),
                                 loss_timeout + 10.0 + jobs * 0.5)
            recovery = [min(w.first[j] for w in others if j in w.first) - t0 for j in moved
                        if any(j in w.first for w in others)]

            # thawed: what the moved jobs left there is collected, and no job runs in two members
            emulators[lost].resume()
            watches[lost].stop()
            core = kubernetes.client.CoreV1Api(emulators[lost].client())

            def leftovers() -> set[str]:
                items = core.list_namespaced_pod(NAMESPACE, label_selector=LABEL_JOB).items
                return {p.metadata.labels[LABEL_JOB] for p in items if not p.metadata.deletion_timestamp
                        and p.metadata.labels[LABEL_JOB] in moved}

            deadline = time.perf_counter() + 60
            while leftovers() and time.perf_counter() < deadline:
                time.sleep(0.5)
            left = leftovers()
            with cond:  # every job, in every member: live pods in more than one is a duplicate
                jobs_seen = {j for w in others for j, pods in w.live.items() if pods} | left
                duplicates = sum(1 for j in jobs_seen
                                 if sum(1 for w in others if w.live.get(j)) + (j in left) > 1)
            for w in others:
                w.stop()
        if log_path:
            Path(log_path).write_text(runner.output)
        return {**placed, "lost_member_jobs": len(moved), "recovered_all": recovered,
                "member_loss_recovery_p95_s": p95(recovery),
                "member_loss_recovery_min_s": round(min(recovery), 3) if recovery else None, "leftovers_after_return": len(left),
                "duplicates": duplicates}
    finally:
        if hub is not None:
            hub.stop()
        for emu in [*emulators.values(), manager]:
            emu.resume()
            emu.stop()


def main() -> int:
    if sys.argv[1:2] == ["--watch-pods"]:  # the pod watcher's own process (`PodWatches`)
        watch_pods(sys.argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=11)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--devices", type=int, default=10_000, help="in all, across the members")
    parser.add_argument("--loss-timeout", type=float, default=10.0, help="the members' loss timeout, s")
    parser.add_argument("--operator-log", help="write the manager operator's log here")
    parser.add_argument("--timeline", help="append each job's times (create sent, answered, first pod) here")
    args = parser.parse_args()
    global TIMELINE
    TIMELINE = args.timeline
    nodes_each = max(1, args.devices // PER_NODE // args.members)
    if (args.members - 1) * nodes_each < args.jobs:
        raise SystemExit("not enough room to re-place a lost member's jobs: raise --devices or lower --jobs")
    started = time.perf_counter()
    single = single_cluster(args.members, nodes_each, args.jobs)
    multi = multi_cluster(args.members, nodes_each, args.jobs, args.loss_timeout, args.operator_log)
    defaults = (args.members, args.jobs, args.devices) == (11, 1000, 10_000)
    meets = bool(
        multi["all_placed"] and single["all_placed"] and multi["recovered_all"]
        and multi["jobs_per_s"] * 2 >= single["jobs_per_s"]
        and (multi["p95_place_s"] or 1e9) <= 2 * (single["p95_place_s"] or 0)
        and (multi["member_loss_recovery_p95_s"] or 1e9) <= args.loss_timeout + 10.0
        and multi["duplicates"] == 0
        and (not defaults or (multi["jobs_per_s"] >= 40 and (multi["p95_place_s"] or 1e9) <= 10.0)))
    result = {
        "members": args.members, "jobs": args.jobs, "devices": args.members * nodes_each * PER_NODE,
        "jobs_per_s": multi["jobs_per_s"], "p95_place_s": multi["p95_place_s"],
        "operator_cpu_s": multi["operator_cpu_s"], "per_job_ms": multi["per_job_ms"],
        "manager_emulator_cpu_s": multi["manager_emulator_cpu_s"], "member_emulators_cpu_s": multi["member_emulators_cpu_s"],
        "member_loss_recovery_p95_s": multi["member_loss_recovery_p95_s"], "duplicates": multi["duplicates"],
        "loss_timeout_s": args.loss_timeout, "multi_cluster": multi, "baseline_single_cluster": single,
        "targets": {"jobs_per_s": ">= single / 2, and >= 40 at the defaults",
                    "p95_place_s": "<= 2 x single, and <= 10 at the defaults",
                    "member_loss_recovery_p95_s": f"<= {args.loss_timeout + 10.0}", "duplicates": 0},
        "meets_targets": meets, "wall_s": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(result))
    return 0 if meets else 1


if __name__ == "__main__":
    sys.exit(main())
