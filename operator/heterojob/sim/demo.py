"""`heterojob demo`: the whole system on one machine, on the embedded defaults, with no cluster."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import kubernetes
import yaml

from heterojob.constants import API_VERSION, GROUP, VERSION
from heterojob.sim.harness import Emulator, seed
from heterojob.sim.exporters import ExporterFleet
from heterojob.sim.kubelet import Kubelet
from heterojob.sim.prometheus import PrometheusServer
from heterojob.sim.nodes import node

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
NAMESPACES = ("team-a", "team-b", "team-c")

# region -> (device class, node count)
FLEET: dict[str, list[tuple[str, int]]] = {
    "cn-east": [("nvidia-h100", 8), ("nvidia-a100", 4), ("cpu", 4)],
    "cn-north": [("ascend-910b", 10), ("nvidia-a100", 4), ("cpu", 2)],
    "eu-west": [("nvidia-h100", 6), ("nvidia-a100", 4), ("cpu", 2)],
}

# A realistic mix: (weight, device alternatives, replicas, per replica, priority)
MIX: list[tuple[int, list[str], int, int, str]] = [
    (4, ["nvidia-h100", "ascend-910b"], 2, 8, "high"),
    (3, ["nvidia-a100", "nvidia-h100"], 1, 4, "medium"),
    (3, ["ascend-910b"], 2, 8, "medium"),
    (2, ["nvidia-h100"], 4, 8, "urgent"),
    (3, ["cpu"], 1, 16, "low"),
]


def fleet_nodes() -> list[dict[str, Any]]:
    nodes = []
    for region, groups in FLEET.items():
        for cls, count in groups:
            for i in range(count):
                nodes.append(node(f"{region}-{cls}-{i:02d}", region, cls))
    return nodes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _say(msg: str) -> None:
    print(f"[demo] {msg}", file=sys.stderr, flush=True)


class Demo:
    def __init__(self, console_port: int = 8501, smoke: bool = False, smoke_seconds: float = 30.0,
                 workdir: Path | None = None, seed_value: int = 7) -> None:
        self.console_port = _free_port() if smoke else console_port
        self.smoke = smoke
        self.smoke_seconds = smoke_seconds
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="heterojob-demo-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.rng = random.Random(seed_value)
        self.submitted = 0
        self._procs: list[subprocess.Popen[bytes]] = []
        self._stop = threading.Event()
        self._prometheus: PrometheusServer | None = None

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

    def _workload(self, api: kubernetes.client.ApiClient, interval: float) -> None:
        n = 0
        while not self._stop.wait(interval):
            n += 1
            self._submit(api, self._random_job(n))

    def run(self) -> int:
        emulator = Emulator(workdir=self.workdir)
        kubelet: Kubelet | None = None
        try:
            _say("starting the Kubernetes API emulator")
            emulator.start()
            api = emulator.client()
            nodes = fleet_nodes()
            _say(f"seeding {len(nodes)} nodes in {len(FLEET)} regions, default classes and regions")
            seed(api, namespaces=NAMESPACES, nodes=nodes)

            exporters = ExporterFleet(nodes, seed=7)
            host, port = exporters.serve()
            telemetry: list[str] = []
            try:
                prometheus = PrometheusServer(exporters.targets(), f"{host}:{port}", scrape_interval_s=5.0,
                                              workdir=self.workdir / "prometheus").start()
                self._prometheus = prometheus
                telemetry = ["--prometheus-url", prometheus.url, "--telemetry-interval", "5",
                             "--telemetry-window", "30"]
                _say(f"simulated exporters on {host}:{port}, scraped by Prometheus at {prometheus.url}")
            except (FileNotFoundError, RuntimeError, TimeoutError) as exc:
                _say(f"telemetry off: {exc}")

            _say("starting the operator")
            self._spawn("operator", [sys.executable, "-m", "heterojob", "operator", "run", "--standalone",
                                     "--kubeconfig", str(emulator.kubeconfig), *telemetry])
            kubelet = Kubelet(api, on_bindings=exporters.bind).start()
            _say(f"starting the console on http://127.0.0.1:{self.console_port}")
            self._spawn("console", [sys.executable, "-m", "heterojob", "console", "--port", str(self.console_port),
                                    "--kubeconfig", str(emulator.kubeconfig)],
                        env={"HETEROJOB_CONSOLE_ADMINS": "local-admin",
                             **({"HETEROJOB_PROMETHEUS_URL": self._prometheus.url} if self._prometheus else {})})

            for path in sorted(EXAMPLES.glob("*.yaml")):
                for doc in yaml.safe_load_all(path.read_text()):
                    if doc and doc.get("kind") == "HeteroJob":
                        self._submit(api, doc)
            threading.Thread(target=self._workload, args=(api, 3.0 if self.smoke else 8.0), daemon=True).start()

            if self.smoke:
                return self._smoke(api)
            _say("ready.")
            print(f"\n  console:     http://127.0.0.1:{self.console_port}\n"
                  f"  kubectl:     KUBECONFIG={emulator.kubeconfig} kubectl get hj -A\n"
                  f"  prometheus:  {self._prometheus.url if self._prometheus else '(not installed)'}\n"
                  f"  a fault:     curl -X POST http://{host}:{port}/faults "
                  f"-d '{{\"kind\": \"fatal-xid\", \"node\": \"cn-east-nvidia-h100-00\", \"device\": 0}}'\n"
                  f"  logs:        {self.workdir}\n  stop:        Ctrl-C\n", flush=True)
            signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            return 0
        finally:
            _say("stopping")
            self._stop.set()
            if kubelet is not None:
                kubelet.stop()
            if self._prometheus is not None:
                self._prometheus.stop()
            for proc in self._procs:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
            for proc in self._procs:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
            emulator.stop()

    def _console_status(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.console_port}/", timeout=5) as resp:
                return int(resp.status)
        except Exception:  # noqa: BLE001 - reported as 0: not answering
            return 0

    def _smoke(self, api: kubernetes.client.ApiClient) -> int:
        custom = kubernetes.client.CustomObjectsApi(api)
        deadline = time.monotonic() + self.smoke_seconds
        while time.monotonic() < deadline:
            time.sleep(1.0)
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
                          "console_status": status}), flush=True)
        return 0
