"""`POST /alerts` in Alertmanager's webhook format, `GET /metrics`, `GET /healthz` (aiohttp, in the operator).

Answers fast and works later: a request is checked (bearer token in constant time, before a byte of the
body is read), its body read as a stream under a size cap (a gzip/deflate body is inflated here, in
bounded steps, with the cap applying to the inflated size; aiohttp's own inflation is off, so a
compression bomb costs at most the cap), decoded (any undecodable body: 400), validated, and its new
alerts go on a bounded queue for a worker. Codes follow what Alertmanager does with them: 2xx delivered;
5xx retried with backoff (queue full); any other code is dropped, so 4xx only for requests that can
never succeed (401 token, 400 undecodable or malformed, 413 too large, 415 unknown encoding); a refused
request's connection is closed instead of its body being drained. Every 4xx is counted in
`heterojob_alerts_rejected_total{code}`.

Ordering follows Alertmanager's timestamps, not arrival: one alert (fingerprint) fires in episodes, each
with its own `startsAt`; once an episode is resolved, a late `firing` of that episode (or anything of an
older episode) is stale and ignored, so it can never re-arm a symptom. Re-sends of what we already have
are de-duplicated. Memory of episodes is bounded. The alerts read back from Alertmanager's API at start
(`restore`, from alerts/restore.py) go through the same de-duplication and handler; so do those of its periodic
re-read (`sync`), which also resolves each firing alert held (`_held`: taken by the handler) that is no longer
listed (planned by alerts/sync.py).

A handler that cannot take an alert (`NotReady`: the operator's controller is not built; or any other error, a
503/429/timeout from the API server) leaves no trace of it: its episode is forgotten (a re-send is new again)
and the alert is kept (the latest of each fingerprint) and handed in again (`retry_deferred`: every `retry_s`
after the round before, and by the operator as soon as its controller runs), de-duplicated again then, so a
newer state heard meanwhile wins. No alert is lost to a slow start or a passing API error. `NotReady` is retried
until the controller runs; a handler error at most `MAX_FAILURES` times in a row for one state of an alert,
then that state is given up (one warning, `heterojob_alerts_given_up_total`) and stays remembered, so its
re-sends are duplicates: a bad alert cannot loop for ever. Each round logs one line, not one per alert.

TLS: `start(..., ssl_context=...)` serves HTTPS (the operator loads a certificate mounted from a Secret).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import ssl
import time
import zlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from heterojob.alerts.mapping import locatable
from heterojob.alerts.payload import Alert, PayloadError, parse
from heterojob.alerts.sync import Held, plan
from heterojob.metrics import OperatorMetrics

log = logging.getLogger("heterojob.alerts")

MAX_BODY = 1 << 20  # 1 MiB (inflated): Alertmanager's largest groups are far below; truncatedAlerts says if it cut
_ENCODINGS = {"": None, "identity": None, "gzip": 47, "x-gzip": 47, "deflate": 47}  # zlib wbits: gzip or zlib


UNLOCATED_LISTED = 20  # the answer lists this many alerts that name no pod, node or device (the warning counts all)
UNLOCATED_HINT = ("labels.namespace + labels.pod, exported_namespace + exported_pod, pod_name; node, "
                  "exported_node, kubernetes_node, node_name, Hostname, hostname, instance, exported_instance; "
                  "UUID, uuid")


RETRY_S = 5.0  # a deferred alert is handed in again this long after the round before ended
MAX_FAILURES = 60  # handler errors (not NotReady) in a row for one state before it is given up: ~5 min of rounds


class NotReady(Exception):
    """Raised by the handler: it cannot take the alert yet (the message says why); it is handed in again."""


class Refused(Exception):
    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code, self.text = code, text


@dataclass(frozen=True)
class Episode:
    starts_at: datetime
    resolved: bool


class AlertOrder:
    NEW = "new"
    DUPLICATE = "duplicate"
    STALE = "stale"


DEFERRED = "deferred"  # `restore`'s count of new alerts the handler could not take yet


def order(episodes: OrderedDict[str, Episode], alert: Alert, remember: int) -> str:
    """Place one alert among what we know of its fingerprint (Alertmanager's startsAt, then firing < resolved)."""
    resolved = alert.status == "resolved"
    prev = episodes.get(alert.fingerprint)
    if prev is not None:
        if alert.starts_at < prev.starts_at:
            return AlertOrder.STALE  # an older episode: a newer one has begun since
        if alert.starts_at == prev.starts_at:
            if prev.resolved:
                return AlertOrder.DUPLICATE if resolved else AlertOrder.STALE  # a firing after its own resolved
            if not resolved:
                return AlertOrder.DUPLICATE
    episodes[alert.fingerprint] = Episode(alert.starts_at, resolved)
    episodes.move_to_end(alert.fingerprint)
    while len(episodes) > remember:
        episodes.popitem(last=False)
    return AlertOrder.NEW


def newer(a: Alert, b: Alert) -> bool:
    """Whether `a` is a later state of its fingerprint than `b` (later episode, or its resolve)."""
    return (a.starts_at, a.status == "resolved") > (b.starts_at, b.status == "resolved")


async def read_capped(request: web.Request, cap: int) -> bytes:
    """The body, inflated if gzip/deflate, refusing (413) as soon as it would exceed `cap` bytes."""
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if encoding not in _ENCODINGS:
        raise Refused(415, f"Content-Encoding {encoding!r} is not supported (send identity, gzip or deflate)")
    wbits = _ENCODINGS[encoding]
    if request.content_length is not None and request.content_length > cap:
        raise Refused(413, f"body over {cap} bytes; lower max_alerts in the receiver")
    inflate = zlib.decompressobj(wbits) if wbits is not None else None
    out = bytearray()
    received = 0
    async for chunk in request.content.iter_any():
        received += len(chunk)
        if received > cap:
            raise Refused(413, f"body over {cap} bytes; lower max_alerts in the receiver")
        if inflate is None:
            out += chunk
            continue
        try:
            data = inflate.decompress(chunk, cap - len(out) + 1)  # never more than the cap allows, per step
        except zlib.error as exc:
            raise Refused(400, f"the {encoding} body cannot be inflated: {exc}") from None
        out += data
        if len(out) > cap or inflate.unconsumed_tail:
            raise Refused(413, f"inflated body over {cap} bytes; lower max_alerts in the receiver")
    if inflate is not None:
        if not inflate.eof:
            raise Refused(400, f"the {encoding} body is truncated")
        out += inflate.flush()
        if len(out) > cap:
            raise Refused(413, f"inflated body over {cap} bytes; lower max_alerts in the receiver")
    elif len(out) > cap:
        raise Refused(413, f"body over {cap} bytes; lower max_alerts in the receiver")
    return bytes(out)


def decode(body: bytes) -> object:
    """JSON, or Refused(400) for anything undecodable: bad UTF-8, numbers past Python's digit limit,
    nesting past the recursion limit, NaN/Infinity."""
    def no_constants(name: str) -> object:
        raise ValueError(f"{name} is not JSON")
    try:
        return json.loads(body.decode("utf-8"), parse_constant=no_constants)
    except UnicodeDecodeError as exc:
        raise Refused(400, f"not UTF-8: {exc.reason} at byte {exc.start}") from None
    except RecursionError:
        raise Refused(400, "not JSON we accept: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, int digit limit, NaN
        raise Refused(400, f"not JSON: {str(exc)[:200]}") from None


class AlertReceiver:
    def __init__(self, handle: Callable[[Alert], Awaitable[None]], token: str | None, metrics: OperatorMetrics,
                 *, queue_size: int = 20_000, remember: int = 100_000, max_body: int = MAX_BODY,
                 retry_s: float = RETRY_S) -> None:
        self.handle = handle
        self._token = token.encode() if token else None
        self.metrics = metrics
        self.max_body = max_body
        self.queue: asyncio.Queue[Alert] = asyncio.Queue(maxsize=queue_size)
        self._episodes: OrderedDict[str, Episode] = OrderedDict()
        self._remember = remember
        self._deferred: OrderedDict[str, Alert] = OrderedDict()  # fingerprint -> its latest alert not yet taken
        self._held: OrderedDict[str, Held] = OrderedDict()  # fingerprint -> the firing alert the handler took
        # fingerprint -> (the state that failed, how many times in a row): the bound on handler errors
        self._failures: dict[str, tuple[Episode, int]] = {}
        self._why: str = ""  # why the last alert was not taken (the round's log line)
        self._retry_s = retry_s
        self._retrying: asyncio.Task[None] | None = None
        self.app = web.Application(client_max_size=max_body)
        self.app.add_routes([web.post("/alerts", self._alerts), web.get("/metrics", self._metrics),
                             web.get("/healthz", self._healthz)])
        self._runner: web.AppRunner | None = None
        self._workers: list[asyncio.Task[None]] = []
        self.processed = 0
        self.tls = False

    def _authorized(self, request: web.Request) -> bool:
        if self._token is None:
            return True
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self._token)

    def _refuse(self, code: int, text: str, close: bool = False) -> web.Response:
        self.metrics.alerts_rejected.labels(str(code)).inc()
        response = web.json_response({"error": text}, status=code)
        if close:
            response.force_close()  # do not drain (or inflate) what the sender still has to send
        return response

    async def _alerts(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._refuse(401, "missing or wrong bearer token (http_config.authorization in the receiver)",
                                close=True)
        try:
            note = parse(decode(await read_capped(request, self.max_body)))
        except Refused as exc:
            return self._refuse(exc.code, exc.text, close=exc.code != 400)
        except PayloadError as exc:
            return self._refuse(400, str(exc))
        if note.truncated_alerts:
            log.warning("Alertmanager truncated %d alerts of group %s", note.truncated_alerts, note.group_key)
        accepted = 0
        unlocated: list[dict[str, str]] = []
        for alert in note.alerts:
            self.metrics.alerts_received.labels(alert.status).inc()
            if self.queue.full():
                # the rest will come again: Alertmanager retries a 5xx, and what was queued is de-duplicated
                return self._refuse(503, "busy: alert queue full, retry later")
            verdict = order(self._episodes, alert, self._remember)
            if verdict != AlertOrder.NEW:
                self.metrics.alerts_deduplicated.inc()
                if verdict == AlertOrder.STALE:
                    log.info("alert %s (%s) %s, startsAt %s: stale (a newer state is known), ignored",
                             alert.name, alert.fingerprint, alert.status, alert.starts_at.isoformat())
                continue
            if not locatable(alert.labels):
                unlocated.append({"fingerprint": alert.fingerprint, "alertname": alert.name})
            self.queue.put_nowait(alert)
            accepted += 1
        self.metrics.alert_queue.set(self.queue.qsize())
        answer: dict[str, object] = {"accepted": accepted, "alerts": len(note.alerts)}
        if unlocated:
            # delivered (a 4xx would make Alertmanager drop the whole group), but said: it can name no job
            answer["unlocated"] = unlocated[:UNLOCATED_LISTED]
            answer["warning"] = (f"{len(unlocated)} alert(s) carry no label naming a pod, node or device "
                                 f"({UNLOCATED_HINT}): they can name no job; keep those labels in the rule")
            log.warning("alerts %s: %s", ", ".join(f"{u['alertname']} ({u['fingerprint']})" for u in unlocated[:5]),
                        answer["warning"])
        return web.json_response(answer)

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def restore(self, alerts: Iterable[Alert]) -> dict[str, int]:
        """Alerts read back from Alertmanager's API (`alerts.restore`): de-duplicated against what the webhook
        brought (and will bring) exactly as a webhook's are, and the new ones handled before this returns,
        together (each handler's first, synchronous step runs before any job it pokes is looked at: every
        dead-node marker is set before a job leaves one of those nodes). How many were new, duplicate, stale."""
        counts = {AlertOrder.NEW: 0, AlertOrder.DUPLICATE: 0, AlertOrder.STALE: 0}
        new: list[Alert] = []
        for alert in alerts:
            verdict = order(self._episodes, alert, self._remember)
            counts[verdict] += 1
            self.metrics.alerts_restored.labels(verdict).inc()
            if verdict == AlertOrder.NEW:
                new.append(alert)
        taken = await asyncio.gather(*(self._process(alert, quiet=True) for alert in new))
        counts[DEFERRED] = taken.count(False)
        self._log_round(counts[DEFERRED], "read back from Alertmanager")
        return counts

    async def sync(self, active: list[Alert], unreadable: set[str], began: float) -> dict[str, int]:
        """Alertmanager's active alerts read again (`alerts.sync`): each held firing alert no longer listed is
        handed in resolved (its episode forgotten first, so a later listing of it is new again: Alertmanager's
        API is the authority), each listed one not held is taken as `restore` takes it. `unreadable`: the
        fingerprints of entries that could not be read; `began`: when the read began (time.monotonic())."""
        todo = plan(self._held, active, unreadable, began, datetime.now(UTC))
        for alert in todo.resolve:
            self._episodes.pop(alert.fingerprint, None)
        taken = await asyncio.gather(*(self._process(alert, quiet=True) for alert in todo.resolve))
        self._log_round(taken.count(False), "resolved by the sync")
        counts = await self.restore(todo.take) if todo.take else {}
        return {**counts, "resolved": len(todo.resolve), "kept": len(todo.kept)}

    def _took(self, alert: Alert) -> None:
        """The handler took (or gave up) this state: a firing one is held until it resolves."""
        if alert.status == "resolved":
            self._held.pop(alert.fingerprint, None)
            return
        self._held[alert.fingerprint] = Held(alert, time.monotonic())
        self._held.move_to_end(alert.fingerprint)
        while len(self._held) > self._remember:
            self._held.popitem(last=False)

    async def _process(self, alert: Alert, quiet: bool = False) -> bool:
        """Hand one alert to the handler; False when it was not taken and is handed in again (`NotReady`, or
        a handler error under the bound). `quiet`: part of a round that logs one line for all."""
        state = Episode(alert.starts_at, alert.status == "resolved")
        try:
            await self.handle(alert)
        except asyncio.CancelledError:
            raise
        except NotReady as exc:
            self._defer(alert, str(exc))
        except Exception as exc:  # noqa: BLE001 - one bad alert must not stop the intake
            failed, times = self._failures.get(alert.fingerprint, (state, 0))
            times = times + 1 if failed == state else 1
            if times >= MAX_FAILURES:
                self._failures.pop(alert.fingerprint, None)
                self.metrics.alerts_given_up.inc()
                log.warning("alert %s (%s) %s, startsAt %s: given up after %d failed attempts in a row (last: "
                            "%s); its re-sends are duplicates until a newer state", alert.name,
                            alert.fingerprint, alert.status, alert.starts_at.isoformat(), times, exc,
                            exc_info=log.isEnabledFor(logging.DEBUG))
                self._took(alert)
                return True
            self._failures[alert.fingerprint] = (state, times)
            self._defer(alert, f"failed: {type(exc).__name__}: {str(exc)[:200]}")
        else:
            self._failures.pop(alert.fingerprint, None)
            self._took(alert)
            return True
        finally:
            self.processed += 1
        if not quiet:
            self._log_round(1, f"{alert.name} ({alert.fingerprint}) {alert.status}")
        return False

    def _log_round(self, deferred: int, what: str) -> None:
        """One line per round of hand-ins, however many alerts it deferred."""
        if deferred:
            log.info("%d alert(s) %s not taken yet (%s): handed in again %g s after this round, or once the "
                     "controller runs", deferred, what, self._why, self._retry_s)

    def _defer(self, alert: Alert, why: str) -> None:
        """Not taken: its episode is forgotten (unless a later state was heard since) and it is kept to be
        handed in again, the latest state of its fingerprint only."""
        self._why = why
        if self._episodes.get(alert.fingerprint) == Episode(alert.starts_at, alert.status == "resolved"):
            del self._episodes[alert.fingerprint]
        held = self._deferred.get(alert.fingerprint)
        if held is None or newer(alert, held):
            self._deferred[alert.fingerprint] = alert
            self._deferred.move_to_end(alert.fingerprint)
            while len(self._deferred) > self._remember:
                self._deferred.popitem(last=False)
        self.metrics.alerts_deferred.inc()
        if self._retrying is None or self._retrying.done():
            self._retrying = asyncio.get_running_loop().create_task(self._retry_loop(), name="alerts-retry")

    async def _retry_loop(self) -> None:
        while self._deferred:
            await asyncio.sleep(self._retry_s)
            await self.retry_deferred()

    async def retry_deferred(self) -> int:
        """Hand the deferred alerts in again, together (as `restore` does), each de-duplicated again first
        (a newer state heard meanwhile makes it stale). How many were taken."""
        batch = list(self._deferred.values())
        self._deferred.clear()
        new = [a for a in batch if order(self._episodes, a, self._remember) == AlertOrder.NEW]
        taken = await asyncio.gather(*(self._process(alert, quiet=True) for alert in new))
        self._log_round(taken.count(False), "handed in again")
        return taken.count(True)

    async def _work(self) -> None:
        while True:
            alert = await self.queue.get()
            try:
                await self._process(alert)
            finally:
                self.queue.task_done()
                self.metrics.alert_queue.set(self.queue.qsize())

    async def start(self, host: str = "0.0.0.0", port: int = 8080, workers: int = 4,
                    ssl_context: ssl.SSLContext | None = None) -> int:
        # auto_decompress off: bodies are inflated by read_capped under the cap, never by the parser;
        # lingering_time 0: a body left unread (a refused request) closes the connection instead of being drained
        self._runner = web.AppRunner(self.app, access_log=None, auto_decompress=False, lingering_time=0)
        await self._runner.setup()
        self.tls = ssl_context is not None
        site = web.TCPSite(self._runner, host, port, ssl_context=ssl_context)
        await site.start()
        self._workers = [asyncio.get_running_loop().create_task(self._work(), name=f"alerts-{i}")
                         for i in range(workers)]
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        return int(sockets[0].getsockname()[1]) if sockets else port

    async def stop(self) -> None:
        tasks = [*self._workers, *([self._retrying] if self._retrying is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
