"""`heterojob demo`: the whole system on one machine, on the embedded defaults, with no cluster.

By default three regions (DEFAULT_MEMBERS, one site each) are member clusters (docs/multicluster.md): each
is its own API emulator process with its own nodes, stand-in kubelet and Prometheus (the Region's
`prometheusURL`, as a site runs its own), joined as README's "Join a member cluster" does; the other
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
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import kubernetes
import urllib3
import yaml

from heterojob.constants import API_VERSION, GROUP, VERSION
from heterojob.alerts.rules import rules_file
from heterojob.controller.discovery import DiscoveryConfig
from heterojob.sim.cluster.harness import Emulator, apply, seed
from heterojob.sim import members as membership
from heterojob.sim.telemetry.devices import realistic_mix
from heterojob.sim.telemetry.exporters import ExporterFleet
from heterojob.sim.cluster.kubelet import Kubelet
from heterojob.sim.cluster.nodelifecycle import NodeLifecycle
from heterojob.sim.cluster.stepping import Stepping
from heterojob.sim.cluster.tainteviction import TaintEviction
from heterojob.sim.telemetry.prometheus import AlertmanagerServer, PrometheusServer
from heterojob.sim.cluster.nodes import NOT_READY_TAINT, UNREACHABLE_TAINT, node, set_node_lost, set_node_ready

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
DEFAULT_WORKDIR = Path.home() / ".cache" / "heterojob" / "demo"
STATE = "demo.json"  # where `heterojob demo inject` finds the running demo
NAMESPACES = ("team-a", "team-b", "team-c")
OPERATOR_NAMESPACE = DiscoveryConfig().namespace  # the operator's own (heterojob-system), as installed

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

# The workload generator pauses while this many jobs wait: a job every 8 s running 60-600 s offers about 1.7x
# the fleet's accelerators, so an open loop grows the queue without bound (and preempts the showcase jobs).
WAITING_CAP = 6


def waiting(jobs: Iterable[Mapping[str, Any]]) -> int:
    """Jobs not placed: new (no phase yet), Pending or Preempted."""
    return sum(1 for j in jobs if ((j.get("status") or {}).get("phase") or "Pending") in ("Pending", "Preempted"))


# Member clusters of the default demo: three western hub sites, one region each (a Region names one member);
# the eastern regions stay in the manager's own cluster. A member lost for DEMO_LOSS_TIMEOUT_S (SIGSTOP its
# emulator: `kill -STOP <pid in members/<region>/pid>`) has its jobs placed again elsewhere.
DEFAULT_MEMBERS = ("cn-chengdu", "cn-guiyang", "cn-zhongwei")
DEMO_LOSS_TIMEOUT_S = 60

SHOWCASE_PREFIX = "showcase-"  # the demo's copies of examples/ jobs: applying examples/ never overwrites them
FOREVER = str(10 * 365 * 24 * 3600)  # a showcase job's simulated run time: it runs until the demo stops


def quota(namespace: str) -> dict[str, Any]:
    """Each team may hold 64 H100s anywhere and 160 accelerators of any class in all (CPU cores are not counted)."""
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


def site_job(region: str) -> dict[str, Any]:
    """One job per member that prefers it, so each member's `kubectl get pods -A` shows a job's pods there."""
    cls = FLEET[region][0][0]
    return {"apiVersion": API_VERSION, "kind": "HeteroJob",
            "metadata": {"name": f"{SHOWCASE_PREFIX}{region}", "namespace": "team-c"},
            "spec": {"priority": "medium", "replicas": {"min": 1},
                     "devices": [{"deviceClass": cls, "perReplica": 16 if cls == "cpu" else 8}],
                     "regions": {"preferred": [region]}, "policy": {"allowCrossRegion": True},
                     "template": {"spec": {"containers": [{"name": "main", "image": "example/train:latest",
                                                           "env": [{"name": "HETEROJOB_SIM_DURATION",
                                                                    "value": FOREVER}]}]}}}}


def parse_members(text: str | None) -> tuple[str, ...]:
    """`--members`: comma-separated regions of FLEET, or "none" (one cluster); None: DEFAULT_MEMBERS."""
    if text is None:
        return DEFAULT_MEMBERS
    if text.strip().lower() in ("none", ""):
        return ()
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in FLEET]
    if unknown:
        raise ValueError(f"--members: {', '.join(unknown)} not a demo region; choose among {', '.join(FLEET)} "
                         "(or 'none' for one cluster)")
    return names


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
    pods = []
    for config in [state["kubeconfig"], *((state.get("members") or {}).values())]:
        path = config if isinstance(config, str) else config["kubeconfig"]
        api = kubernetes.config.new_client_from_config(config_file=path)
        core = kubernetes.client.CoreV1Api(api)
        try:
            pods += core.list_pod_for_all_namespaces(_request_timeout=5).items
        except Exception as exc:  # noqa: BLE001 - any failure to reach the manager means the demo is down
            if path == state["kubeconfig"]:
                raise _demo_down(str(api.configuration.host), exc, workdir) from None
            # a member that does not answer (frozen to show a member loss) has no target to offer
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


# what Kubernetes' node lifecycle controller writes on a Node (sim.cluster.nodes), not an exporter fault
NODE_FAULTS = ("node-unreachable", "node-notready", "node-ready")


def _node_fault(kind: str, node: str, state: Mapping[str, Any]) -> str:
    """Mark `node` in whichever of the demo's clusters has it, as the node lifecycle controller would."""
    configs = [state["kubeconfig"], *(m["kubeconfig"] for m in (state.get("members") or {}).values())]
    for config in configs:
        api = kubernetes.config.new_client_from_config(config_file=config)
        core = kubernetes.client.CoreV1Api(api)
        try:
            core.read_node(node)
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                continue
            raise ValueError(f"the cluster of {config} answered HTTP {exc.status}") from None
        except urllib3.exceptions.HTTPError as exc:
            raise _demo_down(config, exc, None) from None
        if kind == "node-ready":
            set_node_ready(core, node)
            return f"{node} is Ready again (taints node.kubernetes.io/unreachable and not-ready removed)"
        set_node_lost(core, node, reachable=kind == "node-notready")
        taint = NOT_READY_TAINT if kind == "node-notready" else UNREACHABLE_TAINT
        return (f"{node} marked as the node controller does: Ready {'False' if kind == 'node-notready' else 'Unknown'}, "
                f"taints {taint}:NoSchedule and NoExecute")
    raise ValueError(f"no node {node!r} in the demo's clusters")


CLEAR = "clear"  # heals what the exporter faults broke (not a node fault: `node-ready` undoes those)


def inject(kind: str, node: str | None, device: int | None = 0, value: float | None = None,
           workdir: Path | None = None) -> str:
    """Break something in the running demo (found through its state file), or heal it (`clear`: every exporter
    fault of `device` on `node`, of the whole node when no device, of the fleet when no node); the answer for
    the user."""
    if kind in NODE_FAULTS:
        if not node:
            raise ValueError(f"{kind} needs a node, e.g. `heterojob demo inject {kind} cn-east-nvidia-h100-01`")
        return _node_fault(kind, node, demo_state(workdir))
    url = demo_state(workdir)["exporters"]
    if kind == CLEAR:
        if device is not None and not node:
            raise ValueError("clear --device N needs the node, e.g. `heterojob demo inject clear "
                             "cn-east-nvidia-h100-00 --device N`")
        query = urllib.parse.urlencode({k: v for k, v in (("node", node), ("device", device)) if v is not None})
        request = urllib.request.Request(f"{url}/faults" + (f"?{query}" if query else ""), method="DELETE")
        where = (f"{node} device {device}" if device is not None else f"every device of {node}" if node
                 else "every node")
        said = f"cleared every exporter fault on {where}: it reports healthy from the next scrape"
    else:
        body = json.dumps({"kind": kind, "node": node, "device": device or 0, "value": value}).encode()
        request = urllib.request.Request(f"{url}/faults", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        said = f"injected {kind} on {node} device {device or 0}"
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            r.read()
    except urllib.error.HTTPError as exc:
        raise ValueError(exc.read().decode().strip()) from None
    except (urllib.error.URLError, OSError) as exc:
        raise _demo_down(url, exc, workdir) from None
    return said


def prepare(api: kubernetes.client.ApiClient, members: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Seed the demo's (manager) cluster: CRDs, default classes and regions, the teams' namespaces and quotas, the
    operator's namespace (the compute-discovery report and its Events live there) and the nodes of the regions
    that are not `members`; those nodes."""
    local = fleet_nodes(tuple(r for r in FLEET if r not in members))
    seed(api, namespaces=(*NAMESPACES, OPERATOR_NAMESPACE), nodes=local)
    apply(api, [quota(ns) for ns in NAMESPACES])
    return local


def fleet_nodes(regions: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """The demo's nodes (of `regions` only, when given)."""
    nodes = []
    for region, groups in FLEET.items():
        if regions is not None and region not in regions:
            continue
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
                  "  break a GPU:  heterojob demo inject fatal-xid"
                  + (f" --workdir {self.workdir}" if self.workdir != DEFAULT_WORKDIR else "") + "\n"
                  "  heal it:      heterojob demo inject clear <node> [--device N]"
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
