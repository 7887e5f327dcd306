"""What every page shares: page setup, the cached loaders (one read of the cluster serves every page for a
few seconds) and the "data as of" line. Loaders are `cache_resource`: the objects are shared, not copied;
pages only read them."""

from __future__ import annotations

import os
from datetime import UTC, datetime

import pandas as pd
import streamlit as st

from heterojob_console import devices as dev
from heterojob_console.data import Cluster, client, read_cluster

REFRESH_S = 5  # live fragments rerun this often; the loaders cache for as long


def setup(title: str) -> None:
    st.set_page_config(page_title=f"heterojob · {title}" if title != "Overview" else "heterojob", layout="wide")
    # the developer chrome (Deploy, rerun/settings menu) is off through client.toolbarMode=minimal (the
    # `heterojob console` command sets it); the running-man status widget goes too
    st.markdown("<style>[data-testid='stStatusWidget'],[data-testid='stDeployButton']{display:none}</style>",
                unsafe_allow_html=True)


def kubeconfig() -> str | None:
    return os.environ.get("HETEROJOB_KUBECONFIG")


def prometheus() -> str | None:
    return os.environ.get("HETEROJOB_PROMETHEUS_URL")


@st.cache_resource(ttl=REFRESH_S, show_spinner=False, max_entries=4)
def _cluster(config: str | None, tick: int) -> Cluster:
    return read_cluster(client(config))


def cluster() -> Cluster:
    """The cluster as last read (at most REFRESH_S old)."""
    return _cluster(kubeconfig(), int(datetime.now(UTC).timestamp() // REFRESH_S))


@st.cache_resource(ttl=REFRESH_S, show_spinner=False, max_entries=4)
def _telemetry(config: str | None, url: str, tick: int) -> tuple[pd.DataFrame, dict[str, str], datetime]:
    table, problems = dev.current(_cluster(config, tick), url)
    return table, problems, datetime.now(UTC)


def telemetry() -> tuple[pd.DataFrame, dict[str, str], datetime] | None:
    """(devices now, region -> telemetry problem, when measured), or None without Prometheus."""
    url = prometheus()
    if not url:
        return None
    return _telemetry(kubeconfig(), url, int(datetime.now(UTC).timestamp() // REFRESH_S))


@st.cache_resource(ttl=15, show_spinner=False, max_entries=16)
def heat_series(url: str, minutes: int, nodes: tuple[str, ...] | None, tick: int) -> pd.DataFrame:
    return dev.heat_series(url, minutes, list(nodes) if nodes is not None else None)


def as_of(at: datetime, extra: str = "") -> None:
    age = (datetime.now(UTC) - at).total_seconds()
    st.caption(f"data as of {at.astimezone(UTC):%H:%M:%S} UTC ({age:.0f} s ago; refreshes every {REFRESH_S} s)"
               + (f" · {extra}" if extra else ""))


def fail(exc: Exception) -> None:
    st.error(f"The Kubernetes API cannot be read: {exc}")
    st.info("Check the kubeconfig (HETEROJOB_KUBECONFIG or ~/.kube/config) and that the API server answers.")
    st.stop()
