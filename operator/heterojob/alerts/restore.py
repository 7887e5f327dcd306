"""At start, and then every `--alertmanager-sync`, read the alerts that fire now from Alertmanager's API and
feed them to the receiver.

What a firing alert says about a node (a dead device: keep new work off it) is kept in memory only, and
Alertmanager repeats a firing notification only every `repeat_interval` (4 h by default): without this, an
operator that restarts (or a standby that takes the Lease) would place new jobs on a node with a dead GPU
until then. `GET <url>/api/v2/alerts?active=true&silenced=false&inhibited=false` (`alerts.active` has the
shape) is read once, with a bounded timeout and one quick retry (urllib3's `Retry`, as for Prometheus), and
each alert goes through the receiver's de-duplication and handler like a webhook's, so a webhook of the same
episode later changes nothing. An Alertmanager that is absent, slow or answers something else never holds up
or stops the operator: a warning names the URL and what to check, and the read is tried again later (backoff
up to 5 minutes) until it succeeds once.

Then, every `sync_s` (`--alertmanager-sync`, 5 minutes by default), the list is read again and handed to
`sync` (`AlertReceiver.sync`, planned by `alerts.sync`): a held alert no longer active is resolved, so a lost
resolve notification holds a node at most that long. A failed sync changes nothing: the held alerts stay, one
warning per outage, one line when Alertmanager answers again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from heterojob.alerts.active import PATH, QUERY, ActiveError, Skipped, firing
from heterojob.alerts.payload import Alert
from heterojob.failures import describe

log = logging.getLogger("heterojob.alerts")

MAX_ANSWER = 64 << 20  # 64 MiB: some 50,000 alerts; a bigger answer is not read
RETRY_MIN_S, RETRY_MAX_S = 10.0, 300.0
SYNC_S = 300.0  # the active alerts are read again this often (--alertmanager-sync)
EXAMPLE = "http://alertmanager-operated.monitoring.svc:9093"


class RestoreError(Exception):
    """The alerts could not be read this time; the message says why and what to check."""


def shown(url: str) -> str:
    """The URL without credentials (`http://user:pass@host` is how basic auth is given), for logs; never raises
    (a URL too broken to split still has its user part cut)."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*:)?//[^/?#]*@", r"\1//", url, count=1)


def base_url(text: str) -> str:
    """`text` if it can be Alertmanager's base URL (http or https, a host, a valid port), else ValueError saying
    what to give (`--alertmanager-url`'s check: a broken URL is refused at start, not retried for ever)."""
    try:
        parts = urlsplit(text.strip())
        port_ok = parts.port is None or parts.port > 0
    except ValueError as exc:
        raise ValueError(f"{shown(text)!r}: {exc}; give Alertmanager's base URL, e.g. {EXAMPLE}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise ValueError(f"{shown(text)!r}: give Alertmanager's base URL (http or https, a host and an optional "
                         f"port), e.g. {EXAMPLE}")
    return text.strip()


def read(url: str, timeout_s: float, max_bytes: int = MAX_ANSWER) -> object:
    """The decoded answer of `GET <url>/api/v2/alerts` (blocking: run it in a thread), or RestoreError."""
    session = requests.Session()
    retry = Retry(total=1, read=False, backoff_factor=0.2, status_forcelist=(502, 503, 504),
                  allowed_methods=("GET",), raise_on_status=False)
    session.mount("http://", HTTPAdapter(max_retries=retry))
    session.mount("https://", HTTPAdapter(max_retries=retry))
    target = url.rstrip("/") + PATH
    try:
        with session.get(target, params=QUERY, timeout=timeout_s, stream=True,
                         headers={"Accept": "application/json"}) as answer:
            answer.raise_for_status()
            body = bytearray()
            for chunk in answer.iter_content(1 << 16):
                body += chunk
                if len(body) > max_bytes:
                    raise RestoreError(f"the answer is over {max_bytes >> 20} MiB; not read")
        return json.loads(body)
    except requests.HTTPError as exc:
        hint = (" (is it Alertmanager 0.16 or newer, and the URL its base, with any --web.route-prefix?)"
                if exc.response is not None and exc.response.status_code in (404, 405) else "")
        raise RestoreError(f"{describe(exc, timeout_s)}{hint}") from None
    except requests.RequestException as exc:
        raise RestoreError(describe(exc, timeout_s)) from None
    except (ValueError, RecursionError):  # not JSON (UTF-8 errors are ValueErrors too)
        raise RestoreError("the answer is not JSON (is the URL Alertmanager's?)") from None
    finally:
        session.close()


Sync = Callable[[list[Alert], set[str], float], Awaitable[dict[str, int]]]


class Restorer:
    """Reads the firing alerts once (retrying until it succeeds) and hands them to `feed`
    (`AlertReceiver.restore`); then, with `sync`, reads them again every `sync_s` and hands them to it
    (`AlertReceiver.sync`)."""

    def __init__(self, url: str, timeout_s: float, feed: Callable[[list[Alert]], Awaitable[dict[str, int]]],
                 retry_s: tuple[float, float] = (RETRY_MIN_S, RETRY_MAX_S), *, sync: Sync | None = None,
                 sync_s: float = SYNC_S) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.feed = feed
        self.retry_s = retry_s
        self.sync = sync
        self.sync_s = sync_s
        self.syncs = 0  # syncs that read the alerts and handed them in
        self.first_done = asyncio.Event()  # the first try has ended, whatever its outcome
        self.done = False  # the alerts were read and fed

    @property
    def first_try_s(self) -> float:
        """The longest the first read can take: two connections and reads (one retry), plus its backoff."""
        return 4 * self.timeout_s + 1.0

    async def _read(self, quiet: bool = False) -> tuple[list[Alert], list[Skipped]]:
        """The active alerts and what was skipped, or RestoreError. `quiet`: skipped entries not logged."""
        try:
            data = await asyncio.wait_for(asyncio.to_thread(read, self.url, self.timeout_s), self.first_try_s)
        except TimeoutError:
            raise RestoreError(f"no whole answer within {self.first_try_s:g} s") from None
        try:
            alerts, skipped = firing(data)
        except ActiveError as exc:
            raise RestoreError(str(exc)) from None
        shown_skips = [] if quiet else skipped
        for s in shown_skips[:20]:
            log.info("active alert %s from Alertmanager at %s skipped", s, shown(self.url))
        if len(shown_skips) > 20:
            log.info("... and %d more skipped", len(shown_skips) - 20)
        return alerts, skipped

    async def _once(self) -> dict[str, int]:
        alerts, skipped = await self._read()
        counts = await self.feed(alerts)
        log.info("restored the firing alerts from Alertmanager at %s: %d read, %d new (%d of them handed in again "
                 "once the controller runs), %d already known, %d skipped", shown(self.url), len(alerts),
                 counts.get("new", 0), counts.get("deferred", 0), counts.get("duplicate", 0) + counts.get("stale", 0),
                 len(skipped))
        return counts

    async def run(self) -> None:
        delay, tries = self.retry_s[0], 0
        while True:
            tries += 1
            try:
                await self._once()
                self.done = True
                return
            except RestoreError as exc:
                (log.warning if tries == 1 else log.info)(
                    "cannot read the firing alerts from Alertmanager at %s: %s. Until then a node with a dead "
                    "device is known again only when Alertmanager repeats its alert (repeat_interval); check "
                    "--alertmanager-url / HETEROJOB_ALERTMANAGER_URL and that Alertmanager answers there. "
                    "Trying again in %g s", shown(self.url), exc, delay)
            finally:
                self.first_done.set()
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.retry_s[1])

    async def sync_once(self) -> dict[str, int]:
        """Read the active alerts again and hand them to `sync`; RestoreError (nothing handed in) if unread."""
        assert self.sync is not None
        began = time.monotonic()
        alerts, skipped = await self._read(quiet=True)
        unreadable = {s.fingerprint for s in skipped if not s.suppressed}
        counts = await self.sync(alerts, unreadable, began)
        self.syncs += 1
        if counts.get("resolved") or counts.get("new") or counts.get("deferred"):
            log.info("synced the firing alerts with Alertmanager at %s: %d no longer active, resolved; %d new; "
                     "%d unreadable entries", shown(self.url), counts.get("resolved", 0), counts.get("new", 0),
                     len(unreadable))
        return counts

    async def run_syncs(self) -> None:
        """Every `sync_s`, `sync_once`; an outage is one warning (the held alerts stay), its end one line."""
        down = False
        while True:
            await asyncio.sleep(self.sync_s)
            try:
                await self.sync_once()
            except RestoreError as exc:
                if not down:
                    log.warning("cannot read the active alerts from Alertmanager at %s to sync them: %s. The "
                                "alerts held stay held (a lost resolve is not noticed) until it answers; trying "
                                "again every %g s", shown(self.url), exc, self.sync_s)
                down = True
                continue
            if down:
                log.info("Alertmanager at %s answers again: the firing alerts are synced", shown(self.url))
            down = False

    async def run_all(self) -> None:
        """`run` (the restore), then `run_syncs` when there is a `sync`."""
        await self.run()
        if self.sync is not None:
            await self.run_syncs()
