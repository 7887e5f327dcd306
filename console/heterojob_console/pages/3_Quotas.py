"""Quotas: every HeteroQuota of a namespace (the operator applies them all), each limit beside what the
namespace uses as the operator counts it; admins edit each quota with the planner's preview, a warning below
current use, a confirmation, and an audit history."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from heterojob.engine.capacity.fleet import cpu_classes
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
found = quotas.read_all(api, namespace)
if len(found) > 1:
    st.caption(f"{namespace} has {len(found)} HeteroQuotas, and every one counts: a job is admitted only when "
               "every limit that covers its class and region, in any of them, has room.")


@st.fragment(run_every=ui.REFRESH_S)
def in_use(name: str) -> None:
    """One quota's limits beside the namespace's use, live, as the operator enforces them."""
    now = next((q for q in quotas.read_all(api, namespace) if q.name == name), None)
    if now is None:
        st.warning(f"{namespace}/{name} no longer exists.")
        return
    live = ui.cluster()
    ui.as_of(live.at)
    if now.error:
        st.error(f"The operator cannot read this quota's spec ({now.error}): it admits nothing new in {namespace} "
                 "until the spec is fixed; below is the limit it enforces meanwhile.")
    elif now.message:
        st.warning(now.message)
    rows = pd.DataFrame(quotas.used_beside_limits(now.enforced, preview.held(live, namespace),
                                                  cpu_classes(live.classes)),
                        columns=["deviceClass", "region", "limit", "used", "free"])
    rows["use"] = (100 * rows["used"] / rows["limit"].where(rows["limit"] > 0)).fillna(0)
    st.dataframe(rows, hide_index=True, width="stretch", key=f"in-use:{name}", column_config={
        "use": st.column_config.ProgressColumn("use", format="%.0f%%", min_value=0, max_value=100,
                                               help="used / limit: devices the namespace's jobs hold under this "
                                                    "limit (all its jobs, as the operator counts them for each "
                                                    "of its HeteroQuotas) over the limit")})
    if not now.enforced:
        st.info(f"{namespace}/{name} has no limits: it limits none of {namespace}'s jobs.")


def editor(quota: quotas.Quota) -> None:
    """Edit one quota's limits: validation, the planner's preview, a confirmation, then the write."""
    name = quota.name
    base_key = f"base:{namespace}/{name}"
    if base_key not in st.session_state or st.session_state.get(f"reload:{name}"):
        st.session_state[base_key] = quota  # the version the admin edits from
        st.session_state[f"reload:{name}"] = False
    base: quotas.Quota = st.session_state[base_key]
    st.markdown(f"**Edit {namespace}/{name}**")
    conflict = f"conflict:{namespace}/{name}"
    if conflict in st.session_state:  # shown until reloaded: a button nested under Apply would never fire

        def reload() -> None:  # a callback, so the editor's and the checkbox's state can still be dropped
            for stale in (conflict, f"editor:{namespace}/{name}", f"confirm:{name}"):
                st.session_state.pop(stale, None)
            st.session_state[f"reload:{name}"] = True

        st.warning(st.session_state[conflict])
        st.button("Reload", key=f"reload-button:{name}", on_click=reload)
    table = pd.DataFrame(base.limits, columns=quotas.COLUMNS)
    edited = st.data_editor(table, num_rows="dynamic", hide_index=True, key=f"editor:{namespace}/{name}",
                            column_config={"devices": st.column_config.NumberColumn(min_value=0, step=1)})
    limits, problems = quotas.validate(edited.to_dict("records"), cluster.classes, cluster.regions["region"])
    for problem in problems:
        st.error(problem)
    if problems or limits == base.limits:
        return
    st.markdown("**Change:** " + "; ".join(quotas.changes(base.limits, limits)))
    for warning in quotas.below_use(quotas.as_limits(limits, name), preview.held(cluster, namespace),
                                    cpu_classes(cluster.classes)):
        st.warning(warning)
    st.markdown("**Preview** (the operator's planner, on the waiting queue)")
    try:
        effects = preview.quota_change(cluster, namespace, name, limits)
    except ValueError as exc:  # HETEROJOB_QUEUE_POLICY names no policy: say so, the edit stays possible
        st.error(f"No preview: {exc}")
        effects = None
    if effects:
        st.dataframe(pd.DataFrame([{"job": e.job, "change": e.change, "now": e.before, "after the edit": e.after}
                                   for e in effects]), hide_index=True, width="stretch", key=f"preview:{name}")
    elif effects is not None:
        st.info("No waiting job's placement answer changes.")
    sure = st.checkbox(f"I want to apply this change to {namespace}/{name}", key=f"confirm:{name}")
    if st.button("Apply", type="primary", key=f"apply:{name}", disabled=not sure):
        try:
            quotas.apply(api, base, limits, who)
        except quotas.QuotaConflict as exc:
            st.session_state[conflict] = str(exc)
            st.rerun()
        else:
            st.session_state[f"reload:{name}"] = True
            st.success(f"Applied by {who}.")


for quota in found:
    st.subheader(f"{namespace}/{quota.name}" + ("" if quota.resource_version else " (none yet)"))
    in_use(quota.name)
    if admin:
        editor(quota)
    audit = quotas.audit_rows(quota.audit)
    if audit:
        with st.expander(f"Audit of {namespace}/{quota.name}"):
            st.dataframe(pd.DataFrame(audit), hide_index=True, width="stretch", key=f"audit:{quota.name}")
    else:
        st.caption(f"Audit of {namespace}/{quota.name}: no edits recorded yet.")
