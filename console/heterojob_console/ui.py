"""What every page shares: page setup, the poller that keeps one snapshot of the cluster and of the
devices' telemetry fresh for every page and session (shared, not copied: pages only read it), and the
"data as of" line."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NamedTuple

import pandas as pd
import streamlit as st

from heterojob.failures import describe
from heterojob.telemetry.prometheus import TelemetryError

from heterojob_console import devices as dev
from heterojob_console import svg, watch
from heterojob_console.data import client
from heterojob_console.snapshot import Cluster
from heterojob_console.watch import read_cluster

log = logging.getLogger("heterojob.console")
REFRESH_S = 5  # live fragments rerun this often; the poller reads the API as often
TELEMETRY_S = 15  # ... and Prometheus this often: a common scrape interval, no fresher data exists
TELEMETRY_WAIT_S = 1.0  # a page waits this long for the first telemetry read, then shows the rest without it


SIDEBAR_PX = 200  # the page list needs no more (Streamlit's default, 300 px, took a fifth of a 1500 px screen)
NARROW_PX, NARROW_SIDEBAR_PX = 1024, 150  # below 1024 px wide, 200 px was a quarter of the page: 150 still fits


def setup(title: str) -> None:
    st.set_page_config(page_title=f"heterojob · {title}" if title != "Overview" else "heterojob", layout="wide")
    # the developer chrome (Deploy, rerun/settings menu) is off through client.toolbarMode=minimal (the
    # `heterojob console` command sets it); the running-man status widget goes too. The sidebar is narrower
    # and the main column keeps 1.5rem at its sides instead of 5rem, so the tables' columns fit at 1280 px
    # (set_page_config's sidebar width applied on some pages' first load only: CSS holds on every page).
    # Only the open sidebar is sized: sized when collapsed, it slid away but kept its 200 px as a blank column.
    open_ = "[data-testid='stSidebar'][data-collapsed='false']"
    st.markdown("<style>[data-testid='stStatusWidget'],[data-testid='stDeployButton']{display:none}"
                f"{open_}{{width:{SIDEBAR_PX}px !important;min-width:{SIDEBAR_PX}px !important;"
                f"max-width:{SIDEBAR_PX}px !important}}"
                f"@media (max-width:{NARROW_PX}px){{{open_}{{width:{NARROW_SIDEBAR_PX}px !important;"
                f"min-width:{NARROW_SIDEBAR_PX}px !important;max-width:{NARROW_SIDEBAR_PX}px !important}}}}"
                "[data-testid='stMainBlockContainer']{padding:3rem 1.5rem 4rem 1.5rem}</style>",
                unsafe_allow_html=True)


def kubeconfig() -> str | None:
    return os.environ.get("HETEROJOB_KUBECONFIG")


def prometheus() -> str | None:
    return os.environ.get("HETEROJOB_PROMETHEUS_URL")


class Measured(NamedTuple):
    """One read of the devices' telemetry (`devices.Reader`): the devices it lists, region -> why its telemetry is
    unavailable or degraded, when, and (an aggregate read, a national fleet) the devices counted per node."""

    table: pd.DataFrame
    problems: dict[str, str]
    at: datetime
    counted: pd.DataFrame


class Pending(TimeoutError):
    """The first telemetry read is still under way (a national fleet's Prometheus can take seconds): pages show the
    API's figures meanwhile instead of waiting."""

    def __init__(self, running_s: float) -> None:
        super().__init__(f"the first telemetry read is under way ({running_s:.0f} s so far)")
        self.running_s = running_s


class Poller:
    """Reads the cluster (and the devices' telemetry) every REFRESH_S in the background while someone looks,
    so a page shows the latest snapshot at once instead of waiting for the API and Prometheus. Pages see
    the same snapshot until the next one is complete. Idle for IDLE_S, it stops; the next page waits for
    a fresh read."""

    IDLE_S = 30.0

    def __init__(self, config: str | None, url: str | None) -> None:
        self.config, self.url = config, url
        self._lock = threading.Lock()
        self._fresh = threading.Condition(self._lock)
        self._cluster: Cluster | None = None
        self._telemetry: Measured | None = None
        self._error: Exception | None = None
        self._telemetry_error: Exception | None = None
        self._partial = False  # the last telemetry read had fewer devices than the Nodes declare
        self._asked = time.monotonic()
        self._thread: threading.Thread | None = None
        # url: the default Prometheus; Regions may name their own. In the background: no page waits on its calls
        self._reader = dev.Reader(url, timeout_s=dev.BACKGROUND_TIMEOUT_S)
        self._measuring = False  # a telemetry read is under way
        self._cost = 0.0  # how long the last telemetry read took, s
        self._measure_started = 0.0  # when the telemetry read under way began (monotonic)

    def _loop(self) -> None:
        api = None  # one client per run: its list-then-watch caches (`watch.read_cluster`) are what each tick reads
        try:
            while time.monotonic() - self._asked < self.IDLE_S:
                api = self._tick(api)
        finally:
            with self._lock:
                self._thread = None
            watch.close(api)  # idle: the watches end; the next run lists again

    def _tick(self, api: Any) -> Any:
        """One refresh: the cluster (through `api`, made at the first tick), the telemetry when due; the client."""
        started = time.monotonic()
        try:
            api = api or client(self.config)
            cluster = read_cluster(api)
            with self._lock:
                self._cluster, self._error = cluster, None
                self._fresh.notify_all()
        except Exception as exc:  # noqa: BLE001 - shown by the page that asks
            with self._lock:
                self._error = exc
                self._fresh.notify_all()
            cluster = None
        # a read that missed devices the Nodes declare (Prometheus just started, an exporter not scraped
        # yet: the console's own start reads early) is read again at the next tick, not TELEMETRY_S later; a read
        # that takes seconds (a national fleet) is repeated at most every 3 times its length
        due = (self._telemetry is None or self._partial
               or (datetime.now(UTC) - self._telemetry[2]).total_seconds() >= max(TELEMETRY_S, 3 * self._cost))
        if cluster is not None and due and not self._measuring and dev.sources(cluster, self.url):
            # on a thread of its own: the cluster's snapshot goes on refreshing while Prometheus answers
            self._measuring, self._measure_started = True, time.monotonic()
            threading.Thread(target=self._measure, args=(cluster,), name="heterojob-console-telemetry",
                             daemon=True).start()
        time.sleep(max(0.0, REFRESH_S - (time.monotonic() - started)))
        return api

    def _measure(self, cluster: Cluster) -> None:
        """One read of the devices' telemetry (every Prometheus), for the snapshot `cluster`."""
        started = time.monotonic()
        try:
            table, problems = self._reader.current(cluster)
            counted = getattr(self._reader, "counted", None)
            counted = counted if counted is not None else pd.DataFrame(columns=dev.COUNTED_COLUMNS)
            with self._lock:
                self._telemetry, self._telemetry_error = Measured(table, problems, datetime.now(UTC), counted), None
                # a member cluster or a Prometheus that is away is not "early": no quick re-read for it
                nodes = cluster.nodes
                here = nodes[(nodes["kind"] == "accelerator") & ~nodes["unreachable"].astype(bool)
                             & ~nodes["region"].isin(set(problems))]
                self._partial = len(table) + int(counted["devices"].sum()) < int(here["capacity"].sum())
                self._fresh.notify_all()
        except Exception as exc:  # noqa: BLE001 - shown by the page that asks
            with self._lock:
                self._telemetry_error = exc
                self._fresh.notify_all()
        finally:
            self._cost = time.monotonic() - started
            self._measuring = False

    def _ask(self) -> None:
        self._asked = time.monotonic()
        if self._thread is None:
            if self._cluster is not None and (datetime.now(UTC) - self._cluster.at).total_seconds() > 2 * REFRESH_S:
                self._cluster, self._telemetry = None, None  # too old to show while the next read runs
            self._thread = threading.Thread(target=self._loop, name="heterojob-console-poller", daemon=True)
            self._thread.start()

    def start(self) -> None:
        """Begin reading now (the console's start), so the first visitor finds a snapshot ready."""
        with self._lock:
            self._ask()

    def cluster(self, timeout: float = 60.0) -> Cluster:
        with self._lock:
            self._ask()
            self._fresh.wait_for(lambda: self._cluster is not None or self._error is not None, timeout)
            if self._cluster is None:
                raise self._error or TimeoutError("the Kubernetes API did not answer")
            return self._cluster

    def telemetry(self, timeout: float = 60.0) -> Measured:
        with self._lock:
            self._ask()
            self._fresh.wait_for(lambda: self._telemetry is not None or self._telemetry_error is not None
                                 or (self._error is not None and self._cluster is None), timeout)
            if self._telemetry is None:
                if self._telemetry_error is None and self._error is None and self._measuring:
                    raise Pending(time.monotonic() - self._measure_started)
                raise self._telemetry_error or self._error or TimeoutError("Prometheus did not answer")
            return self._telemetry


@st.cache_resource(show_spinner=False, max_entries=4)
def poller(config: str | None, url: str | None) -> Poller:
    """The one poller of this process for (kubeconfig, Prometheus); st.cache_resource is process-wide and
    works before the server runs, so `serve` starts the same poller the pages use."""
    return Poller(config, url)


def prefetch() -> None:
    """Read the cluster and the telemetry once as the console starts, and the Devices page's default heat
    map: the first visitor after a (re)start then finds them instead of waiting for the API and Prometheus.
    The poller stops after IDLE_S if nobody comes."""
    polling = poller(kubeconfig(), prometheus())
    polling.start()
    url = prometheus()

    def warm() -> None:
        if url:
            try:  # the default Prometheus at once, alongside the first cluster read ...
                heat_series(url, HEAT_MINUTES, None)
            except Exception:  # noqa: BLE001 - the page asks again and shows what went wrong
                pass
        try:  # ... then the regions' own (member sites), which the Regions name
            heat(sources(polling.cluster()), HEAT_MINUTES, None)
        except Exception:  # noqa: BLE001 - as above
            pass

    _warming.append(threading.Thread(target=warm, name="heterojob-console-heat", daemon=True))
    _warming[-1].start()


_warming: list[threading.Thread] = []  # the start's heat-map reads (`prefetch`)


def ready(timeout: float) -> None:
    """Wait until the first snapshot is made and, when a Prometheus serves a region, the first telemetry read and the
    Devices page's default heat map (or their errors are known, or `timeout` passed): what the pages wait for."""
    polling, deadline = poller(kubeconfig(), prometheus()), time.monotonic() + timeout
    try:
        if dev.sources(polling.cluster(timeout), prometheus()):
            polling.telemetry(max(0.0, deadline - time.monotonic()))
    except Exception:  # noqa: BLE001 - the page that asks says what went wrong
        pass
    for thread in _warming:
        thread.join(max(0.0, deadline - time.monotonic()))


def cluster() -> Cluster:
    """The cluster as last read (at most about REFRESH_S old)."""
    return poller(kubeconfig(), prometheus()).cluster()


def telemetry(cluster: Cluster) -> Measured | None:
    """(devices now, region -> telemetry problem, when measured, devices counted per node), or None when no
    Prometheus serves any region of `cluster`: neither the default (HETEROJOB_PROMETHEUS_URL) nor one a Region
    names."""
    found = sources(cluster)
    if not found:
        return None
    try:
        return poller(kubeconfig(), prometheus()).telemetry(TELEMETRY_WAIT_S)
    except Pending as exc:
        st.info(f"Telemetry: {exc}; its figures show once Prometheus answers, the page refreshes every "
                f"{REFRESH_S} s.")
        return None
    except Exception as exc:  # noqa: BLE001 - the API figures still show
        why = str(exc) if isinstance(exc, TelemetryError) else describe(exc, dev.TIMEOUT_S)
        st.warning(f"Telemetry unavailable: Prometheus at {', '.join(url for url, _ in found)} did not answer "
                   f"({why}).")
        return None


NO_PROMETHEUS = ("No Prometheus configured: set HETEROJOB_PROMETHEUS_URL (the demo sets it), or a Region's "
                 "spec.prometheusURL for the regions it serves.")


HEAT_MINUTES = 60  # the Devices heat map's default window


HEAT_S = 15.0  # a heat map's series are read again when older than this (a common scrape interval)
HEAT_KEEP_S = 300.0  # a view nobody looked at for this long is forgotten


class Latest:
    """Each heat-map view's series as last read (per source, window and nodes), shared by every session: a page
    shows the last answer at once and, once it is older than HEAT_S, one background read replaces it (a range query
    over every node of a national fleet takes seconds). A view's first read, and a read after its source failed,
    wait for Prometheus: an error is never shown from the past."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[object, ...], tuple[float, pd.DataFrame | Exception]] = {}  # key -> (when, answer)
        self._seen: dict[tuple[object, ...], float] = {}  # key -> last asked
        self._reading: dict[tuple[object, ...], threading.Event] = {}  # key -> set when its read under way ends
        self._cost: dict[tuple[object, ...], float] = {}  # key -> how long its last read took, s

    def get(self, key: tuple[object, ...], fetch: Callable[[], pd.DataFrame], every_s: float | None = None
            ) -> pd.DataFrame:
        """The view's last answer (`fetch` again in the background once older than `every_s`, default HEAT_S)."""
        now = time.monotonic()
        background, read_here, other = False, False, None
        with self._lock:
            self._seen[key] = now
            for old in [k for k, t in self._seen.items() if now - t > HEAT_KEEP_S]:
                self._seen.pop(old, None)
                self._entries.pop(old, None)
                self._cost.pop(old, None)
            entry = self._entries.get(key)
            # a read that took seconds (a national fleet without the recording rule) is repeated at most every 3
            # times its length
            # an empty answer (Prometheus has no samples yet: just started) is asked again after HEAT_S, not later
            empty = entry is not None and isinstance(entry[1], pd.DataFrame) and entry[1].empty
            period = HEAT_S if every_s is None or empty else every_s
            fresh = entry is not None and now - entry[0] < max(period, 3 * self._cost.get(key, 0.0))
            stale = entry is not None and not fresh and not isinstance(entry[1], Exception)  # shown while re-read
            reading = self._reading.get(key)
            if (fresh or stale) and reading is None and stale:
                self._reading[key], background = threading.Event(), True
            elif not (fresh or stale):
                if reading is None:
                    self._reading[key], read_here = threading.Event(), True
                else:
                    other = reading  # another session's read of it is under way: its answer is this one's too
        if background:
            threading.Thread(target=self._read, args=(key, fetch), name="heterojob-console-heat", daemon=True).start()
        answer: pd.DataFrame | Exception
        if (fresh or stale) and entry is not None:
            answer = entry[1]
        elif read_here:
            answer = self._read(key, fetch)
        else:
            if other is not None:
                other.wait(dev.HEAT_TIMEOUT_S + dev.TIMEOUT_S)
            with self._lock:
                done = self._entries.get(key)
            answer = done[1] if done is not None and done[0] >= now else \
                TimeoutError(f"Prometheus did not answer the heat map's query in "
                             f"{dev.HEAT_TIMEOUT_S + dev.TIMEOUT_S:.0f} s")
        if isinstance(answer, Exception):
            raise answer
        return answer

    def _read(self, key: tuple[object, ...], fetch: Callable[[], pd.DataFrame]) -> pd.DataFrame | Exception:
        answer: pd.DataFrame | Exception
        started = time.monotonic()
        try:
            answer = fetch()
        except Exception as exc:  # noqa: BLE001 - kept, and raised to the page that asks
            answer = exc
        with self._lock:
            self._entries[key] = (time.monotonic(), answer)
            self._cost[key] = time.monotonic() - started
            reading = self._reading.pop(key, None)
        if reading is not None:
            reading.set()
        return answer


@st.cache_resource(show_spinner=False)
def latest() -> Latest:
    """The process's heat-map series (one for every session; st.cache_resource.clear() forgets them)."""
    return Latest()


def sources(cluster: Cluster) -> dev.Sources:
    """Which Prometheus serves which region: a Region's own prometheusURL (a member's site), else the default."""
    return dev.sources(cluster, prometheus())


def heat_series(url: str, minutes: int, nodes: tuple[str, ...] | None) -> pd.DataFrame:
    """One Prometheus's utilization series (kept per source: a member's and the default's apart; `Latest`), read
    again once a new column is due: every HEAT_S, or the column's length when longer (a minute for the hour's map:
    its fleet-wide series, 12,500 nodes x 60 points at 100,000 devices, took 0.5 CPU-s to read and gave the same
    columns shifted)."""
    return latest().get((url, minutes, nodes),
                        lambda: dev.heat_series(url, minutes, list(nodes) if nodes is not None else None,
                                                timeout_s=dev.HEAT_TIMEOUT_S),
                        every_s=max(HEAT_S, minutes * 60 / dev.HEAT_POINTS))


def heat(found: dev.Sources, minutes: int, nodes: tuple[str, ...] | None) -> tuple[dict[str, pd.DataFrame], dict[str, str]]:
    """(URL -> utilization series, URL -> why it did not answer), every source read at once."""
    return dev.heat_sources(found, minutes, list(nodes) if nodes is not None else None,
                            fetch=lambda url: heat_series(url, minutes, nodes), timeout_s=dev.HEAT_TIMEOUT_S)


_DRAWN_MAX = 8  # heat-map drawings kept (views looked at lately)
_drawn: dict[tuple[object, ...], tuple[object, pd.DataFrame, str]] = {}  # key -> (what it was drawn from, rows, SVG)
_drawn_lock = threading.Lock()


def heat_drawing(cluster: Cluster, found: dev.Sources, frames: dict[str, pd.DataFrame], level: str,
                 region: str | None, minutes: int) -> tuple[pd.DataFrame, str]:
    """The heat map's rows and SVG for this view, drawn once per data version (this snapshot of the cluster and
    these series as last read, `Latest`) and shared by every session: at 100,000 devices combining and grouping
    12,500 nodes' series cost a visit 0.15 CPU-s though they change once a minute. Keyed by the objects' identity
    (they are replaced, never changed), which the entry keeps alive so an identity is never reused meanwhile."""
    key = (id(cluster), tuple(sorted((url, id(frame)) for url, frame in frames.items())), level, region, minutes)
    with _drawn_lock:
        entry = _drawn.pop(key, None)
        if entry is not None:
            _drawn[key] = entry  # most recent last
            return entry[1], entry[2]
    rows = dev.heat(dev.combine(frames, found, cluster.nodes), cluster.nodes, level, region)
    drawing = "" if rows.empty else svg.heat_map(rows, level, minutes)
    with _drawn_lock:
        _drawn[key] = ((cluster, dict(frames)), rows, drawing)
        while len(_drawn) > _DRAWN_MAX:
            _drawn.pop(next(iter(_drawn)))
    return rows, drawing


def node_devices(cluster: Cluster, node: str, measured: Measured) -> pd.DataFrame:
    """One node's devices, one row each: from the telemetry read `measured` when it lists them (a fleet read per device,
    or a node with an anomaly), else read for that node alone (`devices.node_devices`; kept like the heat map's
    series, `Latest`, shared by every session). Raises what Prometheus answered instead."""
    listed = measured.table[measured.table["node"] == node]
    if measured.counted.empty or node not in set(measured.counted["node"]):
        return listed

    def fetch() -> pd.DataFrame:
        table, why = dev.node_devices(cluster, node, prometheus())
        if why:
            raise RuntimeError(why)
        return table

    return latest().get(("node-devices", node), fetch)


def as_of(at: datetime, extra: str = "") -> None:
    age = (datetime.now(UTC) - at).total_seconds()
    st.caption(f"data as of {at.astimezone(UTC):%H:%M:%S} UTC ({age:.0f} s ago; refreshes every {REFRESH_S} s)"
               + (f" · {extra}" if extra else ""))


def fail(exc: Exception) -> None:
    log.warning("the Kubernetes API cannot be read: %s", exc)  # the detail; the page says it in words
    st.error(f"The Kubernetes API cannot be read: {describe(exc)}.")
    st.info("Check the kubeconfig (HETEROJOB_KUBECONFIG or ~/.kube/config) and that the API server answers.")
    st.stop()
