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
c1, c2, c3, c4 = st.columns(4)
c1.metric("Devices", int(nodes["devices"].sum()))
c2.metric("Nodes ready", f"{int(nodes['ready'].sum())}/{len(nodes)}")
c3.metric("Jobs running", int((jobs["phase"] == "Running").sum()))
c4.metric("Jobs waiting", int(jobs["phase"].isin(["Pending", "New"]).sum()))

by_region = nodes.groupby("region", as_index=False)["devices"].sum()
geo = regions.merge(by_region, on="region", how="left").fillna({"devices": 0})
if not geo.empty:
    fig = px.scatter_geo(geo, lat="latitude", lon="longitude", size="devices", hover_name="city",
                         text="region", projection="natural earth", title="Regions")
    st.plotly_chart(fig, width="stretch", key="map")
per_class = nodes.groupby(["region", "class"], as_index=False)["devices"].sum()
st.plotly_chart(px.bar(per_class, x="region", y="devices", color="class", title="Devices per region"),
                width="stretch", key="bars")
st.subheader("Jobs")
st.dataframe(jobs, hide_index=True, width="stretch", key="jobs")
