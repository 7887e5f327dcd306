"""The `heterojob` command: run the operator, the console or the demo; generate files; run the emulator."""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import heterojob
from heterojob.engine.capacity import transfer
from heterojob.engine.placing.requeue import REQUEUE_AFTER_S


def _operator_run(args: argparse.Namespace) -> int:
    import kopf

    from heterojob import logs
    from heterojob.handlers import OperatorConfig, Standby, make_registry
    from heterojob.kube.api import RateLimit
    from heterojob.controller.monitor import TelemetryConfig
    from heterojob.telemetry.model import DEFAULT_FATAL_XIDS, HealthPolicy

    kopf.configure(verbose=args.verbose, debug=False, log_format=kopf.LogFormat.PLAIN)
    logs.configure(args.verbose)
    fatal = (DEFAULT_FATAL_XIDS | frozenset(args.fatal_xid or ())) - frozenset(args.non_fatal_xid or ())
    telemetry = TelemetryConfig(
        prometheus_url=args.prometheus_url, interval_s=args.telemetry_interval, window_s=args.telemetry_window,
        timeout_s=args.prometheus_timeout, steps_window_s=args.steps_window,
        policy=HealthPolicy(fatal_xids=frozenset(fatal), overheat_celsius=args.overheat_celsius))
    from heterojob.controller import ControllerConfig
    from heterojob.controller.discovery import DiscoveryConfig
    from heterojob.kube.members import MembersConfig

    from heterojob.alerts.mapping import ACTIONS, DEFAULT_TABLE

    table = dict(DEFAULT_TABLE)
    for item in args.alert_action or ():
        name, _, action = item.partition("=")
        if action not in ACTIONS:
            raise SystemExit(f"--alert-action {item!r}: use NAME=ACTION with ACTION one of {', '.join(ACTIONS)}")
        table[name] = action
    if args.alertmanager_url and args.alerts_port is None:
        raise SystemExit("--alertmanager-url needs --alerts-port: the alerts read back from Alertmanager are "
                         "resolved by its webhook")
    token = os.environ.get("HETEROJOB_ALERT_TOKEN")
    if args.alert_token_file:
        token = Path(args.alert_token_file).read_text().strip()
    config = OperatorConfig(kubeconfig=args.kubeconfig, resync_seconds=args.resync_seconds, telemetry=telemetry,
                            resync_rate=args.resync_rate,
                            api_rate=RateLimit(args.kube_api_qps, args.kube_api_burst),
                            alerts_port=args.alerts_port, alert_token=token, alert_actions=table,
                            alerts_tls_dir=args.alerts_tls_dir, alertmanager_url=args.alertmanager_url or None,
                            alertmanager_timeout_s=args.alertmanager_timeout,
                            alertmanager_sync_s=args.alertmanager_sync,
                            discovery=DiscoveryConfig(
                                namespace=args.discovery_namespace or os.environ.get("POD_NAMESPACE")
                                or "heterojob-system", create_classes=args.create_discovered_classes),
                            members=MembersConfig(poll_seconds=args.member_poll_seconds,
                                                  loss_timeout_s=args.member_loss_timeout,
                                                  request_timeout_s=args.member_request_timeout),
                            controller=ControllerConfig(min_runtime_s=args.preemption_min_runtime,
                                                        disruption_budget=args.disruption_budget,
                                                        advisory=args.advisory, queue_policy=args.queue_policy,
                                                        queue_thresholds_device_h=args.mlfq_thresholds,
                                                        starvation_s=args.starvation_bound,
                                                        max_turns=args.max_turns if args.max_turns >= 0 else None,
                                                        move_requeue_after_s=args.move_requeue_after,
                                                        unschedulable_after_s=args.unschedulable_after,
                                                        transfer=_transfer_settings(args)))
    namespaces = args.namespace or ()
    config = dataclasses.replace(config, namespaces=tuple(namespaces))
    if not args.leader_elect:
        registry = make_registry(config)
        kopf.run(registry=registry, standalone=True, clusterwide=not namespaces, namespaces=namespaces,
                 liveness_endpoint=args.liveness)
        return 0

    import asyncio
    import socket

    from heterojob import elected
    from heterojob.kube.api import load_client
    from heterojob.kube.leader import LeaderElector, LeaseConfig

    namespace, _, name = args.leader_elect.rpartition("/")
    namespace = namespace or os.environ.get("POD_NAMESPACE") or "heterojob-system"
    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    lease = LeaseConfig(namespace=namespace, name=name, identity=identity, duration_s=args.lease_duration,
                        renew_deadline_s=min(10.0, args.lease_duration * 2 / 3),
                        renew_s=max(0.5, args.lease_duration / 7.5), retry_s=max(0.5, args.lease_duration / 7.5),
                        pod=os.environ.get("POD_NAME") if os.environ.get("POD_NAMESPACE") == namespace else None)
    elector = LeaderElector(load_client(args.kubeconfig), lease)
    standby = Standby(config)  # the caches, listed and followed while this replica stands by
    registry = make_registry(config, standby)

    async def start(stop_flag: asyncio.Event, ready_flag: asyncio.Event) -> None:
        await kopf.operator(registry=registry, standalone=True, clusterwide=not namespaces, namespaces=namespaces,
                            stop_flag=stop_flag, ready_flag=ready_flag)

    return elected.main(elector, start, args.liveness, standby)


def _console(args: argparse.Namespace) -> int:
    env = dict(os.environ)
    if args.kubeconfig:
        env["HETEROJOB_KUBECONFIG"] = args.kubeconfig
    # `streamlit run heterojob_console/Home.py`, with the console's modules loaded before the server starts
    cmd = [sys.executable, "-m", "heterojob_console.serve", "--server.port", str(args.port),
           "--server.address", args.address, "--server.headless", "true", "--browser.gatherUsageStats", "false",
           # an operator's console, not a developer's: no Deploy button, no rerun/settings menu, no source watch
           "--client.toolbarMode", "minimal", "--server.runOnSave", "false", "--server.fileWatcherType", "none",
           "--client.showErrorDetails", "none"]
    return subprocess.call(cmd, env=env)


def _demo(args: argparse.Namespace) -> int:
    from heterojob.sim.demo.fleet import parse_members
    from heterojob.sim.demo.inject import inject
    from heterojob.sim.demo.run import Demo

    if args.action == "inject":
        from heterojob.sim.demo.inject import CLEAR, DemoNotRunning, follow, known, pick_target

        if not args.fault:
            raise SystemExit("usage: heterojob demo inject FAULT [NODE] [--device N] [--value V]; "
                             "heterojob demo inject clear [NODE] [--device N]")
        try:
            known(args.fault)  # before a target is picked and said
            job = None
            node, device = args.node, args.device if args.device is not None else 0
            if args.fault == CLEAR:  # no device: the whole node; no node: the whole fleet
                device = args.device
            elif not node:
                node, picked, job, pod = pick_target(args.fault, args.workdir)
                device = picked if args.device is None else args.device
                print(f"{args.fault} on {node} device {device}: it is under job {job} (pod {pod})")
            print(inject(args.fault, node, device, args.value, args.workdir))
            if job is not None:
                follow(job, args.workdir)
        except (DemoNotRunning, OSError, ValueError) as exc:
            raise SystemExit(f"heterojob demo inject: {exc}") from None
        return 0

    try:
        members = parse_members(args.members)
    except ValueError as exc:
        raise SystemExit(f"heterojob demo: {exc}") from None
    return Demo(console_port=args.port, smoke=args.smoke, smoke_seconds=args.smoke_seconds,
                workdir=args.workdir, members=members).run()


def _sim(args: argparse.Namespace) -> int:
    from heterojob.replay.cli import main as replay_main

    return replay_main(args.rest)


def _generate(args: argparse.Namespace) -> int:
    from heterojob import generate

    root = Path(args.root)
    if args.check:
        stale = generate.drifted(root)
        for rel in stale:
            print(f"out of date: {rel}", file=sys.stderr)
        if stale:
            print("run `heterojob generate` to regenerate them", file=sys.stderr)
        return 1 if stale else 0
    for rel in generate.write(root):
        print(f"wrote {rel}")
    return 0


def _telemetry(args: argparse.Namespace) -> int:
    from heterojob.kube.fleet import read_fleet
    from heterojob.telemetry.inspect import Options, run

    return run(Options(prometheus_url=args.prometheus_url, kubeconfig=args.kubeconfig, as_json=args.json,
                       window_s=args.window, timeout_s=args.timeout), read_fleet=read_fleet)


def _emulator(args: argparse.Namespace) -> int:
    from heterojob.sim.cluster import apiserver

    argv = ["--host", args.host, "--port", str(args.port)]
    if args.kubeconfig:
        argv += ["--kubeconfig", args.kubeconfig]
    return apiserver.main(argv)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="heterojob",
        description="Run AI training jobs on heterogeneous accelerators (NVIDIA GPUs, Ascend NPUs, CPUs) "
                    "across regions. Start with `heterojob demo`: a simulated fleet, the operator and the "
                    "console on one machine, no cluster needed.",
    )
    p.add_argument("--version", action="version", version=f"heterojob {heterojob.__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    op = sub.add_parser("operator", help="run the operator against a cluster")
    op_sub = op.add_subparsers(dest="operator_command", required=True, metavar="ACTION")
    run = op_sub.add_parser("run", help="reconcile HeteroJobs until interrupted",
                            description="Reconcile HeteroJobs: place them, create their pods, follow them.")
    run.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, else $KUBECONFIG or ~/.kube/config)")
    run.add_argument("-n", "--namespace", action="append",
                     help="serve only this namespace (repeatable); default: all namespaces")
    mode = run.add_mutually_exclusive_group()
    mode.add_argument("--standalone", action="store_true", help="the only operator instance (the default)")
    mode.add_argument("--leader-elect", metavar="[NAMESPACE/]LEASE", default=None,
                      help="several replicas, one active: act only while holding this coordination.k8s.io Lease "
                           "(namespace default $POD_NAMESPACE); see docs/operations.md")
    run.add_argument("--lease-duration", type=float, default=15.0, metavar="S",
                     help="a standby takes over this long after the leader's last renewal (default 15)")
    run.add_argument("--liveness", default=None,
                     help="serve a health endpoint, e.g. http://0.0.0.0:8081/healthz (with --leader-elect also "
                          "/readyz: 200 on the leader only)")
    run.add_argument("--resync-seconds", type=float, default=30.0, help="look at every job again this often")
    run.add_argument("--resync-rate", type=float, default=50.0, metavar="JOBS/S",
                     help="at most this many jobs a second in a resync round (0: all at once); a round over more "
                          "jobs takes longer than --resync-seconds, and the next starts that long after it ends")
    run.add_argument("--kube-api-qps", type=float, default=500.0, metavar="QPS",  # kube.api.RateLimit's
                     help="client rate limit: API calls a second on average (0: unlimited; default 500)")
    run.add_argument("--kube-api-burst", type=int, default=1000, metavar="N",
                     help="client rate limit: API calls at once above the average (default 1000)")
    run.add_argument("--preemption-min-runtime", type=float, default=300.0, metavar="S",
                     help="a job that has run less than this is never preempted (default 300)")
    run.add_argument("--disruption-budget", type=int, default=5, metavar="N",
                     help="at most N jobs checkpointing, migrating or resizing at once (default 5)")
    run.add_argument("--create-discovered-classes", action="store_true",
                     help="create an AcceleratorClass for every device model no class covers (default: only "
                          "propose it in the ConfigMap heterojob-discovery)")
    run.add_argument("--discovery-namespace", default=None, metavar="NS",
                     help="namespace of the discovery report ConfigMap (default $POD_NAMESPACE, else heterojob-system)")
    run.add_argument("--queue-policy", choices=["fifo", "mlfq"], default="mlfq",
                     help="order within a priority level: mlfq (default: least attained service first, kept in "
                          "status.scheduling, with a starvation bound; classes chosen by expected completion), "
                          "or fifo (oldest first, the user's class order); see docs/scheduling.md")
    run.add_argument("--mlfq-thresholds", type=_thresholds, default=(1.0, 10.0), metavar="H,H",
                     help="mlfq level boundaries in attained device-hours, increasing (default 1,10)")
    run.add_argument("--starvation-bound", type=_positive_seconds, default=4 * 3600.0, metavar="S",
                     help="mlfq: a job that has waited this long since it last ran goes to the first level "
                          "(default 14400)")
    run.add_argument("--max-turns", type=int, default=2, metavar="N",
                     help="mlfq: a running job preempted N times (status.scheduling.preemptions) is displaced "
                          "again only by a higher priority, never by its level; -1: no bound (default 2)")
    run.add_argument("--move-requeue-after", type=_positive_seconds, default=REQUEUE_AFTER_S, metavar="S",
                     help="a move off failed, hot, NotReady or cordoned nodes that fits nowhere for this long "
                          "since it began goes back to the queue as Pending, giving back its reserved room "
                          "(default 120)")
    run.add_argument("--unschedulable-after", type=_positive_seconds, default=60.0, metavar="S",
                     help="a rank the cluster's scheduler refuses (PodScheduled False, Unschedulable) for this long "
                          "sends its gang elsewhere, avoiding that node (default 60)")
    run.add_argument("--advisory", action="store_true",
                     help="decide migrations and resizes, record them (Events, decision log), touch nothing")
    mc = run.add_argument_group("member clusters (docs/multicluster.md)")
    mc.add_argument("--member-poll-seconds", type=float, default=2.0, metavar="S",
                    help="probe each member this often (default 2): its reachability and leftovers; its nodes, "
                         "pods and Services are watched")
    mc.add_argument("--member-loss-timeout", type=float, default=900.0, metavar="S",
                    help="a member that does not answer this long is lost and its jobs placed again "
                         "(default 900; a Region's spec.cluster.lossTimeoutSeconds wins)")
    mc.add_argument("--member-request-timeout", type=float, default=10.0, metavar="S",
                    help="one call to a member; no answer by then counts as unreachable (default 10)")
    mc.add_argument("--default-link", default=None, metavar="GBPS/MS",
                    help="the link assumed between two regions no Region links, e.g. 1/80 (1 Gbit/s, 80 ms): "
                         "without it a voluntary move between them is refused (NoLink) and an involuntary "
                         "one goes there only when no linked region fits")
    mc.add_argument("--storage-gbps", type=float, default=8.0, metavar="GBPS",
                    help="checkpoint save/restore throughput assumed before a save time is measured (default 8)")
    al = run.add_argument_group("alerts")
    al.add_argument("--alerts-port", type=int, default=None, metavar="PORT",
                    help="serve POST /alerts (Alertmanager webhook) and GET /metrics on this port")
    al.add_argument("--alert-token-file", help="file holding the bearer token (else $HETEROJOB_ALERT_TOKEN)")
    al.add_argument("--alert-action", action="append", metavar="ALERTNAME=ACTION",
                    help="map an alertname to migrate, migrate-now, checkpoint or ignore")
    al.add_argument("--alerts-tls-dir", metavar="DIR",
                    help="serve HTTPS with DIR/tls.crt and DIR/tls.key (a mounted kubernetes.io/tls Secret) "
                         "when they exist")
    al.add_argument("--alertmanager-url", default=os.environ.get("HETEROJOB_ALERTMANAGER_URL"), metavar="URL",
                    type=_alertmanager_url,
                    help="at start, read the alerts firing now from this Alertmanager (API v2, e.g. "
                         "http://alertmanager-operated.monitoring.svc:9093; $HETEROJOB_ALERTMANAGER_URL), so a "
                         "node with a dead device is known before its next repeat; needs --alerts-port")
    al.add_argument("--alertmanager-timeout", type=_positive_seconds, default=5.0, metavar="S",
                    help="per request to --alertmanager-url (default 5)")
    al.add_argument("--alertmanager-sync", type=_positive_seconds, default=300.0, metavar="S",
                    help="read the active alerts from --alertmanager-url again this often and resolve a held "
                         "alert no longer active there, so a lost resolve notification holds a node at most "
                         "this long (default 300)")
    tel = run.add_argument_group("telemetry")
    tel.add_argument("--prometheus-url", default=os.environ.get("HETEROJOB_PROMETHEUS_URL"),
                     help="Prometheus for every region without spec.prometheusURL ($HETEROJOB_PROMETHEUS_URL)")
    tel.add_argument("--telemetry-interval", type=float, default=15.0, metavar="S", help="seconds between cycles")
    tel.add_argument("--telemetry-window", type=int, default=60, metavar="S",
                     help="avg/min_over_time window in seconds (hysteresis)")
    tel.add_argument("--steps-window", type=int, default=300, metavar="S",
                     help="the training step rate's window (the SDK's heterojob_training_steps_total): a job's "
                          "speed is known once its ranks have stepped this long (default 300; docs/telemetry.md)")
    tel.add_argument("--prometheus-timeout", type=float, default=5.0, metavar="S")
    tel.add_argument("--overheat-celsius", type=float, default=90.0)
    tel.add_argument("--fatal-xid", type=int, action="append", metavar="N", help="also treat XID N as fatal")
    tel.add_argument("--non-fatal-xid", type=int, action="append", metavar="N",
                     help="do not treat XID N as fatal (default set: docs/telemetry.md)")
    run.add_argument("-v", "--verbose", action="store_true",
                     help="log every handler run, urllib3 retries and full tracebacks")
    run.set_defaults(func=_operator_run)

    con = sub.add_parser("console", help="serve the Streamlit console")
    con.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, else ~/.kube/config)")
    con.add_argument("--port", type=int, default=8501)
    con.add_argument("--address", default="127.0.0.1")
    con.set_defaults(func=_console)

    demo = sub.add_parser("demo", help="run everything on this machine: emulated cluster, fleet, operator, console",
                          description="Start an emulated Kubernetes API with a simulated multi-region fleet, "
                                      "the operator, a stand-in kubelet, a workload and the console. Ctrl-C stops it.")
    demo.add_argument("action", nargs="?", choices=["run", "inject"], default="run",
                      help="run (default) or inject a fault into a running demo")
    demo.add_argument("fault", nargs="?", help="inject: fatal-xid, application-xid, overheat, npu-unhealthy, "
                                                "npu-unknown, vanish, exporter-down, straggle, uncollected, "
                                                "npu-network-down, npu-link-down, fell-off-bus; clear (heals them); or "
                                                "what the node controller writes: node-unreachable, node-notready, "
                                                "node-ready")
    demo.add_argument("node", nargs="?", help="inject: the node, e.g. cn-east-nvidia-h100-00; without one, a node "
                                               "that hosts a running job (the job's next steps are printed); clear without one: "
                                               "every node")
    demo.add_argument("--device", type=int, default=None,
                      help="inject: device index on the node (default 0, or the picked job's first device; "
                           "clear: default every device of the node)")
    demo.add_argument("--value", type=float, default=None, help="inject: XID code, temperature or slow-down")
    demo.add_argument("--port", type=int, default=8501, help="console port (0: any free port)")
    demo.add_argument("--smoke", action="store_true",
                      help="run headless for a while, then print one JSON line with what happened")
    demo.add_argument("--smoke-seconds", type=float, default=60.0)
    demo.add_argument("--members", default=None, metavar="REGIONS",
                      help="regions run as member clusters, one API emulator each, comma-separated (default "
                           "cn-chengdu,cn-guiyang,cn-zhongwei); 'none': one cluster (docs/multicluster.md)")
    demo.add_argument("--workdir", type=Path, default=None,
                      help="where the kubeconfig, logs and state go (default ~/.cache/heterojob/demo)")
    demo.set_defaults(func=_demo)

    sim = sub.add_parser("sim", help="simulations: `heterojob sim replay --help` replays a job trace")
    sim.add_argument("what", choices=["replay"])
    sim.add_argument("rest", nargs=argparse.REMAINDER)
    sim.set_defaults(func=_sim)
    gen = sub.add_parser("generate", help="regenerate crds/ and manifests/defaults/ from the code")
    gen.add_argument("--check", action="store_true", help="only report files that are out of date (exit 1)")
    gen.add_argument("--root", default=".", help="repository root")
    gen.set_defaults(func=_generate)

    telemetry = sub.add_parser("telemetry", help="see what heterojob sees in Prometheus")
    tel_sub = telemetry.add_subparsers(dest="telemetry_command", required=True, metavar="ACTION")
    snap = tel_sub.add_parser(
        "snapshot", help="one row per device: node, region, class, utilization, memory, health, pod",
        description="Query Prometheus once as the operator does and print every device it reads, with the "
                    "parse report. Exits 2 when Prometheus cannot be read.")
    snap.add_argument("--prometheus-url", default=os.environ.get("HETEROJOB_PROMETHEUS_URL"),
                      required=not os.environ.get("HETEROJOB_PROMETHEUS_URL"),
                      help="e.g. http://prometheus-k8s.monitoring.svc:9090")
    snap.add_argument("--kubeconfig", help="join devices with the cluster's Nodes (region, class); without it, "
                                           "nodes come from the series' labels only")
    snap.add_argument("--json", action="store_true", help="a JSON list of device objects (the report on stderr)")
    snap.add_argument("--window", type=int, default=60, metavar="S", help="avg/min/max_over_time window (60)")
    snap.add_argument("--timeout", type=float, default=10.0, metavar="S", help="per query (10)")
    snap.set_defaults(func=_telemetry)

    emu = sub.add_parser("emulator", help="serve the Kubernetes API emulator alone (for development)")
    emu.add_argument("--host", default="127.0.0.1")
    emu.add_argument("--port", type=int, default=0)
    emu.add_argument("--kubeconfig", help="write a kubeconfig pointing at it here")
    emu.set_defaults(func=_emulator)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return int(args.func(args) or 0)


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive number of seconds")
    return value


def _alertmanager_url(text: str) -> str:
    from heterojob.alerts.restore import base_url

    try:
        return base_url(text) if text.strip() else ""
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _thresholds(text: str) -> tuple[float, ...]:
    """--mlfq-thresholds: positive device-hours, increasing."""
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give device-hours separated by commas, e.g. 1,10") from None
    if not values or any(v <= 0 for v in values) or list(values) != sorted(set(values)):
        raise argparse.ArgumentTypeError(f"{text!r}: thresholds must be positive and increasing, e.g. 1,10")
    return values


def _transfer_settings(args: argparse.Namespace) -> transfer.TransferSettings:
    """--default-link GBPS/MS and --storage-gbps as `engine.capacity.transfer.TransferSettings` (a bad value: a clear exit)."""
    link = None
    if args.default_link:
        try:
            gbps, ms = (float(x) for x in args.default_link.split("/"))
            if not (gbps > 0 and ms >= 0):
                raise ValueError
        except ValueError:
            raise SystemExit(f"--default-link {args.default_link!r}: expected GBPS/MS with GBPS > 0 and MS >= 0, "
                             "e.g. 1/80") from None
        link = transfer.Link(gbps, ms, assumed=True)
    if not args.storage_gbps > 0:
        raise SystemExit(f"--storage-gbps {args.storage_gbps}: must be > 0")
    return transfer.TransferSettings(default_link=link, storage_gbps=args.storage_gbps)
