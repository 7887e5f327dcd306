"""Devices: health and utilization of every accelerator, from Prometheus through the operator's adapters;
a heat map by region and class that drills down to a region's nodes and a node's devices; live."""

from __future__ import annotations

from urllib.parse import quote

import pandas as pd
import streamlit as st

from heterojob_console import devices as dev
from heterojob_console import kpis, svg, tables, ui

ui.setup("Devices")
st.title("Devices")
try:
    first = ui.cluster()
except Exception as exc:  # noqa: BLE001 - shown as a page, never a traceback
    ui.fail(exc)
    raise
if not ui.sources(first):
    st.warning(ui.NO_PROMETHEUS)
    st.stop()
accel = first.nodes[first.nodes["kind"] == "accelerator"]
c1, c2, c3 = st.columns([2, 2, 1])
region = c1.selectbox("Region (drill down)", ["all regions", *sorted(accel["region"].unique())], key="region")
region = None if region == "all regions" else region
in_region = accel[accel["region"] == region] if region else accel
node = c2.selectbox("Node (drill down)", ["all nodes", *(sorted(in_region["node"]) if region else [])],
                    key="node", disabled=region is None)  # the options only once a region is picked
node = None if node in (None, "all nodes") else node
minutes = c3.radio("Window", options=[15, 60, 360, 1440], index=[15, 60, 360, 1440].index(ui.HEAT_MINUTES),
                   key="minutes", horizontal=True, format_func=lambda m: f"{m // 60} h" if m >= 60 else f"{m} min")


def link(device: str, at: str) -> str:
    return f"Device?device={quote(device, safe='')}&node={quote(at, safe='')}"


def links(frame: pd.DataFrame) -> list[str]:
    """Each row's history link (its node too: a national fleet's page reads that node's devices)."""
    return [link(d, n) for d, n in zip(frame["device"], frame["node"], strict=True)]


# widths that let every column show at 1280 px; a device id (a GPU UUID is 40 characters) is cut with "..."
# and opened whole by its "history" link
DEVICE_COLUMNS = {
    "device": st.column_config.TextColumn("device", width=210),
    "node": st.column_config.TextColumn("node", width=150),
    "region": st.column_config.TextColumn("region", width=105),
    "health": st.column_config.TextColumn("health", width=75),
    "reason": st.column_config.TextColumn("reason", width=130),
    "pod": st.column_config.TextColumn("pod", width=150),
    "job": st.column_config.TextColumn("job", width=120),
    "utilization": st.column_config.NumberColumn("util. %", width=70, format="%.0f"),
    "memory_used_mib": st.column_config.NumberColumn("memory MiB", width=95, format="%.0f"),
    "temperature": st.column_config.NumberColumn("°C", width=55, format="%.0f"),
    "power": st.column_config.NumberColumn("W", width=60, format="%.0f"),
    "history": st.column_config.LinkColumn("history", display_text="open", width=65),
}


@st.fragment(run_every=ui.REFRESH_S)
def live() -> None:
    cluster = ui.cluster()
    measured = ui.telemetry(cluster)  # None: no read yet (the tiles say "-"; the history and the nodes still show)
    nodes = cluster.nodes[cluster.nodes["kind"] == "accelerator"]
    if region:
        nodes = nodes[nodes["region"] == region]
    if node:
        nodes = nodes[nodes["node"] == node]
    cap = kpis.capacity(nodes)
    shown = None
    if measured is not None:
        table, problems, at, counted = measured
        for name, why in sorted(problems.items()):
            st.warning(f"Telemetry {'for ' + name if name != '*' else ''} unavailable or degraded: {why}")
        if node:  # its devices one by one: read for this node alone when the fleet's read only counted them
            try:
                shown, counted = ui.node_devices(cluster, node, measured), counted.iloc[0:0]
            except Exception as exc:  # noqa: BLE001 - said in words; the counted figures stay
                st.warning(f"The devices of {node} could not be read one by one: {exc}")
                shown = table[table["node"] == node]
        else:
            shown = table[table["node"].isin(set(nodes["node"]))]
        health = kpis.health(shown, cap.declared, nodes["node"], counted)
        ui.as_of(cluster.at, f"telemetry {at:%H:%M:%S} UTC")
    else:
        ui.as_of(cluster.at, "telemetry not read yet")
    k = st.columns(6)
    k[0].metric("Accelerators", cap.accelerators, help=kpis.HELP["accelerators"])
    figures = [("Reporting", "reporting"), ("Accelerator utilization", "utilization"), ("Failed", "failed"),
               ("Degraded", "degraded"), ("Unknown", "unknown")]
    for i, (label, key) in enumerate(figures, start=1):
        value = "-" if measured is None else kpis.pct(health.utilization) if key == "utilization" \
            else getattr(health, key)
        k[i].metric(label, value, help=kpis.HELP[key])

    level = "device" if node else "node" if region else "region/class"
    found = ui.sources(cluster)  # each region from its own Prometheus (a member's site), else the default
    if node:
        found = dev.serving(found, region)
    frames, down = ui.heat(found, minutes, (node,) if node else None)
    heat, drawing = ui.heat_drawing(cluster, found, frames, level, region, minutes)  # once per data version
    st.subheader(f"Utilization by {level}" + (f" in {node or region}" if region else ""))
    shown_sources = {u for u, _ in (dev.serving(found, region) if region else found)}
    for source, why in sorted((u, w) for u, w in down.items() if u in shown_sources):
        st.warning(f"Utilization history of {dev.where(found, source)} unavailable: {why}. The other regions "
                   "are shown.")
    if heat.empty:
        st.info("No utilization series in this window (or Prometheus could not answer the range query).")
    else:
        svg.show(drawing)

    st.subheader("Failed and degraded")
    if shown is None:
        st.caption("Shown once the first telemetry read is in.")
    elif (bad := shown[shown["health"].isin(["failed", "degraded"])].assign(history=links)).empty:
        st.success(f"No failed or degraded accelerator among the {health.reporting} reporting.")  # not an empty grid
    else:
        st.dataframe(bad, hide_index=True, width="stretch", key="unhealthy", column_config=DEVICE_COLUMNS,
                     column_order=["device", "node", "region", "health", "reason", "pod", "job", "history"])
    if node and shown is not None:
        st.subheader(f"Devices of {node}")  # node, region and class: the same on every row, said above
        st.dataframe(shown.assign(history=links), hide_index=True, width="stretch",
                     key="node-devices", column_config=DEVICE_COLUMNS, column_order=[
                         "device", "utilization", "memory_used_mib", "temperature", "power", "health", "reason",
                         "pod", "job", "history"])

    st.subheader("Software stack per node" if region else "Software stack by region and class")
    st.caption("Driver, CUDA and CANN versions and network features each node publishes (GPU Feature "
               "Discovery, the Ascend device plugin, Node Feature Discovery): a job's `requires` is checked "
               "against these, node by node." + ("" if region else " Nodes that publish the same stack are "
                                                  "counted together; pick a region to list its nodes."))
    if region:
        st.dataframe(nodes[["node", "member", "region", "class", "software", "network", "ready"]], hide_index=True,
                     width="stretch", key="software")
    else:
        stacks = (nodes.groupby(["member", "region", "class", "software", "network"], as_index=False, dropna=False)
                  .agg(nodes=("node", "size"), ready=("ready", "sum")))
        if len(stacks) <= tables.ROWS:  # a table, not a grid: the grid's JavaScript was most of a visit's browser time
            st.markdown(tables.html(stacks, [
                tables.Column("member", "member"), tables.Column("region", "region"), tables.Column("class", "class"),
                tables.Column("nodes", "nodes", "number"), tables.Column("ready", "ready", "number"),
                tables.Column("network", "network"), tables.Column("software", "software")], "software"),
                unsafe_allow_html=True)
        else:
            st.dataframe(stacks, hide_index=True, width="stretch", key="software")

live()
