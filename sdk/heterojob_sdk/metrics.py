"""The training step as a Prometheus metric, served from the training process (standard library only).

A pod opts in by declaring a container port named `heterojob-steps` in its template: the operator then sets
`$HETEROJOB_METRICS_PORT` to it, `Checkpointer` serves `/metrics` there (http.server in a daemon thread, the
text exposition format 0.0.4) and the shipped PodMonitor scrapes every pod with that port. Without the port
nothing is served. Series carry no labels of their own: the scrape adds the pod's (`namespace`, `pod`).

    heterojob_training_steps_total     counter: steps this process advanced since its first report
    heterojob_training_steps_created   gauge: unix time of that first report (the counter's start)
    heterojob_training_step            gauge: the last step reported

The counter starts at the first report, not when the process starts, so a restore, a warm-up or an image pull
never counts as slow steps; the operator reads the rate only over windows that begin after `_created`. A step
lower than the last (the loop went back) re-bases without counting; the counter never goes down. Nothing here
raises into the training loop: a port in use or a bad port is logged once and the metric is simply not served.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger("heterojob.sdk")

METRICS_PORT_ENV = "HETEROJOB_METRICS_PORT"
METRICS_PORT_NAME = "heterojob-steps"  # the container port a pod declares to be scraped (the PodMonitor's)
STEPS_TOTAL = "heterojob_training_steps_total"
STEPS_CREATED = "heterojob_training_steps_created"
STEP = "heterojob_training_step"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class StepMetrics:
    """The step counter of one process (thread-safe; `report` is cheap enough for every step)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.total = 0
        self.created: float | None = None  # unix time of the first report
        self.step: int | None = None

    def report(self, step: int) -> None:
        """The loop reached `step` (a whole number; anything else is ignored)."""
        if isinstance(step, bool) or not isinstance(step, int):
            return
        with self._lock:
            if self.step is None:
                self.created = self._clock()
            elif step > self.step:
                self.total += step - self.step
            self.step = step

    def render(self) -> bytes:
        with self._lock:
            total, created, step = self.total, self.created, self.step
        lines = [f"# HELP {STEPS_TOTAL} Training steps this process advanced since its first step report.",
                 f"# TYPE {STEPS_TOTAL} counter"]
        if created is not None:
            lines.append(f"{STEPS_TOTAL} {total}")
        lines += [f"# HELP {STEPS_CREATED} Unix time of this process's first step report (the counter's start).",
                  f"# TYPE {STEPS_CREATED} gauge"]
        if created is not None:
            lines.append(f"{STEPS_CREATED} {created:.3f}")
        lines += [f"# HELP {STEP} The last training step reported.", f"# TYPE {STEP} gauge"]
        if step is not None:
            lines.append(f"{STEP} {step}")
        return ("\n".join(lines) + "\n").encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True  # a restarted process binds again at once (TIME_WAIT), never a second live one

    def __init__(self, address: tuple[str, int], metrics: StepMetrics) -> None:
        self.metrics = metrics
        host = address[0]
        if host in ("", "::") and socket.has_dualstack_ipv6():
            self.address_family = socket.AF_INET6
            address = ("::", address[1])
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # IPv4 too (a pod IP of either)
        super().server_bind()


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *_: Any) -> None:  # a scrape every 15 s is not news
        pass

    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        if self.path.split("?", 1)[0] not in ("/metrics", "/"):
            self.send_error(404, "the metric is at /metrics")
            return
        body = self.server.metrics.render()
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


_lock = threading.Lock()
_served: dict[int, tuple[_Server, StepMetrics]] = {}  # port -> what this process serves there


def port_from(value: object) -> int | None:
    """A metrics port from a parameter or `$HETEROJOB_METRICS_PORT`: None (off) when unset, empty or 0; a
    value that is not a port is logged and means off."""
    if value is None or value == "" or value == 0 or value == "0":
        return None
    try:
        port = int(str(value).strip())
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        log.warning("heterojob: metrics port %r is not a TCP port (1-65535): the step metric is not served",
                    str(value)[:32])
        return None
    return port


def serve(port: int, host: str = "") -> StepMetrics:
    """The process's step metric, served at http://<host>:<port>/metrics from a daemon thread (one server per
    port per process: a second Checkpointer shares it). A port that cannot be bound (in use, e.g. by another
    process of the same pod) is logged and the metric is kept in memory only; never raised."""
    with _lock:
        if port in _served:
            return _served[port][1]
        metrics = StepMetrics()
        try:
            server = _Server((host, port), metrics)
        except OSError as exc:
            log.warning("heterojob: cannot serve the step metric on port %d (%s): training goes on without it "
                        "(another process of this pod may serve it)", port, exc)
            return metrics
        threading.Thread(target=server.serve_forever, name=f"heterojob-metrics-{port}", daemon=True).start()
        _served[port] = (server, metrics)
        log.info("heterojob: step metric served on port %d (/metrics)", port)
        return metrics


def stop(port: int) -> None:
    """Stop serving on `port` (tests; a process normally serves until it exits)."""
    with _lock:
        item = _served.pop(port, None)
    if item is not None:
        item[0].shutdown()
        item[0].server_close()


__all__ = ["CONTENT_TYPE", "METRICS_PORT_ENV", "METRICS_PORT_NAME", "STEP", "STEPS_CREATED", "STEPS_TOTAL",
           "StepMetrics", "port_from", "serve", "stop"]
