"""Start the API emulator in its own process and talk to it; shared by the tests, benchmarks and demo."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import kubernetes
import urllib3

from heterojob.sim import process


class Emulator:
    """`python -m heterojob.sim.cluster.apiserver` as a child process, with a kubeconfig pointing at it."""

    def __init__(self, workdir: Path | None = None, crd_dir: Path | None = None) -> None:
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="heterojob-emulator-"))
        self.kubeconfig = self.workdir / "kubeconfig.yaml"
        self.crd_dir = crd_dir
        self.url = ""
        self._proc: subprocess.Popen[str] | None = None

    def start(self, timeout: float = 30.0) -> Emulator:
        cmd = [sys.executable, "-m", "heterojob.sim.cluster.apiserver", "--kubeconfig", str(self.kubeconfig)]
        if self.crd_dir is not None:
            cmd += ["--crds", str(self.crd_dir)]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=None, text=True,
                                      env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + timeout
        assert self._proc.stdout is not None
        while time.monotonic() < deadline:
            line = self._proc.stdout.readline()
            if line.startswith("READY "):
                self.url = line.split()[1]
                return self
            if not line and self._proc.poll() is not None:
                break
        self.stop()
        raise RuntimeError("the API emulator did not start; see its output above")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def stop(self) -> None:
        process.stop(self._proc)
        self._proc = None

    def pause(self) -> None:
        """Freeze the process (SIGSTOP): its port stays open and nothing answers, as across a partition."""
        assert self._proc is not None
        self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self._proc is not None
        self._proc.send_signal(signal.SIGCONT)

    def reset(self) -> None:
        urllib3.request("POST", f"{self.url}/_emulator/reset")

    def gc_lag(self, seconds: float) -> None:
        """How long the emulator's garbage collector takes to reach an object made for owners already gone
        (`sim.cluster.collector`; back to its default at the next reset)."""
        answer = urllib3.request("POST", f"{self.url}/_emulator/gc", json={"lagSeconds": seconds})
        if answer.status != 200:
            raise RuntimeError(f"the emulator refused the collector's lag: {answer.data!r}")

    def client(self) -> kubernetes.client.ApiClient:
        return kubernetes.config.new_client_from_config(config_file=str(self.kubeconfig))

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# kubernetes' DynamicClient caches discovery in $TMPDIR/osrcp-<md5(host)>.json, keyed by host alone: an emulator
# started on the port of a stopped one would be served the old one's kinds. A cache file in a directory that
# does not exist is never read and never written (the library ignores a failed write), so discovery is fresh.
_NO_DISCOVERY_CACHE = str(Path(tempfile.gettempdir()) / "heterojob-no-discovery-cache" / "absent" / "cache.json")


def dynamic(api: kubernetes.client.ApiClient) -> kubernetes.dynamic.DynamicClient:
    """A dynamic client that discovers the server's kinds afresh (see `_NO_DISCOVERY_CACHE`)."""
    return kubernetes.dynamic.DynamicClient(api, cache_file=_NO_DISCOVERY_CACHE)


def apply(api: kubernetes.client.ApiClient, objects: Iterable[Mapping[str, Any]]) -> None:
    """Create each object (kubectl-apply-like for tests: existing objects are left as they are)."""
    dyn = dynamic(api)
    for obj in objects:
        res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        try:
            res.create(body=dict(obj), namespace=(obj.get("metadata") or {}).get("namespace"))
        except kubernetes.dynamic.exceptions.ConflictError:
            pass


def seed(api: kubernetes.client.ApiClient, namespaces: Iterable[str] = ("team-a",),
         nodes: Iterable[Mapping[str, Any]] = (), defaults: bool = True) -> None:
    """CRDs, default classes and regions, namespaces and nodes: an empty cluster made ready for jobs (each
    namespace's `default` ServiceAccount there: the API server's controller makes it a moment later)."""
    from heterojob import defaults as embedded
    from heterojob.api import crds

    namespaces = list(namespaces)
    apply(api, [crds.crd(r) for r in crds.RESOURCES])
    apply(api, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in namespaces])
    if defaults:
        apply(api, embedded.all_objects())
    apply(api, nodes)
    accounts_ready(api, namespaces)


def accounts_ready(api: kubernetes.client.ApiClient, namespaces: Iterable[str], timeout_s: float = 10.0) -> None:
    """Wait until each namespace's `default` ServiceAccount exists (the controller-manager makes it a moment after
    the namespace; a pod naming no account is refused until then)."""
    core, deadline = kubernetes.client.CoreV1Api(api), time.monotonic() + timeout_s
    for ns in namespaces:
        while True:
            try:
                core.read_namespaced_service_account("default", ns)
                break
            except kubernetes.client.ApiException as exc:
                if exc.status != 404 or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)


class OperatorRunner:
    """The real operator under `kopf.testing.KopfRunner`, with a fresh registry, against a kubeconfig."""

    def __init__(self, kubeconfig: Path, **config: Any) -> None:
        from heterojob.handlers import OperatorConfig, make_registry

        self.config = OperatorConfig(kubeconfig=str(kubeconfig), **config)
        self.registry = make_registry(self.config)
        self._runner: Any = None

    def __enter__(self) -> OperatorRunner:
        from kopf.testing import KopfRunner

        self._runner = KopfRunner(["run", "--all-namespaces", "--standalone"], registry=self.registry,
                                  timeout=30)
        self._runner.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._runner.__exit__(*exc)

    @property
    def output(self) -> str:
        return self._runner.output
