"""Chaos: random disruptions against the real operator on a nearly full emulated fleet, judged from the API.

Set-up: the API emulator in its own process; the real operator as a separate process
(`python -m heterojob operator run --standalone`, resync 2 s, alert port on) so it can be `kill -9`ed and
restarted; the stand-in kubelet in this process (it binds and runs pods and answers checkpoint requests
like the SDK, except on jobs that run "without the SDK"). 15 nodes (6 H100, 4 A100 in cn-east; 5 Ascend
910B in cn-north, 8 devices each) are filled to 90%+ with gangs of 1-4 replicas, three priorities, some
elastic, some with a second device class, then a few larger jobs wait in the queue; where the operator's
own placement leaves holes, low-priority one-replica jobs the size of the hole are added.

Then `--events` random events from a seeded RNG (`--seed`), one every 0.15-0.65 s:
- migrate: `heterojob.io/migrate: chaos-<n>` on a Running job; cancel: the bench removes one it set;
- xid: an Alertmanager-shaped `HeteroJobGPUFatalXID` (webhook v4, bearer token) posted to the operator's
  /alerts naming a node, the GPU and the workload pod on it (as dcgm-exporter labels it); resolved when
  the job left (plus 2-6 s) or after 31 s;
- notready: a node's Ready condition goes False with the node-lifecycle taint; back the same way;
- kill: `kill -9` of the operator, restarted after 0-1.5 s (not within 10 s of its last start: a kill
  measures recovery, not starvation);
- refuse: for 2-6 s, pod creation is refused in namespace chaos-b: a ResourceQuota `pods` at the live pod
  count or one more (transient, 403 exceeded quota; with one more, a gang gets a replica created and the
  next refused) or, one time in four, PodSecurity `restricted` on the namespace (permanent, 403).
At most 3 node faults at once; one refusal window at a time.

Invariants, checked from API state only (a poll of jobs, pods every 0.5 s and a watch on HeteroJobs):
- stranded: a job that had its whole gang Running, then had no live pod at all for more than 20 s of
  operator uptime (or for more than 5 s while its status said NoRoom / "no room": it gave up its devices
  with nowhere to go), with no involuntary cause since it last had its whole gang: no node fault (NotReady or
  XID) on a node it ran on, was reserved or placed on, no refusal window in its namespace, not preempted
  or reclaimed (phase Preempted, or a `preempt`/`reclaim` history entry), not terminal. It lost its
  devices to a voluntary move (manual, resize, ...) and sat without room: make before break was broken.
- left_on_failed_device_s_max: over every node fault, the longest time a pod stayed live (not deleted, not
  finished) on the faulty node: for NotReady, any pod there at the fault or placed there during it; for an
  XID, the pods of the job the alert names. Operator uptime is not deducted: a restart must be fast.
- partial_gangs: a job saying Running/Admitted whose live pods of its placement generation are fewer than
  `status.placement.replicas`, or any job with live pods of two generations, for more than 10 s of
  operator uptime (counted once per job and episode).
- lost_requests: a migrate annotation the bench set that was never seen served (status.handled.migrate
  equal to it, or the placement generation above the one it was set on, at any poll), not cancelled by the
  bench, not in progress at the end
  (status.migration.request equals it) and not still set while held (a True MoveHeld/MigrationHeld
  condition) or while the job is not Running (it is moving or waiting for room for another reason: the
  request is read when it runs again); a job that ended (Failed/Succeeded) is not counted. Before judging,
  the bench waits (up to 30 s) until no Running job has an unanswered request.
- ledger_mismatches: a node whose live pods hold more devices than it has, for 2 s; at the end, after
  settling, a job whose live pods do not sit on status.placement.nodes by rank, live pods of another
  generation than its placement, or live pods of a job that has no placement or has ended.
- hot_loops: a job whose status changed more than 20 times, or whose placement generation rose more than
  3 times, within 10 s with no bench event touching it (on it, its nodes, its namespace, or an operator
  restart) from 3 s before that window to its end.
Also: events (bench-initiated events, recoveries not counted), wall_s, and for reading: allocation at the
start, events by kind, operator restarts and tracebacks in its log, jobs Failed, pods placed on an XID node
while the alert fired. Details of every violation go to stderr; the
bench's event journal (journal.txt) and the operator's output (operator.log), both stamped with the bench's
clock, go to --workdir. Last line: one JSON object; exit 1 when an
invariant fails. `k8s_default_left_s` is the baseline: what Kubernetes alone leaves pods on a NotReady node
(40 s node-monitor grace + 300 s default not-ready toleration).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes
import urllib3


from heterojob.constants import (ANNOTATION_MIGRATE, ANNOTATION_NODE, GROUP, LABEL_GENERATION,
                                 LABEL_JOB, LABEL_RANK, VERSION)
from heterojob.sim.cluster.harness import Emulator, seed
from heterojob.sim.cluster.kubelet import Kubelet, pod_devices
from heterojob.sim.cluster.nodes import node
from heterojob.sim.telemetry.prometheus import free_port

TOKEN = "chaos-token"
NAMESPACES = ("chaos-a", "chaos-b")
REFUSING_NS = "chaos-b"
POOLS = {"nvidia-h100": ("cn-east", 6), "nvidia-a100": ("cn-east", 4), "ascend-910b": ("cn-north", 5)}
PER_NODE = 8
SHAPES = {"nvidia-h100": [(1, 2), (1, 4), (1, 8), (2, 4), (2, 8), (3, 8)],
          "nvidia-a100": [(1, 2), (1, 4), (1, 8), (2, 4), (2, 8)],
          "ascend-910b": [(4, 8), (1, 4), (1, 8), (2, 8)]}
FILL = 0.92
MAX_FAULTS = 3
STRAND_GRACE_S = 20.0
NOROOM_GRACE_S = 5.0
PARTIAL_GRACE_S = 10.0
OVERCOMMIT_GRACE_S = 2.0
LEFT_TARGET_S = 30.0
FAULT_MAX_S = 31.0
HOT_WINDOW_S, HOT_RV, HOT_GEN, HOT_QUIET_BEFORE_S = 10.0, 20, 3, 3.0
WARMUP_S = 8.0  # after an operator (re)start, its clocks (partial, stranded) start counting
K8S_DEFAULT_LEFT_S = 40.0 + 300.0
VOLUNTARY_PHASES_OK = ("Running",)


def now_iso() -> str:
    return datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the fleet ------------------------------------------------------------------------------------

def fleet_nodes() -> list[dict[str, Any]]:
    out = []
    for cls, (region, count) in POOLS.items():
        for i in range(count):
            out.append(node(f"{cls.split('-')[-1]}-{i}", region, cls, devices=PER_NODE))
    return out


def plan_jobs(rng: random.Random) -> list[tuple[str, str, dict[str, Any]]]:
    """(namespace, name, spec): gangs first-fit into each class's nodes up to FILL, then a queue that waits."""
    jobs: list[tuple[str, str, dict[str, Any]]] = []
    n = 0
    for cls, (_, count) in POOLS.items():
        bins = [PER_NODE] * count
        target = FILL * PER_NODE * count
        attempts = 0
        while PER_NODE * count - sum(bins) < target and attempts < 200:
            attempts += 1
            replicas, per = rng.choice(SHAPES[cls])
            trial = sorted(bins, reverse=True)
            placed = 0
            for _ in range(replicas):
                for i, free in enumerate(trial):
                    if free >= per:
                        trial[i] -= per
                        placed += 1
                        break
            if placed < replicas:
                continue
            bins = trial
            jobs.append(job_spec(rng, n, cls, replicas, per))
            n += 1
    for cls, replicas, per in (("nvidia-h100", 2, 8), ("ascend-910b", 1, 8), ("nvidia-a100", 1, 8)):
        jobs.append(job_spec(rng, n, cls, replicas, per, priority=rng.choice(["high", "medium"])))
        n += 1
    return jobs


def job_spec(rng: random.Random, n: int, cls: str, replicas: int, per: int,
             priority: str | None = None) -> tuple[str, str, dict[str, Any]]:
    devices = [{"deviceClass": cls, "perReplica": per}]
    if cls.startswith("nvidia") and rng.random() < 0.5:
        devices.append({"deviceClass": "nvidia-a100" if cls == "nvidia-h100" else "nvidia-h100", "perReplica": per})
    elastic = replicas == 1 and per <= 4 and rng.random() < 0.4
    env = [{"name": "HETEROJOB_SIM_DURATION", "value": "100000"}]
    if rng.random() < 0.15:
        env.append({"name": "HETEROJOB_SIM_NO_SDK", "value": "1"})  # checkpoints time out
    spec = {
        "priority": priority or rng.choices(["low", "medium", "high"], [3, 5, 2])[0],
        "replicas": {"min": 1, "max": 2, "initial": 1} if elastic else {"min": replicas},
        "devices": devices,
        "checkpoint": {"timeoutSeconds": 4},
        "policy": {"cooldownSeconds": 3, "maxMigrationsPerHour": 60},
        "template": {"spec": {"containers": [{"name": "main", "image": "train:latest", "env": env}]}},
    }
    namespace = NAMESPACES[1] if rng.random() < 0.35 else NAMESPACES[0]
    return namespace, f"job-{n:02d}", spec


# --- the operator process -------------------------------------------------------------------------

class OperatorProcess:
    def __init__(self, kubeconfig: Path, log_path: Path, alerts_port: int, source: Path | None = None) -> None:
        """`source`: run the operator package found there (a checkout's operator/ directory) instead."""
        self.kubeconfig, self.log_path, self.alerts_port, self.source = kubeconfig, log_path, alerts_port, source
        self.proc: subprocess.Popen[bytes] | None = None
        self.t0 = time.monotonic()
        self.started_at = 0.0
        self.restarts = 0

    def start(self) -> None:
        cmd = [sys.executable, "-m", "heterojob", "operator", "run", "--standalone", "--kubeconfig",
               str(self.kubeconfig), "--resync-seconds", "2", "--preemption-min-runtime", "20",
               "--disruption-budget", "3", "--alerts-port", str(self.alerts_port)]
        env = {**os.environ, "HETEROJOB_ALERT_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1"}
        if self.source is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(self.source), env.get("PYTHONPATH", "")])
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        self.started_at = time.monotonic()
        threading.Thread(target=self._copy_log, args=(self.proc,), daemon=True).start()

    def _copy_log(self, proc: subprocess.Popen[bytes]) -> None:
        """The operator's output into the log, each line stamped with the bench's clock (as in the journal)."""
        assert proc.stdout is not None
        with self.log_path.open("ab") as log:
            log.write(f"[{time.monotonic() - self.t0:7.1f}s] --- operator pid {proc.pid} started\n".encode())
            for line in proc.stdout:
                log.write(f"[{time.monotonic() - self.t0:7.1f}s] ".encode() + line)
                log.flush()

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def up(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def warm(self, now: float) -> bool:
        return self.up() and now - self.started_at >= WARMUP_S

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill9()
        self.proc = None


# --- what the bench knows and saw -----------------------------------------------------------------

@dataclass
class Fault:
    kind: str  # notready | xid
    node: str
    start: float
    end: float | None = None
    target_job: str | None = None  # xid: namespace/name of the job on the failed GPU
    fingerprint: str = ""
    starts_at: str = ""
    pods: dict[str, float] = field(default_factory=dict)  # pod key -> when first seen live on the node (clocked)
    left: dict[str, float] = field(default_factory=dict)  # pod key -> seconds it stayed
    clear_since: float | None = None
    linger: float = 3.0
    pod: dict[str, Any] | None = None  # xid: the workload pod on the failed GPU


@dataclass
class Request:
    job: str
    value: str
    t: float
    generation: int
    cancelled: bool = False
    served: bool = False  # seen served at some poll (a later request may overwrite status.handled)


@dataclass
class Track:
    had_full: bool = False
    involuntary: bool = False
    gap_start: float | None = None  # op clock
    noroom_since: float | None = None  # op clock
    stranded: bool = False
    partial_since: float | None = None
    partial_counted: bool = False
    twogen_since: float | None = None
    twogen_counted: bool = False
    rv_times: list[float] = field(default_factory=list)
    gen_times: list[float] = field(default_factory=list)
    last_rv: str = ""
    last_gen: int = 0
    touches: list[float] = field(default_factory=list)


def live(pod: dict[str, Any]) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and \
        (pod.get("status") or {}).get("phase", "Pending") not in ("Succeeded", "Failed")


def pod_node(pod: dict[str, Any]) -> str:
    return (pod.get("spec") or {}).get("nodeName") or (pod["metadata"].get("annotations") or {}).get(ANNOTATION_NODE, "")


def job_key_of(pod: dict[str, Any]) -> str:
    return f"{pod['metadata']['namespace']}/{(pod['metadata'].get('labels') or {}).get(LABEL_JOB, '')}"


def pod_key(pod: dict[str, Any]) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def pod_gen(pod: dict[str, Any]) -> int:
    try:
        return int((pod["metadata"].get("labels") or {}).get(LABEL_GENERATION, "0"))
    except ValueError:
        return 0


class Observer:
    """What the bench knows and saw: the jobs and pods polled from the API, the HeteroJob watch's changes per job,
    the faults, requests and refusals the bench made, its journal; and waiting for the fleet to settle."""

    def __init__(self, seed_: int, workdir: Path) -> None:
        self.rng = random.Random(seed_)
        self.workdir = workdir
        self.lock = threading.RLock()
        self.faults: list[Fault] = []
        self.requests: list[Request] = []
        self.tracks: dict[str, Track] = {}
        self.violations: dict[str, list[str]] = {k: [] for k in (
            "stranded", "left_on_failed_device", "partial_gangs", "lost_requests", "ledger_mismatches", "hot_loops")}
        self.overcommit_since: dict[str, float] = {}
        self.overcommit_counted: set[str] = set()
        self.refusal: tuple[str, float, float] | None = None  # (kind, start, end)
        self.refusal_ended = -1e9
        self.op_clock = 0.0
        self.jobs: dict[str, dict[str, Any]] = {}
        self.pods: list[dict[str, Any]] = []
        self.kinds: dict[str, int] = {}
        self.journal: list[tuple[float, str]] = []  # (t, what): the bench's event sequence
        self.xid_placed = 0
        self.t0 = time.monotonic()
        self._stop = threading.Event()

    # -- plumbing --
    def note(self, what: str) -> None:
        self.journal.append((time.monotonic() - self.t0, what))

    def touch(self, keys: Iterable[str]) -> None:
        t = time.monotonic()
        with self.lock:
            for k in keys:
                self.tracks.setdefault(k, Track()).touches.append(t)

    def jobs_on(self, node_name: str) -> set[str]:
        with self.lock:
            keys = {job_key_of(p) for p in self.pods if live(p) and pod_node(p) == node_name}
            for key, job in self.jobs.items():
                s = job.get("status") or {}
                nodes = set((s.get("placement") or {}).get("nodes") or [])
                nodes |= set((((s.get("migration") or {}).get("reserved")) or {}).get("nodes") or [])
                if node_name in nodes:
                    keys.add(key)
        return keys

    def history(self, key: str, last: int = 12) -> str:
        """The bench's events that concern the job: on it, its nodes, its namespace, the operator."""
        ns, name = key.split("/")
        s = (self.jobs.get(key) or {}).get("status") or {}
        nodes = set((s.get("placement") or {}).get("nodes") or []) | {
            pod_node(p) for p in self.pods if job_key_of(p) == key}
        mine = {name, ns, *nodes}
        rows = [f"{t:.1f}s {w}" for t, w in self.journal if mine & set(w.split()) or "operator" in w]
        return "; ".join(rows[-last:])

    def status_brief(self, key: str) -> str:
        job = self.jobs.get(key) or {}
        s = job.get("status") or {}
        p = s.get("placement") or {}
        conds = [f"{c.get('type')}={c.get('status')}/{c.get('reason')}" for c in s.get("conditions") or []]
        return (f"phase={s.get('phase')} reason={s.get('reason')} message={str(s.get('message'))[:160]!r} "
                f"placement=g{p.get('generation')}:{p.get('nodes')} migration={s.get('migration')} "
                f"handled={s.get('handled')} conditions={conds} "
                f"annotations={((job.get('metadata') or {}).get('annotations') or {}).get(ANNOTATION_MIGRATE)}")

    # -- observation --
    def watch_loop(self, custom: kubernetes.client.CustomObjectsApi) -> None:
        while not self._stop.is_set():
            try:
                w = kubernetes.watch.Watch()
                for ev in w.stream(custom.list_cluster_custom_object, GROUP, VERSION, "heterojobs",
                                   timeout_seconds=5, _request_timeout=10):
                    obj = ev["object"]
                    key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
                    rv = obj["metadata"].get("resourceVersion", "")
                    gen = int((((obj.get("status") or {}).get("placement")) or {}).get("generation") or 0)
                    t = time.monotonic()
                    with self.lock:
                        tr = self.tracks.setdefault(key, Track())
                        if rv and rv != tr.last_rv:
                            if tr.last_rv:
                                tr.rv_times.append(t)
                            tr.last_rv = rv
                        if gen != tr.last_gen:
                            if tr.last_gen:
                                tr.gen_times.append(t)
                            tr.last_gen = gen
                    if self._stop.is_set():
                        w.stop()
                        break
            except Exception as exc:  # noqa: BLE001 - re-watch
                if not self._stop.is_set():
                    print(f"watch: {exc}", file=sys.stderr)
                    self._stop.wait(0.5)

    def settled_now(self) -> bool:
        with self.lock:
            for key, job in self.jobs.items():
                s = job.get("status") or {}
                if s.get("phase") in ("Checkpointing", "Migrating", "Admitted", "Resizing"):
                    if s.get("phase") != "Migrating" or any(job_key_of(p) == key and live(p) for p in self.pods):
                        return False
                placement = s.get("placement") or {}
                pods = [p for p in self.pods if live(p) and job_key_of(p) == key]
                if any((p.get("status") or {}).get("phase") != "Running" for p in pods):
                    return False
                if s.get("phase") == "Running" and len(pods) != int(placement.get("replicas") or 0):
                    return False
                asked = ((job.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_MIGRATE)
                if s.get("phase") == "Running" and asked and asked != (s.get("handled") or {}).get("migrate") \
                        and not self.held(s):
                    return False  # give the operator time to serve or hold it
        return True

    @staticmethod
    def held(s: dict[str, Any]) -> bool:
        return any(c.get("status") == "True" and ({"MoveHeld", "MigrationHeld"} & {c.get("type"), c.get("reason")})
                   for c in s.get("conditions") or [] if isinstance(c, dict))

    def settle(self, quiet_s: float = 4.0, limit_s: float = 30.0) -> bool:
        deadline = time.monotonic() + limit_s
        calm_since: float | None = None
        while time.monotonic() < deadline:
            if self.settled_now():
                calm_since = calm_since or time.monotonic()
                if time.monotonic() - calm_since >= quiet_s:
                    return True
            else:
                calm_since = None
            time.sleep(0.5)
        return False


class Invariants(Observer):
    """The invariants (the module docstring's list), judged from what the Observer saw: on every poll of the jobs
    and pods (`observe_loop`, `check`) and once at the end, after settling (`final_checks`)."""

    def observe_loop(self, core: kubernetes.client.CoreV1Api, custom: kubernetes.client.CustomObjectsApi,
                     operator: OperatorProcess) -> None:
        last = time.monotonic()
        while not self._stop.is_set():
            t = time.monotonic()
            if operator.warm(t):
                self.op_clock += t - last
            last = t
            try:
                jobs = json.loads(custom.list_cluster_custom_object(GROUP, VERSION, "heterojobs",
                                                                    _preload_content=False).data)["items"]
                pods = json.loads(core.list_pod_for_all_namespaces(label_selector=LABEL_JOB,
                                                                   _preload_content=False).data)["items"]
            except Exception as exc:  # noqa: BLE001 - keep observing
                print(f"observer: {exc}", file=sys.stderr)
                self._stop.wait(0.5)
                continue
            with self.lock:
                self.jobs = {f"{j['metadata']['namespace']}/{j['metadata']['name']}": j for j in jobs}
                self.pods = pods
                self.check(t)
            self._stop.wait(0.5)

    def check(self, t: float) -> None:
        by_job: dict[str, list[dict[str, Any]]] = {}
        for p in self.pods:
            if live(p):
                by_job.setdefault(job_key_of(p), []).append(p)
        # faults: who is (still) on the faulty node
        for f in self.faults:
            if f.end is not None:
                continue
            on = [p for p in self.pods if live(p) and pod_node(p) == f.node]
            if f.kind == "xid":
                newcomers = [p for p in on if job_key_of(p) != f.target_job and pod_key(p) not in f.pods]
                for p in newcomers:
                    f.pods[pod_key(p)] = -1.0  # placed on the failed node after the alert: counted apart
                    self.xid_placed += 1
                on = [p for p in on if job_key_of(p) == f.target_job]
            keys = {pod_key(p) for p in on}
            for k in keys:
                f.pods.setdefault(k, t)
            for k, since in f.pods.items():
                if since >= 0 and k not in keys and k not in f.left:
                    f.left[k] = t - since
            if keys:
                f.clear_since = None
            elif f.clear_since is None:
                f.clear_since = t
        faulty = {f.node for f in self.faults if f.end is None}
        # node overcommit
        held: dict[str, int] = {}
        who: dict[str, set[str]] = {}
        for p in self.pods:
            if live(p) and pod_node(p):
                held[pod_node(p)] = held.get(pod_node(p), 0) + pod_devices(p)
                who.setdefault(pod_node(p), set()).add(p["metadata"]["name"])
        for n, used in held.items():
            if used > PER_NODE:
                since = self.overcommit_since.setdefault(n, t)
                tag = f"{n}:{sorted(who[n])}"
                if t - since > OVERCOMMIT_GRACE_S and tag not in self.overcommit_counted:
                    self.overcommit_counted.add(tag)
                    self.violations["ledger_mismatches"].append(
                        f"node {n}: live pods hold {used} of {PER_NODE} devices for {t - since:.1f}s: {sorted(who[n])}")
            else:
                self.overcommit_since.pop(n, None)
        refusing = self.refusal is not None or t - self.refusal_ended < 5.0
        for r in self.requests:
            if not r.served:
                s = (self.jobs.get(r.job) or {}).get("status") or {}
                r.served = (s.get("handled") or {}).get("migrate") == r.value or \
                    int(((s.get("placement") or {}).get("generation")) or 0) > r.generation
        for key, job in self.jobs.items():
            s = job.get("status") or {}
            tr = self.tracks.setdefault(key, Track())
            phase = s.get("phase")
            placement = s.get("placement") or {}
            pods = by_job.get(key, [])
            gen = int(placement.get("generation") or 0)
            mine = [p for p in pods if pod_gen(p) == gen]
            history = s.get("history") or []
            last_action = str((history[-1] or {}).get("action", "")) if history and isinstance(history[-1], dict) else ""
            # stranded
            if phase in ("Failed", "Succeeded"):
                tr.involuntary, tr.gap_start = True, None
            full = (phase == "Running" and placement and len(mine) == int(placement.get("replicas") or 0)
                    and all((p.get("status") or {}).get("phase") == "Running" for p in mine))
            if full:
                tr.had_full, tr.involuntary, tr.gap_start = True, False, None
            # after `full`: a fault on its nodes marks it even while its pods still run there
            reserved = (((s.get("migration") or {}).get("reserved")) or {}).get("nodes") or []
            if faulty & ({pod_node(p) for p in pods} | set(placement.get("nodes") or []) | set(reserved)):
                tr.involuntary = True
            if (phase == "Preempted" or "reempt" in str(s.get("reason") or "") or "preempt" in last_action
                    or "reclaim" in last_action or (refusing and key.startswith(REFUSING_NS + "/"))):
                tr.involuntary = True
            if tr.had_full and not pods and not tr.involuntary:
                noroom = s.get("reason") == "NoRoom" or "no room" in str(s.get("message") or "")
                if tr.gap_start is None:
                    tr.gap_start = self.op_clock
                if noroom and tr.noroom_since is None:
                    tr.noroom_since = self.op_clock
                if not noroom:
                    tr.noroom_since = None
                gap = self.op_clock - tr.gap_start
                waiting = self.op_clock - tr.noroom_since if tr.noroom_since is not None else 0.0
                if (gap > STRAND_GRACE_S or waiting > NOROOM_GRACE_S) and not tr.stranded:
                    tr.stranded = True
                    self.violations["stranded"].append(
                        f"{key}: no pods for {gap:.0f}s of operator uptime ({waiting:.0f}s of them saying no room) "
                        f"after a voluntary move; API: {self.status_brief(key)}; bench events: {self.history(key)}")
            elif pods:
                tr.gap_start = tr.noroom_since = None
            # partial gangs
            short = phase in ("Running", "Admitted") and placement and len(mine) < int(placement.get("replicas") or 0)
            if short:
                if tr.partial_since is None:
                    tr.partial_since = self.op_clock
                elif self.op_clock - tr.partial_since > PARTIAL_GRACE_S and not tr.partial_counted:
                    tr.partial_counted = True
                    self.violations["partial_gangs"].append(
                        f"{key}: says {phase} with {len(mine)} of {placement.get('replicas')} live pods of generation "
                        f"{gen} for {self.op_clock - tr.partial_since:.0f}s; pods={[p['metadata']['name'] for p in pods]}; "
                        f"API: {self.status_brief(key)}; bench events: {self.history(key)}")
            else:
                tr.partial_since, tr.partial_counted = None, False
            gens = {pod_gen(p) for p in pods if (p.get("status") or {}).get("phase") == "Running"}
            if len(gens) > 1:
                if tr.twogen_since is None:
                    tr.twogen_since = self.op_clock
                elif self.op_clock - tr.twogen_since > PARTIAL_GRACE_S and not tr.twogen_counted:
                    tr.twogen_counted = True
                    self.violations["partial_gangs"].append(
                        f"{key}: pods of generations {sorted(gens)} running at once for "
                        f"{self.op_clock - tr.twogen_since:.0f}s; API: {self.status_brief(key)}")
            else:
                tr.twogen_since, tr.twogen_counted = None, False

    def final_checks(self) -> None:
        by_job: dict[str, list[dict[str, Any]]] = {}
        for p in self.pods:
            if live(p):
                by_job.setdefault(job_key_of(p), []).append(p)
        for key, pods in by_job.items():
            if key not in self.jobs:
                self.violations["ledger_mismatches"].append(
                    f"{key}: live pods {[p['metadata']['name'] for p in pods]} of a job that does not exist")
        for key, job in self.jobs.items():
            s = job.get("status") or {}
            placement = s.get("placement") or {}
            pods = by_job.get(key, [])
            if s.get("phase") in ("Failed", "Succeeded") and pods:
                self.violations["ledger_mismatches"].append(
                    f"{key}: {s.get('phase')} but live pods {[p['metadata']['name'] for p in pods]}")
                continue
            if not placement:
                if pods:
                    self.violations["ledger_mismatches"].append(
                        f"{key}: no status.placement but live pods {[p['metadata']['name'] for p in pods]}; "
                        f"API: {self.status_brief(key)}")
                continue
            gen = int(placement.get("generation") or 0)
            others = [p["metadata"]["name"] for p in pods if pod_gen(p) != gen]
            ranks = {int((p["metadata"].get("labels") or {}).get(LABEL_RANK, -1)): pod_node(p)
                     for p in pods if pod_gen(p) == gen}
            nodes = list(placement.get("nodes") or [])
            if others or (ranks and [ranks.get(i) for i in range(len(nodes))] != nodes):
                self.violations["ledger_mismatches"].append(
                    f"{key}: status.placement g{gen} {nodes} but live pods by rank {ranks}, other generations "
                    f"{others}; API: {self.status_brief(key)}")
        # lost requests
        for r in self.requests:
            job = self.jobs.get(r.job)
            if job is None or r.cancelled:
                continue
            s = job.get("status") or {}
            if s.get("phase") in ("Failed", "Succeeded"):
                continue
            gen_now = int(((s.get("placement") or {}).get("generation")) or 0)
            served = r.served or (s.get("handled") or {}).get("migrate") == r.value or gen_now > r.generation
            moving = ((s.get("migration") or {}).get("request")) == r.value
            annotation = ((job.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_MIGRATE)
            # still asked: held with a condition, or the job is not running (moving, waiting for room),
            # so the request is read when it runs again
            held = annotation == r.value and (self.held(s) or s.get("phase") != "Running")
            if not (served or moving or held):
                self.violations["lost_requests"].append(
                    f"{r.job}: migrate {r.value} (set at {r.t - self.t0:.1f}s on g{r.generation}) neither served, "
                    f"in progress nor held; API: {self.status_brief(r.job)}; bench events: {self.history(r.job)}")
        # left on failed devices
        for f in self.faults:
            for k, secs in f.left.items():
                if secs > LEFT_TARGET_S:
                    self.violations["left_on_failed_device"].append(
                        f"{k}: stayed {secs:.1f}s on {f.node} after {f.kind} at {f.start - self.t0:.1f}s; "
                        f"API: {self.status_brief(k.split('/')[0] + '/' + k.split('/')[1].rsplit('-g', 1)[0])}; "
                        f"bench events: {self.history(k.split('/')[0] + '/' + k.split('/')[1].rsplit('-g', 1)[0])}")
        # hot loops
        for key, tr in self.tracks.items():
            found = ""
            for times, bound, what in ((tr.rv_times, HOT_RV, "status changes"),
                                       (tr.gen_times, HOT_GEN, "placement generations")):
                for i, start in enumerate(times):
                    window = [x for x in times[i:] if x < start + HOT_WINDOW_S]
                    if len(window) > bound and not any(
                            start - HOT_QUIET_BEFORE_S <= x <= start + HOT_WINDOW_S for x in tr.touches):
                        found = f"{len(window)} {what} in {HOT_WINDOW_S:.0f}s from {start - self.t0:.1f}s"
                        break
                if found:
                    break
            if found:
                self.violations["hot_loops"].append(f"{key}: {found} with no bench event on it; "
                                                    f"API: {self.status_brief(key)}")

    def request_outcomes(self) -> dict[str, int]:
        out = {"served": 0, "waiting": 0, "in_progress": 0}
        for r in self.requests:
            s = (self.jobs.get(r.job) or {}).get("status") or {}
            if r.served or (s.get("handled") or {}).get("migrate") == r.value or \
                    int(((s.get("placement") or {}).get("generation")) or 0) > r.generation:
                out["served"] += 1
            elif ((s.get("migration") or {}).get("request")) == r.value:
                out["in_progress"] += 1
            elif not r.cancelled:
                out["waiting"] += 1
        return out


class Disruptions(Invariants):
    """The bench's events (migrate, cancel, notready, xid, kill, refuse) and their recoveries (`timers`)."""

    # -- events --
    def running_jobs(self) -> list[str]:
        with self.lock:
            return sorted(k for k, j in self.jobs.items() if (j.get("status") or {}).get("phase") == "Running")

    def ev_migrate(self, custom: Any, n: int) -> bool:
        with self.lock:
            candidates = [k for k in self.running_jobs()
                          if ANNOTATION_MIGRATE not in ((self.jobs[k].get("metadata") or {}).get("annotations") or {})
                          and not any(r.job == k and not r.cancelled and self._open(r) for r in self.requests)]
        if not candidates:
            return False
        key = self.rng.choice(candidates)
        ns, name = key.split("/")
        value = f"chaos-{n}"
        with self.lock:
            gen = int(((((self.jobs.get(key) or {}).get("status") or {}).get("placement")) or {}).get("generation") or 0)
        self.touch([key])
        custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "heterojobs", name,
                                              {"metadata": {"annotations": {ANNOTATION_MIGRATE: value}}})
        with self.lock:
            self.requests.append(Request(key, value, time.monotonic(), gen))
        self.note(f"migrate {name} {value}")
        return True

    def _open(self, r: Request) -> bool:
        s = (self.jobs.get(r.job) or {}).get("status") or {}
        return not r.served and (s.get("handled") or {}).get("migrate") != r.value

    def ev_cancel(self, custom: Any) -> bool:
        with self.lock:
            open_ = [r for r in self.requests if not r.cancelled and self._open(r)
                     and ((self.jobs.get(r.job) or {}).get("metadata", {}).get("annotations") or {}).get(
                         ANNOTATION_MIGRATE) == r.value]
        if not open_:
            return False
        r = self.rng.choice(open_)
        ns, name = r.job.split("/")
        self.touch([r.job])
        # a JSON patch with a test: only remove the annotation if it still holds our value
        try:
            custom.patch_namespaced_custom_object(
                GROUP, VERSION, ns, "heterojobs", name,
                [{"op": "test", "path": "/metadata/annotations/heterojob.io~1migrate", "value": r.value},
                 {"op": "remove", "path": "/metadata/annotations/heterojob.io~1migrate"}],
                _content_type="application/json-patch+json")
        except kubernetes.client.ApiException:
            return False  # the operator took it first
        r.cancelled = True
        self.note(f"cancel {name} {r.value}")
        return True

    def pick_node(self) -> str | None:
        with self.lock:
            busy = {f.node for f in self.faults if f.end is None}
            if len(busy) >= MAX_FAULTS:
                return None
            nodes = [n["metadata"]["name"] for n in fleet_nodes() if n["metadata"]["name"] not in busy]
            used = [n for n in nodes if any(live(p) and pod_node(p) == n for p in self.pods)]
        pool = used or nodes
        return self.rng.choice(pool) if pool else None

    def ev_notready(self, core: Any) -> bool:
        n = self.pick_node()
        if n is None:
            return False
        self.touch(self.jobs_on(n))
        set_ready(core, n, False)
        with self.lock:
            self.faults.append(Fault("notready", n, time.monotonic(), linger=self.rng.uniform(2, 6)))
            self.check(time.monotonic())
        self.note(f"notready {n}")
        return True

    def ev_xid(self, operator: OperatorProcess) -> bool:
        n = self.pick_node()
        if n is None or n.startswith("910b"):
            return False
        with self.lock:
            on = [p for p in self.pods if live(p) and pod_node(p) == n]
        if not on:
            return False
        pod = self.rng.choice(on)
        target = job_key_of(pod)
        fault = Fault("xid", n, time.monotonic(), target_job=target, fingerprint=f"{self.rng.getrandbits(64):016x}",
                      starts_at=now_iso(), linger=self.rng.uniform(2, 6), pod=pod)
        with self.lock:
            for p in on:  # the other GPUs' users: not named, not timed, not newcomers
                if job_key_of(p) != target:
                    fault.pods[pod_key(p)] = -2.0
            self.faults.append(fault)
            self.check(time.monotonic())
        self.touch(self.jobs_on(n))
        ok = post_alert(operator.alerts_port, fault, "firing", pod)
        self.note(f"xid {n} {pod['metadata']['name']} {target.split('/')[1]} {'posted' if ok else 'NOT-POSTED'}")
        return True

    def ev_kill(self, operator: OperatorProcess) -> bool:
        if time.monotonic() - operator.started_at < WARMUP_S + 2:
            return False  # a kill measures recovery, not starvation: let the last start get going first
        operator.kill9()
        self.note("operator kill -9")
        time.sleep(self.rng.uniform(0, 1.5))
        operator.start()
        operator.restarts += 1
        self.touch(list(self.jobs))
        self.note("operator restarted")
        return True

    def ev_refuse(self, core: Any) -> bool:
        if self.refusal is not None:
            return False
        kind = "podsecurity" if self.rng.random() < 0.25 else "quota"
        if kind == "quota":
            # room for 0 or 1 more pod: a gang of two or more gets some replicas created and one refused
            with self.lock:
                there = sum(1 for p in self.pods if live(p) and p["metadata"]["namespace"] == REFUSING_NS)
            hard = there + self.rng.choice([0, 1])
            core.create_namespaced_resource_quota(REFUSING_NS, {"apiVersion": "v1", "kind": "ResourceQuota",
                                                                "metadata": {"name": "chaos"},
                                                                "spec": {"hard": {"pods": str(hard)}}})
            kind = f"quota(pods={hard})"
        else:
            core.patch_namespace(REFUSING_NS, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce":
                                                                       "restricted"}}})
        t = time.monotonic()
        self.refusal = (kind, t, t + self.rng.uniform(2, 6))
        with self.lock:
            self.touch([k for k in self.jobs if k.startswith(REFUSING_NS + "/")])
        self.note(f"refuse {kind} {REFUSING_NS} on")
        return True

    def end_refusal(self, core: Any) -> None:
        assert self.refusal is not None
        kind = self.refusal[0]
        if kind.startswith("quota"):
            core.delete_namespaced_resource_quota("chaos", REFUSING_NS)
        else:
            core.patch_namespace(REFUSING_NS, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": None}}})
        self.refusal = None
        self.refusal_ended = time.monotonic()
        self.note(f"refuse {kind} {REFUSING_NS} off")

    def timers(self, core: Any, operator: OperatorProcess, final: bool = False) -> None:
        """Recoveries that are due: refusal windows, node faults whose pods left (plus a linger) or at 31 s."""
        t = time.monotonic()
        if self.refusal is not None and (t >= self.refusal[2] or final):
            self.end_refusal(core)
        with self.lock:
            due = [f for f in self.faults if f.end is None and (
                t - f.start >= FAULT_MAX_S or (f.clear_since is not None and t - f.clear_since >= f.linger))]
        for f in due:
            with self.lock:
                self.check(time.monotonic())
                f.end = time.monotonic()
                for k, since in f.pods.items():
                    if since >= 0 and k not in f.left:
                        f.left[k] = f.end - since  # still there when the fault ended
            self.touch(self.jobs_on(f.node))
            if f.kind == "notready":
                set_ready(core, f.node, True)
            else:
                post_alert(operator.alerts_port, f, "resolved", f.pod)
            self.note(f"{f.kind} {f.node} recovered")


class Chaos(Disruptions):
    """The run: the emulator, the operator and the kubelet started, the fleet filled, `--events` random events,
    recoveries and settling, then the result."""

    def __init__(self, seed_: int, events: int, workdir: Path, operator_source: Path | None = None) -> None:
        super().__init__(seed_, workdir)
        self.operator_source = operator_source
        self.n_events = events
        self.emu = Emulator(workdir / "emulator")

    # -- the run --
    def run(self) -> dict[str, Any]:
        self.emu.workdir.mkdir(parents=True, exist_ok=True)
        self.emu.start()
        api = self.emu.client()
        core, custom = kubernetes.client.CoreV1Api(api), kubernetes.client.CustomObjectsApi(api)
        seed(api, namespaces=NAMESPACES, nodes=fleet_nodes())
        operator = OperatorProcess(self.emu.kubeconfig, self.workdir / "operator.log", free_port(),
                                   self.operator_source)
        operator.t0 = self.t0
        kubelet = Kubelet(self.emu.client(), start_delay=0.3, interval=0.4, answer_checkpoints=True,
                          checkpoint_delay=0.5)
        threads = [threading.Thread(target=self.observe_loop, args=(core, custom, operator), daemon=True),
                   threading.Thread(target=self.watch_loop, args=(kubernetes.client.CustomObjectsApi(
                       self.emu.client()),), daemon=True)]
        try:
            operator.start()
            kubelet.start()
            for th in threads:
                th.start()
            plan = plan_jobs(self.rng)
            for ns, name, spec in sorted(plan, key=lambda j: -j[2]["replicas"]["min"]
                                         * j[2]["devices"][0]["perReplica"]):
                custom.create_namespaced_custom_object(GROUP, VERSION, ns, "heterojobs", {
                    "apiVersion": f"{GROUP}/{VERSION}", "kind": "HeteroJob",
                    "metadata": {"name": name, "namespace": ns}, "spec": spec})
            allocation, fillers = self.fill(custom)
            self.note(f"fleet at {allocation:.2f} with {len(plan)} jobs and {fillers} fillers")
            events = 0
            n = 0
            weights = {"migrate": 30, "cancel": 10, "xid": 12, "notready": 12, "kill": 4, "refuse": 10}
            while events < self.n_events:
                self.timers(core, operator)
                n += 1
                kind = self.rng.choices(list(weights), list(weights.values()))[0]
                done = {"migrate": lambda: self.ev_migrate(custom, n), "cancel": lambda: self.ev_cancel(custom),
                        "xid": lambda: self.ev_xid(operator), "notready": lambda: self.ev_notready(core),
                        "kill": lambda: self.ev_kill(operator), "refuse": lambda: self.ev_refuse(core)}[kind]()
                if done:
                    events += 1
                    self.kinds[kind] = self.kinds.get(kind, 0) + 1
                time.sleep(self.rng.uniform(0.15, 0.65) if done else 0.05)
            # let every fault and refusal end, then settle
            if not operator.up():
                operator.start()
            end = time.monotonic() + FAULT_MAX_S + 2
            while time.monotonic() < end:
                self.timers(core, operator, final=True)
                with self.lock:
                    if all(f.end is not None for f in self.faults):
                        break
                time.sleep(0.3)
            settled = self.settle()
            self._stop.set()
            with self.lock:
                self.final_checks()
            result = self.result(allocation, settled, operator)
            (self.workdir / "journal.txt").write_text("".join(f"[{t:7.1f}s] {w}\n" for t, w in self.journal))
        finally:
            self._stop.set()
            kubelet.stop()
            operator.stop()
            self.emu.stop()
        return result

    def fill(self, custom: Any, limit_s: float = 60.0) -> tuple[float, int]:
        """Wait for the planned jobs to run; where the operator's placement left holes, add low-priority
        one-replica jobs the size of the hole. Returns the allocation reached and the fillers added."""
        total = PER_NODE * sum(c for _, c in POOLS.values())
        deadline = time.monotonic() + limit_s
        last, stable_since, fillers = -1.0, time.monotonic(), 0
        classes = {n["metadata"]["name"]: cls for cls in POOLS for n in fleet_nodes()
                   if n["metadata"]["name"].startswith(cls.split("-")[-1])}
        while time.monotonic() < deadline:
            allocation = self.allocation(total)
            if allocation >= 0.9:
                time.sleep(2)
                return max(allocation, self.allocation(total)), fillers
            if allocation != last:
                last, stable_since = allocation, time.monotonic()
            elif time.monotonic() - stable_since > 4 and fillers < 12:
                with self.lock:
                    used: dict[str, int] = {}
                    for p in self.pods:
                        if live(p) and pod_node(p):
                            used[pod_node(p)] = used.get(pod_node(p), 0) + pod_devices(p)
                planned = sum(used.values())
                for name, cls in sorted(classes.items(), key=lambda nc: used.get(nc[0], 0), reverse=True):
                    free = PER_NODE - used.get(name, 0)
                    if free >= 2 and fillers < 12 and planned < 0.93 * total:
                        planned += free
                        ns, job, spec = job_spec(self.rng, 90 + fillers, cls, 1, free, priority="low")
                        spec["replicas"] = {"min": 1}
                        spec["devices"] = spec["devices"][:1]
                        custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACES[0], "heterojobs", {
                            "apiVersion": f"{GROUP}/{VERSION}", "kind": "HeteroJob",
                            "metadata": {"name": job, "namespace": NAMESPACES[0]}, "spec": spec})
                        fillers += 1
                stable_since = time.monotonic()
            time.sleep(0.5)
        return self.allocation(total), fillers

    def allocation(self, total: int) -> float:
        with self.lock:
            held = sum(pod_devices(p) for p in self.pods
                       if live(p) and (p.get("status") or {}).get("phase") == "Running")
        return held / total

    def result(self, allocation: float, settled: bool, operator: OperatorProcess) -> dict[str, Any]:
        lefts = [s for f in self.faults for s in f.left.values()]
        log_text = (self.workdir / "operator.log").read_text(errors="replace") \
            if (self.workdir / "operator.log").exists() else ""
        failed = sorted(k for k, j in self.jobs.items() if (j.get("status") or {}).get("phase") == "Failed")
        out = {
            "events": sum(self.kinds.values()),
            "stranded": len(self.violations["stranded"]),
            "left_on_failed_device_s_max": round(max(lefts, default=0.0), 1),
            "partial_gangs": len(self.violations["partial_gangs"]),
            "lost_requests": len(self.violations["lost_requests"]),
            "ledger_mismatches": len(self.violations["ledger_mismatches"]),
            "hot_loops": len(self.violations["hot_loops"]),
            "wall_s": round(time.monotonic() - self.t0, 1),
            "events_by_kind": dict(sorted(self.kinds.items())),
            "allocation_start": round(allocation, 3),
            "jobs": len(self.jobs),
            "jobs_failed": len(failed),
            "requests": len(self.requests),
            "requests_cancelled": sum(r.cancelled for r in self.requests),
            **{f"requests_{k}": v for k, v in self.request_outcomes().items()},
            "node_faults": len(self.faults),
            "xid_node_placements": self.xid_placed,
            "operator_restarts": operator.restarts,
            "operator_tracebacks": log_text.count("Traceback"),
            "settled": settled,
            "target_left_s": LEFT_TARGET_S,
            "k8s_default_left_s": K8S_DEFAULT_LEFT_S,
        }
        out["meets_targets"] = (all(out[k] == 0 for k in ("stranded", "partial_gangs", "lost_requests",
                                                          "ledger_mismatches", "hot_loops"))
                                and out["left_on_failed_device_s_max"] <= LEFT_TARGET_S
                                and out["events"] >= self.n_events)
        return out


def set_ready(core: kubernetes.client.CoreV1Api, name: str, ready: bool) -> None:
    """What the node lifecycle controller shows: Ready False plus the not-ready NoExecute taint, and back."""
    core.patch_node_status(name, {"status": {"conditions": [{
        "type": "Ready", "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "kubelet is posting ready status" if ready else "container runtime is down",
        "lastHeartbeatTime": now_iso(), "lastTransitionTime": now_iso()}]}})
    taints = [] if ready else [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "timeAdded": now_iso()}]
    core.patch_node(name, {"spec": {"taints": taints}})


def post_alert(port: int, fault: Fault, status: str, pod: dict[str, Any] | None) -> bool:
    """Alertmanager's webhook (version 4) for a dcgm-exporter fatal XID, as the shipped rule labels it."""
    labels = {"alertname": "HeteroJobGPUFatalXID", "severity": "critical", "Hostname": fault.node,
              "gpu": "3", "UUID": f"GPU-{fault.fingerprint[:8]}-chaos", "modelName": "NVIDIA H100 80GB HBM3",
              "instance": f"{fault.node}:9400", "job": "dcgm-exporter", "namespace": "gpu-operator",
              "pod": "nvidia-dcgm-exporter-chaos"}
    if pod is not None:
        labels |= {"exported_namespace": pod["metadata"]["namespace"], "exported_pod": pod["metadata"]["name"],
                   "exported_container": "main"}
    alert = {"status": status, "labels": labels,
             "annotations": {"summary": f"GPU {labels['UUID']} on {fault.node}: fatal XID 79",
                             "heterojob_action": "migrate-now"},
             "startsAt": fault.starts_at, "endsAt": now_iso() if status == "resolved" else "0001-01-01T00:00:00Z",
             "generatorURL": "http://127.0.0.1:9090/graph", "fingerprint": fault.fingerprint}
    body = {"version": "4", "groupKey": '{}:{alertname="HeteroJobGPUFatalXID"}', "truncatedAlerts": 0,
            "status": status, "receiver": "heterojob", "groupLabels": {"alertname": "HeteroJobGPUFatalXID"},
            "commonLabels": labels, "commonAnnotations": alert["annotations"], "externalURL": "http://127.0.0.1:9093",
            "alerts": [alert]}
    for _ in range(20):  # Alertmanager retries until the receiver answers (the operator may be restarting)
        try:
            r = urllib3.request("POST", f"http://127.0.0.1:{port}/alerts", json=body, timeout=2.0, retries=False,
                                headers={"Authorization": f"Bearer {TOKEN}"})
            if r.status < 300:
                return True
            if r.status < 500:
                print(f"alert refused {r.status}: {r.data[:200]!r}", file=sys.stderr)
                return False
        except urllib3.exceptions.HTTPError:
            pass
        time.sleep(0.5)
    return False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=18)
    p.add_argument("--events", type=int, default=200)
    p.add_argument("--workdir", type=Path, default=None, help="keep the operator log here")
    p.add_argument("--operator-source", type=Path, default=None,
                   help="judge the operator package in this directory (e.g. an older checkout's operator/)")
    args = p.parse_args(argv)
    import tempfile
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="heterojob-chaos-"))
    workdir.mkdir(parents=True, exist_ok=True)
    chaos = Chaos(args.seed, args.events, workdir, args.operator_source)
    result = chaos.run()
    for kind, items in chaos.violations.items():
        for item in items:
            print(f"VIOLATION {kind}: {item}", file=sys.stderr)
    print(f"operator log: {workdir / 'operator.log'}", file=sys.stderr)
    print(json.dumps(result))
    return 0 if result["meets_targets"] else 1


if __name__ == "__main__":
    sys.exit(main())
