"""Kopf wiring, kept thin: Kopf runs the operator (login, startup, cleanup, liveness) and watches nothing; the
operator's caches (`kube.caches`, informers of its own) feed the fleet view, and their events, a HeteroJob's
among them, poke the controller's work queue."""

from __future__ import annotations

import asyncio
import gc
import logging
import ssl
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kopf
import kubernetes

from heterojob.alerts import mapping as alerts_mapping
from heterojob.alerts.payload import Alert
from heterojob.alerts.receiver import AlertReceiver, NotReady
from heterojob.alerts.restore import Restorer, shown
from heterojob.controller import Controller, ControllerConfig, FleetSource
from heterojob.controller.discovery import Discovery, DiscoveryConfig
from heterojob.engine.placing.discovery import reads as discovery_reads
from heterojob.engine.capacity.fleet import Node
from heterojob.kube.caches import Caches
from heterojob.kube.api import Kube, RateLimit, load_client
from heterojob.kube.members import Members, MembersConfig
from heterojob.state.faults import Faults, faults
from heterojob.state.views import Versioned
from heterojob.metrics import OperatorMetrics
from heterojob.controller.monitor import Monitor, TelemetryConfig
from heterojob.telemetry.watched import watched_job

log = logging.getLogger("heterojob.operator")
YOUNG_GC = 20_000  # net allocations between collections of the youngest generation, once the controller runs


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
    namespaces: tuple[str, ...] = ()  # the namespaces served (`--namespace`); empty: all
    cache_page_size: int = 500  # the caches list this many objects a request (`limit`/`continue`)


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
    caches: Caches | None = None  # the informers that feed the fleet view (`kube.caches`)
    build_task: asyncio.Task[None] | None = None  # builds the controller once the caches are synced
    gc_threshold: tuple[int, ...] | None = None  # the collector's thresholds before the controller started
    unwatch_gc: Callable[[], None] | None = None  # stops timing the collector's passes (`OperatorMetrics.watch_gc`)
    # HeteroJob events before the controller is built and started: the last of each job, handed in then (None after)
    early_jobs: dict[str, tuple[str | None, dict[str, Any]]] | None = field(default_factory=dict)
    standing_by: bool = False  # a standby's informers run (`Standby`); the controller loads only once it leads


def new_runtime(config: OperatorConfig) -> Runtime:
    """The API client and the informers (`kube.caches`), started; their events reach the controller once it runs."""
    runtime = Runtime(Kube(load_client(config.kubeconfig), workers=config.api_workers, rate=config.api_rate))
    runtime.caches = Caches(load_client(config.kubeconfig), watched_job, config.namespaces,
                            on_node=lambda event, key, old, new: _node_news(runtime, key[1], event, old, new),
                            on_fleet=lambda: _fleet_news(runtime),
                            on_job_pod=lambda event, ns, pod, job, view: _pod_news(runtime, event, ns, pod, job, view),
                            on_job=lambda event, key, body: _job_news(runtime, event, key, body),
                            on_room=lambda: runtime.controller.room_freed() if runtime.controller else None,
                            page_size=config.cache_page_size).start()
    return runtime


@dataclass
class Standby:
    """A replica's informers, started while it stands by for the Lease (`elected.run`), so that when it leads its
    caches already hold the fleet and every job: at 100,000 devices the first listing took 6.5 s of the takeover
    (controller-runtime starts its caches on every replica the same way). Kopf's startup takes the runtime."""

    config: OperatorConfig
    runtime: Runtime | None = None
    _synced: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.runtime = new_runtime(self.config)
        self.runtime.standing_by = True
        assert self.runtime.caches is not None
        self._synced = asyncio.get_running_loop().create_task(self.runtime.caches.synced(), name="standby-caches")

    def take(self) -> Runtime | None:
        """The runtime for the leader's startup (None when none was started)."""
        runtime, self.runtime = self.runtime, None
        if runtime is not None:
            runtime.standing_by = False
        return runtime

    async def stop(self) -> None:
        """Stop what was started and not taken (a standby that never led)."""
        if self._synced is not None:
            self._synced.cancel()
            await asyncio.gather(self._synced, return_exceptions=True)
        runtime, self.runtime = self.runtime, None
        if runtime is not None:
            if runtime.caches is not None:
                await runtime.caches.stop()
            runtime.kube.close()


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


def _node_news(runtime: Runtime, name: str, event: str | None, old: Node | None, view: Node | None) -> None:
    """A Node's view changed (a heartbeat does not change it): the planner hears of it; discovery looks again
    when what it reads changed (a node came or went, its labels or devices), not for its health or taints: a
    NotReady node's jobs do not wait behind a pass over every node."""
    ctl = runtime.controller
    if ctl is None:  # not built yet: it reads the whole cache when it is
        return
    new = None if event == "DELETED" else view
    if ctl.node_news(name, new) and runtime.discovery is not None and discovery_reads(old) != discovery_reads(new):
        runtime.discovery.poke()


def _fleet_news(runtime: Runtime) -> None:
    """An AcceleratorClass, Region or HeteroQuota changed what a pass reads of it."""
    ctl = runtime.controller
    if ctl is None:
        return
    ctl.poke_pending(delay=0.2)
    if runtime.discovery is not None:
        runtime.discovery.poke()


def _pod_news(runtime: Runtime, event: str | None, namespace: str, name: str, job: str,
              view: Mapping[str, Any]) -> None:
    """A job's pod changed: its job gets a pass, unless the event is the pod just as the operator wrote it."""
    ctl = runtime.controller
    if ctl is None:
        return
    if ctl.kube.own_pods.seen(namespace, name, view, event):
        return  # the pod as the operator created it: the pass that created it counted it
    ctl.poke(f"{namespace}/{job}")


def _job_news(runtime: Runtime, event: str | None, key: str, body: dict[str, Any]) -> None:
    """A HeteroJob a watch event or a listing brought (`Caches` on_job): a deleted job is forgotten; any other
    gets a pass unless the body is the echo of a write its pass settled (`Controller.seen`). Before the
    controller is built and started, the last body of each job is kept and handed in then."""
    early = runtime.early_jobs
    ctl = runtime.controller
    if early is not None or ctl is None:
        if early is not None and event == "DELETED" and runtime.standing_by:
            early.pop(key, None)  # the controller loads (lists) every job after it leads: a standby keeps no tombstone
        elif early is not None:
            early[key] = (event, body)
        return
    if event == "DELETED":
        ctl.forget(key, (body.get("metadata") or {}).get("uid"))
    elif ctl.seen(key, body):
        ctl.poke(key)


def _hand_over(runtime: Runtime) -> None:
    """The HeteroJob events kept while the controller was not running, to it now (`_job_news`)."""
    early, runtime.early_jobs = runtime.early_jobs or {}, None
    for key, (event, body) in early.items():
        try:
            _job_news(runtime, event, key, body)
        except Exception:  # noqa: BLE001 - one job's trouble must not keep the others' events: logged
            log.exception("handing the controller %s's %s failed", key, event or "listing")


def _poke(ctl: Controller | None, keys: Iterable[str]) -> None:
    if ctl is not None:
        for key in keys:
            ctl.poke(key)


class NoDiffBase(kopf.DiffBaseStorage):
    """No object's last-handled state: the operator has no on.create/update/field handler (only activities), so
    there is no diff to take, and Kopf would otherwise deep-copy every watched body to build one on every event."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def register(registry: kopf.OperatorRegistry, config: OperatorConfig, standby: Standby | None = None) -> None:
    """Register every handler on `registry` (a fresh one per operator instance, e.g. per test); `standby`: the
    informers started while this replica stood by, taken at startup."""

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
        # a startup Kopf tries again keeps the runtime the first try made (or took from the standby)
        runtime = memo.runtime = memo.get("runtime") or (standby.take() if standby is not None else None) \
            or new_runtime(config)
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
        runtime.build_task = asyncio.get_running_loop().create_task(build(memo), name="controller-start")

    async def controller(memo: kopf.Memo) -> Controller:
        """The controller, built once every cache holds its first listing (`kube.caches`): a pass must not see a
        job without its pods, or a node without the pods on it. The HeteroJob events that came before it was
        started are handed in by `build` once it is (`Runtime.early_jobs`)."""
        runtime: Runtime = memo.runtime
        caches = runtime.caches
        assert caches is not None
        await caches.synced()
        async with runtime.lock:
            if runtime.controller is not None:
                return runtime.controller

            def region_of(key: str) -> str | None:
                entry = runtime.controller.cache.entries.get(key) if runtime.controller else None
                return entry.allocation.region if entry is not None and entry.allocation is not None else None

            members = Members(runtime.kube, caches.member_refs, config.members,
                              on_pods=lambda keys: _poke(runtime.controller, keys),
                              region_of=region_of,
                              on_fleet=lambda: runtime.controller.poke_pending(0.2) if runtime.controller else None)
            # every Node (the manager's and the members'): read on every pass, built again only after an event
            # that changed what the planner reads (`Controller.fleet_version`)
            fleet_nodes = Versioned(lambda: members.fleet_nodes(caches.node_views(), caches.region_views()),
                                    lambda: runtime.controller.fleet_version if runtime.controller else None)
            source = FleetSource(
                nodes=fleet_nodes, classes=caches.class_views, regions=caches.region_views,
                foreign_usage=caches.foreign_usage, leaving=caches.leaving_usage, quota_objects=caches.quota_objects,
                faults=lambda: _faults(runtime),
                telemetry=lambda: runtime.monitor.snapshot if runtime.monitor else None)
            if caches.member_refs():  # every member tried once before the first placement (bounded)
                try:
                    await asyncio.wait_for(members.poll(), config.members.request_timeout_s)
                except TimeoutError:
                    pass
            ctl = Controller(runtime.kube, source, config.controller, runtime.metrics, members,
                             watched_pods=caches.job_pods)
            ctl.nodes_known(caches.node_views())  # a node's next event is news to the planner only if it changed
            await ctl.load()
            # what startup built (modules, clients, the loaded cache) lives as long as the process: kept out of
            # the collector's full passes, which otherwise scan it again and again as events allocate
            gc.freeze()
            # and the youngest generation collected after YOUNG_GC net allocations, not 700: a pass allocates
            # thousands of short-lived objects (bodies, manifests, answers) that reference counting frees, and
            # collecting every 700 took a tenth of the operator's CPU in an admission burst, mostly scanning what
            # a pass still held; restored at cleanup (tests run many operators in one process)
            runtime.gc_threshold = gc.get_threshold()
            gc.set_threshold(YOUNG_GC, *runtime.gc_threshold[1:])
            runtime.unwatch_gc = runtime.metrics.watch_gc()
            runtime.controller = ctl  # alerts are handled from here on; other handlers still wait for the lock
            runtime.ready.set()
            if runtime.receiver is not None:  # alerts that came before it, handed in now, before any placement
                await runtime.receiver.retry_deferred()
            await _restored(runtime)
            ctl.start_resync(config.resync_seconds, config.resync_rate)
            runtime.members = members
            members.start()
            runtime.monitor = Monitor(runtime.kube, source, caches.running_jobs, config.telemetry,
                                      on_symptoms=lambda keys: _poke(ctl, keys))
            runtime.monitor.start()
            runtime.discovery = Discovery(runtime.kube, source.nodes, source.classes, config.discovery)
            runtime.discovery.start(config.resync_seconds)
            return ctl

    async def build(memo: kopf.Memo) -> None:
        """Build and start the controller once the caches are synced, then hand it the HeteroJob events that came
        before (every job listed, and what changed since: each gets a pass)."""
        while True:
            try:
                await controller(memo)
                _hand_over(memo.runtime)
                return
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - e.g. the API server away while loading: logged, tried again
                log.exception("starting the controller failed; trying again in 5 s")
                await asyncio.sleep(5.0)

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
        if runtime.build_task is not None:
            runtime.build_task.cancel()
            await asyncio.gather(runtime.build_task, return_exceptions=True)
        if runtime.caches is not None:
            await runtime.caches.stop()
        if runtime.gc_threshold is not None:
            gc.set_threshold(*runtime.gc_threshold)
        if runtime.unwatch_gc is not None:
            runtime.unwatch_gc()
        runtime.kube.close()


def make_registry(config: OperatorConfig, standby: Standby | None = None) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    register(registry, config, standby)
    return registry
