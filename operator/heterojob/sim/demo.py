"""`heterojob demo`: the whole system on one machine, on the embedded defaults, with no cluster."""

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
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import kubernetes
import yaml

from heterojob.constants import API_VERSION, GROUP, VERSION
from heterojob.alerts.rules import rules_file
from heterojob.sim.cluster.harness import Emulator, apply, seed
from heterojob.sim.telemetry.exporters import ExporterFleet, realistic_mix
from heterojob.sim.cluster.kubelet import Kubelet
from heterojob.sim.telemetry.prometheus import AlertmanagerServer, PrometheusServer
from heterojob.sim.cluster.nodes import node

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
DEFAULT_WORKDIR = Path.home() / ".cache" / "heterojob" / "demo"
STATE = "demo.json"  # where `heterojob demo inject` finds the running demo
NAMESPACES = ("team-a", "team-b", "team-c")

# region -> (device class, node count): eleven sites, 42 nodes (304 accelerators, 256 CPU cores), light
# enough for CI. The eastern cities run NVIDIA, the western hubs mostly Ascend, some mix both.
FLEET: dict[str, list[tuple[str, int]]] = {
    "cn-north": [("nvidia-h100", 4), ("nvidia-a100", 2), ("cpu", 2)],
    "cn-east": [("nvidia-h100", 4), ("nvidia-a100", 2), ("cpu", 2)],
    "cn-zhangjiakou": [("nvidia-a100", 2), ("ascend-910b", 2)],
    "cn-hohhot": [("ascend-910b", 3)],
    "cn-wuhu": [("nvidia-h100", 2), ("ascend-910b", 1)],
    "cn-shaoguan": [("nvidia-a100", 2), ("ascend-910b", 2)],
    "cn-chengdu": [("ascend-910b", 3)],
    "cn-chongqing": [("nvidia-a100", 2)],
    "cn-guiyang": [("ascend-910b", 3)],
    "cn-qingyang": [("ascend-910b", 2)],
    "cn-zhongwei": [("nvidia-h100", 2)],
}

# A realistic mix: (weight, device alternatives, replicas, per replica, priority)
MIX: list[tuple[int, list[str], int, int, str]] = [
    (4, ["nvidia-h100", "ascend-910b"], 2, 8, "high"),
    (3, ["nvidia-a100", "nvidia-h100"], 1, 4, "medium"),
    (3, ["ascend-910b"], 2, 8, "medium"),
    (2, ["nvidia-h100"], 4, 8, "urgent"),
    (3, ["cpu"], 1, 16, "low"),
]


SHOWCASE_PREFIX = "showcase-"  # the demo's copies of examples/ jobs: applying examples/ never overwrites them
FOREVER = str(10 * 365 * 24 * 3600)  # a showcase job's simulated run time: it runs until the demo stops


def quota(namespace: str) -> dict[str, Any]:
    """Each team may hold 64 H100s anywhere and 160 devices of any class per region."""
    return {"apiVersion": API_VERSION, "kind": "HeteroQuota",
            "metadata": {"name": f"demo-{namespace}", "namespace": namespace},
            "spec": {"limits": [{"deviceClass": "nvidia-h100", "region": "*", "devices": 64},
                                {"deviceClass": "*", "region": "*", "devices": 160}]}}


def showcase(doc: dict[str, Any]) -> dict[str, Any]:
    """An examples/ job as the demo seeds it: renamed, and simulated to run until the demo stops."""
    job = json.loads(json.dumps(doc))
    job["metadata"]["name"] = SHOWCASE_PREFIX + job["metadata"]["name"]
    for container in ((job["spec"].get("template") or {}).get("spec") or {}).get("containers") or []:
        env = [e for e in container.get("env") or [] if e.get("name") != "HETEROJOB_SIM_DURATION"]
        container["env"] = env + [{"name": "HETEROJOB_SIM_DURATION", "value": FOREVER}]
    return job


class DemoNotRunning(RuntimeError):
    """No demo answers: the message says how to start one."""


def demo_state(workdir: Path | None = None) -> dict[str, Any]:
    state_file = Path(workdir or DEFAULT_WORKDIR) / STATE
    if not state_file.exists():
        raise DemoNotRunning(f"no running demo found ({state_file} is missing): start `heterojob demo` first"
                             + (f" (with --workdir {workdir})" if workdir else ""))
    try:
        return dict(json.loads(state_file.read_text()))
    except ValueError:
        raise DemoNotRunning(f"{state_file} is not a demo state file: start `heterojob demo` again") from None


def _demo_down(url: str, exc: Exception, workdir: Path | None) -> DemoNotRunning:
    reason = getattr(exc, "reason", exc)
    return DemoNotRunning(f"no demo is answering at {url} ({reason}); it has stopped: start `heterojob demo` "
                          f"first (the state file in {Path(workdir or DEFAULT_WORKDIR)} is left from an earlier run)")


FAULT_RESOURCES = {"npu-unhealthy": "huawei.com/", "npu-unknown": "huawei.com/"}


def pick_target(kind: str, workdir: Path | None = None) -> tuple[str, int, str, str]:
    """A device under a running job that the fault can hit: (node, device index, namespace/job, pod).

    The simulated exporters hand each node's devices to its running pods in the order the API lists them
    (as the stand-in kubelet reports them), so the pod's first device index is the count before it."""
    state = demo_state(workdir)
    api = kubernetes.config.new_client_from_config(config_file=state["kubeconfig"])
    core = kubernetes.client.CoreV1Api(api)
    try:
        pods = core.list_pod_for_all_namespaces(_request_timeout=5).items
    except Exception as exc:  # noqa: BLE001 - any failure to reach the emulator means the demo is down
        raise _demo_down(str(api.configuration.host), exc, workdir) from None
    wanted = FAULT_RESOURCES.get(kind, "nvidia.com/")
    taken: dict[str, int] = {}
    candidates: list[tuple[bool, str, str, int, str, str]] = []
    for pod in pods:
        limits = (pod.spec.containers[0].resources.limits or {}) if pod.spec.containers else {}
        devices = sum(int(v) for k, v in limits.items() if "/" in k and str(v).isdigit())
        node = pod.spec.node_name
        if pod.status.phase != "Running" or not node or not devices:
            continue
        first = taken.get(node, 0)
        taken[node] = first + devices
        job = (pod.metadata.labels or {}).get("heterojob.io/job")
        if job and any(k.startswith(wanted) for k in limits):
            candidates.append((not pod.metadata.name.startswith(SHOWCASE_PREFIX), pod.metadata.name, str(node),
                               first, f"{pod.metadata.namespace}/{job}", str(pod.metadata.name)))
    if not candidates:
        raise DemoNotRunning(f"no running job holds a {wanted.rstrip('/')} device yet: wait a little, or name a node")
    _, _, node, device, job, name = min(candidates)
    return node, device, job, name


def follow(job: str, workdir: Path | None = None, seconds: float = 60.0) -> list[str]:
    """What the job does after a fault: its phase changes, until it runs again on a new generation."""
    state = demo_state(workdir)
    api = kubernetes.config.new_client_from_config(config_file=state["kubeconfig"])
    custom = kubernetes.client.CustomObjectsApi(api)
    namespace, name = job.split("/", 1)
    seen: list[str] = []
    start_gen = None
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "heterojobs", name)
        except kubernetes.client.ApiException:
            break
        status = obj.get("status") or {}
        placement = status.get("placement") or {}
        gen = placement.get("generation")
        start_gen = gen if start_gen is None else start_gen
        line = f"{status.get('phase')}: {status.get('message') or ''}".strip()
        if not seen or seen[-1] != line:
            seen.append(line)
            print(f"  {job} {line}", flush=True)
        if status.get("phase") == "Running" and gen is not None and start_gen is not None and gen != start_gen:
            print(f"  {job} runs again on {placement.get('region')}/{placement.get('deviceClass')} "
                  f"(generation {gen})", flush=True)
            break
        time.sleep(1.0)
    else:
        print(f"  {job} is still {seen[-1] if seen else 'unknown'} after {seconds:.0f} s; "
              "`kubectl get hj -A` follows it", flush=True)
    return seen


def inject(kind: str, node: str, device: int = 0, value: float | None = None, workdir: Path | None = None) -> str:
    """Break something in the running demo (found through its state file); the answer for the user."""
    url = demo_state(workdir)["exporters"]
    body = json.dumps({"kind": kind, "node": node, "device": device, "value": value}).encode()
    request = urllib.request.Request(f"{url}/faults", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            r.read()
    except urllib.error.HTTPError as exc:
        raise ValueError(exc.read().decode().strip()) from None
    except (urllib.error.URLError, OSError) as exc:
        raise _demo_down(url, exc, workdir) from None
    return f"injected {kind} on {node} device {device}"


def fleet_nodes() -> list[dict[str, Any]]:
    nodes = []
    for region, groups in FLEET.items():
        for cls, count in groups:
            for i in range(count):
                nodes.append(node(f"{region}-{cls}-{i:02d}", region, cls, stack=i))  # mixed drivers
    return nodes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _say(msg: str) -> None:
    print(f"[demo] {msg}", file=sys.stderr, flush=True)


class Demo:
    def __init__(self, console_port: int = 8501, smoke: bool = False, smoke_seconds: float = 30.0,
                 workdir: Path | None = None, seed_value: int = 7) -> None:
        self.console_port = _free_port() if smoke or not console_port else console_port
        self.smoke = smoke
        self.smoke_seconds = smoke_seconds
        self.workdir = Path(workdir or DEFAULT_WORKDIR)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.rng = random.Random(seed_value)
        self.submitted = 0
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
        """Prometheus (with the shipped rules) and Alertmanager, when installed; the operator's flags."""
        alerts_port = _free_port()
        flags = ["--alerts-port", str(alerts_port)]
        try:
            self._alertmanager = AlertmanagerServer(f"http://127.0.0.1:{alerts_port}/alerts", self.token,
                                                    workdir=self.workdir / "alertmanager").start()
            rules = self.workdir / "rules.yaml"
            rules.write_text(yaml.safe_dump(rules_file({"xid": "0s", "npu": "10s", "overheat": "30s"})))
            shutil.rmtree(self.workdir / "prometheus", ignore_errors=True)  # a second start begins afresh
            self._prometheus = PrometheusServer(
                exporters.targets(), f"{host}:{port}", scrape_interval_s=5.0, workdir=self.workdir / "prometheus",
                rule_files=[str(rules)], alertmanager=f"127.0.0.1:{self._alertmanager.port}").start()
            _say(f"simulated exporters on {host}:{port}; Prometheus {self._prometheus.url} with the shipped rules; "
                 f"Alertmanager {self._alertmanager.url} posting to the operator")
            flags += ["--prometheus-url", self._prometheus.url, "--telemetry-interval", "5", "--telemetry-window", "30"]
        except (FileNotFoundError, RuntimeError, TimeoutError) as exc:
            _say(f"telemetry and alerts off ({exc}); scripts/install-deps installs Prometheus and Alertmanager")
        return flags

    def _workload(self, api: kubernetes.client.ApiClient, interval: float) -> None:
        n = 0
        while not self._stop.wait(interval):
            n += 1
            self._submit(api, self._random_job(n))

    def run(self) -> int:
        emulator = Emulator(workdir=self.workdir)
        kubelet: Kubelet | None = None
        # Both stop everything, whatever the shell: a background job of a non-interactive shell starts with
        # SIGINT ignored, and Python then never raises KeyboardInterrupt for it.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _interrupt)
        try:
            _say("starting the Kubernetes API emulator")
            emulator.start()
            api = emulator.client()
            nodes = fleet_nodes()
            _say(f"seeding {len(nodes)} nodes in {len(FLEET)} regions, default classes and regions")
            seed(api, namespaces=NAMESPACES, nodes=nodes)

            apply(api, [quota(ns) for ns in NAMESPACES])

            exporters = ExporterFleet(nodes, seed=7, profiles=realistic_mix(nodes))  # as deployments vary
            host, port = exporters.serve()
            self.exporters_url = f"http://{host}:{port}"
            flags = self._telemetry(exporters, host, port)

            _say("starting the operator")
            self._spawn("operator", [sys.executable, "-m", "heterojob", "operator", "run", "--standalone",
                                     "--kubeconfig", str(emulator.kubeconfig), *flags],
                        env={"HETEROJOB_ALERT_TOKEN": self.token})
            kubelet = Kubelet(api, on_bindings=exporters.bind, answer_checkpoints=True).start()
            _say(f"starting the console on http://127.0.0.1:{self.console_port} (admin mode: local-admin)")
            self._spawn("console", [sys.executable, "-m", "heterojob", "console", "--port", str(self.console_port),
                                    "--kubeconfig", str(emulator.kubeconfig)],
                        env={"HETEROJOB_CONSOLE_ADMINS": "local-admin",
                             **({"HETEROJOB_PROMETHEUS_URL": self._prometheus.url} if self._prometheus else {})})
            state = {"kubeconfig": str(emulator.kubeconfig), "exporters": self.exporters_url,
                     "console": f"http://127.0.0.1:{self.console_port}",
                     "prometheus": self._prometheus.url if self._prometheus else None,
                     "alertmanager": self._alertmanager.url if self._alertmanager else None}
            (self.workdir / STATE).write_text(json.dumps(state, indent=2))

            for path in sorted(EXAMPLES.glob("*.yaml")):
                for doc in yaml.safe_load_all(path.read_text()):
                    if doc and doc.get("kind") == "HeteroJob":
                        self._submit(api, showcase(doc))
            threading.Thread(target=self._workload, args=(api, 3.0 if self.smoke else 8.0), daemon=True).start()

            if self.smoke:
                return self._smoke(api)
            _say("ready.")
            print(f"\n  console:      http://127.0.0.1:{self.console_port}   (admin mode: local-admin)\n"
                  f"  kubectl:      KUBECONFIG={emulator.kubeconfig} kubectl get hj -A\n"
                  f"  prometheus:   {self._prometheus.url if self._prometheus else '(not installed)'}\n"
                  f"  alertmanager: {self._alertmanager.url if self._alertmanager else '(not installed)'}\n"
                  f"  break a GPU:  heterojob demo inject fatal-xid"
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
            if kubelet is not None:
                kubelet.stop()
            for server in (self._prometheus, self._alertmanager):
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
            emulator.stop()
            (self.workdir / STATE).unlink(missing_ok=True)  # `inject` now says no demo is running

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
                          "console_status": status, "telemetry_degraded": sorted(degraded)}), flush=True)
        return 0
