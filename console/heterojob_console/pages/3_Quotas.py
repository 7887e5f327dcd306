"""Quotas: HeteroQuota limits per namespace beside current use; admins edit them."""

from __future__ import annotations

import os

import pandas as pd
import streamlit as st

from heterojob_console import quotas
from heterojob_console.auth import identity, is_admin
from heterojob_console.data import client, read_fleet

st.set_page_config(page_title="heterojob · quotas", layout="wide")
st.title("Quotas")

kubeconfig = os.environ.get("HETEROJOB_KUBECONFIG")
try:
    api = client(kubeconfig)
    fleet = read_fleet(api)
except Exception as exc:  # noqa: BLE001 - shown as a page, never a traceback
    st.error(f"The Kubernetes API cannot be read: {exc}")
    st.stop()

who = identity()
admin = is_admin(who)
st.caption(f"signed in as **{who}**" + ("" if admin else " (read-only: not in HETEROJOB_CONSOLE_ADMINS)"))

namespaces = sorted(set(fleet.jobs["namespace"]) | set(fleet.quota_namespaces)) or ["default"]
namespace = st.selectbox("Namespace", namespaces, key="namespace")
quota = quotas.read(api, namespace)
base_key = f"base:{namespace}"
if base_key not in st.session_state or st.session_state.get("reload"):
    st.session_state[base_key] = quota  # the version the admin edits from
    st.session_state["reload"] = False
base: quotas.Quota = st.session_state[base_key]

left, right = st.columns([3, 2])
with right:
    st.subheader("In use")
    st.dataframe(pd.DataFrame(quota.used, columns=["deviceClass", "region", "devices"]), hide_index=True,
                 key="used")
with left:
    st.subheader(f"Limits of {namespace}/{base.name}")
    table = pd.DataFrame(base.limits, columns=quotas.COLUMNS)
    if not admin:
        st.dataframe(table, hide_index=True, key="limits")
        st.stop()
    edited = st.data_editor(table, num_rows="dynamic", hide_index=True, key=f"editor:{namespace}",
                            column_config={"devices": st.column_config.NumberColumn(min_value=0, step=1)})

limits, problems = quotas.validate(edited.to_dict("records"), fleet.classes, fleet.regions["region"])
for problem in problems:
    st.error(problem)
if not problems and limits != base.limits:
    waiting = fleet.waiting(namespace)
    effects = quotas.preview(namespace, base.limits, limits, waiting, fleet.held(namespace))
    st.subheader("Preview")
    if effects:
        st.dataframe(pd.DataFrame([{"job": e.job, "wants": e.wants,
                                    "now": "admitted" if not e.after else f"blocked: {e.after}"} for e in effects]),
                     hide_index=True, key="preview")
    else:
        st.info("No waiting job changes its quota verdict.")
    if st.button("Apply", type="primary", key="apply"):
        try:
            quotas.apply(api, base, limits, who)
        except quotas.Conflict as exc:
            st.warning(str(exc))
            if st.button("Reload", key="reload-button"):
                st.session_state["reload"] = True
                st.rerun()
        else:
            st.session_state["reload"] = True
            st.success(f"Applied by {who}.")
if base.audit:
    st.subheader("Audit")
    st.dataframe(pd.DataFrame([{"when": a["when"], "who": a["who"], "old": str(a["old"]), "new": str(a["new"])}
                               for a in reversed(base.audit)]), hide_index=True, key="audit")
