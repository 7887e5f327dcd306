"""A real Prometheus (Debian's `prometheus` package) scraping the simulated exporters, for tests and the demo.

Each node is its own target, labelled `node` and `region` the way Kubernetes service discovery plus a
relabelling rule would (npu-exporter series carry no hostname of their own).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from heterojob.sim import process

if TYPE_CHECKING:
    from heterojob.sim.telemetry.exporters import ExporterFleet

JOBS = {"dcgm": "dcgm-exporter", "npu-exporter": "npu-exporter"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def binary(name: str = "prometheus") -> str:
    found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    if found is None:
        raise FileNotFoundError(f"{name} is not installed: apt-get install -y prometheus prometheus-alertmanager")
    return found


def config(targets: Iterable[Mapping[str, str]], exporter: str, scrape_interval_s: float,
           rule_files: Iterable[str] = (), alertmanager: str | None = None) -> dict[str, Any]:
    """A Prometheus config scraping every simulated node at `exporter` (host:port)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for t in targets:
        # `node` is what relabelling __meta_kubernetes_pod_node_name gives (manifests/telemetry); a target
        # with `relabel_node: False` has none (a plain static config). `labels` are further target labels, e.g.
        # the exporter's own pod/namespace as a ServiceMonitor attaches them (honorLabels: false).
        labels = {"region": t.get("region", ""), "__metrics_path__": t["path"], **(t.get("labels") or {})}
        if t.get("relabel_node", True):
            labels["node"] = t["node"]
        groups.setdefault(JOBS.get(t["family"], t["family"]), []).append(
            {"targets": [t.get("address") or exporter], "labels": labels})
    interval = f"{int(scrape_interval_s * 1000)}ms"
    out: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval,
                   "scrape_timeout": f"{int(min(scrape_interval_s, 10) * 1000)}ms"},
        "scrape_configs": [{"job_name": job, "static_configs": static} for job, static in sorted(groups.items())],
    }
    if rule_files:
        out["rule_files"] = list(rule_files)
    if alertmanager:
        out["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    return out


class _Daemon:
    """A Debian binary on a loopback port: written config, log file, ready check on /-/ready, stop by PID."""

    name = ""  # the program, for messages and the log file
    config_file = ""
    workdir: Path
    url: str
    config: dict[str, Any]
    _proc: subprocess.Popen[bytes] | None = None

    def command(self, config_path: Path) -> list[str]:
        raise NotImplementedError

    def start(self, timeout_s: float = 30.0) -> Any:
        self.workdir.mkdir(parents=True, exist_ok=True)
        cfg = self.workdir / self.config_file
        cfg.write_text(yaml.safe_dump(self.config, sort_keys=False))
        log_path = self.workdir / f"{self.name}.log"
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self._proc = subprocess.Popen(self.command(cfg), stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"{self.name} not ready after {timeout_s}s")

    @property
    def pid(self) -> int | None:
        """The running daemon's process id (None when stopped): benches read its CPU time."""
        return self._proc.pid if self._proc is not None else None

    def stop(self) -> None:
        process.stop(self._proc)
        if self._proc is not None:
            self._log.close()
        self._proc = None

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *_: Any) -> None:
        self.stop()


class PrometheusServer(_Daemon):
    """Start with `start()`, stop with `stop()`; `url` once started."""

    def __init__(self, targets: Iterable[Mapping[str, str]], exporter: str, *, scrape_interval_s: float = 1.0,
                 workdir: Path | None = None, port: int | None = None, rule_files: Iterable[str] = (),
                 alertmanager: str | None = None) -> None:
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="heterojob-prometheus-"))
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = config(targets, exporter, scrape_interval_s, rule_files, alertmanager)

    name, config_file = "prometheus", "prometheus.yml"

    def command(self, config_path: Path) -> list[str]:
        return [binary(), f"--config.file={config_path}", f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--web.enable-lifecycle",
                "--storage.tsdb.retention.time=1h", "--log.level=warn"]


class VictoriaMetricsServer(_Daemon):
    """Debian's victoria-metrics on a loopback port: a global PromQL endpoint (`/api/v1/query`) that regional
    Prometheus servers remote-write to (`remote_write`, `/api/v1/write`) or that imports text (`import_text`)."""

    def __init__(self, *, workdir: Path | None = None) -> None:
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="heterojob-victoria-metrics-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = {}

    name, config_file = "victoria-metrics", "unused.yml"

    def command(self, config_path: Path) -> list[str]:
        return [binary("victoria-metrics"), f"-storageDataPath={self.workdir / 'data'}",
                f"-httpListenAddr=127.0.0.1:{self.port}", "-retentionPeriod=1", "-loggerLevel=WARN",
                "-search.latencyOffset=0s",  # answer up to now (the default hides the last 30 s)
                "-search.maxQueryLen=262144"]  # the aggregate read's `flags` query is ~18 KB (default limit 16 KB)

    def remote_write(self) -> dict[str, Any]:
        """The `remote_write` entry of a Prometheus config that sends everything here."""
        return {"url": f"{self.url}/api/v1/write", "queue_config": {"batch_send_deadline": "1s"}}

    def import_text(self, path: Path) -> None:
        """Imports a Prometheus text file with millisecond timestamps, then makes it searchable."""
        with open(path, "rb") as body:
            request = urllib.request.Request(f"{self.url}/api/v1/import/prometheus", data=body, method="POST")
            request.add_header("Content-Length", str(path.stat().st_size))
            urllib.request.urlopen(request, timeout=600).close()
        urllib.request.urlopen(f"{self.url}/internal/force_flush", timeout=60).close()


class AlertmanagerServer(_Daemon):
    """Debian's prometheus-alertmanager on a loopback port, posting to one webhook with a bearer token."""

    def __init__(self, webhook: str, token: str | None = None, *, workdir: Path | None = None,
                 group_wait: str = "1s", group_interval: str = "1s", repeat_interval: str = "1h") -> None:
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="heterojob-alertmanager-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        hook: dict[str, Any] = {"url": webhook, "send_resolved": True}
        if token:
            hook["http_config"] = {"authorization": {"type": "Bearer", "credentials": token}}
        self.config = {
            "route": {"receiver": "heterojob", "group_by": ["alertname", "node", "Hostname", "hostname"],
                      "group_wait": group_wait, "group_interval": group_interval, "repeat_interval": repeat_interval},
            "receivers": [{"name": "heterojob", "webhook_configs": [hook]}],
        }

    name, config_file = "alertmanager", "alertmanager.yml"

    def command(self, config_path: Path) -> list[str]:
        return [binary("prometheus-alertmanager"), f"--config.file={config_path}",
                f"--storage.path={self.workdir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=", "--log.level=warn"]


@dataclass
class AlertingStack:
    exporters: ExporterFleet
    prometheus: PrometheusServer
    alertmanager: AlertmanagerServer
    alerts_port: int  # where the operator must serve /alerts


@contextmanager
def alerting_stack(nodes: Sequence[Mapping[str, Any]], token: str, workdir: Path, *, scrape_interval_s: float = 1.0,
                   durations: Mapping[str, str] | None = None, seed: int = 3) -> Iterator[AlertingStack]:
    """Simulated exporters -> Prometheus with the shipped rules -> Alertmanager -> http://127.0.0.1:<port>/alerts.

    Start the operator with `alerts_port=stack.alerts_port` and the same token; everything stops on exit.
    """
    from heterojob.alerts.rules import rules_file
    from heterojob.sim.telemetry.exporters import ExporterFleet

    exporters = ExporterFleet(nodes, seed=seed)
    host, port = exporters.serve()
    alerts_port = free_port()
    manager = prometheus = None
    try:
        manager = AlertmanagerServer(f"http://127.0.0.1:{alerts_port}/alerts", token, workdir=workdir / "am").start()
        rules = workdir / "rules.yaml"
        rules.write_text(yaml.safe_dump(rules_file(dict(durations or {"xid": "0s"}))))
        prometheus = PrometheusServer(exporters.targets(), f"{host}:{port}", scrape_interval_s=scrape_interval_s,
                                      workdir=workdir / "prom", rule_files=[str(rules)],
                                      alertmanager=f"127.0.0.1:{manager.port}").start()
        yield AlertingStack(exporters, prometheus, manager, alerts_port)
    finally:
        for server in (prometheus, manager):
            if server is not None:
                server.stop()
        exporters.stop()
