"""The Jobs page (AppTest against the operator on the harness): the table, a job's story, admin requests."""

from __future__ import annotations

from importlib.resources import files
from typing import Any

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from heterojob.constants import GROUP, VERSION

from heterojob.sim.cluster.nodes import node
from tests.conftest import Cluster, eventually

PAGE = str(files("heterojob_console") / "pages" / "2_Jobs.py")


@pytest.mark.harness
def test_jobs_page_shows_the_story_and_admins_can_ask_for_a_checkpoint_and_a_move(
        cluster: Cluster, operator: Any, emulator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("h100-b", "cn-east", "nvidia-h100")])
    cluster.create_job("train", {"priority": "high", "replicas": {"min": 1},
                                 "checkpoint": {"timeoutSeconds": 1},
                                 "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
                                 "template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}})
    [pod] = eventually(lambda: cluster.pods("train"), what="pod")
    cluster.set_pod_phase(pod.metadata.name, "Running")
    eventually(lambda: (cluster.job("train").get("status") or {}).get("phase") == "Running", what="Running")
    monkeypatch.setenv("HETEROJOB_KUBECONFIG", str(emulator.kubeconfig))
    monkeypatch.setenv("HETEROJOB_CONSOLE_ADMINS", "local-admin")

    at = AppTest.from_file(PAGE, default_timeout=30).run()
    assert not at.exception
    table = at.dataframe[0].value
    assert list(table["name"]) == ["train"] and list(table["generation"]) == [1] and list(table["migrations"]) == [0]
    at.session_state["selected-job"] = "team-a/train"  # what clicking its row does
    at.run()
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Phase"] == "Running" and metrics["Placement"] == "cn-east/nvidia-h100"
    assert "Admitted" in list(at.dataframe[-1].value["reason"])  # its Events

    at.button("checkpoint").click().run()
    assert at.success[0].value == "Checkpoint requested."
    eventually(lambda: (cluster.core.read_namespaced_pod(pod.metadata.name, "team-a").metadata.annotations or {})
               .get("heterojob.io/checkpoint-request"), what="the operator asked the pod for a checkpoint")

    at.button("migrate").click().run()  # the dialog: where the planner would put it, before confirming
    markdown = " ".join(m.value for m in at.markdown)
    assert "**From** `cn-east/nvidia-h100 x1" in markdown and "**To** `cn-east/nvidia-h100 x1 on h100-b`" in markdown
    at.button("confirm-migrate").click().run()
    eventually(lambda: ((cluster.job("train").get("status") or {}).get("placement") or {}).get("generation") == 2,
               timeout=20, what="moved at the console's request")
    st.cache_resource.clear()
    at = AppTest.from_file(PAGE, default_timeout=30)
    at.session_state["selected-job"] = "team-a/train"
    at.run()
    history = at.dataframe[1].value
    assert "migrate" in list(history["what"]) and "console: local-admin" in " ".join(history["detail"])
    assert list(at.dataframe[0].value["migrations"]) == [1]
    assert at.get("plotly_chart")  # the timeline


@pytest.mark.harness
def test_a_pending_migration_request_can_be_cancelled(cluster: Cluster, emulator: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100")])
    cluster.create_job("train", {"devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
                                 "template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}})
    cluster.custom.patch_namespaced_custom_object_status(GROUP, VERSION, "team-a", "heterojobs", "train", {
        "status": {"phase": "Running", "placement": {"region": "cn-east", "deviceClass": "nvidia-h100", "replicas": 1,
                                                     "perReplica": 8, "nodes": ["h100-a"], "generation": 1}}})
    cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, "team-a", "heterojobs", "train", {
        "metadata": {"annotations": {"heterojob.io/migrate": "console: someone"}}})  # not acted on (no operator)
    monkeypatch.setenv("HETEROJOB_KUBECONFIG", str(emulator.kubeconfig))
    monkeypatch.setenv("HETEROJOB_CONSOLE_ADMINS", "local-admin")
    at = AppTest.from_file(PAGE, default_timeout=30)
    at.session_state["selected-job"] = "team-a/train"
    at.run()
    assert "A migration is requested (console: someone)" in at.info[0].value
    at.button("cancel-migrate").click().run()
    assert "heterojob.io/migrate" not in (cluster.job("train")["metadata"].get("annotations") or {})


def test_non_admins_get_no_buttons(cluster: Cluster, emulator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100")])
    cluster.create_job("idle", {"devices": [{"deviceClass": "nvidia-h100"}],
                                "template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}})
    monkeypatch.setenv("HETEROJOB_KUBECONFIG", str(emulator.kubeconfig))
    monkeypatch.delenv("HETEROJOB_CONSOLE_ADMINS", raising=False)
    at = AppTest.from_file(PAGE, default_timeout=30)
    at.session_state["selected-job"] = "team-a/idle"
    at.run()
    assert not at.exception and not at.button


def _status(cluster: Cluster, name: str, phase: str) -> None:
    cluster.custom.patch_namespaced_custom_object_status(GROUP, VERSION, "team-a", "heterojobs", name,
                                                         {"status": {"phase": phase}})


def test_the_phase_filter_shows_phases_that_appear_later_and_keeps_a_users_choice(
        cluster: Cluster, emulator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100")])
    spec = {"devices": [{"deviceClass": "nvidia-h100"}], "template": {"spec": {"containers": [{"name": "m",
                                                                                              "image": "i"}]}}}
    cluster.create_job("a", spec)
    _status(cluster, "a", "Pending")
    monkeypatch.setenv("HETEROJOB_KUBECONFIG", str(emulator.kubeconfig))
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    assert not at.exception and list(at.dataframe[0].value["name"]) == ["a"]

    _status(cluster, "a", "Running")  # a phase nobody saw at the first render, and a new job that failed
    cluster.create_job("b", spec)
    _status(cluster, "b", "Failed")
    st.cache_resource.clear()  # the next read, not the poller's snapshot of a moment ago
    at.run()
    assert sorted(at.dataframe[0].value["name"]) == ["a", "b"]

    at.multiselect(key="phases").select("Running").run()  # the user's own choice ...
    assert list(at.dataframe[0].value["name"]) == ["a"]
    cluster.create_job("c", spec)
    _status(cluster, "c", "Succeeded")
    st.cache_resource.clear()
    at.run()  # ... is kept as new values appear; the new ones are offered
    assert at.multiselect(key="phases").value == ["Running"] and list(at.dataframe[0].value["name"]) == ["a"]
    assert {"Succeeded", "Failed", "Pending"} <= set(at.multiselect(key="phases").options)


def test_the_table_is_paged_and_search_reaches_every_page(cluster: Cluster, emulator: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from heterojob_console import filters

    monkeypatch.setattr(filters, "PAGE_ROWS", 2)  # 10,000 jobs a national fleet, 100 a page: 3 jobs, 2 a page
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100")])
    spec = {"devices": [{"deviceClass": "nvidia-h100"}], "template": {"spec": {"containers": [{"name": "m",
                                                                                              "image": "i"}]}}}
    for name in ("alpha", "beta", "gamma"):
        cluster.create_job(name, spec)
    monkeypatch.setenv("HETEROJOB_KUBECONFIG", str(emulator.kubeconfig))
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    assert not at.exception and list(at.dataframe[0].value["name"]) == ["alpha", "beta"]  # one page, not all
    assert "Jobs 1-2 of 3" in " ".join(c.value for c in at.caption)
    at.number_input(key="page").set_value(2).run()
    assert list(at.dataframe[0].value["name"]) == ["gamma"]
    at.text_input(key="search").input("ALP").run()  # one page found: the page number falls back to it
    assert list(at.dataframe[0].value["name"]) == ["alpha"] and not at.number_input
    at.session_state["selected-job"] = "team-a/alpha"
    at.run()
    assert at.subheader[0].value == "team-a/alpha"


def test_search_and_pages_are_literal_and_bounded() -> None:
    import pandas as pd

    from heterojob_console import filters

    frame = pd.DataFrame({"job": ["a/x.y", "a/xzy", "b/q"], "placement": ["cn/h100", None, "us/h100"]})
    assert list(filters.search(frame, "x.y", ["job"])["job"]) == ["a/x.y"]  # "." is a dot, not any character
    assert list(filters.search(frame, " H100 ", ["job", "placement"])["job"]) == ["a/x.y", "b/q"]
    assert filters.pages(0, 2) == 1 and filters.pages(4, 2) == 2 and filters.pages(5, 2) == 3
    assert list(filters.page(frame, 9, 2)["job"]) == ["b/q"]  # past the last page: the last
    assert list(filters.page(frame, 1, 2).index) == [0, 1]
