"""Devices: utilization over time and what is unhealthy, from Prometheus through the operator's adapters."""

from __future__ import annotations

import os

import plotly.express as px
import streamlit as st

from heterojob_console import devices as dev
from heterojob_console.data import client

st.set_page_config(page_title="heterojob · devices", layout="wide")
st.title("Devices")
url = os.environ.get("HETEROJOB_PROMETHEUS_URL")
if not url:
    st.warning("No Prometheus configured: set HETEROJOB_PROMETHEUS_URL (the demo sets it).")
    st.stop()


minutes = st.select_slider("Window", options=[15, 60, 360, 1440], value=60, key="minutes",
                           format_func=lambda m: f"{m // 60} h" if m >= 60 else f"{m} min")


@st.cache_data(ttl=10, show_spinner=False)
def load(kubeconfig: str | None, prometheus: str, window: int):  # type: ignore[no-untyped-def]
    return dev.current(client(kubeconfig), prometheus, window)


try:
    table, problems, series = load(os.environ.get("HETEROJOB_KUBECONFIG"), url, minutes)
except Exception as exc:  # noqa: BLE001 - shown as a page, never a traceback
    st.error(f"The Kubernetes API cannot be read: {exc}")
    st.stop()
for region, why in sorted(problems.items()):
    st.warning(f"Telemetry {'for ' + region if region != '*' else ''} unavailable or degraded: {why}")

c1, c2, c3 = st.columns(3)
regions = c1.multiselect("Region", sorted(table["region"].dropna().unique()), key="regions")
classes = c2.multiselect("Class", sorted(table["class"].dropna().unique()), key="classes")
nodes = c3.multiselect("Node", sorted(table["node"].unique()), key="nodes")
shown = table
for column, chosen in (("region", regions), ("class", classes), ("node", nodes)):
    if chosen:
        shown = shown[shown[column].isin(chosen)]

health = shown.groupby("health").size()
k1, k2, k3, k4 = st.columns(4)
k1.metric("Devices", len(shown))
k2.metric("Failed", int(health.get("failed", 0)))
k3.metric("Degraded", int(health.get("degraded", 0)))
k4.metric("Average utilization", f"{shown['utilization'].mean():.0f}%" if shown["utilization"].notna().any() else "-")

heat = dev.heat(series, shown)
if heat.empty:
    st.info("No utilization series in this window (or Prometheus could not answer the range query).")
else:
    label = "device" if len(shown) <= dev.HEAT_ROWS else (
        "node" if shown["node"].nunique() <= dev.HEAT_ROWS else "region/class")
    fig = px.imshow(heat, aspect="auto", color_continuous_scale="Viridis", zmin=0, zmax=100,
                    labels={"x": "time", "y": label, "color": "util %"}, title=f"Utilization by {label}")
    st.plotly_chart(fig, width="stretch", key="heat")

st.subheader("Unhealthy and degraded")
bad = shown[shown["health"].isin(["failed", "degraded"])]
st.dataframe(bad, hide_index=True, width="stretch", key="unhealthy")
