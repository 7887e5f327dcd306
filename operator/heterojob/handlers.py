"""Kopf wiring, kept thin: indexes feed the fleet view; events poke the controller's work queue."""

from __future__ import annotations

import asyncio
import gc
import logging
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kopf
import kubernetes

from heterojob.alerts import mapping as alerts_mapping
from heterojob.alerts.payload import Alert
from heterojob.alerts.receiver import AlertReceiver, NotReady
from heterojob.alerts.restore import Restorer, shown
from heterojob.constants import GROUP, LABEL_JOB, VERSION
from heterojob.controller import Controller, ControllerConfig, FleetSource
from heterojob.controller.discovery import Discovery, DiscoveryConfig
from heterojob.engine.fleet import DeviceClass, Node, RegionInfo
from heterojob.kube import convert
from heterojob.kube.api import Kube, RateLimit, load_client
from heterojob.kube.members import Members, MembersConfig, member_ref
from heterojob.kube.ownpods import kept
from heterojob.state.faults import Faults, faults
from heterojob.state.views import Versioned
from heterojob.metrics import OperatorMetrics
from heterojob.controller.monitor import Monitor, TelemetryConfig
from heterojob.telemetry.snapshot import WatchedJob
from heterojob.telemetry.watched import watched_job

log = logging.getLogger("heterojob.operator")


@dataclass(frozen=True)
class OperatorConfig:
    kubeconfig: str | None = None  # None: in-cluster, else ~/.kube/config or $KUBECONFIG
    resync_seconds: float = 30.0  # every job is looked at again this often, whatever the events said
    resync_rate: float = 50.0  # ... but at most this many jobs a second (a resync round over a big fleet is paced)
    api_workers: int = 16
    api_rate: RateLimit = field(default_factory=RateLimit)  # --kube-api-qps, --kube-api-burst
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    alerts_port: int | None = None  # serve POST /alerts and GET /metrics here (0: any free port); None: off
    alerts_host: str = "0.0.0.0"
    alert_token: str | None = None  # the bearer token Alertmanager sends; None accepts any request
    alert_actions: Mapping[str, str] = field(default_factory=lambda: dict(alerts_mapping.DEFAULT_TABLE))
    alerts_tls_dir: str | None = None  # tls.crt + tls.key here (a kubernetes.io/tls Secret): serve HTTPS
    alertmanager_url: str | None = None  # read the firing alerts back from here at start (alerts/restore.py)
    alertmanager_timeout_s: float = 5.0  # per request to it
    alertmanager_sync_s: float = 300.0  # then read them again this often: a held alert no longer active resolves
    alert_wait_s: float = 30.0  # an alert waits this long for the controller, then is handed in again later
    discovery: DiscoveryConfig = field(default_factory=DiscoveryConfig)
    members: MembersConfig = field(default_factory=MembersConfig)  # member clusters (docs/multicluster.md)


@dataclass
class Runtime:
    kube: Kube
    controller: Controller | None = None
    monitor: Monitor | None = None
    discovery: Discovery | None = None
    members: Members | None = None
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    receiver: AlertReceiver | None = None
    restorer: Restorer | None = None
    restore_task: asyncio.Task[None] | None = None
    alerts_port: int | None = None  # where the receiver listens (the real port when asked for 0)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    ready: asyncio.Event = field(default_factory=asyncio.Event)  # set once `controller` is


def tls_context(directory: str | None) -> ssl.SSLContext | None:
    """A server TLS context from DIR/tls.crt and DIR/tls.key (a mounted kubernetes.io/tls Secret), or None
    when they are not there. A certificate that does not load is an error, never a silent fallback."""
    if not directory:
        return None
    cert, key = Path(directory) / "tls.crt", Path(directory) / "tls.key"
    if not (cert.is_file() and key.is_file()):
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert), str(key))
    return context


def _index_values(index: Mapping[Any, Any]) -> dict[Any, Any]:
    """A Kopf index (key -> store of values) as key -> its one value."""
    out = {}
    for key, store in list(index.items()):
        for value in store:
            out[key] = value
            break
    return out


def _sum_usage(index: Mapping[Any, Any]) -> dict[tuple[str, str], int]:
    used: dict[tuple[str, str], int] = {}
    for store in list(index.values()):
        for per_pod in store:
            for key, count in per_pod.items():
                used[key] = used.get(key, 0) + count
    return used


def _faults(runtime: Runtime) -> Faults:
    """Failed, overheating and network-down devices per node: the last telemetry snapshot's (computed once per
    cycle, not per placement) and the firing alerts'."""
    snapshot = runtime.monitor.snapshot if runtime.monitor else None
    alerts = runtime.controller.alerts if runtime.controller is not None else None
    return faults(snapshot, alerts.dead() if alerts else None, alerts.hot() if alerts else None)


async def _restored(runtime: Runtime) -> None:
    """Before the first placement: wait (bounded) for the firing alerts read back from Alertmanager, so a node
    they name as having a dead device is already kept out of it."""
    restorer = runtime.restorer
    if restorer is None or restorer.first_done.is_set():
        return
    try:
        await asyncio.wait_for(restorer.first_done.wait(), restorer.first_try_s + 10.0)
    except TimeoutError:
        log.warning("placing jobs before the firing alerts from Alertmanager at %s were handled (still trying)",
                    shown(restorer.url))


async def _on_alert(runtime: Runtime, config: OperatorConfig, alert: Alert) -> None:
    """Map one alert to running jobs and an action, and hand it to the controller."""
    if runtime.controller is None:  # it is built on the first watch event: wait for it, a bounded while
        try:
            await asyncio.wait_for(runtime.ready.wait(), config.alert_wait_s)
        except TimeoutError:
            # not taken: the receiver forgets it and hands it in again (no alert is lost to a slow start)
            raise NotReady(f"the controller is not running after {config.alert_wait_s:g} s") from None
    ctl = runtime.controller
    assert ctl is not None
    action = alerts_mapping.action_for(alert.labels, alert.annotations, config.alert_actions)
    if action is None:
        runtime.metrics.alerts_unmatched.inc()
        log.info("alert %s (%s): no heterojob_action annotation and not in the alert table; ignored",
                 alert.name, alert.fingerprint)
        return
    summary = alert.annotations.get("summary") or alert.annotations.get("description") or ""
    message = f"{alert.name}" + (f": {summary}" if summary else "")
    node = alerts_mapping.node_of(alert.labels, ctl.fleet_source.nodes())
    if ctl.alerts.node_alert(alert.fingerprint, alert.status == "firing", action, node, message,
                             alerts_mapping.device_of(alert.labels, node)):
        ctl.poke_pending(delay=0.2)  # the node takes work again: a waiting job may fit there now
    snapshot = runtime.monitor.snapshot if runtime.monitor else None
    hits = alerts_mapping.jobs_for(alert.labels, ctl.placed, snapshot.node_of if snapshot else {})
    if not hits or action == alerts_mapping.IGNORE:
        if not hits:
            runtime.metrics.alerts_unmatched.inc()
            log.info("alert %s (%s) names no job heterojob runs: %s", alert.name, alert.fingerprint, alert.labels)
        return
    for hit in hits:
        await ctl.alert(hit.job, alert.fingerprint, alert.status == "firing", action, hit.nodes, message,
                        alert.starts_at)
    runtime.metrics.alerts_acted.labels(action).inc()


def _poke(ctl: Controller | None, keys: Iterable[str]) -> None:
    if ctl is not None:
        for key in keys:
            ctl.poke(key)


class NoDiffBase(kopf.DiffBaseStorage):
    """No object's last-handled state: the operator has no on.create/update/field handler (only events, indexes
    and activities), so there is no diff to take, and Kopf would otherwise deep-copy every watched body to build
    one on every event."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    """Register every handler on `registry` (a fresh one per operator instance, e.g. per test)."""

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        client = load_client(config.kubeconfig)
        cfg: kubernetes.client.Configuration = client.configuration
        token: str = (cfg.api_key or {}).get("authorization", "") or (cfg.api_key or {}).get("BearerToken", "")
        scheme, _sep, token = token.partition(" ") if " " in token else ("Bearer", "", token)
        return kopf.ConnectionInfo(
            server=cfg.host, ca_path=cfg.ssl_ca_cert, insecure=not cfg.verify_ssl,
            username=cfg.username or None, password=cfg.password or None,
            scheme=scheme if token else None, token=token or None,
            certificate_path=cfg.cert_file, private_key_path=cfg.key_file,
            default_namespace=None,
        )

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        settings.posting.level = logging.WARNING
        settings.persistence.diffbase_storage = NoDiffBase()
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        # Kopf gives every object a shallow copy of the memo: keep shared state in one mutable holder.
        runtime = memo.runtime = Runtime(Kube(load_client(config.kubeconfig), workers=config.api_workers,
                                                     rate=config.api_rate))
        if config.alerts_port is not None:
            if not config.alert_token:
                log.warning("the alert receiver accepts requests without a token: set HETEROJOB_ALERT_TOKEN")
            runtime.receiver = AlertReceiver(lambda alert: _on_alert(runtime, config, alert), config.alert_token,
                                             runtime.metrics)
            tls = tls_context(config.alerts_tls_dir)
            if config.alerts_tls_dir and tls is None:
                log.warning("no tls.crt/tls.key in %s: the alert receiver serves plain HTTP", config.alerts_tls_dir)
            runtime.alerts_port = await runtime.receiver.start(config.alerts_host, config.alerts_port,
                                                               ssl_context=tls)
            log.info("alert receiver on %s://%s:%d (/alerts, /metrics)", "https" if tls else "http",
                     config.alerts_host, runtime.alerts_port)
        if config.alertmanager_url and runtime.receiver is None:
            log.warning("--alertmanager-url %s is not used without --alerts-port: an alert read back from it "
                        "would never resolve (its webhook resolves it); set --alerts-port too",
                        shown(config.alertmanager_url))
        elif config.alertmanager_url and runtime.receiver is not None:
            # in the background: startup never waits for Alertmanager; the first placement does, a bounded while
            runtime.restorer = Restorer(config.alertmanager_url, config.alertmanager_timeout_s,
                                        runtime.receiver.restore, sync=runtime.receiver.sync,
                                        sync_s=config.alertmanager_sync_s)
            runtime.restore_task = asyncio.get_running_loop().create_task(runtime.restorer.run_all(),
                                                                          name="alerts-restore")

    # Indexes are coroutines: Kopf runs a plain function in its thread pool, a hop per object per event.
    @kopf.index("nodes", id="hj_nodes", registry=registry)
    async def hj_nodes(name: str, body: kopf.Body, **_: Any) -> dict[str, Node]:
        return {name: convert.node_view(body)}

    @kopf.index(GROUP, VERSION, "acceleratorclasses", id="hj_classes", registry=registry)
    async def hj_classes(name: str, body: kopf.Body, **_: Any) -> dict[str, DeviceClass] | None:
        cls = convert.device_class(body)
        return {name: cls} if cls else None

    @kopf.index(GROUP, VERSION, "regions", id="hj_regions", registry=registry)
    async def hj_regions(name: str, body: kopf.Body, **_: Any) -> dict[str, RegionInfo] | None:
        region = convert.region_info(body)
        return {name: region} if region else None

    @kopf.index(GROUP, VERSION, "regions", id="hj_members", registry=registry)
    async def hj_members(name: str, body: kopf.Body, **_: Any) -> dict[str, Any] | None:
        ref = member_ref(body)
        return {name: ref} if ref else None

    @kopf.index("pods", id="hj_foreign_pods", registry=registry)
    async def hj_foreign_pods(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any] | None:
        used = convert.pod_usage(body)
        return {(namespace, name): used} if used else None

    @kopf.index("pods", id="hj_job_pods", labels={LABEL_JOB: kopf.PRESENT}, registry=registry)
    async def hj_job_pods(namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_: Any) -> dict[Any, Any]:
        """Each job's pods as the watch has them (what a pass reads of them: `kube.ownpods.kept`)."""
        return {(namespace, labels[LABEL_JOB]): kept(body)}

    @kopf.index(GROUP, VERSION, "heteroquotas", id="hj_quotas", registry=registry)
    async def hj_quotas(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
        return {(namespace, name): convert.quota_limits(body)}

    @kopf.index(GROUP, VERSION, "heterojobs", id="hj_running", registry=registry)
    async def hj_running(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[str, WatchedJob] | None:
        job = watched_job(body)
        return {f"{namespace}/{name}": job} if job else None

    async def controller(memo: kopf.Memo, kwargs: Mapping[str, Any]) -> Controller:
        """The controller, built on first use: only handlers receive Kopf's indexes."""
        runtime: Runtime = memo.runtime
        async with runtime.lock:
            if runtime.controller is not None:
                return runtime.controller
            nodes, classes, regions, pods, quotas = (kwargs["hj_nodes"], kwargs["hj_classes"], kwargs["hj_regions"],
                                                     kwargs["hj_foreign_pods"], kwargs["hj_quotas"])
            member_refs = kwargs["hj_members"]

            def region_of(key: str) -> str | None:
                entry = runtime.controller.cache.entries.get(key) if runtime.controller else None
                return entry.allocation.region if entry is not None and entry.allocation is not None else None

            members = Members(runtime.kube, lambda: _index_values(member_refs), config.members,
                              on_pods=lambda keys: _poke(runtime.controller, keys),
                              region_of=region_of,
                              on_fleet=lambda: runtime.controller.poke_pending(0.2) if runtime.controller else None)
            # every Node (the manager's and the members'): read on every pass, built again only after an event
            # that changed what the planner reads (`Controller.fleet_version`)
            fleet_nodes = Versioned(lambda: members.fleet_nodes(_index_values(nodes), _index_values(regions)),
                                    lambda: runtime.controller.fleet_version if runtime.controller else None)
            source = FleetSource(
                nodes=fleet_nodes,
                classes=lambda: _index_values(classes),
                regions=lambda: _index_values(regions), foreign_usage=lambda: _sum_usage(pods),
                quota_objects=lambda: _index_values(quotas), faults=lambda: _faults(runtime),
                telemetry=lambda: runtime.monitor.snapshot if runtime.monitor else None)
            if member_refs:  # every member tried once before the first placement (bounded: one call's timeout)
                try:
                    await asyncio.wait_for(members.poll(), config.members.request_timeout_s)
                except TimeoutError:
                    pass
            job_pods = kwargs["hj_job_pods"]
            ctl = Controller(runtime.kube, source, config.controller, runtime.metrics, members,
                             watched_pods=lambda namespace, job: list(job_pods.get((namespace, job), ())))
            await ctl.load()
            # what startup built (modules, clients, the loaded cache) lives as long as the process: kept out of
            # the collector's full passes, which otherwise scan it again and again as events allocate
            gc.freeze()
            runtime.controller = ctl  # alerts are handled from here on; other handlers still wait for the lock
            runtime.ready.set()
            if runtime.receiver is not None:  # alerts that came before it, handed in now, before any placement
                await runtime.receiver.retry_deferred()
            await _restored(runtime)
            ctl.start_resync(config.resync_seconds, config.resync_rate)
            runtime.members = members
            members.start()
            running = kwargs["hj_running"]
            runtime.monitor = Monitor(runtime.kube, source, lambda: _index_values(running), config.telemetry,
                                      on_symptoms=lambda keys: _poke(ctl, keys))
            runtime.monitor.start()
            runtime.discovery = Discovery(runtime.kube, source.nodes, source.classes, config.discovery)
            runtime.discovery.start(config.resync_seconds)
            return ctl

    @kopf.on.event(GROUP, VERSION, "heterojobs", registry=registry)
    async def job_event(event: Mapping[str, Any], namespace: str | None, name: str, memo: kopf.Memo, **kwargs: Any
                        ) -> None:
        ctl = await controller(memo, kwargs)
        key = f"{namespace}/{name}"
        if event.get("type") == "DELETED":
            ctl.forget(key)
        elif ctl.seen(key, event.get("object") or {}):  # not the echo of a write its pass settled
            ctl.poke(key)

    @kopf.on.event("pods", labels={LABEL_JOB: kopf.PRESENT}, registry=registry)
    async def pod_event(namespace: str | None, name: str, labels: Mapping[str, str], event: Mapping[str, Any],
                        memo: kopf.Memo, **kwargs: Any) -> None:
        ctl = await controller(memo, kwargs)
        if ctl.kube.own_pods.seen(namespace or "", name, event.get("object") or {}, event.get("type")):
            return  # the pod as the operator created it: the pass that created it counted it
        ctl.poke(f"{namespace}/{labels[LABEL_JOB]}")

    @kopf.on.event("nodes", registry=registry)
    async def node_event(name: str, event: Mapping[str, Any], body: kopf.Body, memo: kopf.Memo, **kwargs: Any
                         ) -> None:
        ctl = await controller(memo, kwargs)
        gone = event.get("type") == "DELETED"
        if not ctl.node_news(name, None if gone else convert.node_view(body)):
            return  # a heartbeat (Lease, Ready's lastHeartbeatTime): nothing the planner reads changed
        if memo.runtime.discovery is not None:
            memo.runtime.discovery.poke()

    @kopf.on.event(GROUP, VERSION, "acceleratorclasses", registry=registry)
    @kopf.on.event(GROUP, VERSION, "regions", registry=registry)
    @kopf.on.event(GROUP, VERSION, "heteroquotas", registry=registry)
    async def fleet_event(memo: kopf.Memo, **kwargs: Any) -> None:
        ctl = await controller(memo, kwargs)
        ctl.poke_pending(delay=0.2)
        if memo.runtime.discovery is not None:
            memo.runtime.discovery.poke()

    @kopf.on.cleanup(registry=registry)
    async def cleanup(memo: kopf.Memo, **_: Any) -> None:
        runtime: Runtime = memo.runtime
        if runtime.restore_task is not None:
            runtime.restore_task.cancel()
            await asyncio.gather(runtime.restore_task, return_exceptions=True)
        if runtime.receiver is not None:
            await runtime.receiver.stop()
        if runtime.monitor is not None:
            await runtime.monitor.stop()
        if runtime.discovery is not None:
            await runtime.discovery.stop()
        if runtime.controller is not None:
            await runtime.controller.stop()
        if runtime.members is not None:
            await runtime.members.stop()
        runtime.kube.close()


def make_registry(config: OperatorConfig) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    register(registry, config)
    return registry
