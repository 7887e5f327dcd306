"""Jobs: every HeteroJob with its phase, placement, utilization, generation, migrations and queue position
(live); click a row for its timeline, history and Events; admins checkpoint, migrate (after seeing where
the planner would put it) or cancel a pending migration request."""

from __future__ import annotations

import streamlit as st

from heterojob.api.job import Phase
from heterojob.engine.basics.phases import DISRUPTED

from heterojob_console import figures, filters, kpis, preview, ui
from heterojob_console import jobs as story
from heterojob_console.auth import identity, is_admin
from heterojob_console.data import client, utilization
from heterojob_console.members import LOCAL

ui.setup("Jobs")
st.title("Jobs")
SELECTED = "selected-job"
PHASES = ["New", *(p.value for p in Phase)]  # every phase a job can show, in the order of its life
# The table's columns, each with a width, so that they all fit the page at 1280 px (what a job's row does not
# show -- namespace and name apart, replicas, message, creation -- its details below show once it is clicked)
COLUMNS = {
    "job": st.column_config.TextColumn("job", width=200, help="namespace/name"),
    "priority": st.column_config.TextColumn("priority", width=68),
    "phase": st.column_config.TextColumn("phase", width=95),
    "placement": st.column_config.TextColumn("placement", width=160, help="region/class of status.placement"),
    "member": st.column_config.TextColumn("member", width=100, help="the cluster its pods run in"),
    "devices": st.column_config.NumberColumn("devices", width=62, help="accelerators (or CPU cores) its placement "
                                                                       "holds"),
    "utilization": st.column_config.ProgressColumn("utilization", format="%.0f%%", min_value=0, max_value=100,
                                                   width=110, help="status.utilization.average: "
                                                                   + kpis.HELP["utilization"]),
    "generation": st.column_config.NumberColumn("gen.", width=50, help="placement generation: +1 on every move"),
    "migrations": st.column_config.NumberColumn("moves", width=58, help="migrate entries in status.history"),
    "queue": st.column_config.NumberColumn("queue", width=58, help="position among the waiting jobs, in the "
                                                                   "order the operator plans them: its queue "
                                                                   "policy's (mlfq: priority, then the level of "
                                                                   "attained service; fifo: priority), then age"),
}


@st.fragment(run_every=ui.REFRESH_S)
def table() -> None:
    try:
        cluster = ui.cluster()
    except Exception as exc:  # noqa: BLE001 - shown as a page, never a traceback
        ui.fail(exc)
        return
    jobs = cluster.jobs
    ui.as_of(cluster.at)
    k = st.columns(4)
    k[0].metric("Jobs running", int((jobs["phase"] == "Running").sum()), help=kpis.HELP["jobs_running"])
    k[1].metric("Jobs waiting", int(jobs["queue"].notna().sum()), help=kpis.HELP["jobs_waiting"])
    k[2].metric("Moving", int(jobs["phase"].isin([p.value for p in DISRUPTED]).sum()),
                help="Jobs checkpointing, migrating or resizing now.")
    util = jobs["utilization"].dropna()
    k[3].metric("Job utilization", kpis.pct(float(util.mean()) if len(util) else None),
                help="The mean of the running jobs' status.utilization.average (each job's exporter-measured "
                     "average over its reporting devices).")
    # Filters start empty, meaning "all": a phase or a member that appears later (Running after Pending, a
    # member joined since) shows without anyone ticking it; a choice a user made is kept as values come and go.
    f1, f2, f3 = st.columns(3)
    chosen = f1.multiselect("Phase", filters.options(PHASES, jobs["phase"], st.session_state.get("phases")),
                            default=[], key="phases", placeholder="All phases")
    shown = filters.keep(jobs, "phase", chosen)
    if not cluster.members.empty:  # member clusters: which cluster a job's pods run in
        known = [LOCAL, *cluster.members["member"]]
        where = f2.multiselect("Member cluster", filters.options(known, jobs["member"].dropna(),
                                                                 st.session_state.get("members")),
                               default=[], key="members", placeholder="All member clusters")
        shown = filters.keep(shown, "member", where, keep_missing=True)  # a waiting job has no cluster yet
    shown = shown.sort_values(["queue", "namespace", "name"], na_position="first")
    shown = shown.assign(job=shown["namespace"] + "/" + shown["name"],
                         placement=shown["region"].where(shown["region"].isna(), shown["region"] + "/" + shown["class"]))
    found = filters.search(shown, f3.text_input("Search", key="search", placeholder="namespace/name, region/class"),
                           ["job", "placement"])
    # a page of rows at a time, in the queue's order: the browser gets what a screen scrolls through (10,000 jobs
    # in one grid were 1.4 MB a visit), and search, the filters and the page number reach every job
    last = filters.pages(len(found))
    if st.session_state.get("page", 1) > last:  # fewer pages since (a filter, a search): its last page
        st.session_state["page"] = last
    number = 1
    if last > 1:
        p1, p2 = st.columns([1, 4])
        number = int(p1.number_input(f"Page (of {last})", min_value=1, max_value=last, step=1, key="page"))
        first = (number - 1) * filters.PAGE_ROWS
        p2.caption(f"Jobs {first + 1:,}-{min(first + filters.PAGE_ROWS, len(found)):,} of {len(found):,}"
                   f"{' found' if len(found) < len(shown) else ''}: waiting jobs first in queue order, then by "
                   "namespace and name; a column's header sorts this page.")
    view = filters.page(found, number)
    order = [c for c in COLUMNS if c != "member" or not cluster.members.empty]
    # only the columns shown (and the job's namespace and name) go to the browser: 10,000 jobs' messages and
    # timestamps were half of the page's bytes
    event = st.dataframe(view[[*order, "namespace", "name"]], hide_index=True, width="stretch", key="table",
                         height=min(420, 38 + 35 * max(len(view), 1)), column_config=COLUMNS, column_order=order,
                         on_select="rerun", selection_mode="single-row")
    rows = event.selection.rows if event is not None else []
    pick = f"{view.at[rows[0], 'namespace']}/{view.at[rows[0], 'name']}" if rows and rows[0] < len(view) else None
    if pick and pick != st.session_state.get(SELECTED):
        st.session_state[SELECTED] = pick
        st.rerun(scope="app")  # the job's details are outside this fragment
    if not pick and not st.session_state.get(SELECTED):
        st.caption("Click a row to see that job.")


MIGRATING = "migrating"  # the job whose migration dialog is open (it survives reruns until answered)


def _close() -> None:
    st.session_state.pop(MIGRATING, None)


@st.dialog("Migrate this job?", on_dismiss=_close)
def migrate(namespace: str, name: str, who: str) -> None:
    api = client(ui.kubeconfig())
    move = preview.migration_target(ui.cluster(), namespace, name)
    if move is None:
        st.warning("The job holds no placement now; there is nothing to move.")
        return
    st.markdown(f"**From** `{move.origin}`")
    if move.target:
        st.markdown(f"**To** `{move.target}` (the planner's answer now; the operator decides again after the "
                    f"checkpoint, so it can differ if the fleet changes meanwhile)")
    else:
        st.error(f"The planner finds no other place now ({move.why}). The operator would keep the job running "
                 f"where it is and hold the move (MigrationHeld) until room frees.")
    a, b = st.columns(2)
    if a.button("Confirm migration", type="primary", key="confirm-migrate"):
        _close()
        story.request(api, namespace, name, "migrate", who)
        st.session_state["flash"] = "Migration requested (after a checkpoint)."
        st.rerun()
    if b.button("Cancel", key="cancel-dialog"):
        _close()
        st.rerun()


table()


@st.fragment(run_every=ui.REFRESH_S)
def detail() -> None:
    """The selected job, live like the table (once drawn outside a fragment, it froze at the click: the
    phase, the buttons and the history stayed as they were while the job moved on)."""
    key = st.session_state.get(SELECTED)
    cluster = ui.cluster()
    obj = cluster.job(*key.split("/", 1)) if key else None
    if obj is None:
        return
    namespace, name = key.split("/", 1)
    api = client(ui.kubeconfig())
    status = obj.get("status") or {}
    placement = status.get("placement") or {}
    st.subheader(key)
    c = st.columns([1, 2, 1, 1, 1])
    c[0].metric("Phase", status.get("phase") or "New")
    c[1].metric("Placement", f"{placement.get('region', '-')}/{placement.get('deviceClass', '-')}")
    c[2].metric("Replicas", placement.get("replicas", 0))
    c[3].metric("Generation", placement.get("generation") or status.get("lastGeneration") or "-")
    util = utilization(status)
    c[4].metric("Utilization", f"{util:.0f}%" if util is not None else "-", help=kpis.HELP["utilization"])
    created = obj["metadata"].get("creationTimestamp", "")
    workload = (obj.get("spec") or {}).get("workload")
    st.caption(f"priority {(obj.get('spec') or {}).get('priority', 'medium')} · created {created}"
               + (f" · workload {workload} (shares measured speeds)" if workload else "")
               + (f" · {status['message']}" if status.get("message") else ""))
    if flash := st.session_state.pop("flash", None):
        st.success(flash)

    who = identity()
    requested = ((obj["metadata"].get("annotations") or {}).get("heterojob.io/migrate") or "").strip()
    if is_admin(who) and status.get("phase") == "Running":
        a, b, _ = st.columns([1, 1, 3])
        if a.button("Request a checkpoint", key="checkpoint"):
            story.request(api, namespace, name, "checkpoint", who)
            st.success("Checkpoint requested.")
        if requested:
            st.info(f"A migration is requested ({requested}) and not yet acted on.")
            if b.button("Cancel the migration request", key="cancel-migrate"):
                story.cancel_migration(api, namespace, name)
                st.success("Migration request withdrawn.")
        elif b.button("Migrate…", key="migrate"):
            st.session_state[MIGRATING] = key
            st.rerun(scope="app")  # the dialog opens from the page, not from this fragment's 5 s reruns

    bars, points = story.segments(obj, cluster.at)
    if not bars.empty:
        st.plotly_chart(figures.gantt(bars, points), width="stretch", key="timeline")
    st.subheader("History")
    st.dataframe(story.timeline(obj), hide_index=True, width="stretch", key="history")
    pods = cluster.pods[(cluster.pods["namespace"] == namespace) & (cluster.pods["job"] == name)]
    if not pods.empty:
        st.subheader("Pods")
        st.caption("Read from the cluster they run in (member: a member cluster; manager: the operator's own).")
        st.dataframe(pods.drop(columns=["namespace", "job"]), hide_index=True, width="stretch", key="pods")
    st.subheader("Events")
    st.dataframe(story.events(api, namespace, name), hide_index=True, width="stretch", key="events")


detail()
if (moving := st.session_state.get(MIGRATING)) and moving == st.session_state.get(SELECTED) and is_admin(identity()):
    migrate(*moving.split("/", 1), identity())
