"""Overview: the fleet across regions, and the jobs on it."""

from __future__ import annotations

import os

import plotly.express as px
import streamlit as st

from heterojob_console.data import client, read_fleet

st.set_page_config(page_title="heterojob", layout="wide")
st.title("heterojob fleet")


@st.cache_data(ttl=5, show_spinner=False)
def load(kubeconfig: str | None):  # type: ignore[no-untyped-def]
    """Cached per cluster: the kubeconfig is part of the key."""
    return read_fleet(client(kubeconfig))


try:
    fleet = load(os.environ.get("HETEROJOB_KUBECONFIG"))
except Exception as exc:  # noqa: BLE001 - shown to the user as a page, never a traceback
    st.error(f"The Kubernetes API cannot be read: {exc}")
    st.info("Check the kubeconfig (HETEROJOB_KUBECONFIG or ~/.kube/config) and that the API server answers.")
    st.stop()

nodes, jobs, regions = fleet.nodes, fleet.jobs, fleet.regions
allocated = fleet.allocated()
total = int(nodes["devices"].sum())
held = int(allocated["allocated"].sum())
measured = allocated.dropna(subset=["utilization"])
c1, c2, c3, c4, c5, c6 = st.columns(6)
c1.metric("Devices", total)
c2.metric("Nodes ready", f"{int(nodes['ready'].sum())}/{len(nodes)}")
c3.metric("Allocated", f"{100 * held / total:.0f}%" if total else "-")
c4.metric("Average utilization", f"{(measured['utilization'] * measured['allocated']).sum() / measured['allocated'].sum():.0f}%"
          if not measured.empty and measured["allocated"].sum() else "-")
c5.metric("Jobs running", int((jobs["phase"] == "Running").sum()))
c6.metric("Quota in use", f"{fleet.quota_used}/{fleet.quota_limit}" if fleet.quota_limit else "none")

by_region = nodes.groupby("region", as_index=False)["devices"].sum()
geo = regions.merge(by_region, on="region", how="left").merge(allocated, on="region", how="left")
geo = geo.fillna({"devices": 0, "allocated": 0})
geo["allocated %"] = (100 * geo["allocated"].astype(float) / geo["devices"].where(geo["devices"] > 0)).fillna(0).round(0)
if not geo.empty:
    fig = px.scatter_geo(geo, lat="latitude", lon="longitude", size="devices", color="allocated %",
                         range_color=(0, 100), color_continuous_scale="RdYlGn_r", hover_name="city",
                         hover_data={"devices": True, "allocated": True, "utilization": ":.0f"},
                         text="region", projection="natural earth", title="Regions (size: devices; colour: allocated)")
    # The coastlines are a topojson plotly.js fetches from its CDN, which a cluster without internet (and
    # this demo) cannot reach: draw a graticule instead, so the map shows either way.
    fig.update_geos(visible=False, showframe=True, lataxis_showgrid=True, lonaxis_showgrid=True,
                    lataxis_dtick=30, lonaxis_dtick=30)
    fig.update_traces(textposition="top center")
    st.plotly_chart(fig, width="stretch", key="map")
phases = jobs.groupby("phase", as_index=False).size().rename(columns={"size": "jobs"})
st.plotly_chart(px.bar(phases, x="phase", y="jobs", title="Jobs by phase"), width="stretch", key="phases")
per_class = nodes.groupby(["region", "class"], as_index=False)["devices"].sum()
st.plotly_chart(px.bar(per_class, x="region", y="devices", color="class", title="Devices per region"),
                width="stretch", key="bars")
st.subheader("Jobs")
st.dataframe(jobs, hide_index=True, width="stretch", key="jobs")
