"""Jobs: every HeteroJob with its phase, placement, priority and utilization; one job's story."""

from __future__ import annotations

import os

import plotly.express as px
import streamlit as st

from heterojob_console import jobs as story
from heterojob_console.auth import identity, is_admin
from heterojob_console.data import client, read_fleet

st.set_page_config(page_title="heterojob · jobs", layout="wide")
st.title("Jobs")
try:
    api = client(os.environ.get("HETEROJOB_KUBECONFIG"))
    fleet = read_fleet(api)
except Exception as exc:  # noqa: BLE001 - shown as a page, never a traceback
    st.error(f"The Kubernetes API cannot be read: {exc}")
    st.stop()

table = fleet.jobs
phases = sorted(table["phase"].unique())
chosen = st.multiselect("Phase", phases, default=phases, key="phases")
shown = table[table["phase"].isin(chosen)]
st.dataframe(shown, hide_index=True, width="stretch", key="table")
if shown.empty:
    st.info("No jobs.")
    st.stop()

names = [f"{r.namespace}/{r.name}" for r in shown.itertuples()]
pick = st.selectbox("Job", names, key="job")
namespace, name = pick.split("/", 1)
obj = next(o for o in fleet.job_objects if o["metadata"]["namespace"] == namespace and o["metadata"]["name"] == name)
status = obj.get("status") or {}
c1, c2, c3, c4 = st.columns(4)
c1.metric("Phase", status.get("phase") or "New")
placement = status.get("placement") or {}
c2.metric("Placement", f"{placement.get('region', '-')}/{placement.get('deviceClass', '-')}")
c3.metric("Replicas", placement.get("replicas", 0))
util = (status.get("utilization") or {}).get("average")
c4.metric("Utilization", f"{util:.0f}%" if util is not None else "-")
if status.get("message"):
    st.caption(status["message"])

events = story.timeline(obj)
if not events.empty:
    fig = px.scatter(events, x="time", y="what", hover_data=["detail"], title="Timeline")
    st.plotly_chart(fig, width="stretch", key="timeline")
    st.dataframe(events, hide_index=True, width="stretch", key="history")
st.subheader("Events")
st.dataframe(story.events(api, namespace, name), hide_index=True, width="stretch", key="events")

who = identity()
if is_admin(who) and status.get("phase") == "Running":
    a, b = st.columns(2)
    if a.button("Request a checkpoint", key="checkpoint"):
        story.request(api, namespace, name, "checkpoint", who)
        st.success("Checkpoint requested.")
    if b.button("Migrate now", key="migrate"):
        story.request(api, namespace, name, "migrate", who)
        st.success("Migration requested (after a checkpoint).")
