"""`POST /alerts` in Alertmanager's webhook format, `GET /metrics`, `GET /healthz` (aiohttp, in the operator).

Answers fast and works later: a request is checked (bearer token in constant time, size, JSON, schema),
its new alerts go on a bounded queue, and a worker hands them on. Codes follow what Alertmanager does
with them: 2xx delivered; 5xx retried with backoff (queue full, not ready); any other code is dropped, so
4xx only for requests that can never succeed (401 token, 400 malformed, 413 too large).
De-duplication by (fingerprint, startsAt, status) over a bounded memory of recent alerts.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from heterojob.alerts.payload import Alert, PayloadError, parse
from heterojob.metrics import OperatorMetrics

log = logging.getLogger("heterojob.alerts")

MAX_BODY = 1 << 20  # 1 MiB: Alertmanager's largest groups are far below; truncatedAlerts says if it cut


class AlertReceiver:
    def __init__(self, handle: Callable[[Alert], Awaitable[None]], token: str | None, metrics: OperatorMetrics,
                 *, queue_size: int = 20_000, remember: int = 100_000, max_body: int = MAX_BODY) -> None:
        self.handle = handle
        self._token = token.encode() if token else None
        self.metrics = metrics
        self.queue: asyncio.Queue[Alert] = asyncio.Queue(maxsize=queue_size)
        self._seen: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._remember = remember
        self.app = web.Application(client_max_size=max_body)
        self.app.add_routes([web.post("/alerts", self._alerts), web.get("/metrics", self._metrics),
                             web.get("/healthz", self._healthz)])
        self._runner: web.AppRunner | None = None
        self._workers: list[asyncio.Task[None]] = []
        self.processed = 0

    def _authorized(self, request: web.Request) -> bool:
        if self._token is None:
            return True
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self._token)

    def _refuse(self, code: int, text: str) -> web.Response:
        self.metrics.alerts_rejected.labels(str(code)).inc()
        return web.json_response({"error": text}, status=code)

    async def _alerts(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._refuse(401, "missing or wrong bearer token (http_config.authorization in the receiver)")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._refuse(413, f"body over {self.app._client_max_size} bytes; lower max_alerts in the receiver")
        try:
            note = parse(json.loads(body))
        except json.JSONDecodeError as exc:
            return self._refuse(400, f"not JSON: {exc}")
        except PayloadError as exc:
            return self._refuse(400, str(exc))
        if note.truncated_alerts:
            log.warning("Alertmanager truncated %d alerts of group %s", note.truncated_alerts, note.group_key)
        accepted = 0
        for alert in note.alerts:
            self.metrics.alerts_received.labels(alert.status).inc()
            key = (*alert.key, alert.status)
            if key in self._seen:
                self.metrics.alerts_deduplicated.inc()
                continue
            try:
                self.queue.put_nowait(alert)
            except asyncio.QueueFull:
                # the rest will come again: Alertmanager retries a 5xx, and what was queued is de-duplicated
                return self._refuse(503, "busy: alert queue full, retry later")
            self._seen[key] = None
            if len(self._seen) > self._remember:
                self._seen.popitem(last=False)
            accepted += 1
        self.metrics.alert_queue.set(self.queue.qsize())
        return web.json_response({"accepted": accepted, "alerts": len(note.alerts)})

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _work(self) -> None:
        while True:
            alert = await self.queue.get()
            try:
                await self.handle(alert)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - one bad alert must not stop the intake
                log.exception("alert %s (%s) could not be processed", alert.fingerprint, alert.name)
            finally:
                self.processed += 1
                self.queue.task_done()
                self.metrics.alert_queue.set(self.queue.qsize())

    async def start(self, host: str = "0.0.0.0", port: int = 8080, workers: int = 4) -> int:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        self._workers = [asyncio.get_running_loop().create_task(self._work(), name=f"alerts-{i}")
                         for i in range(workers)]
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        return int(sockets[0].getsockname()[1]) if sockets else port

    async def stop(self) -> None:
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
