"""A real Kubernetes control plane for the test tier and the benchmarks, from a kit in the envtest convention.

`HETEROJOB_KUBE_ASSETS` names a folder holding two executables (controller-runtime's envtest calls its folder
`KUBEBUILDER_ASSETS`):

- `up DIR` starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler on free ports of 127.0.0.1,
  writes `DIR/admin.kubeconfig` (cluster-admin) and prints that path last; it returns once all four are healthy;
- `down DIR` stops them and removes what `up` stored.

Nothing runs pods: the caller brings the node stand-in (`sim.cluster.kubelet`). The controller manager is expected
to run the namespace, ServiceAccount, garbage-collector and node-lifecycle controllers (the kit used in CI marks a
node NotReady 20 s after its last Lease renewal: `--node-monitor-grace-period=20s`).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import kubernetes

ASSETS_ENV = "HETEROJOB_KUBE_ASSETS"
UP_TIMEOUT_S = 240.0  # a cold start unpacks the binaries: 25-33 s on a busy 2-core machine, more under load


class KitMissing(Exception):
    """No usable kit: the message says what is missing and how to provide one."""


def kit(environ: os._Environ[str] | dict[str, str] | None = None) -> Path:
    """The kit's folder from `HETEROJOB_KUBE_ASSETS`; KitMissing says why there is none."""
    value = (os.environ if environ is None else environ).get(ASSETS_ENV, "")
    if not value:
        raise KitMissing(f"{ASSETS_ENV} is not set: point it at a folder with executable `up` and `down` that start "
                         "and stop a local control plane (README, 'Production readiness: test tiers')")
    folder = Path(value).expanduser()
    for name in ("up", "down"):
        if not os.access(folder / name, os.X_OK):
            raise KitMissing(f"{ASSETS_ENV}={value}: no executable {folder / name} (the kit needs `up DIR` and "
                             "`down DIR`)")
    return folder


class ControlPlane:
    """One control plane started with the kit's `up`, stopped with its `down` (also on a failed start)."""

    def __init__(self, assets: Path, workdir: Path | None = None) -> None:
        self.assets = assets
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="heterojob-k8s-"))
        self.kubeconfig = self.workdir / "admin.kubeconfig"

    def start(self, timeout_s: float = UP_TIMEOUT_S) -> ControlPlane:
        try:
            done = subprocess.run([str(self.assets / "up"), str(self.workdir)], capture_output=True, text=True,
                                  timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            self.stop()
            raise RuntimeError(f"{self.assets / 'up'} did not finish in {timeout_s:.0f}s") from exc
        if done.returncode != 0 or not self.kubeconfig.exists():
            self.stop()
            raise RuntimeError(f"{self.assets / 'up'} {self.workdir} failed ({done.returncode}): "
                               f"{done.stderr.strip()[-2000:]}")
        return self

    def stop(self) -> None:
        subprocess.run([str(self.assets / "down"), str(self.workdir)], capture_output=True, timeout=120,
                       check=False)

    def client(self) -> kubernetes.client.ApiClient:
        return kubernetes.config.new_client_from_config(config_file=str(self.kubeconfig))

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
