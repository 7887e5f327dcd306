"""Quotas: each HeteroQuota limit beside what the namespace uses; admins edit them with the planner's
preview, a warning below current use, a confirmation, and an audit history."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from heterojob_console import preview, quotas, ui
from heterojob_console.auth import identity, is_admin
from heterojob_console.data import client

ui.setup("Quotas")
st.title("Quotas")

try:
    api = client(ui.kubeconfig())
    cluster = ui.cluster()
except Exception as exc:  # noqa: BLE001 - shown as a page, never a traceback
    ui.fail(exc)
    raise

who = identity()
admin = is_admin(who)
st.caption(f"signed in as **{who}**" + ("" if admin else " (read-only: not in HETEROJOB_CONSOLE_ADMINS)"))

namespaces = cluster.namespaces or ["default"]
namespace = st.selectbox("Namespace", namespaces, key="namespace")
quota = quotas.read(api, namespace)
base_key = f"base:{namespace}"
if base_key not in st.session_state or st.session_state.get("reload"):
    st.session_state[base_key] = quota  # the version the admin edits from
    st.session_state["reload"] = False
base: quotas.Quota = st.session_state[base_key]


@st.fragment(run_every=ui.REFRESH_S)
def in_use() -> None:
    """Limits beside use, live (the operator updates status.used as jobs come and go)."""
    now = quotas.read(api, namespace)
    ui.as_of(cluster.at)
    rows = pd.DataFrame(quotas.used_beside_limits(now.limits, now.used),
                        columns=["deviceClass", "region", "limit", "used", "free"])
    rows["use"] = (100 * rows["used"] / rows["limit"].where(rows["limit"] > 0)).fillna(0)
    st.dataframe(rows, hide_index=True, width="stretch", key="in-use", column_config={
        "use": st.column_config.ProgressColumn("use", format="%.0f%%", min_value=0, max_value=100,
                                               help="used / limit: devices the namespace's jobs hold under this "
                                                    "limit (HeteroQuota status.used) over the limit")})
    if not now.limits:
        st.info(f"{namespace} has no HeteroQuota limits: its jobs are not limited.")


st.subheader(f"{namespace}/{base.name}: limits and use")
in_use()

if admin:
    st.subheader("Edit limits")
    table = pd.DataFrame(base.limits, columns=quotas.COLUMNS)
    edited = st.data_editor(table, num_rows="dynamic", hide_index=True, key=f"editor:{namespace}",
                            column_config={"devices": st.column_config.NumberColumn(min_value=0, step=1)})
    limits, problems = quotas.validate(edited.to_dict("records"), cluster.classes, cluster.regions["region"])
    for problem in problems:
        st.error(problem)
    if not problems and limits != base.limits:
        st.markdown("**Change:** " + "; ".join(quotas.changes(base.limits, limits)))
        for warning in quotas.below_use(limits, quota.used):
            st.warning(warning)
        st.subheader("Preview (the operator's planner, on the waiting queue)")
        try:
            effects = preview.quota_change(cluster, namespace, base.name, limits)
        except ValueError as exc:  # HETEROJOB_QUEUE_POLICY names no policy: say so, the edit stays possible
            st.error(f"No preview: {exc}")
            effects = None
        if effects:
            st.dataframe(pd.DataFrame([{"job": e.job, "change": e.change, "now": e.before, "after the edit": e.after}
                                       for e in effects]), hide_index=True, width="stretch", key="preview")
        elif effects is not None:
            st.info("No waiting job's placement answer changes.")
        sure = st.checkbox(f"I want to apply this change to {namespace}/{base.name}", key="confirm")
        if st.button("Apply", type="primary", key="apply", disabled=not sure):
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

st.subheader("Audit")
audit = quotas.audit_rows(quota.audit)
if audit:
    st.dataframe(pd.DataFrame(audit), hide_index=True, width="stretch", key="audit")
else:
    st.caption("No edits recorded yet.")
