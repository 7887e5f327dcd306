"""The flow tier: one test body, two clusters.

Each flow test runs against `site`, parametrized twice: `emulator` (the project's API emulator, its stand-in
kube-scheduler and node lifecycle controller) and `real` (a real kube-apiserver, kube-controller-manager,
kube-scheduler and etcd from the kit `HETEROJOB_KUBE_ASSETS` names, `heterojob.sim.controlplane`; without it
those cases are skipped and say why). A difference between the two shows as a test failing on one of them.

On both: README's "Install on a cluster" lines run as written (kubectl), once per site; the operator runs as a
process of its own with the token of its own ServiceAccount (`heterojob-system/heterojob-operator`, bound to the
shipped ClusterRole: never admin); nodes are played by the stand-in kubelet (`sim.cluster.kubelet`: Leases and
Ready heartbeats, pods Running then Succeeded, graceful deletions finished), whose ranks answer checkpoint requests
through the training SDK's own client (`heterojob_sdk.PodClient`) with a token bound to the pod (TokenRequest).
Each test gets namespaces and nodes of its own and removes what it made.
"""

from __future__ import annotations

import base64
import itertools
import json
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from heterojob_sdk import PodClient

from heterojob.constants import ANNOTATION_CHECKPOINT_ACK, GROUP, LABEL_JOB, VERSION
from heterojob.sim import controlplane
from heterojob.sim.cluster import ipam
from heterojob.sim.cluster.harness import Emulator
from heterojob.sim.cluster.kubelet import Kubelet
from heterojob.sim.cluster.nodelifecycle import NodeLifecycle
from tests.conftest import eventually
from tests.harness.test_failover import Replica
from tests.harness.test_install import readme_install_lines, run

ROOT = Path(__file__).resolve().parents[2]
SYSTEM_NS, OPERATOR_ACCOUNT, LEASE = "heterojob-system", "heterojob-operator", "heterojob-operator"
GRACE_S = 20.0  # the node lifecycle controller's grace on both sites (the kit's --node-monitor-grace-period)


@dataclass
class Site:
    """A cluster the flows run on, installed as README says, and what a flow needs of it."""

    name: str  # "emulator" or "real"
    kubeconfig: Path  # the admin's (the test's own calls, kubectl, the node stand-in)
    api: kubernetes.client.ApiClient
    workdir: Path
    installed: list[tuple[str, subprocess.CompletedProcess[str]]] = field(default_factory=list)
    operator_kubeconfig: Path | None = None  # the operator's own ServiceAccount token
    ca_file: str | None = None

    @property
    def real(self) -> bool:
        return self.name == "real"

    def install(self) -> None:
        """README's install lines in order (each must pass: a failure is reported by `test_install`), then the
        operator's credentials: a token of its ServiceAccount (TokenRequest) in a kubeconfig of its own. The
        install's Deployments are scaled to 0: the operator runs here as a process, with the same account."""
        home = self.workdir / "home"
        home.mkdir(exist_ok=True)
        for line in readme_install_lines():
            self.installed.append((line, run(line, self.kubeconfig, home)))
            if self.installed[-1][1].returncode != 0:
                return
        # the install's example job waits for nodes: each flow brings its own, so it is taken out of their way
        # (test_every_example_job_runs_with_its_first_gang applies it again)
        kubernetes.client.CustomObjectsApi(self.api).delete_namespaced_custom_object(
            GROUP, VERSION, "team-a", "heterojobs", "llama-finetune")
        apps = kubernetes.client.AppsV1Api(self.api)
        for name in ("heterojob-operator", "heterojob-console"):
            apps.patch_namespaced_deployment_scale(name, SYSTEM_NS, {"spec": {"replicas": 0}})
        core = kubernetes.client.CoreV1Api(self.api)
        token = core.create_namespaced_service_account_token(
            OPERATOR_ACCOUNT, SYSTEM_NS, {"spec": {"expirationSeconds": 4 * 3600}}).status.token
        config = yaml.safe_load(self.kubeconfig.read_text())
        config["users"][0]["user"] = {"token": token}
        self.operator_kubeconfig = self.workdir / "operator.kubeconfig"
        self.operator_kubeconfig.write_text(yaml.safe_dump(config))
        cluster = config["clusters"][0]["cluster"]
        if cluster.get("certificate-authority-data"):
            ca = self.workdir / "ca.crt"
            ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
            self.ca_file = str(ca)


@pytest.fixture(scope="session", params=["emulator", "real"])
def site(request: pytest.FixtureRequest) -> Iterator[Site]:
    workdir = Path(tempfile.mkdtemp(prefix=f"heterojob-tier-{request.param}-"))
    if request.param == "real":
        try:
            assets = controlplane.kit()
        except controlplane.KitMissing as exc:
            pytest.skip(f"the real-control-plane tier is off: {exc}")
        with controlplane.ControlPlane(assets, workdir / "cluster") as plane:
            s = Site("real", plane.kubeconfig, plane.client(), workdir)
            s.install()
            yield s
            s.api.close()
        return
    (workdir / "cluster").mkdir()
    with Emulator(workdir / "cluster") as emu:
        s = Site("emulator", emu.kubeconfig, emu.client(), workdir)
        lifecycle = NodeLifecycle(s.api, interval=2.0, grace_s=GRACE_S).start()  # kube-controller-manager's
        try:
            s.install()
            yield s
        finally:
            lifecycle.stop()
            s.api.close()


_count = itertools.count(1)


class Flow:
    """One test's corner of a site: its namespaces and nodes, the node stand-in, and the operator replicas."""

    def __init__(self, site: Site, tmp: Path) -> None:
        self.site, self.tmp = site, tmp
        self.api = site.api
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.custom = kubernetes.client.CustomObjectsApi(self.api)
        self.rbac = kubernetes.client.RbacAuthorizationV1Api(self.api)
        self.prefix = f"t{next(_count)}"
        self.namespaces: list[str] = []
        self.node_names: list[str] = []
        self.replicas: list[Replica] = []
        self.acks: list[tuple[str, str]] = []  # (pod, ack) each rank wrote through the SDK
        self.kubelet = Kubelet(self.api, schedule=not site.real, answer_checkpoints=True, checkpoint_delay=0.5,
                               acknowledge=self._sdk_ack, interval=0.3)
        self.kubelet.start()

    # --- the cluster ----------------------------------------------------------------------------------

    def namespace(self, name: str, *, wait_account: bool = True) -> str:
        """A namespace of this test (`<prefix>-<name>`); `wait_account`: until its `default` ServiceAccount is
        there (the controller manager makes it a moment later)."""
        ns = f"{self.prefix}-{name}"
        self.core.create_namespace({"metadata": {"name": ns}})
        self.namespaces.append(ns)
        if wait_account:
            eventually(lambda: self._account(ns), timeout=30, what=f"{ns}/default ServiceAccount")
        return ns

    def _account(self, ns: str) -> bool:
        try:
            self.core.read_namespaced_service_account("default", ns)
            return True
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return False
            raise

    def nodes(self, nodes: list[dict[str, Any]]) -> list[str]:
        """Register `nodes` as their kubelets do (renamed `<prefix>-<name>`, with a pod CIDR and an InternalIP
        where the cluster gives none), Ready; their heartbeats start at the stand-in's next step."""
        existing = json.loads(self.core.list_node(_preload_content=False).data)["items"]
        names = []
        for node in nodes:
            node = json.loads(json.dumps(node))
            name = f"{self.prefix}-{node['metadata']['name']}"
            node["metadata"]["name"] = name
            node["metadata"]["labels"]["kubernetes.io/hostname"] = name
            ipam.assign_node_addresses(node, existing)
            node["status"]["conditions"][0]["lastHeartbeatTime"] = _now()
            self.core.create_node(node)
            existing.append(node)
            names.append(name)
        self.node_names += names
        return names

    def create_job(self, name: str, spec: dict[str, Any], namespace: str) -> dict[str, Any]:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "HeteroJob",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec}
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "heterojobs", body)

    def job(self, name: str, namespace: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "heterojobs", name)

    def status(self, name: str, namespace: str) -> dict[str, Any]:
        return self.job(name, namespace).get("status") or {}

    def condition(self, name: str, namespace: str, type_: str) -> dict[str, Any]:
        return next((c for c in self.status(name, namespace).get("conditions") or [] if c["type"] == type_), {})

    def pods(self, job: str, namespace: str, live: bool = True) -> list[kubernetes.client.V1Pod]:
        items = self.core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOB}={job}").items
        return sorted((p for p in items if not (live and p.metadata.deletion_timestamp)),
                      key=lambda p: p.metadata.name)

    def events(self, job: str, namespace: str) -> list[kubernetes.client.CoreV1Event]:
        return [e for e in self.core.list_namespaced_event(namespace).items if e.involved_object.name == job]

    def phase(self, name: str, namespace: str, want: str, timeout: float = 60) -> dict[str, Any]:
        try:
            return eventually(lambda: (s := self.status(name, namespace)).get("phase") == want and s,
                              timeout=timeout, what=f"{namespace}/{name} {want}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.describe(name, namespace)}") from None

    def describe(self, name: str, namespace: str) -> str:
        """What a failed wait shows: the job's status, its pods, the namespace's Events, the operator's last lines."""
        status = self.status(name, namespace)
        pods = [(p.metadata.name, p.spec.node_name, p.status.phase, bool(p.metadata.deletion_timestamp))
                for p in self.pods(name, namespace, live=False)]
        events = [(e.type, e.reason, e.involved_object.name, e.message) for e in
                  self.core.list_namespaced_event(namespace).items]
        logs = "".join(r.output()[-3000:] for r in self.replicas)
        return (f"status: {json.dumps(status)[:3000]}\npods: {pods}\nevents: {events[-30:]}\n"
                f"operator log (tail):\n{logs}")

    # --- the operator ---------------------------------------------------------------------------------

    def operator(self, *args: str, name: str = "") -> Replica:
        """A replica of the operator (own account, leader election on the shipped Lease; `args`: more flags)."""
        assert self.site.operator_kubeconfig is not None, "the install failed: see test_install"
        replica = Replica(self.site.operator_kubeconfig, name or f"{self.prefix}-op-{len(self.replicas)}",
                          self.tmp / f"operator-{len(self.replicas)}.log", args)
        self.replicas.append(replica)
        return replica

    # --- the ranks' SDK -------------------------------------------------------------------------------

    def pod_token(self, pod: dict[str, Any] | kubernetes.client.V1Pod) -> str:
        """What the kubelet mounts in a pod: a token of its ServiceAccount bound to the pod (TokenRequest)."""
        if not isinstance(pod, dict):
            pod = self.api.sanitize_for_serialization(pod)
        meta, spec = pod["metadata"], pod["spec"]
        request = {"spec": {"expirationSeconds": 3600, "boundObjectRef": {
            "apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}}}
        return str(self.core.create_namespaced_service_account_token(
            spec.get("serviceAccountName") or "default", meta["namespace"], request).status.token)

    def pod_client(self, token: str) -> PodClient:
        return PodClient(self.api.configuration.host, token=token, ca_file=self.site.ca_file)

    def _sdk_ack(self, pod: dict[str, Any], ack: str) -> None:
        meta = pod["metadata"]
        self.pod_client(self.pod_token(pod)).patch_pod(meta["namespace"], meta["name"], {
            "metadata": {"annotations": {ANNOTATION_CHECKPOINT_ACK: ack}}})
        self.acks.append((meta["name"], ack))

    # --- the end --------------------------------------------------------------------------------------

    def close(self) -> None:
        """Delete this test's jobs (their pods go with them: the garbage collector), then its namespaces and
        nodes; the operator and the node stand-in stop last, so the deletions finish as they would."""
        for name in self.node_names:  # a silenced node's kubelet answers again: its pods' deletions finish
            self.kubelet.answer(name)
        try:
            for ns in self.namespaces:
                for job in self.custom.list_namespaced_custom_object(GROUP, VERSION, ns, "heterojobs")["items"]:
                    try:
                        self.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "heterojobs",
                                                                    job["metadata"]["name"])
                    except kubernetes.client.ApiException as exc:
                        if exc.status != 404:
                            raise
            for ns in self.namespaces:  # what the garbage collector would take a few seconds later
                self.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
            for ns in self.namespaces:
                eventually(lambda ns=ns: not self.core.list_namespaced_pod(ns).items, timeout=60,
                           what=f"{ns} without pods")
        finally:
            for replica in self.replicas:
                replica.stop()
            self.kubelet.stop()
            for ns in self.namespaces:
                try:
                    self.core.delete_namespace(ns)
                except kubernetes.client.ApiException:
                    pass
            for name in self.node_names:
                try:
                    self.core.delete_node(name)
                except kubernetes.client.ApiException:
                    pass


@pytest.fixture
def flow(site: Site, tmp_path: Path) -> Iterator[Flow]:
    if site.operator_kubeconfig is None:
        pytest.fail(f"README's install failed on the {site.name} site: {site.installed[-1:]}")
    f = Flow(site, tmp_path)
    try:
        yield f
    finally:
        f.close()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

