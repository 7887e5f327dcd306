"""The console across member clusters (docs/multicluster.md), with Streamlit's AppTest: nodes and pods read
from each member with the kubeconfig its Region's Secret holds, jobs from the manager; a member that does
not answer shows as unreachable, in words (timed out after 3 s, connection refused: never urllib3's text),
its nodes counted as not ready rather than left out, and the rest of the page renders; the kubeconfig never
shows. The fleet: tests/console/member_fleet.py (shared with the Chromium test)."""

from __future__ import annotations

import time
from importlib.resources import files
from typing import Any

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from heterojob.sim.cluster.harness import Emulator
from heterojob.sim.cluster.nodes import node
from tests.conftest import Cluster
from tests.console.member_fleet import AWAY, SECRET_TOKEN, join_member, member_fleet, place, run_in_member

HOME = str(files("heterojob_console") / "Home.py")
JOBS = str(files("heterojob_console") / "pages" / "2_Jobs.py")
RAW = ("MaxRetryError", "HTTPConnectionPool", "NewConnectionError", "urllib3", "Caused by")


def shown(at: AppTest) -> str:
    return " ".join(str(e.value) for e in [*at.dataframe, *at.warning, *at.caption, *at.markdown, *at.metric]) + \
        " ".join(str(m.proto.delta) for m in at.metric)


def test_overview_and_jobs_show_each_members_nodes_and_pods_and_an_unreachable_member(
        cluster: Cluster, emulator: Any, member: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    member_fleet(cluster, member, member_nodes=2)
    monkeypatch.setenv("HETEROJOB_KUBECONFIG", str(emulator.kubeconfig))
    monkeypatch.delenv("HETEROJOB_PROMETHEUS_URL", raising=False)

    started = time.monotonic()
    at = AppTest.from_file(HOME, default_timeout=60).run()
    assert not at.exception
    assert time.monotonic() - started < 30  # the member that does not answer costs a timeout, not the page
    metrics = {m.label: m for m in at.metric}
    assert metrics["Accelerators"].value == "24"  # 8 in the manager + 16 read from the member
    assert metrics["Accelerators allocated"].value == "33%"  # the member's pod holds 8 of them
    assert metrics["Jobs running"].value == "1"
    # cn-guiyang never answered since the console started: its nodes are unknown, and the tile says so
    assert metrics["Nodes ready"].value == "3/3 + ?"
    assert metrics["Nodes ready"].proto.delta == "? in cn-guiyang"
    members = next(d.value for d in at.dataframe if "reachable" in d.value.columns).set_index("member")
    assert members.loc["cn-zhongwei", "reachable"] and members.loc["cn-zhongwei", "nodes"] == 2
    assert not members.loc["cn-guiyang", "reachable"]
    assert members.loc["cn-guiyang", "message"] == \
        "the member's API server did not answer: connection refused (nothing listens there)"
    assert any("Member cluster cn-guiyang is unreachable" in w.value and "nodes are unknown" in w.value
               for w in at.warning)
    text = shown(at)
    assert SECRET_TOKEN not in text and AWAY not in text and not any(raw in text for raw in RAW)

    at = AppTest.from_file(JOBS, default_timeout=60)
    at.session_state["selected-job"] = "team-a/far"  # what clicking its row does
    at.run()
    assert not at.exception
    table = at.dataframe[0].value
    assert list(table["member"]) == ["cn-zhongwei"]
    pods = next(d.value for d in at.dataframe if "pod" in d.value.columns and "node" in d.value.columns)
    assert pods.to_dict("records") == [{"pod": "far-g1-0", "member": "cn-zhongwei", "node": "cn-zhongwei-h100-1",
                                        "phase": "Running", "generation": "1"}]
    assert SECRET_TOKEN not in " ".join(str(d.value) for d in at.dataframe)


def test_a_member_that_stops_answering_keeps_its_nodes_counted_as_not_ready(
        cluster: Cluster, emulator: Any, member: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    member_fleet(cluster, member, member_nodes=2)
    monkeypatch.setenv("HETEROJOB_KUBECONFIG", str(emulator.kubeconfig))
    monkeypatch.delenv("HETEROJOB_PROMETHEUS_URL", raising=False)
    at = AppTest.from_file(HOME, default_timeout=60).run()
    assert {m.label: m.value for m in at.metric}["Nodes ready"] == "3/3 + ?"

    member.pause()  # a partition: its port stays open, nothing answers
    try:
        st.cache_resource.clear()  # the next read, not the poller's snapshot of a moment ago
        at.run()
    finally:
        member.resume()
    assert not at.exception
    metrics = {m.label: m for m in at.metric}
    # the fleet did not shrink: its 16 accelerators and 2 nodes stay, the nodes not ready
    assert metrics["Accelerators"].value == "24"
    assert metrics["Nodes ready"].value == "1/3 + ?"
    assert metrics["Nodes ready"].proto.delta == "2 unreachable · ? in cn-guiyang"
    members = next(d.value for d in at.dataframe if "reachable" in d.value.columns).set_index("member")
    assert not members.loc["cn-zhongwei", "reachable"] and members.loc["cn-zhongwei", "nodes"] == 2
    assert members.loc["cn-zhongwei", "message"] == "the member's API server did not answer: timed out after 3 s"
    assert any("Member cluster cn-zhongwei is unreachable" in w.value and "2 nodes count as not ready" in w.value
               for w in at.warning)
    text = shown(at)
    assert not any(raw in text for raw in RAW) and SECRET_TOKEN not in text

    at = AppTest.from_file(JOBS, default_timeout=60)  # its pod: phase unknown while its cluster is away
    at.session_state["selected-job"] = "team-a/far"
    member.pause()
    try:
        st.cache_resource.clear()
        at.run()
    finally:
        member.resume()
    pods = next(d.value for d in at.dataframe if "pod" in d.value.columns and "node" in d.value.columns)
    assert list(pods["phase"]) == ["Unknown"] and list(pods["member"]) == ["cn-zhongwei"]


def test_the_member_filter_shows_a_members_jobs_that_appear_later(
        cluster: Cluster, emulator: Any, member: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    member.reset()
    cluster.seed([node("cn-east-h100-0", "cn-east", "nvidia-h100")])
    place(cluster, "near", "cn-east", "cn-east-h100-0")
    monkeypatch.setenv("HETEROJOB_KUBECONFIG", str(emulator.kubeconfig))
    monkeypatch.delenv("HETEROJOB_PROMETHEUS_URL", raising=False)
    join_member(cluster, member, "cn-zhongwei", 1)
    at = AppTest.from_file(JOBS, default_timeout=60).run()  # first render: only the manager runs a job
    assert not at.exception and list(at.dataframe[0].value["name"]) == ["near"]

    place(cluster, "far", "cn-zhongwei", "cn-zhongwei-h100-0", cluster_name="cn-zhongwei")
    run_in_member(member, "far", "cn-zhongwei-h100-0")
    st.cache_resource.clear()
    at.run()
    assert sorted(at.dataframe[0].value["name"]) == ["far", "near"]
    at.multiselect(key="members").select("cn-zhongwei").run()
    assert list(at.dataframe[0].value["name"]) == ["far"]
