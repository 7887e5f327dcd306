"""`heterojob demo`: the whole system on one machine, on the embedded defaults, with no cluster (the step that
starts and stops everything: the API emulators, the simulated exporters, Prometheus and Alertmanager, the
stand-in kubelets and controllers, the operator and the console; then the showcase jobs and the random
workload, and `--smoke`'s run and figures).

By default three regions (DEFAULT_MEMBERS, one site each) are member clusters (docs/multicluster.md): each
is its own API emulator process with its own nodes, stand-in kubelet and Prometheus (the Region's
`prometheusURL`, as a site runs its own), joined as docs/multicluster.md's "Join a member cluster" does; the other
regions stay in the manager's emulator. `--members none` runs the one-cluster demo."""

from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from collections.abc import Callable, Mapping
from typing import Any

import kubernetes
import yaml

from heterojob.constants import API_VERSION, GROUP, VERSION
from heterojob.alerts.rules import rules_file
from heterojob.sim.cluster.harness import Emulator
from heterojob.sim import members as membership
from heterojob.sim.demo.fleet import (DEFAULT_MEMBERS, DEMO_LOSS_TIMEOUT_S, FLEET, MIX, NAMESPACES, SHOWCASE_PREFIX,
                                      WAITING_CAP, fleet_nodes, prepare, showcase, site_job, waiting)
from heterojob.sim.demo.inject import DEFAULT_WORKDIR, STATE, DemoNotRunning, inject, pick_target
from heterojob.sim.telemetry.devices import realistic_mix
from heterojob.sim.telemetry.exporters import ExporterFleet
from heterojob.sim.cluster.kubelet import Kubelet
from heterojob.sim.cluster.nodelifecycle import NodeLifecycle
from heterojob.sim.cluster.stepping import Stepping
from heterojob.sim.cluster.tainteviction import TaintEviction
from heterojob.sim.telemetry.prometheus import AlertmanagerServer, PrometheusServer

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def cli_command() -> str:
    """How to run `heterojob` from another terminal: the command when it is on PATH (an active virtualenv), else
    the checkout's `scripts/run heterojob` (README's way), else this interpreter's `-m heterojob`."""
    if shutil.which("heterojob"):
        return "heterojob"
    runner = Path(__file__).resolve().parents[4] / "scripts" / "run"
    if runner.is_file():
        return f"{runner} heterojob"
    return f"{sys.executable} -m heterojob"


def _say(msg: str) -> None:
    print(f"[demo] {msg}", file=sys.stderr, flush=True)


class Bindings:
    """The exporters hear every cluster's stand-in kubelet: each reports only its own nodes' pods, so the
    fleet is bound to the union (node names are unique across the demo's clusters)."""

    def __init__(self, exporters: ExporterFleet) -> None:
        self.exporters = exporters
        self.parts: dict[str, Mapping[str, Any]] = {}
        self.lock = threading.Lock()

    def of(self, cluster: str) -> Callable[[Mapping[str, Any]], None]:
        def hear(bindings: Mapping[str, Any]) -> None:
            with self.lock:
                self.parts[cluster] = bindings
                merged: dict[str, Any] = {}
                for part in self.parts.values():
                    merged.update(part)
                self.exporters.bind(merged)
        return hear


class Demo:
    def __init__(self, console_port: int = 8501, smoke: bool = False, smoke_seconds: float = 30.0,
                 workdir: Path | None = None, seed_value: int = 7,
                 members: tuple[str, ...] = DEFAULT_MEMBERS) -> None:
        self.console_port = _free_port() if smoke or not console_port else console_port
        self.smoke = smoke
        self.smoke_seconds = smoke_seconds
        self.workdir = Path(workdir or DEFAULT_WORKDIR)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.rng = random.Random(seed_value)
        self.submitted = 0
        self.members = members
        self._member_emulators: dict[str, Emulator] = {}
        self._member_prometheus: dict[str, PrometheusServer] = {}
        self._procs: list[subprocess.Popen[bytes]] = []
        self._stop = threading.Event()
        self._prometheus: PrometheusServer | None = None
        self._alertmanager: AlertmanagerServer | None = None
        self.token = secrets.token_urlsafe(24)
        self.exporters_url = ""

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                                start_new_session=True)
        self._procs.append(proc)
        return proc

    def _submit(self, api: kubernetes.client.ApiClient, body: dict[str, Any]) -> None:
        custom = kubernetes.client.CustomObjectsApi(api)
        meta = body["metadata"]
        try:
            custom.create_namespaced_custom_object(GROUP, VERSION, meta["namespace"], "heterojobs", body)
            self.submitted += 1
        except kubernetes.client.ApiException as exc:
            if exc.status != 409:
                raise

    def _random_job(self, n: int) -> dict[str, Any]:
        weights = [m[0] for m in MIX]
        _, classes, replicas, per, priority = self.rng.choices(MIX, weights)[0]
        duration = self.rng.randint(60, 600)
        return {
            "apiVersion": API_VERSION, "kind": "HeteroJob",
            "metadata": {"name": f"job-{n:04d}", "namespace": self.rng.choice(NAMESPACES)},
            "spec": {
                "priority": priority, "replicas": {"min": replicas},
                "devices": [{"deviceClass": c, "perReplica": per} for c in classes],
                "template": {"spec": {"containers": [{"name": "main", "image": "example/train:latest",
                                                       "env": [{"name": "HETEROJOB_SIM_DURATION",
                                                                "value": str(duration)}]}]}},
            },
        }

    def _telemetry(self, exporters: ExporterFleet, host: str, port: int) -> list[str]:
        """Prometheus (with the shipped rules) and Alertmanager, when installed; the operator's flags.

        One Prometheus per cluster, as each site runs its own next to its nodes: the manager's scrapes the
        manager's nodes (the operator's --prometheus-url), each member's scrapes that member's nodes (its
        Region's prometheusURL). All of them send alerts to the one Alertmanager that posts to the operator."""
        alerts_port = _free_port()
        flags = ["--alerts-port", str(alerts_port)]
        try:
            self._alertmanager = AlertmanagerServer(f"http://127.0.0.1:{alerts_port}/alerts", self.token,
                                                    workdir=self.workdir / "alertmanager").start()
            rules = self.workdir / "rules.yaml"
            rules.write_text(yaml.safe_dump(rules_file({"xid": "0s", "npu": "10s", "overheat": "30s"})))
            targets = exporters.targets()

            def prometheus(regions: set[str], workdir: Path) -> PrometheusServer:
                shutil.rmtree(workdir, ignore_errors=True)  # a second start begins afresh
                assert self._alertmanager is not None
                return PrometheusServer(
                    [t for t in targets if t["region"] in regions], f"{host}:{port}", scrape_interval_s=5.0,
                    workdir=workdir, rule_files=[str(rules)], alertmanager=f"127.0.0.1:{self._alertmanager.port}")

            self._prometheus = prometheus(set(FLEET) - set(self.members), self.workdir / "prometheus").start()
            for region in self.members:
                self._member_prometheus[region] = prometheus({region}, self._member_dir(region) / "prometheus").start()
            _say(f"simulated exporters on {host}:{port}; Prometheus {self._prometheus.url} with the shipped rules"
                 + (f" (and one per member: {', '.join(p.url for p in self._member_prometheus.values())})"
                    if self.members else "")
                 + f"; Alertmanager {self._alertmanager.url} posting to the operator")
            flags += ["--prometheus-url", self._prometheus.url, "--telemetry-interval", "5", "--telemetry-window", "30",
                      "--alertmanager-url", self._alertmanager.url]  # a restarted operator reads the firing alerts back
        except (FileNotFoundError, RuntimeError, TimeoutError) as exc:
            _say(f"telemetry and alerts off ({exc}); scripts/install-deps installs Prometheus and Alertmanager")
        return flags

    def _member_dir(self, region: str) -> Path:
        return self.workdir / "members" / region

    def _start_members(self) -> None:
        """One API emulator process per member region (its own control plane, as a site runs)."""
        for region in self.members:
            _say(f"starting member cluster {region} (its own API emulator)")
            self._member_dir(region).mkdir(parents=True, exist_ok=True)
            emu = self._member_emulators[region] = Emulator(workdir=self._member_dir(region))
            emu.start()
            # for `kill -STOP $(cat members/<region>/pid)` by hand: a member lost while the demo runs
            (self._member_dir(region) / "pid").write_text(f"{emu.pid}\n")

    def _join_members(self, api: kubernetes.client.ApiClient) -> None:
        for region, emu in self._member_emulators.items():
            prom = self._member_prometheus.get(region)
            membership.join(api, emu.client(), region, emu.kubeconfig.read_text(), nodes=fleet_nodes((region,)),
                            namespaces=NAMESPACES, prometheus_url=prom.url if prom else None,
                            loss_timeout_s=DEMO_LOSS_TIMEOUT_S)
        if self.members:
            _say(f"joined {len(self.members)} member clusters ({', '.join(self.members)}): a kubeconfig Secret "
                 f"each in namespace {membership.SECRETS_NAMESPACE}, Regions naming them")

    def _waiting(self, api: kubernetes.client.ApiClient) -> int:
        try:
            return waiting(kubernetes.client.CustomObjectsApi(api).list_cluster_custom_object(
                GROUP, VERSION, "heterojobs")["items"])
        except kubernetes.client.ApiException:
            return 0

    def _workload(self, api: kubernetes.client.ApiClient, interval: float) -> None:
        n = 0
        while not self._stop.wait(interval):
            if self._waiting(api) >= WAITING_CAP:
                continue  # the fleet is full: submit again when the queue drains
            n += 1
            self._submit(api, self._random_job(n))

    def run(self) -> int:
        emulator = Emulator(workdir=self.workdir)
        kubelets: list[Stepping] = []  # each cluster's kubelet (and scheduler) and controllers
        exporters: ExporterFleet | None = None
        # Both stop everything, whatever the shell: a background job of a non-interactive shell starts with
        # SIGINT ignored, and Python then never raises KeyboardInterrupt for it.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _interrupt)
        try:
            _say("starting the Kubernetes API emulator" + (" (the manager cluster)" if self.members else ""))
            emulator.start()
            api = emulator.client()
            self._start_members()
            nodes = fleet_nodes()
            local = prepare(api, self.members)
            _say(f"seeded {len(local)} nodes in {len(FLEET) - len(self.members)} regions, default classes and regions"
                 + (f"; {len(nodes) - len(local)} nodes in the members" if self.members else ""))

            exporters = ExporterFleet(nodes, seed=7, profiles=realistic_mix(nodes))  # as deployments vary
            host, port = exporters.serve()
            self.exporters_url = f"http://{host}:{port}"
            flags = self._telemetry(exporters, host, port)
            self._join_members(api)
            if self.members:
                flags += ["--member-loss-timeout", str(DEMO_LOSS_TIMEOUT_S)]

            _say("starting the operator")
            self._spawn("operator", [sys.executable, "-m", "heterojob", "operator", "run", "--standalone",
                                     "--kubeconfig", str(emulator.kubeconfig), *flags],
                        env={"HETEROJOB_ALERT_TOKEN": self.token})
            bindings = Bindings(exporters)
            # each cluster's kubelet also plays its device plugins: a GPU/NPU the exporters say failed leaves
            # its node's allocatable (as Kubernetes shows it before heterojob's own fault judge does)
            health = exporters.unhealthy_devices
            kubelets.append(Kubelet(api, on_bindings=bindings.of(""), answer_checkpoints=True,
                                    device_health=health).start())
            kubelets.append(TaintEviction(api).start())  # an unreachable node's pods go 300 s later
            kubelets.append(NodeLifecycle(api).start())  # a node whose kubelet stops renewing goes Unknown
            for region, emu in self._member_emulators.items():
                kubelets.append(Kubelet(emu.client(), on_bindings=bindings.of(region), answer_checkpoints=True,
                                        interval=1.0, device_health=health).start())
                kubelets.append(TaintEviction(emu.client(), interval=2.0).start())
                kubelets.append(NodeLifecycle(emu.client()).start())
            _say(f"starting the console on http://127.0.0.1:{self.console_port} (admin mode: local-admin)")
            self._spawn("console", [sys.executable, "-m", "heterojob", "console", "--port", str(self.console_port),
                                    "--kubeconfig", str(emulator.kubeconfig)],
                        env={"HETEROJOB_CONSOLE_ADMINS": "local-admin",
                             **({"HETEROJOB_PROMETHEUS_URL": self._prometheus.url} if self._prometheus else {})})
            state = {"kubeconfig": str(emulator.kubeconfig), "exporters": self.exporters_url,
                     "console": f"http://127.0.0.1:{self.console_port}",
                     "prometheus": self._prometheus.url if self._prometheus else None,
                     "alertmanager": self._alertmanager.url if self._alertmanager else None,
                     "members": {region: {"kubeconfig": str(emu.kubeconfig),
                                          "prometheus": p.url if (p := self._member_prometheus.get(region)) else None}
                                 for region, emu in self._member_emulators.items()}}
            (self.workdir / STATE).write_text(json.dumps(state, indent=2))

            for path in sorted(EXAMPLES.glob("*.yaml")):
                for doc in yaml.safe_load_all(path.read_text()):
                    if doc and doc.get("kind") == "HeteroJob":
                        self._submit(api, showcase(doc))
            for region in self.members:
                self._submit(api, site_job(region))
            threading.Thread(target=self._workload, args=(api, 3.0 if self.smoke else 8.0), daemon=True).start()

            if self.smoke:
                return self._smoke(api)
            _say("ready.")
            print(f"\n  console:      http://127.0.0.1:{self.console_port}   (admin mode: local-admin)\n"
                  f"  kubectl:      KUBECONFIG={emulator.kubeconfig} kubectl get hj -A"
                  + ("   (the manager)" if self.members else "") + "\n"
                  f"  prometheus:   {self._prometheus.url if self._prometheus else '(not installed)'}\n"
                  f"  alertmanager: {self._alertmanager.url if self._alertmanager else '(not installed)'}\n"
                  + self._members_text() +
                  f"  break a GPU:  {cli_command()} demo inject fatal-xid"
                  + (f" --workdir {self.workdir}" if self.workdir != DEFAULT_WORKDIR else "") + "\n"
                  f"  heal it:      {cli_command()} demo inject clear <node> [--device N]"
                  + (f" --workdir {self.workdir}" if self.workdir != DEFAULT_WORKDIR else "") + "\n"
                  f"  logs:         {self.workdir}\n  stop:         Ctrl-C\n", flush=True)
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            return 0
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not leave processes behind
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            _say("stopping")
            self._stop.set()
            for kubelet in kubelets:
                kubelet.stop()
            for server in (self._prometheus, self._alertmanager, *self._member_prometheus.values()):
                if server is not None:
                    server.stop()
            for proc in self._procs:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
            for proc in self._procs:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
            if exporters is not None:
                exporters.stop()
            for emu in [*self._member_emulators.values(), emulator]:
                if emu.pid is not None:
                    emu.resume()  # one frozen by hand must stop too
                emu.stop()
            (self.workdir / STATE).unlink(missing_ok=True)  # `inject` now says no demo is running

    def _members_text(self) -> str:
        if not self.members:
            return ""
        lines = [f"  members:      {len(self.members)} member clusters, one API emulator each "
                 f"(lost after {DEMO_LOSS_TIMEOUT_S} s without an answer; docs/multicluster.md)\n"]
        for region, emu in self._member_emulators.items():
            prom = self._member_prometheus.get(region)
            lines.append(f"    {region}: kubectl --kubeconfig {emu.kubeconfig} get pods -A"
                         f"   (job team-c/{SHOWCASE_PREFIX}{region} runs there"
                         + (f"; Prometheus {prom.url}" if prom else "") + ")\n")
        return "".join(lines)

    def _member_pods(self, jobs: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
        """Per member: heterojob's running pods there (listed in the member) and jobs placed there (manager)."""
        out = {}
        for region, emu in self._member_emulators.items():
            core = kubernetes.client.CoreV1Api(emu.client())
            pods = core.list_pod_for_all_namespaces(label_selector="heterojob.io/job", _request_timeout=10).items
            placed = sum(1 for j in jobs if ((j.get("status") or {}).get("placement") or {}).get("cluster") == region)
            out[region] = {"pods_running": sum(1 for p in pods if p.status.phase == "Running"), "jobs_placed": placed}
        return out

    def _break_a_gpu(self, core: kubernetes.client.CoreV1Api) -> str | None:
        """A fatal XID on a GPU under a running job (what the smoke run shows); None while no job holds one."""
        try:
            node, device, job, pod = pick_target("fatal-xid", self.workdir)
        except DemoNotRunning:
            return None
        _say(f"breaking GPU {device} of {node}, under job {job} (pod {pod})")
        _say(inject("fatal-xid", node, device, 79, self.workdir))
        return node

    def _console_status(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.console_port}/", timeout=5) as resp:
                return int(resp.status)
        except Exception:  # noqa: BLE001 - reported as 0: not answering
            return 0

    def _smoke(self, api: kubernetes.client.ApiClient) -> int:
        custom = kubernetes.client.CustomObjectsApi(api)
        core = kubernetes.client.CoreV1Api(api)
        started = time.monotonic()
        deadline = started + self.smoke_seconds
        broken = None
        degraded: set[str] = set()  # TelemetryDegraded messages seen on any job (the demo has no partial data)
        last_look = 0.0
        while time.monotonic() < deadline:
            time.sleep(1.0)
            if broken is None and time.monotonic() - started >= self.smoke_seconds / 3:
                broken = self._break_a_gpu(core)
            if time.monotonic() - last_look >= 5:
                last_look = time.monotonic()
                for j in custom.list_cluster_custom_object(GROUP, VERSION, "heterojobs")["items"]:
                    degraded |= {c.get("message", "") for c in (j.get("status") or {}).get("conditions") or []
                                 if c.get("type") == "TelemetryDegraded" and c.get("status") == "True"}
        jobs = custom.list_cluster_custom_object(GROUP, VERSION, "heterojobs")["items"]
        phases = [(j.get("status") or {}).get("phase") for j in jobs]
        measured = sum(1 for j in jobs if ((j.get("status") or {}).get("utilization") or {}).get("average"))
        migrations = sum(1 for j in jobs for h in (j.get("status") or {}).get("history") or []
                         if h.get("action") == "migrate")
        status = 0
        for _ in range(30):
            status = self._console_status()
            if status == 200:
                break
            time.sleep(1)
        print(json.dumps({"jobs_submitted": self.submitted, "jobs_running": phases.count("Running"),
                          "jobs_with_utilization": measured, "migrations": migrations,
                          "console_status": status, "telemetry_degraded": sorted(degraded),
                          "members": self._member_pods(jobs)}), flush=True)
        return 0
