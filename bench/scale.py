"""Scale: the real operator, as its own process, on a national fleet with thousands of jobs waiting (issue 35).

Set-up (defaults): the API emulator, the stand-in kubelet and a prober each in their own process, the operator
(`python -m heterojob operator run --standalone`) in another, so its CPU (/proc/<pid>/stat) is its own. 100,000
devices: Nodes of 8 in the demo's eleven regions (sim/demo/fleet.py FLEET: NVIDIA H100 and A100, Ascend 910B, CPU
pools, in the demo's proportions). 10,000 HeteroJobs in eight team namespaces, each under a HeteroQuota:
- running ("fill"): --jobs less --backlog, one class and region each (that pool), replicas of 8, 4, 2 or 1
  devices, gangs of up to 16, sized so the pools are exactly full; created largest replica size first, each size
  once the larger are placed (so they pack whatever the scorer), at most --fill-window waiting at a time;
- waiting ("backlog", --backlog, 5,000 by default): 1-16 replicas of 1-8 devices, one to three device
  alternatives, any region, mixed priorities. With the pools full they wait for room;
- the probe region (cn-zhongwei, H100 only) is kept free of both: every team's HeteroQuota allows 0 devices there.
  The probe namespace (no quota) runs there the fault victims (two-replica gangs) and the admission probes.
Preemption is kept out (--preemption-min-runtime 10^9): the backlog never displaces the fill.

Measured, after the backlog is created and the operator has given every waiting job a status (or --settle-timeout):
- idle_writes_per_s: --idle-seconds with nothing changing; the operator's writes to the API (POST, PUT, PATCH,
  DELETE, counted by the emulator per client: every client but the kubelet's and the bench's; by kube-apiserver on an
  existing cluster, below) per second, once
  the fill's jobs all say Running (`fill_running_s`) and its trailing writes (the Events queued for the backlog)
  have gone out (`idle_drain_s`); `idle_writes_by`: what they were;
- admit_free_p95_s: --admit-probes jobs, one at a time, that fit the probe region, from create until all their
  pods exist; each is deleted after (capacity freed: the event that wakes a scheduler);
- cycle_cpu_s_p95: from the operator's histogram heterojob_scheduler_cycle_cpu_seconds over the measured phase
  when it serves one (cycle_cpu_source "metric": the upper bound of the bucket holding the p95;
  `cycle_cpu_share_le`: the share of cycles at or under each bucket's bound); else (source "window") the operator's CPU-seconds from each
  probe's deletion until it is quiet (under 5 % CPU for 2 s, at most --cycle-window-max seconds: capped, the value
  is then a floor), i.e. one cycle triggered by freed capacity;
- fault_to_pods_p95_s: --fault-probes running victims, one at a time: a node of theirs goes NotReady as the node
  lifecycle controller writes it for a dead node (Ready Unknown, the unreachable taints; --fault-kind notready: Ready
  False, a node that still answers, whose jobs checkpoint first), until pods of the next placement generation exist
  for every replica; then the node is Ready again;
- operator_rss_mb: the operator's peak RSS (VmHWM);
- gc_full_passes, gc_full_p95_le_s, gc_pauses_over_0_25_s: the operator's garbage collector over the measured phase
  (`heterojob_gc_pause_seconds`): its full passes, the bucket bound of their p95, and passes of any generation
  that held the event loop over 0.25 s;
- probe_p99_s: the operator's /healthz (Kopf's liveness endpoint), /metrics and its alert webhook (an alert that
  names no job), asked every second from each one's first answer (the operator's start is not timed) to the end,
  each with a 5 s timeout (a timeout or a failure counts 5 s); probe_failures counts answers that were not 2xx or
  never came;
- wall_s.
Last (unless --no-restart): the operator restarted on the full fleet, the prober stopped first (probe_p99_s times
the running operator): restart_first_placement_s (a job that fits free room, created at the restart, until its
pod exists), restart_caches (the caches' first listing, from its log), restart_pod_creates_again (pods created
beyond that job's: 0 when every job's pods were in the caches before its first pass), restart_quiet_s and
restart_cpu_s (until under 5 % CPU for 2 s), restart_rss_mb.
Also: operator_start_s (from its start to its first placements: its caches list every Node, pod and job
first; --start-timeout ends the run there, with "aborted"), waiting (at the measurements) and waiting_end, the
CPU-seconds of the operator, emulator and kubelet processes, fill_s and backlog_settle_s.
Targets are printed beside each figure ("targets") and "met" says which hold. `--quick`: 2,000 devices, 300 jobs
(150 waiting), short phases: the test suite's run. Last line: one JSON object. The operator's output goes to
--workdir/operator.log.

`--kubeconfig PATH` (an existing cluster's admin kubeconfig, e.g. a kit's `up DIR`, README "Test tiers"): the same
run and JSON on that cluster instead of the emulator (`sim.existing`). The CRDs and default classes and regions are
installed where missing; the operator runs with a token of its own ServiceAccount (heterojob-system/heterojob-
operator, the shipped ClusterRole) when the install made it, else as the admin (`operator_credentials` says which).
The cluster's kube-scheduler binds the pods (the stand-in kubelet's scheduler is off) and its node lifecycle
controller watches the Nodes' Leases, renewed every 10 s by --run-heartbeats processes apart from the stand-in
kubelet. A fault (`fault_injection`) is still written as that controller writes it (Ready Unknown and the
unreachable taints), with the node's heartbeats stopped so its Lease lapses behind it: timing from a lapsed Lease
would add the controller's grace (20 s on the kit); `--fault-kind lapse` does that (heartbeats stop, nothing
written). The operator's writes are counted by kube-apiserver's API Priority and Fairness (`writes_source`: one
FlowSchema per write verb and resource of the operator's ClusterRole, matching its ServiceAccount, removed at the
end; none when it runs as the admin, whose requests APF exempts); `apiserver_cpu_s` is kube-apiserver's own
process_cpu_seconds_total over the run (etcd's is not counted). A cluster holding an earlier run's namespaces is
refused; at the end the run deletes its namespaces and Nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import urllib3
from prometheus_client.parser import text_string_to_metric_families


from heterojob.constants import GROUP, LABEL_GENERATION, LABEL_JOB, VERSION
from heterojob.sim import existing
from heterojob.sim.cluster.harness import Emulator, apply, seed
from heterojob.sim.cluster.nodes import KUBELET_STOPPED, node, set_node_lost, set_node_ready
from heterojob.sim.demo.fleet import FLEET
from heterojob.sim.process import cpu_seconds
from heterojob.sim.telemetry.prometheus import free_port

TARGETS = {"cycle_cpu_s_p95": 1.0, "admit_free_p95_s": 2.0, "fault_to_pods_p95_s": 2.0, "idle_writes_per_s": 1.0,
           "operator_rss_mb": 2000.0, "probe_p99_s": 1.0}
PER_NODE = 8
PROBE_REGION, PROBE_CLASS, PROBE_NS = "cn-zhongwei", "nvidia-h100", "probe"
TEAMS = tuple(f"team-{i:02d}" for i in range(8))
PRIORITIES = (("low", 3), ("medium", 5), ("high", 2), ("urgent", 1))
CLASSES = ("nvidia-h100", "nvidia-a100", "ascend-910b", "cpu")
ALTERNATIVES = {"nvidia-h100": ("nvidia-a100", "ascend-910b"), "nvidia-a100": ("nvidia-h100", "ascend-910b"),
                "ascend-910b": ("nvidia-h100", "nvidia-a100"), "cpu": ()}
VICTIM_REPLICAS = 2
FOREVER = str(10**8)
BENCH_AGENT, KUBELET_AGENT = "heterojob-scale-bench/1", "heterojob-scale-kubelet/1"
PROBE_TIMEOUT_S = 5.0
TOKEN = "scale-token"
BENCH_LABEL = "heterojob.io/bench"  # on the bench's Nodes: an existing cluster's are deleted by it at the end
HEARTBEAT_SHARDS = 2  # on an existing cluster: processes renewing the Nodes' Leases (each node's by one of them)
HEARTBEAT_THREADS = 32  # in each (mostly waiting on the API server)
NODES_READY_MAX_S = 300.0  # the longest wait for every Node to be untainted before the operator starts


def p(values: list[float], q: float) -> float | None:
    """The q-quantile (nearest rank) of `values`, None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))], 3)


# --- the fleet and the jobs ---------------------------------------------------------------------

def pools(devices: int, probe_nodes: int) -> dict[tuple[str, str], int]:
    """(region, class) -> nodes: the demo's eleven regions in its proportions, the probe region's H100s apart."""
    weights = {(r, c): n for r, groups in FLEET.items() for c, n in groups if r != PROBE_REGION}
    total = max(len(weights), devices // PER_NODE - probe_nodes)
    scale = total / sum(weights.values())
    out = {k: max(1, int(w * scale)) for k, w in weights.items()}
    biggest = max(out, key=out.__getitem__)
    out[biggest] += total - sum(out.values())
    out[(PROBE_REGION, PROBE_CLASS)] = probe_nodes
    return out


def fleet_nodes(layout: dict[tuple[str, str], int]) -> list[dict[str, Any]]:
    out = []
    for (region, cls), count in layout.items():
        for i in range(count):
            n = node(f"{region}-{cls}-{i:05d}", region, cls, devices=PER_NODE, stack=i)
            # a fleet's cluster CIDR (10.0.0.0/8, a /24 per node); kind's 10.244.0.0/16 holds only 256 nodes
            cidr = f"10.{len(out) // 256}.{len(out) % 256}.0/24"
            n["spec"].update(podCIDR=cidr, podCIDRs=[cidr])
            # its kubelet's InternalIP (a real cluster gives none; the emulator would pick the same kind)
            n["metadata"]["labels"][BENCH_LABEL] = "scale"
            n["status"]["conditions"][0]["lastHeartbeatTime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            n["status"]["addresses"].insert(0, {"type": "InternalIP",
                                                "address": f"172.16.{len(out) // 250}.{len(out) % 250 + 1}"})
            out.append(n)
    return out


def template(env: dict[str, str] | None = None) -> dict[str, Any]:
    values = {"HETEROJOB_SIM_DURATION": FOREVER, **(env or {})}
    return {"spec": {"containers": [{"name": "main", "image": "train:latest",
                                     "env": [{"name": k, "value": v} for k, v in values.items()]}]}}


def job(namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "HeteroJob",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def priority(rng: random.Random) -> str:
    return rng.choices([n for n, _ in PRIORITIES], [w for _, w in PRIORITIES])[0]


def fill_jobs(rng: random.Random, layout: dict[tuple[str, str], int], count: int) -> list[dict[str, Any]]:
    """`count` jobs (about) that fill every pool but the probe region's exactly: each a gang of 1-16 replicas of
    8, 4, 2 or 1 devices in one pool (regions.allowed, one class)."""
    filled = {k: v for k, v in layout.items() if k[0] != PROBE_REGION}
    nodes_total = sum(filled.values())
    out: list[dict[str, Any]] = []
    n = 0
    for (region, cls), nodes in filled.items():
        capacity = nodes * PER_NODE
        k = max(1, min(capacity, round(count * nodes / nodes_total)))
        shapes = [[1, rng.choices((8, 4, 2, 1), (6, 2, 1, 1))[0]] for _ in range(k)]
        while sum(r * d for r, d in shapes) > capacity:  # a small pool: fewer, smaller jobs
            shapes.sort(key=lambda s: s[0] * s[1])
            if shapes[-1][1] > 1:
                shapes[-1][1] //= 2
            else:
                shapes.pop()
        left = capacity - sum(r * d for r, d in shapes)
        while left > 0:
            takers = [s for s in shapes if s[0] < 16 and s[1] <= left]
            if not takers:
                shapes.append([1, max(d for d in (8, 4, 2, 1) if d <= left)])
            else:
                rng.choice(takers)[0] += 1
            left = capacity - sum(r * d for r, d in shapes)
        for replicas, per in shapes:
            spec = {"priority": priority(rng), "replicas": {"min": replicas},
                    "devices": [{"deviceClass": cls, "perReplica": per}],
                    "regions": {"allowed": [region]}, "template": template()}
            out.append(job(TEAMS[n % len(TEAMS)], f"fill-{n:05d}", spec))
            n += 1
    return out


def backlog_jobs(rng: random.Random, count: int) -> list[dict[str, Any]]:
    """Jobs that wait: 1-16 replicas of 1-8 devices, some listing two or three classes, any region."""
    out = []
    for n in range(count):
        first = rng.choices(CLASSES, (4, 3, 3, 1))[0]
        others = [c for c in ALTERNATIVES[first] if rng.random() < 0.35]
        replicas = rng.choices((1, 2, 4, 8, 16), (5, 3, 2, 1, 1))[0]
        per = rng.choice((1, 2, 4, 8))
        spec = {"priority": priority(rng), "replicas": {"min": replicas},
                "devices": [{"deviceClass": c, "perReplica": per} for c in (first, *others)],
                "template": template()}
        out.append(job(TEAMS[n % len(TEAMS)], f"wait-{n:05d}", spec))
    return out


def probe_job(name: str, replicas: int, per: int, prio: str = "medium") -> dict[str, Any]:
    return job(PROBE_NS, name, {"priority": prio, "replicas": {"min": replicas},
                                "devices": [{"deviceClass": PROBE_CLASS, "perReplica": per}],
                                "regions": {"allowed": [PROBE_REGION]}, "template": template()})


def quotas() -> list[dict[str, Any]]:
    """Each team: nothing in the probe region, and a bound that never binds elsewhere."""
    return [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "HeteroQuota",
             "metadata": {"name": "team", "namespace": ns},
             "spec": {"limits": [{"deviceClass": "*", "region": PROBE_REGION, "devices": 0},
                                 {"deviceClass": "*", "region": "*", "devices": 1_000_000}]}} for ns in TEAMS]


# --- watching the cluster -----------------------------------------------------------------------

class Stream(threading.Thread):
    """A list then a watch of one resource, streamed and parsed as raw JSON (no client models), re-listed when the
    watch ends or its history expired; `on_list(items)` then `on_event(type, object)` under `cond`."""

    def __init__(self, list_call: Callable[..., Any], on_list: Callable[[list[dict[str, Any]]], None],
                 on_event: Callable[[str, dict[str, Any]], None], cond: threading.Condition, **kwargs: Any) -> None:
        super().__init__(daemon=True)
        self.list_call, self.on_list, self.on_event, self.cond, self.kwargs = list_call, on_list, on_event, cond, kwargs
        self.stopped = threading.Event()

    def run(self) -> None:
        rv = None
        while not self.stopped.is_set():
            try:
                if rv is None:
                    listed = json.loads(self.list_call(_preload_content=False, **self.kwargs).data)
                    with self.cond:
                        self.on_list(listed["items"])
                        self.cond.notify_all()
                    rv = listed["metadata"]["resourceVersion"]
                answer = self.list_call(watch=True, resource_version=rv, timeout_seconds=60, _preload_content=False,
                                        _request_timeout=90, **self.kwargs)
                buffer = b""
                for chunk in answer.stream(1 << 16):
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        if event["type"] == "ERROR":
                            rv = None
                            break
                        rv = event["object"]["metadata"].get("resourceVersion", rv)
                        with self.cond:
                            self.on_event(event["type"], event["object"])
                            self.cond.notify_all()
                    if rv is None or self.stopped.is_set():
                        break
                answer.close()  # a watch left mid-stream: its connection is not reused
            except Exception as exc:  # noqa: BLE001 - watch again
                if not self.stopped.is_set():
                    print(f"watch: {type(exc).__name__}: {exc}", file=sys.stderr)
                    rv = None
                    time.sleep(1.0)


@dataclass
class Seen:
    """What the watches say: each job's phase and reason, and each (job, generation)'s live pods."""
    cond: threading.Condition = field(default_factory=threading.Condition)
    phase: dict[str, str] = field(default_factory=dict)  # ns/name -> status.phase ("" when none yet)
    pods: dict[str, dict[int, set[str]]] = field(default_factory=dict)  # ns/job -> generation -> live pod names
    pod_nodes: dict[str, str] = field(default_factory=dict)  # ns/pod -> node (annotation or nodeName)

    def jobs_list(self, items: list[dict[str, Any]]) -> None:
        self.phase = {}
        for obj in items:
            self.jobs_event("ADDED", obj)

    def jobs_event(self, etype: str, obj: dict[str, Any]) -> None:
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        if etype == "DELETED":
            self.phase.pop(key, None)
        else:
            self.phase[key] = str((obj.get("status") or {}).get("phase") or "")

    def pods_list(self, items: list[dict[str, Any]]) -> None:
        self.pods, self.pod_nodes = {}, {}
        for obj in items:
            self.pods_event("ADDED", obj)

    def pods_event(self, etype: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        labels = meta.get("labels") or {}
        try:
            key, gen = f"{meta['namespace']}/{labels[LABEL_JOB]}", int(labels.get(LABEL_GENERATION, "0"))
        except (KeyError, ValueError):
            return
        name = f"{meta['namespace']}/{meta['name']}"
        if etype == "DELETED" or meta.get("deletionTimestamp"):
            self.pods.get(key, {}).get(gen, set()).discard(meta["name"])
            self.pod_nodes.pop(name, None)
        else:
            self.pods.setdefault(key, {}).setdefault(gen, set()).add(meta["name"])
            where = (obj.get("spec") or {}).get("nodeName") or (meta.get("annotations") or {}).get("heterojob.io/node")
            if where:
                self.pod_nodes[name] = where

    def live(self, job_key: str, generation: int) -> int:
        return len(self.pods.get(job_key, {}).get(generation, ()))

    def generations(self, job_key: str) -> list[int]:
        return sorted(g for g, names in self.pods.get(job_key, {}).items() if names)

    def wait(self, check: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not check():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(min(left, 0.5))
        return True


# --- the processes ------------------------------------------------------------------------------

def rss_peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def spawn(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    out = log.open("ab")
    return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_kubelet(kubeconfig: str, real: bool = False) -> int:
    """`--run-kubelet`: the stand-in kubelet (playing the SDK's checkpoint answers) until SIGTERM. With `real` (an
    existing cluster): its kube-scheduler binds (the stand-in's is off) and the heartbeats run apart
    (`run_heartbeats`: a step that starts a thousand pods must not hold up the Leases the node lifecycle
    controller reads)."""
    from heterojob.sim.cluster.kubelet import Kubelet

    api = kubernetes.config.new_client_from_config(config_file=kubeconfig)
    api.user_agent = KUBELET_AGENT
    kubelet = Kubelet(api, answer_checkpoints=True, schedule=not real, heartbeats=not real).start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    done.wait()
    kubelet.stop()
    return 0


def run_heartbeats(kubeconfig: str, shard: int, shards: int, threads: int = HEARTBEAT_THREADS) -> int:
    """`--run-heartbeats`: what each kubelet posts to show its node alive (`sim.cluster.heartbeats`: the Lease
    renewed every 10 s, Ready reported), for the Nodes whose name hashes to `shard` of `shards`, but for those
    whose kubelet is stopped (annotation KUBELET_STOPPED, set by a fault), until SIGTERM. `threads` renew at once
    (each its share of the nodes, on a client of its own): one write waits on the API server, and a busy one
    answers in tenths of a second, which one thread renewing hundreds of Leases every 10 s cannot afford."""
    import zlib

    from heterojob.sim.cluster.heartbeats import Heartbeats
    from heterojob.sim.cluster.mirror import Mirror

    def client() -> kubernetes.client.CoreV1Api:
        api = kubernetes.config.new_client_from_config(config_file=kubeconfig)
        api.user_agent = KUBELET_AGENT
        return kubernetes.client.CoreV1Api(api)

    mirror = Mirror(client().list_node).watch(f"heartbeats-{shard}")
    lock = threading.Lock()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())

    def beat(part: int) -> None:
        beats = Heartbeats(client())
        while not done.is_set():
            try:
                with lock:
                    listed = mirror.sync()
                nodes = {n["metadata"]["name"]: n for n in listed
                         if zlib.crc32(n["metadata"]["name"].encode()) % (shards * threads) == shard * threads + part}
                silent = {name for name, n in nodes.items()
                          if KUBELET_STOPPED in ((n.get("metadata") or {}).get("annotations") or {})}
                beats.beat(nodes, silent, time.monotonic())
            except Exception as exc:  # noqa: BLE001 - a busy API server: beat again
                print(f"heartbeats: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            done.wait(0.5)

    workers = [threading.Thread(target=beat, args=(part,), daemon=True) for part in range(threads)]
    for worker in workers:
        worker.start()
    done.wait()
    for worker in workers:
        worker.join(timeout=10)
    mirror.stop()
    return 0


def run_prober(health_url: str, alerts_port: int, out_path: str) -> int:
    """`--run-prober`: every second, GET /healthz and /metrics and POST an alert naming no job; one JSON line per
    answer ({"t", "what", "s", "ok"}), from each endpoint's first answer on (the operator's start is not timed)."""
    alerts = f"http://127.0.0.1:{alerts_port}"
    http = urllib3.PoolManager(maxsize=16)
    up: set[str] = set()
    lock = threading.Lock()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    out = open(out_path, "a", buffering=1)  # noqa: SIM115 - closed at exit

    def ask(what: str, n: int) -> None:
        started = time.monotonic()
        try:
            if what == "alert":
                fingerprint = f"scale{n:012x}"
                labels = {"alertname": "HeteroJobScaleProbe", "severity": "info", "Hostname": "scale-probe-none"}
                body = {"version": "4", "status": "firing", "receiver": "heterojob", "groupKey": "{}:{}",
                        "groupLabels": {}, "commonLabels": labels, "commonAnnotations": {}, "truncatedAlerts": 0,
                        "externalURL": "http://127.0.0.1:9093",
                        "alerts": [{"status": "firing", "labels": labels, "annotations": {}, "fingerprint": fingerprint,
                                    "startsAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                    "endsAt": "0001-01-01T00:00:00Z", "generatorURL": ""}]}
                r = http.request("POST", f"{alerts}/alerts", json=body, headers={"Authorization": f"Bearer {TOKEN}"},
                                 timeout=PROBE_TIMEOUT_S, retries=False)
            else:
                r = http.request("GET", health_url if what == "healthz" else f"{alerts}/metrics",
                                 timeout=PROBE_TIMEOUT_S, retries=False)
            ok, took = 200 <= r.status < 300, time.monotonic() - started
        except urllib3.exceptions.HTTPError:
            ok, took = False, PROBE_TIMEOUT_S
        with lock:
            if ok:
                up.add(what)
            if what in up:
                out.write(json.dumps({"t": time.time(), "what": what, "s": round(min(took, PROBE_TIMEOUT_S), 4),
                                      "ok": ok}) + "\n")

    with ThreadPoolExecutor(max_workers=24) as pool:
        n = 0
        while not done.is_set():
            for what in ("healthz", "metrics", "alert"):
                pool.submit(ask, what, n)
            n += 1
            done.wait(1.0)
    out.close()
    return 0


# --- the run ------------------------------------------------------------------------------------

@dataclass
class Settings:
    devices: int
    jobs: int
    backlog: int
    admit_probes: int
    fault_probes: int
    idle_s: float
    probe_timeout_s: float
    fill_timeout_s: float
    settle_timeout_s: float
    cycle_window_max_s: float
    fill_window: int
    start_timeout_s: float
    fault_kind: str
    resync_s: float
    seed: int
    restart: bool = True
    kubeconfig: Path | None = None  # an existing cluster's admin kubeconfig: used instead of the emulator


class Abort(Exception):
    """A phase that cannot go on (the operator never placed the first jobs): the figures so far are reported."""


class ScaleCluster:
    """The cluster under the run (the emulator, or an existing one), the operator started on it, and what they
    count (the operator's CPU and writes, its metrics)."""

    def __init__(self, settings: Settings, workdir: Path, operator_source: Path | None) -> None:
        self.s, self.workdir, self.operator_source = settings, workdir, operator_source
        self.rng = random.Random(settings.seed)
        self.seen = Seen()
        self.replicas: dict[str, int] = {}  # ns/name -> replicas of the jobs the bench made
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.streams: list[Stream] = []
        self.t0 = time.monotonic()
        self.notes: dict[str, Any] = {}
        self.counter: existing.WriteCounter | None = None
        self.made_on_existing = False  # the run's namespaces and Nodes are its own to delete at the end

    def say(self, what: str) -> None:
        print(f"[{time.monotonic() - self.t0:7.1f}s] {what}", file=sys.stderr, flush=True)

    # -- plumbing --
    def create(self, objects: list[dict[str, Any]], workers: int = 8) -> None:
        def one(obj: dict[str, Any]) -> None:
            for attempt in range(5):
                try:
                    # the answer read: its connection goes back to the pool clean
                    _ = self.custom.create_namespaced_custom_object(
                        GROUP, VERSION, obj["metadata"]["namespace"], "heterojobs", obj, _preload_content=False).data
                    return
                except kubernetes.client.ApiException as exc:
                    if exc.status == 409:
                        return
                    if attempt == 4:
                        raise
                    time.sleep(0.5)
        for obj in objects:
            self.replicas[f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"] = \
                obj["spec"]["replicas"]["min"]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(one, objects))

    def placed(self, key: str) -> bool:
        return any(self.seen.live(key, g) >= self.replicas[key] for g in self.seen.generations(key))

    def delete_job(self, key: str) -> None:
        ns, name = key.split("/")
        try:
            self.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "heterojobs", name)
        except kubernetes.client.ApiException as exc:
            if exc.status != 404:
                raise

    def operator_cpu(self) -> float:
        return cpu_seconds(self.procs["operator"].pid)

    def writes(self) -> dict[str, int]:
        """Writes so far by client (the emulator's count; none on an existing cluster)."""
        if self.s.kubeconfig is not None:
            return {}
        rows = json.loads(urllib3.request("GET", f"{self.emu.url}/_emulator/writes", timeout=30).data)
        out: dict[str, int] = {}
        for row in rows:
            out[row["agent"]] = out.get(row["agent"], 0) + row["count"]
        return out

    def operator_writes(self) -> int:
        return sum(self.operator_writes_by().values())

    def operator_writes_by(self) -> dict[str, int]:
        """The operator's writes so far, per method, resource and subresource ("PATCH heterojobs/status"): the
        emulator's count by client; on an existing cluster kube-apiserver's, by FlowSchema (`existing.WriteCounter`;
        "PATCH heterojob.io/heterojobs/status"); {} when neither can count them."""
        if self.s.kubeconfig is not None:
            return self.counter.counts() if self.counter is not None else {}
        rows = json.loads(urllib3.request("GET", f"{self.emu.url}/_emulator/writes", timeout=30).data)
        out: dict[str, int] = {}
        for row in rows:
            if row["agent"] not in (BENCH_AGENT.split("/")[0], KUBELET_AGENT.split("/")[0]):
                what = f"{row['method']} {row['resource']}" + (f"/{row['subresource']}" if row["subresource"] else "")
                out[what] = out.get(what, 0) + row["count"]
        return out

    def metrics(self) -> str | None:
        try:
            r = urllib3.request("GET", f"http://127.0.0.1:{self.alerts_port}/metrics", timeout=30, retries=False)
            return r.data.decode() if r.status == 200 else None
        except urllib3.exceptions.HTTPError:
            return None

    # -- phases --
    def start(self) -> None:
        s = self.s
        probe_nodes = VICTIM_REPLICAS * s.fault_probes * 2 + 4
        self.layout = pools(s.devices, probe_nodes)
        if s.kubeconfig is None:
            (self.workdir / "emulator").mkdir(parents=True, exist_ok=True)
            self.emu = Emulator(self.workdir / "emulator").start(timeout=60)
            self.procs["emulator"] = self.emu._proc  # type: ignore[assignment]
            admin = operator_kubeconfig = self.emu.kubeconfig
            api = self.emu.client()
        else:
            admin = s.kubeconfig
            api = kubernetes.config.new_client_from_config(config_file=str(admin))
        api.user_agent = BENCH_AGENT
        self.api = api
        self.core, self.custom = kubernetes.client.CoreV1Api(api), kubernetes.client.CustomObjectsApi(api)
        if s.kubeconfig is not None:
            self.existing_cluster(api)
            operator_kubeconfig = self.operator_kubeconfig
        seed(api, namespaces=(*TEAMS, PROBE_NS))
        apply(api, quotas())
        nodes = fleet_nodes(self.layout)
        if s.kubeconfig is not None:  # each Node's Lease renewed from its registration on, as its kubelet would
            me = [sys.executable, str(Path(__file__).resolve())]
            for shard in range(HEARTBEAT_SHARDS):
                self.procs[f"heartbeats-{shard}"] = spawn(
                    [*me, "--run-heartbeats", str(admin), str(shard), str(HEARTBEAT_SHARDS)],
                    self.workdir / f"heartbeats-{shard}.log")
        self.say(f"creating {len(nodes)} nodes ({len(nodes) * PER_NODE} devices) in {len(FLEET)} regions")
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda n: self.core.create_node(n, _preload_content=False).data, nodes))
        self.notes["nodes"] = len(nodes)
        if s.kubeconfig is not None:
            self.nodes_ready([n["metadata"]["name"] for n in nodes])
        self.notes["devices"] = len(nodes) * PER_NODE
        me = [sys.executable, str(Path(__file__).resolve())]
        env = {"PYTHONPATH": os.pathsep.join([str(self.operator_source or Path(__file__).resolve().parents[1] /
                                                   "operator"), os.environ.get("PYTHONPATH", "")])}
        real = ["--real"] if s.kubeconfig is not None else []
        self.procs["kubelet"] = spawn([*me, "--run-kubelet", str(admin), *real], self.workdir / "kubelet.log")
        health_port, self.alerts_port = free_port(), free_port()
        health = f"http://127.0.0.1:{health_port}/healthz"
        self.operator_cmd = [sys.executable, "-m", "heterojob", "operator", "run", "--standalone", "--kubeconfig",
                             str(operator_kubeconfig), "--resync-seconds", str(s.resync_s),
                             "--preemption-min-runtime", "1e9", "--alerts-port", str(self.alerts_port),
                             "--liveness", health]
        self.operator_env = {**env, "HETEROJOB_ALERT_TOKEN": TOKEN}
        self.op_started = time.monotonic()
        self.procs["operator"] = spawn(self.operator_cmd, self.workdir / "operator.log", env=self.operator_env)
        self.procs["prober"] = spawn([*me, "--run-prober", health, str(self.alerts_port),
                                      str(self.workdir / "probes.jsonl")], self.workdir / "prober.log")
        self.streams = [
            Stream(self.custom.list_cluster_custom_object, self.seen.jobs_list, self.seen.jobs_event, self.seen.cond,
                   group=GROUP, version=VERSION, plural="heterojobs"),
            Stream(self.core.list_pod_for_all_namespaces, self.seen.pods_list, self.seen.pods_event, self.seen.cond,
                   label_selector=LABEL_JOB)]
        for stream in self.streams:
            stream.start()

    def existing_cluster(self, api: kubernetes.client.ApiClient) -> None:
        """On an existing cluster (--kubeconfig): refuse one holding an earlier run's objects; the CRDs and
        defaults where missing; the operator's own credentials, and its writes counted by the API server's APF
        where it runs as its ServiceAccount; the API server's CPU from its /metrics."""
        for ns in (*TEAMS, PROBE_NS):
            try:
                self.core.read_namespace(ns)
            except kubernetes.client.ApiException as exc:
                if exc.status == 404:
                    continue
                raise
            raise Abort(f"namespace {ns} exists (an earlier run's?): run on a fresh cluster, or delete namespaces "
                        f"{', '.join((*TEAMS, PROBE_NS))} and the Nodes labelled {BENCH_LABEL}")
        self.made_on_existing = True
        self.notes["cluster"] = "existing (--kubeconfig): its kube-apiserver, kube-scheduler and controller manager"
        self.notes.update(existing.prepare(api))
        self.operator_kubeconfig, why = existing.operator_credentials(api, self.s.kubeconfig or Path(),
                                                                      self.workdir / "operator.kubeconfig")
        self.notes["operator_credentials"] = why or \
            f"ServiceAccount {existing.SYSTEM_NS}/{existing.ACCOUNT} token (its ClusterRole; not admin)"
        self.counter = existing.WriteCounter(api).install() if why is None else None
        self.notes["writes_source"] = (
            "kube-apiserver API Priority and Fairness: apiserver_flowcontrol_dispatched_requests_total of FlowSchemas "
            "matching the operator's ServiceAccount, one per write verb and resource of its ClusterRole"
            if why is None else f"none: {why}; an admin's requests are exempt from APF")
        self.notes["fault_injection"] = {
            "unreachable": "direct: the bench writes what the node lifecycle controller writes for a dead node (Ready "
                           "Unknown, the unreachable taints) and stops the node's heartbeats (its Lease then lapses "
                           "and the controller confirms it after its grace)",
            "notready": "direct: the bench writes Ready False and the not-ready taints (heartbeats go on)",
            "lapse": "the node's heartbeats stop; the node lifecycle controller marks it after its grace "
                     "(--node-monitor-grace-period): the figure includes that grace"}[self.s.fault_kind]
        self.apiserver_cpu0 = existing.apiserver_cpu_seconds(api)

    def nodes_ready(self, names: list[str]) -> None:
        """A wait (at most NODES_READY_MAX_S) until the node lifecycle controller has taken the not-ready and
        unreachable taints off every Node (a real cluster's new Node carries one until the controller sees it Ready):
        the operator starts on a fleet that is up (`nodes_ready_s`, from the last Node's registration). On a busy
        machine Leases renewed late keep some Nodes flapping: the run goes on and `nodes_tainted_at_start` says
        how many were tainted then."""
        started, wanted = time.monotonic(), set(names)
        tainted = len(wanted)
        while time.monotonic() - started < min(self.s.start_timeout_s, NODES_READY_MAX_S):
            listed = json.loads(self.core.list_node(label_selector=BENCH_LABEL, _preload_content=False).data)
            tainted = sum(1 for n in listed["items"] if n["metadata"]["name"] in wanted
                          and (n["spec"].get("taints") or []))
            if not tainted:
                break
            time.sleep(2.0)
        self.notes.update(nodes_ready_s=round(time.monotonic() - started, 1), nodes_tainted_at_start=tainted)
        self.say(f"nodes: {len(wanted) - tainted} of {len(wanted)} without taints after {self.notes['nodes_ready_s']} s")

    def cleanup_existing(self) -> None:
        """What the run made on an existing cluster: the write counters, its namespaces, its Nodes."""
        if self.counter is not None:
            self.counter.remove()
        for ns in (*TEAMS, PROBE_NS):
            try:
                self.core.delete_namespace(ns)
            except kubernetes.client.ApiException as exc:
                if exc.status != 404:
                    raise
        self.core.delete_collection_node(label_selector=BENCH_LABEL)


class Scale(ScaleCluster):
    """The run's phases (fill, backlog, idle, admission and fault probes, restart) and the figures they give."""

    def paced(self, jobs: list[dict[str, Any]], deadline: float) -> int:
        """Create `jobs`, at most fill_window of them not yet placed at a time; wait until all are placed (or the
        deadline). Returns how many were placed."""
        keys = [f"{j['metadata']['namespace']}/{j['metadata']['name']}" for j in jobs]
        todo = list(zip(keys, jobs, strict=True))
        out: set[str] = set()
        while (todo or out) and time.monotonic() < deadline:
            with self.seen.cond:
                out = {k for k in out if not self.placed(k)}
            room = self.s.fill_window - len(out)
            if todo and room > 0:
                batch, todo = todo[:room], todo[room:]
                self.create([j for _, j in batch])
                out |= {k for k, _ in batch}
            self.seen.wait(lambda out=out: any(self.placed(k) for k in out) if out else True, 1.0)
        return sum(1 for k in keys if self.placed(k))

    def fill(self) -> None:
        s = self.s
        deadline = time.monotonic() + s.fill_timeout_s
        started = time.monotonic()
        victims = [probe_job(f"victim-{i:02d}", VICTIM_REPLICAS, PER_NODE, "high") for i in range(s.fault_probes)]
        self.victims = [f"{PROBE_NS}/{v['metadata']['name']}" for v in victims]
        self.say(f"{len(victims)} fault victims in {PROBE_REGION}")
        placed = self.paced(victims, min(deadline, self.op_started + s.start_timeout_s))
        self.notes["operator_start_s"] = round(time.monotonic() - self.op_started, 1)  # to its first placements
        if placed < len(victims):
            raise Abort(f"the operator placed {placed} of {len(victims)} jobs in the free probe region within "
                        f"{s.start_timeout_s:g} s of its start (--start-timeout)")
        self.say(f"operator: first placements {self.notes['operator_start_s']} s after its start")
        jobs = fill_jobs(self.rng, self.layout, max(1, s.jobs - s.backlog - s.fault_probes))
        self.notes["fill_jobs"] = len(jobs)
        self.notes["fill_pods"] = sum(j["spec"]["replicas"]["min"] for j in jobs)
        placed = 0
        for per in (8, 4, 2, 1):
            group = [j for j in jobs if j["spec"]["devices"][0]["perReplica"] == per]
            if group:
                self.say(f"filling: {len(group)} jobs of {per}-device replicas "
                         f"({sum(j['spec']['replicas']['min'] for j in group)} pods)")
                placed += self.paced(group, deadline)
        self.notes["fill_s"] = round(time.monotonic() - started, 1)
        self.notes["fill_placed"] = placed
        self.say(f"fill: {placed} of {len(jobs)} placed in {self.notes['fill_s']} s")
        self.fill_keys = [f"{j['metadata']['namespace']}/{j['metadata']['name']}" for j in jobs]

    def backlog(self) -> None:
        s = self.s
        jobs = backlog_jobs(self.rng, s.backlog)
        started = time.monotonic()
        self.say(f"creating the backlog: {len(jobs)} jobs")
        self.create(jobs)
        keys = [f"{j['metadata']['namespace']}/{j['metadata']['name']}" for j in jobs]
        settled = self.seen.wait(lambda: all(self.seen.phase.get(k) for k in keys), s.settle_timeout_s)
        with self.seen.cond:
            answered = sum(1 for k in keys if self.seen.phase.get(k))
        self.notes.update(backlog_settle_s=round(time.monotonic() - started, 1), settled=settled,
                          backlog_answered=answered, waiting=self.waiting())
        self.say(f"backlog: {answered} of {len(keys)} with a status after {self.notes['backlog_settle_s']} s; "
                 f"{self.notes['waiting']} waiting")

    def waiting(self) -> int:
        with self.seen.cond:
            return sum(1 for k, ph in self.seen.phase.items()
                       if k in self.replicas and ph in ("", "Pending", "Preempted") and not self.placed(k))

    def idle(self) -> None:
        # the running jobs first: at 12,500 nodes the stand-in kubelet starts the fill's pods for minutes after
        # they exist, and each job's status then says Running (a write and an Event each): a change, not idle
        # (`fill_running_s`: until every placed fill job's status says Running, at most 600 s from here)
        started = time.monotonic()
        keys = getattr(self, "fill_keys", [])
        self.seen.wait(lambda: all(self.seen.phase.get(k) in ("Running", "Succeeded") for k in keys
                                   if self.placed(k)), 600)
        self.notes["fill_running_s"] = round(time.monotonic() - started, 1)
        # the operator's trailing writes first: the Events queued while the backlog was told to wait go out one
        # at a time behind its decisions (kube/recorder.py; a bounded queue); the window measures what it writes
        # once that is done, with nothing changing (`idle_drain_s`: how long the drain took, at most 300 s)
        started, last = time.monotonic(), self.operator_writes()
        while time.monotonic() - started < 300:
            time.sleep(5)
            now_w = self.operator_writes()
            if now_w - last <= 5:
                break
            last = now_w
        self.notes["idle_drain_s"] = round(time.monotonic() - started, 1)
        before_by, before_c = self.operator_writes_by(), self.operator_cpu()
        time.sleep(self.s.idle_s)
        after_by, after_c = self.operator_writes_by(), self.operator_cpu()
        before_w, after_w = sum(before_by.values()), sum(after_by.values())
        counted = self.s.kubeconfig is None or self.counter is not None
        self.notes["idle_writes_per_s"] = round((after_w - before_w) / self.s.idle_s, 2) if counted else None
        self.notes["idle_writes_by"] = {k: n - before_by.get(k, 0) for k, n in after_by.items()
                                        if n > before_by.get(k, 0)}  # what the operator wrote meanwhile
        self.notes["idle_cpu_s_per_s"] = round((after_c - before_c) / self.s.idle_s, 3)
        self.say(f"idle {self.s.idle_s:g} s: {after_w - before_w} operator writes, "
                 f"{after_c - before_c:.1f} CPU-s")

    def quiet_cpu(self, start_cpu: float, cap: float | None = None) -> tuple[float, bool]:
        """Operator CPU-seconds since `start_cpu` until it stays under 5 % CPU for 2 s (capped: True)."""
        started = time.monotonic()
        last, quiet_since = self.operator_cpu(), None
        while time.monotonic() - started < (cap or self.s.cycle_window_max_s):
            time.sleep(0.5)
            now = self.operator_cpu()
            if now - last < 0.025:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= 2.0:
                    return self.operator_cpu() - start_cpu, False
            else:
                quiet_since = None
            last = now
        return self.operator_cpu() - start_cpu, True

    def admit(self, use_window: bool) -> None:
        shapes = [(1, 8), (1, 4), (2, 8), (1, 1), (2, 4)]
        times, cycles, timeouts, capped = [], [], 0, 0
        for i in range(self.s.admit_probes):
            replicas, per = shapes[i % len(shapes)]
            obj = probe_job(f"admit-{i:03d}", replicas, per)
            key = f"{PROBE_NS}/admit-{i:03d}"
            started = time.monotonic()
            self.create([obj])
            ok = self.seen.wait(lambda key=key: self.placed(key), self.s.probe_timeout_s)
            times.append(time.monotonic() - started if ok else self.s.probe_timeout_s)
            timeouts += not ok
            cpu0 = self.operator_cpu()
            self.delete_job(key)  # capacity freed (or a request gone): what wakes a scheduling cycle
            if use_window:
                used, cap = self.quiet_cpu(cpu0)
                cycles.append(used)
                capped += cap
            self.seen.wait(lambda key=key: not any(self.seen.live(key, g) for g in self.seen.generations(key)), 60)
            self.say(f"admit {key} ({replicas}x{per}): {times[-1]:.2f} s" + ("" if ok else " (timed out)")
                     + (f"; cycle {cycles[-1]:.2f} CPU-s" + (" (capped)" if cap else "") if use_window else ""))
            # after every probe: a run cut short keeps what it measured
            self.notes.update(admit_free_p95_s=p(times, 0.95), admit_free_p50_s=p(times, 0.5),
                              admit_timeouts=timeouts, admit_samples=[round(t, 2) for t in times])
            if use_window:
                self.notes.update(cycle_cpu_s_p95=p(cycles, 0.95), cycle_cpu_samples=[round(c, 2) for c in cycles],
                                  cycle_windows_capped=capped)
            time.sleep(1.0)

    def faults(self) -> None:
        times, timeouts = [], 0
        for key in self.victims:
            with self.seen.cond:
                gens = [g for g in self.seen.generations(key) if self.seen.live(key, g) >= self.replicas[key]]
                if not gens:
                    self.say(f"fault: {key} is not running; skipped")
                    continue
                gen = gens[-1]
                ns = key.split("/")[0]
                pod = min(self.seen.pods[key][gen])
                where = self.seen.pod_nodes.get(f"{ns}/{pod}")
            if not where:
                continue
            started = time.monotonic()
            if self.s.fault_kind == "lapse":  # its kubelet stops: nothing written but the annotation it reads
                self.core.patch_node(where, {"metadata": {"annotations": {KUBELET_STOPPED: "true"}}})
            else:
                set_node_lost(self.core, where, reachable=self.s.fault_kind == "notready")
            ok = self.seen.wait(lambda key=key, gen=gen: any(
                self.seen.live(key, g) >= self.replicas[key] for g in self.seen.generations(key) if g > gen),
                self.s.probe_timeout_s)
            times.append(time.monotonic() - started if ok else self.s.probe_timeout_s)
            timeouts += not ok
            self.say(f"fault {where} ({key} g{gen}): {times[-1]:.2f} s" + ("" if ok else " (timed out)"))
            set_node_ready(self.core, where)
            self.notes.update(fault_to_pods_p95_s=p(times, 0.95), fault_to_pods_p50_s=p(times, 0.5),
                              fault_timeouts=timeouts, fault_samples=[round(t, 2) for t in times])
            time.sleep(1.0)

    def pod_creates(self) -> int:
        """Pods the operator created so far (POSTs to pods by its client: `operator_writes_by`)."""
        by = self.operator_writes_by()
        return by.get("POST pods", 0) + by.get("CREATE pods", 0)

    def restart(self) -> None:
        """The operator restarted on the full fleet (every Node, pod and job there): from its start until a job
        that fits free room has its pods, the caches' first listing (from its log), the pods it created again
        (none should be: every job's pods are in its caches before its first pass) once it is quiet, and its
        peak RSS. The prober stops first: probe_p99_s times the running operator, not a restart's gap."""
        op = self.procs["operator"]
        self.notes.update(operator_rss_mb=rss_peak_mb(op.pid), operator_cpu_s=round(cpu_seconds(op.pid), 1))
        stop(self.procs.pop("prober", None))
        stop(op)
        creates = self.pod_creates()
        log_path = self.workdir / "operator.log"
        offset = log_path.stat().st_size if log_path.exists() else 0
        started = time.monotonic()
        self.procs["operator"] = spawn(self.operator_cmd, log_path, env=self.operator_env)
        key = f"{PROBE_NS}/restart-000"
        self.create([probe_job("restart-000", 1, PER_NODE)])
        ok = self.seen.wait(lambda: self.placed(key), self.s.start_timeout_s)
        self.notes["restart_first_placement_s"] = round(time.monotonic() - started, 1) if ok else None
        self.say(f"restart: {key} placed {self.notes['restart_first_placement_s']} s after the operator's start")
        cpu, capped = self.quiet_cpu(0.0, cap=self.s.start_timeout_s)  # its CPU from its start
        self.notes.update(restart_quiet_s=round(time.monotonic() - started, 1), restart_quiet_capped=capped,
                          restart_cpu_s=round(cpu, 1), restart_pod_creates_again=self.pod_creates() - creates - 1,
                          restart_rss_mb=rss_peak_mb(self.procs["operator"].pid))
        with log_path.open("rb") as f:
            f.seek(offset)
            synced = [line for line in f.read().decode(errors="replace").splitlines() if "caches synced in" in line]
        self.notes["restart_caches"] = synced[0].split("caches synced in", 1)[1].strip() if synced else None
        self.say(f"restart: quiet after {self.notes['restart_quiet_s']} s, {self.notes['restart_cpu_s']} CPU-s; "
                 f"caches synced in {self.notes['restart_caches']}; pods created again: "
                 f"{self.notes['restart_pod_creates_again']}")

    def probes(self) -> dict[str, Any]:
        path = self.workdir / "probes.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
        by = {w: [r["s"] for r in rows if r["what"] == w] for w in ("healthz", "metrics", "alert")}
        return {"probe_p99_s": p([r["s"] for r in rows], 0.99), "probe_count": len(rows),
                "probe_failures": sum(1 for r in rows if not r["ok"]),
                "probe_p99_by_endpoint_s": {w: p(v, 0.99) for w, v in by.items()}}

    def run(self) -> dict[str, Any]:
        try:
            self.phases()
        except (Abort, KeyboardInterrupt) as exc:
            self.notes["aborted"] = str(exc) or type(exc).__name__
            self.say(f"aborted: {self.notes['aborted']}")
        finally:
            for stream in self.streams:
                stream.stopped.set()
            self.collect()
            for name in ("prober", "operator"):
                stop(self.procs.get(name))
            if self.made_on_existing:
                try:
                    self.cleanup_existing()  # the kubelet stand-in still finishes the pods' deletions
                except (kubernetes.client.ApiException, urllib3.exceptions.HTTPError) as exc:
                    self.say(f"cleanup: {exc}")
                time.sleep(5)
            for name in [n for n in self.procs if n.startswith(("kubelet", "heartbeats"))]:
                stop(self.procs.get(name))
            if getattr(self, "emu", None) is not None:
                self.emu.stop()
        return self.result()

    def collect(self) -> None:
        """What the operator process shows at the end (while it still runs)."""
        op = self.procs.get("operator")
        alive = op is not None and op.poll() is None
        self.notes["operator_alive"] = alive
        if alive and op is not None and "operator_rss_mb" not in self.notes:  # else restart() has them
            self.notes.update(operator_rss_mb=rss_peak_mb(op.pid), operator_cpu_s=round(cpu_seconds(op.pid), 1))
        if alive and op is not None:
            try:
                self.say(f"writes by client: {self.writes()}")
            except urllib3.exceptions.HTTPError:
                pass
        try:  # the whole run's, from `writes_source` on an existing cluster: the two setups' counts side by side
            self.notes["operator_writes_by"] = self.operator_writes_by()
        except (urllib3.exceptions.HTTPError, kubernetes.client.ApiException, RuntimeError, AttributeError):
            pass
        if getattr(self, "emu", None) is not None and self.emu.pid:
            self.notes["emulator_cpu_s"] = round(cpu_seconds(self.emu.pid), 1)
        if getattr(self, "apiserver_cpu0", None) is not None:  # its own process_cpu_seconds_total, over the run
            try:
                self.notes["apiserver_cpu_s"] = round((existing.apiserver_cpu_seconds(self.api) or 0.0)
                                                      - self.apiserver_cpu0, 1)
            except (kubernetes.client.ApiException, urllib3.exceptions.HTTPError):
                pass
        if self.procs.get("kubelet") is not None and self.procs["kubelet"].poll() is None:
            self.notes["kubelet_cpu_s"] = round(cpu_seconds(self.procs["kubelet"].pid), 1)
        beats = [p for n, p in self.procs.items() if n.startswith("heartbeats") and p.poll() is None]
        if beats:
            self.notes["heartbeats_cpu_s"] = round(sum(cpu_seconds(p.pid) for p in beats), 1)

    def phases(self) -> None:
        self.start()
        self.fill()
        self.backlog()
        at_start = self.metrics()
        first = cycle_histogram(at_start)
        self.notes["cycle_cpu_source"] = "metric" if first is not None else "window"
        self.idle()
        self.admit(use_window=first is None)
        self.faults()
        at_end = self.metrics()
        self.notes.update(gc_pauses(at_start, at_end))
        if first is not None:
            last = cycle_histogram(at_end) or first
            self.notes["cycle_cpu_s_p95"] = histogram_quantile(first, last, 0.95)
            self.notes["cycle_count"] = int(last.get(float("inf"), 0) - first.get(float("inf"), 0))
            self.notes["cycle_cpu_share_le"] = histogram_shares(first, last)
        self.notes["waiting_end"] = self.waiting()
        if self.s.restart:
            self.restart()

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: self.notes.get(k) for k in (
            "cycle_cpu_s_p95", "admit_free_p95_s", "fault_to_pods_p95_s", "idle_writes_per_s", "operator_rss_mb")}
        out.update(self.probes())
        out["wall_s"] = round(time.monotonic() - self.t0, 1)
        out.update({k: v for k, v in self.notes.items() if k not in out})
        out["backlog"], out["jobs"] = self.s.backlog, self.s.jobs
        out["targets"] = dict(TARGETS)
        out["met"] = {k: out.get(k) is not None and out[k] <= t for k, t in TARGETS.items()}
        return out


def cycle_histogram(text: str | None) -> dict[float, float] | None:
    """le -> cumulative count of heterojob_scheduler_cycle_cpu_seconds in a /metrics answer; None when absent."""
    return histogram(text, "heterojob_scheduler_cycle_cpu_seconds")


def histogram(text: str | None, name: str, **labels: str) -> dict[float, float] | None:
    """le -> cumulative count of histogram `name`'s series with these labels in a /metrics answer; None when
    absent."""
    if not text:
        return None
    out: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{name}_bucket" and all(sample.labels.get(k) == v for k, v in labels.items()):
                out[float(sample.labels["le"])] = sample.value
    return out or None


def gc_pauses(first: str | None, last: str | None) -> dict[str, Any]:
    """The operator's collector passes between two /metrics readings (`heterojob_gc_pause_seconds`): full passes
    (generation 2) and passes of any generation over 0.25 s (each a stall of the event loop: probes, passes and
    webhooks wait)."""
    out: dict[str, Any] = {}
    long = 0.0
    for generation in ("0", "1", "2"):
        a, b = histogram(first, "heterojob_gc_pause_seconds", generation=generation), \
            histogram(last, "heterojob_gc_pause_seconds", generation=generation)
        if b is None:
            continue
        a = a or {}
        count = b.get(float("inf"), 0.0) - a.get(float("inf"), 0.0)
        long += count - (b.get(0.25, 0.0) - a.get(0.25, 0.0))
        if generation == "2":
            out["gc_full_passes"] = int(count)
            out["gc_full_p95_le_s"] = histogram_quantile(a, b, 0.95) if count else None
    if out:
        out["gc_pauses_over_0_25_s"] = int(long)
    return out


def histogram_quantile(first: dict[float, float], last: dict[float, float], q: float) -> float | None:
    """The upper bound of the bucket holding the q-quantile of the observations between two readings."""
    delta = {le: last.get(le, 0.0) - first.get(le, 0.0) for le in last}
    total = delta.get(float("inf"), 0.0)
    if total <= 0:
        return None
    for le in sorted(delta):
        if delta[le] >= q * total:
            return le if le != float("inf") else max((b for b in delta if b != float("inf")), default=None)
    return None


def histogram_shares(first: dict[float, float], last: dict[float, float]) -> dict[str, float]:
    """Bucket bound -> share of the observations between two readings at or under it (how far under the target
    the quantile's bucket is: the p95 names only a bucket's upper bound)."""
    total = last.get(float("inf"), 0.0) - first.get(float("inf"), 0.0)
    return {f"{le:g}": round((last.get(le, 0.0) - first.get(le, 0.0)) / total, 3)
            for le in sorted(last) if le != float("inf") and total > 0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a small run for the test suite")
    ap.add_argument("--devices", type=int, default=None, help="devices in the fleet (100,000; quick 2,000)")
    ap.add_argument("--jobs", type=int, default=None, help="HeteroJobs (10,000; quick 300)")
    ap.add_argument("--backlog", type=int, default=None, help="of them waiting (half the jobs)")
    ap.add_argument("--admit-probes", type=int, default=None, help="jobs timed to their pods (20; quick 5)")
    ap.add_argument("--fault-probes", type=int, default=None, help="node faults timed (10; quick 3)")
    ap.add_argument("--idle-seconds", type=float, default=None, help="the idle window (60; quick 15)")
    ap.add_argument("--probe-timeout", type=float, default=None, help="per admission or fault probe (120; quick 60)")
    ap.add_argument("--start-timeout", type=float, default=None,
                    help="from the operator's start to its first placements (1800; quick 300)")
    ap.add_argument("--fill-timeout", type=float, default=None, help="placing the running jobs (3600; quick 300)")
    ap.add_argument("--settle-timeout", type=float, default=None,
                    help="until every waiting job has a status (900; quick 120)")
    ap.add_argument("--cycle-window-max", type=float, default=None,
                    help="longest CPU window of one cycle without the metric (120; quick 30)")
    ap.add_argument("--fault-kind", choices=("unreachable", "notready", "lapse"), default="unreachable",
                    help="a dead node (Ready Unknown: no checkpoint can be had) or a NotReady one that still answers "
                         "(its jobs checkpoint first), each written as the node lifecycle controller writes it; "
                         "lapse (--kubeconfig only): the node's heartbeats stop and the cluster's controller marks it")
    ap.add_argument("--kubeconfig", type=Path, default=None,
                    help="an existing cluster's admin kubeconfig: run there instead of the API emulator (its "
                         "kube-scheduler binds, its node lifecycle controller watches the Leases)")
    ap.add_argument("--fill-window", type=int, default=100, help="running jobs created but not yet placed, at most")
    ap.add_argument("--resync-seconds", type=float, default=30.0, help="the operator's --resync-seconds")
    ap.add_argument("--seed", type=int, default=35)
    ap.add_argument("--no-restart", action="store_true",
                    help="skip the last phase: the operator restarted on the full fleet (restart_* figures)")
    ap.add_argument("--workdir", type=Path, default=None, help="keep the logs here (operator.log, probes.jsonl)")
    ap.add_argument("--operator-source", type=Path, default=None,
                    help="run the operator package in this directory (e.g. another checkout's operator/)")
    ap.add_argument("--run-kubelet", metavar="KUBECONFIG", help=argparse.SUPPRESS)
    ap.add_argument("--real", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--run-heartbeats", nargs=3, metavar=("KUBECONFIG", "SHARD", "SHARDS"), help=argparse.SUPPRESS)
    ap.add_argument("--run-prober", nargs=3, metavar=("HEALTH_URL", "ALERTS_PORT", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.run_kubelet:
        return run_kubelet(args.run_kubelet, args.real)
    if args.run_heartbeats:
        return run_heartbeats(args.run_heartbeats[0], int(args.run_heartbeats[1]), int(args.run_heartbeats[2]))
    if args.fault_kind == "lapse" and args.kubeconfig is None:
        ap.error("--fault-kind lapse needs --kubeconfig (the emulated cluster's nodes are marked by the bench)")
    if args.run_prober:
        return run_prober(args.run_prober[0], int(args.run_prober[1]), args.run_prober[2])
    quick = args.quick

    def pick(value: Any, full: Any, small: Any) -> Any:
        return value if value is not None else small if quick else full

    jobs = pick(args.jobs, 10_000, 300)
    settings = Settings(devices=pick(args.devices, 100_000, 2_000), jobs=jobs, backlog=pick(args.backlog, jobs // 2,
                        jobs // 2), admit_probes=pick(args.admit_probes, 20, 5), fault_probes=pick(args.fault_probes,
                        10, 3), idle_s=pick(args.idle_seconds, 60.0, 15.0), probe_timeout_s=pick(args.probe_timeout,
                        120.0, 60.0), fill_timeout_s=pick(args.fill_timeout, 3600.0, 300.0),
                        settle_timeout_s=pick(args.settle_timeout, 900.0, 120.0),
                        cycle_window_max_s=pick(args.cycle_window_max, 120.0, 30.0), fill_window=args.fill_window,
                        start_timeout_s=pick(args.start_timeout, 1800.0, 300.0),
                        resync_s=args.resync_seconds, seed=args.seed, fault_kind=args.fault_kind,
                        restart=not args.no_restart, kubeconfig=args.kubeconfig)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="heterojob-scale-"))
    workdir.mkdir(parents=True, exist_ok=True)
    result = Scale(settings, workdir, args.operator_source).run()
    print(f"logs: {workdir}", file=sys.stderr)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
