"""One device over time: utilization, memory, temperature, power and its last XID (GPU) or health (NPU),
from Prometheus range queries; where it is and which pod and job hold it."""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from heterojob.failures import describe

from heterojob_console import devices as dev
from heterojob_console import figures, ui

ANOMALIES = "devices with an anomaly"
ui.setup("Device")
st.title("Device")
try:
    cluster = ui.cluster()
except Exception as exc:  # noqa: BLE001 - shown as a page, never a traceback
    ui.fail(exc)
    raise
if not ui.sources(cluster):
    st.warning(ui.NO_PROMETHEUS)
    st.stop()
measured = ui.telemetry(cluster)
if measured is None:
    st.stop()
table = measured.table
wanted = st.query_params.get("device")
if not measured.counted.empty:
    # a national fleet is read in aggregate: the devices with an anomaly are listed, a node's are read when picked
    accelerators = sorted(cluster.nodes.loc[cluster.nodes["kind"] == "accelerator", "node"])
    choices = [ANOMALIES, *accelerators]
    asked = st.query_params.get("node")
    at_node = st.selectbox("Node", choices, index=choices.index(asked) if asked in choices else 0, key="node")
    if at_node != ANOMALIES:
        st.query_params["node"] = at_node
        try:
            table = ui.node_devices(cluster, at_node, measured)
        except Exception as exc:  # noqa: BLE001 - said in words
            st.warning(f"The devices of {at_node} could not be read: {exc}")
            st.stop()
    elif table.empty:
        st.success("No accelerator has an anomaly now; pick a node to see its devices.")
        st.stop()
devices = sorted(table["device"])
if not devices:  # none yet (Prometheus has not scraped, or the exporters are down): look again shortly
    st.info(f"No device reports now; looking again in {ui.REFRESH_S} s.")
    time.sleep(ui.REFRESH_S)
    st.rerun()
failed = sorted(table.loc[table["health"] == "failed", "device"])
first = wanted if wanted in devices else (failed or devices)[0]
device = st.selectbox("Device", devices, index=devices.index(first), key="device")
st.query_params["device"] = device
row = table[table["device"] == device].iloc[0]
st.markdown(f"**health** {row['health']}" + (f" ({row['reason']})" if row["reason"] else "")
            + f" · **node** {row['node']} · **region** {row['region']} · **class** {row['class']}"
            + f" · **pod** {row['pod'] or '-'} · **job** {row['job'] or '-'}")
minutes = st.radio("Window", options=[15, 60, 360, 1440], index=1, key="minutes", horizontal=True,
                   format_func=lambda m: f"{m // 60} h" if m >= 60 else f"{m} min")


# its history from the Prometheus that watches its region (a member's site has its own), as the operator reads it
source = next(iter(dev.serving(ui.sources(cluster), row["region"])), None)


@st.fragment(run_every=ui.REFRESH_S * 2)
def charts() -> None:
    if source is None:
        st.warning(f"No Prometheus serves region {row['region']}: set its Region's spec.prometheusURL.")
        return
    try:
        history = dev.history(source[0], device, minutes)
    except Exception as exc:  # noqa: BLE001 - said in words, the detail in the log
        dev.log.warning("history of %s: Prometheus at %s: %s", device, source[0], exc)
        st.warning(f"The history of {device} is unavailable: Prometheus at {source[0]} (region {row['region']}): "
                   f"{describe(exc, dev.TIMEOUT_S)}.")
        return
    cols = st.columns(2)
    for i, (title, unit, *_) in enumerate(dev.HISTORY):
        frame = history.get(title)
        with cols[i % 2]:
            if frame is None or frame.empty:
                st.caption(f"{title}: no samples in this window")
            else:
                fig = figures.series(frame, title, unit)
                fig.update_xaxes(range=[frame["time"].max() - pd.Timedelta(minutes=minutes), frame["time"].max()])
                st.plotly_chart(fig, width="stretch", key=f"h{i}")


charts()
