"""Overview: the fleet's capacity, allocation, utilization and health across its regions, on a map; live."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import streamlit as st

from heterojob_console import kpis, members, svg, tables, ui
from heterojob_console.data import moves

ui.setup("Overview")
st.title("heterojob fleet")


@st.fragment(run_every=ui.REFRESH_S)
def overview() -> None:
    try:
        cluster = ui.cluster()
    except Exception as exc:  # noqa: BLE001 - shown to the user as a page, never a traceback
        ui.fail(exc)
        return
    cap = kpis.capacity(cluster.nodes)
    measured = ui.telemetry(cluster)
    jobs = cluster.jobs
    waiting = int(jobs["queue"].notna().sum())
    ui.as_of(cluster.at, "telemetry: " + (f"{measured.at:%H:%M:%S} UTC" if measured else
                                          "not read yet" if ui.sources(cluster) else "off (no Prometheus)"))

    row = st.columns(5)
    row[0].metric("Accelerators", cap.accelerators, help=kpis.HELP["accelerators"]
                  + f" Now: {cap.gpus} GPUs, {cap.npus} NPUs.")
    row[1].metric("Accelerators allocated", kpis.pct(cap.allocated_pct), help=kpis.HELP["allocated"]
                  + f" Now: {cap.accelerators_held} of {cap.accelerators}.")
    row[2].metric("CPU cores allocated", kpis.pct(cap.cpu_pct),
                  help=kpis.HELP["cpu"] + f" Now: {cap.cpu_held} of {cap.cpu_cores}.")
    row[3].metric("Jobs running", int((jobs["phase"] == "Running").sum()), help=kpis.HELP["jobs_running"])
    row[4].metric("Jobs waiting", waiting, help=kpis.HELP["jobs_waiting"])
    row = st.columns(5)
    if measured is not None:
        health = kpis.health(measured.table, cap.declared,
                             cluster.nodes.loc[cluster.nodes["kind"] == "accelerator", "node"], measured.counted)
        row[0].metric("Accelerator utilization", kpis.pct(health.utilization), help=kpis.HELP["utilization"]
                      + f" Now: over {health.reporting} reporting accelerators.")
        row[1].metric("Failed", health.failed, help=kpis.HELP["failed"])
        row[2].metric("Degraded", health.degraded, help=kpis.HELP["degraded"])
        row[3].metric("Unknown", health.unknown, help=kpis.HELP["unknown"])
        for region, why in sorted(measured.problems.items()):
            st.warning(f"Telemetry {'for ' + region if region != '*' else ''} unavailable or degraded: {why}")
    else:
        why = " No telemetry read yet." if ui.sources(cluster) else " No Prometheus configured."
        row[0].metric("Accelerator utilization", "-", help=kpis.HELP["utilization"] + why)
        for i, label in enumerate(("Failed", "Degraded", "Unknown"), start=1):
            row[i].metric(label, "-", help=kpis.HELP[label.lower()] + why)
    unknown = kpis.members_unknown(cluster.members)
    row[4].metric("Nodes ready", f"{cap.nodes_ready}/{cap.nodes}" + (" + ?" if unknown else ""),
                  kpis.nodes_note(cap, unknown), delta_color="off", delta_arrow="off", help=kpis.HELP["nodes"])
    members.show(cluster.members)  # member clusters' reachability (nothing with one cluster)

    regions = kpis.by_region(cluster.nodes, cluster.regions)
    located = regions.dropna(subset=["latitude", "longitude"])
    recent = moves(cluster, cluster.at - timedelta(hours=1))
    left, right = st.columns([3, 1])
    with left:
        svg.show(svg.fleet_map(located, cluster.links, recent))
        st.caption(f"{len(located)} regions · size: accelerators · colour: allocated · lines: links (width: "
                   f"bandwidth) · red arcs: {len(recent)} cross-region move(s) in the last hour · hover for details")
    with right:
        st.markdown("**Jobs by phase**")
        phases = jobs.groupby("phase", as_index=False).size().rename(columns={"size": "jobs"})
        st.markdown(tables.html(phases.sort_values("jobs", ascending=False), [
            tables.Column("phase", "phase"),
            tables.Column("jobs", "jobs", "bar", top=max(int(phases["jobs"].max()), 1) if len(phases) else 1)],
            "phases"), unsafe_allow_html=True)

    # under the map, the page's whole width: its seven columns fit at 1280 px (beside the map they were cut off)
    st.markdown("**Regions**")
    st.markdown(tables.html(regions, [
        tables.Column("region", "region"), tables.Column("city", "city"),
        tables.Column("accelerators", "accelerators", "number", help=kpis.HELP["accelerators"]),
        tables.Column("held", "held by pods", "number"),
        tables.Column("allocated_pct", "allocated", "bar", fmt="{:.0f}%", help=kpis.HELP["allocated"]),
        tables.Column("cpu_cores", "CPU cores", "number"), tables.Column("mix", "accelerator mix")], "regions"),
        unsafe_allow_html=True)


overview()
st.caption(f"page opened {datetime.now(UTC):%H:%M:%S} UTC")
