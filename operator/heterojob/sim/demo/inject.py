"""`heterojob demo inject` (one step of `heterojob demo`): finds the running demo through the state file it
leaves (`STATE` in its workdir), breaks a device through the simulated exporters' fault API or a node as the
node lifecycle controller would, heals them (`clear`, `node-ready`), picks a device under a running job when
no node is named, and follows that job until it runs again."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from collections.abc import Mapping
from typing import Any

import kubernetes
import urllib3

from heterojob.constants import GROUP, VERSION
from heterojob.sim.cluster.nodes import NOT_READY_TAINT, UNREACHABLE_TAINT, set_node_lost, set_node_ready
from heterojob.sim.demo.fleet import SHOWCASE_PREFIX

DEFAULT_WORKDIR = Path.home() / ".cache" / "heterojob" / "demo"
STATE = "demo.json"  # where `heterojob demo inject` finds the running demo


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


def known(kind: str) -> str:
    """`kind` when it is a fault `inject` knows (or `clear`); else ValueError naming them all."""
    from heterojob.sim.telemetry.devices import Fault

    kinds = [*(f.value for f in Fault), *NODE_FAULTS, CLEAR]
    if kind not in kinds:
        raise ValueError(f"unknown fault {kind!r}: one of {', '.join(kinds)}")
    return kind


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
