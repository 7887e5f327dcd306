"""The Quotas page (AppTest against the emulator): read-only for non-admins, valid edits applied with an
audit record, invalid ones refused with their message, a concurrent change detected, a preview."""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from heterojob.constants import GROUP, VERSION
from heterojob.sim.cluster.nodes import node
from tests.conftest import Cluster

PAGE = str(files("heterojob_console") / "pages" / "3_Quotas.py")
EDITOR = "editor:team-a/team-a"


def quota(cluster: Cluster, limits: list[dict[str, Any]], name: str = "team-a") -> None:
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, "team-a", "heteroquotas", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "HeteroQuota",
        "metadata": {"name": name, "namespace": "team-a"}, "spec": {"limits": limits}})


def stored(cluster: Cluster, name: str = "team-a") -> dict[str, Any]:
    return cluster.custom.get_namespaced_custom_object(GROUP, VERSION, "team-a", "heteroquotas", name)


def running(cluster: Cluster, name: str, node_name: str, devices: int = 8) -> None:
    """A job the operator placed: status.placement, as it writes it (no operator runs here)."""
    cluster.create_job(name, {"devices": [{"deviceClass": "nvidia-h100", "perReplica": devices}],
                              "template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}})
    cluster.custom.patch_namespaced_custom_object_status(GROUP, VERSION, "team-a", "heterojobs", name, {
        "status": {"phase": "Running", "placement": {"region": "cn-east", "deviceClass": "nvidia-h100", "replicas": 1,
                                                     "perReplica": devices, "nodes": [node_name], "generation": 1}}})


@pytest.fixture
def page(cluster: Cluster, emulator: Any, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("h100-b", "cn-east", "nvidia-h100")])
    quota(cluster, [{"deviceClass": "nvidia-h100", "region": "*", "devices": 8}])
    cluster.create_job("big", {"replicas": {"min": 2}, "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
                               "template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}})
    monkeypatch.setenv("HETEROJOB_KUBECONFIG", str(emulator.kubeconfig))
    monkeypatch.setenv("HETEROJOB_CONSOLE_ADMINS", "local-admin")
    return AppTest.from_file(PAGE, default_timeout=30)


def edit(at: AppTest, **changes: Any) -> AppTest:
    at.session_state[EDITOR] = {"edited_rows": {0: changes}, "added_rows": [], "deleted_rows": []}
    return at.run()


def test_a_non_admin_sees_limits_beside_use_read_only(page: AppTest, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETEROJOB_CONSOLE_ADMINS", "alice@example.com")
    at = page.run()
    assert not at.exception
    assert "read-only" in at.caption[0].value and "anonymous" in at.caption[0].value
    rows = at.dataframe[0].value
    assert list(rows["limit"]) == [8] and list(rows["used"]) == [0]  # the limit beside its use
    assert not at.button and not at.get("data_editor")  # nothing to edit or apply


def test_a_valid_edit_is_previewed_confirmed_applied_and_audited(page: AppTest, cluster: Cluster) -> None:
    at = edit(page.run(), devices=16)
    assert not at.exception and not at.error
    preview = at.dataframe[2].value  # 0: limits and use, 1: the editor
    assert list(preview["job"]) == ["team-a/big"] and list(preview["change"]) == ["admitted"]
    assert "quota 0/8 used" in preview["now"][0] and "placed on cn-east/nvidia-h100" in preview["after the edit"][0]
    assert at.button("apply:team-a").disabled  # not before the admin confirms
    at.checkbox("confirm:team-a").check().run()
    at.button("apply:team-a").click().run()
    assert "Applied by local-admin." in at.success[0].value
    obj = stored(cluster)
    assert obj["spec"]["limits"] == [{"deviceClass": "nvidia-h100", "region": "*", "devices": 16}]
    [record] = json.loads(obj["metadata"]["annotations"]["heterojob.io/audit"])
    assert record["who"] == "local-admin" and record["old"][0]["devices"] == 8 and record["new"][0]["devices"] == 16
    at = page.run()
    assert at.dataframe[-1].value["change"][0] == "nvidia-h100 in *: 8 → 16"  # readable, not a dict


def test_a_limit_below_current_use_is_warned(page: AppTest, cluster: Cluster) -> None:
    running(cluster, "small", "h100-a")  # 8 devices held, as the operator counts them (status.used not written)
    at = edit(page.run(), devices=4)
    assert any("limit 4 is below the 8 devices held now" in w.value for w in at.warning)


def test_an_invalid_edit_is_refused_with_its_message(page: AppTest, cluster: Cluster) -> None:
    at = edit(page.run(), devices=-3, deviceClass="nvidia-h200")
    errors = [e.value for e in at.error]
    assert any("row 1: device class 'nvidia-h200' is not known" in e for e in errors)
    assert any("row 1: devices -3 must be a whole number >= 0" in e for e in errors)
    assert not at.button and stored(cluster)["spec"]["limits"][0]["devices"] == 8


def test_a_concurrent_change_of_the_limits_is_detected_not_overwritten(page: AppTest, cluster: Cluster) -> None:
    at = edit(page.run(), devices=16)
    cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, "team-a", "heteroquotas", "team-a", {
        "spec": {"limits": [{"deviceClass": "nvidia-h100", "region": "*", "devices": 4}]}})  # someone else
    at.checkbox("confirm:team-a").check().run()
    at.button("apply:team-a").click().run()
    assert "changed by someone else" in at.warning[0].value
    assert stored(cluster)["spec"]["limits"][0]["devices"] == 4  # theirs kept
    at.button("reload-button:team-a").click().run()  # the Reload it offers does reload (it was a dead button)
    assert not at.exception and not any("someone else" in w.value for w in at.warning)
    assert list(at.get("data_editor")[0].value["devices"]) == [4]  # their limits, the stale edit dropped
    assert not any(m.value.startswith("**Change:**") for m in at.markdown)  # nothing to apply until edited again


def test_the_operators_status_write_does_not_fail_an_edit(page: AppTest, cluster: Cluster) -> None:
    at = edit(page.run(), devices=16)
    before = stored(cluster)["metadata"]["resourceVersion"]
    cluster.custom.patch_namespaced_custom_object_status(GROUP, VERSION, "team-a", "heteroquotas", "team-a", {
        "status": {"used": [{"deviceClass": "nvidia-h100", "region": "cn-east", "devices": 0}]}})
    assert stored(cluster)["metadata"]["resourceVersion"] != before  # the object did change ...
    at.checkbox("confirm:team-a").check().run()
    at.button("apply:team-a").click().run()
    assert "Applied by local-admin." in at.success[0].value  # ... but not its limits
    assert stored(cluster)["spec"]["limits"][0]["devices"] == 16


def test_preview_of_a_job_without_allowed_regions_asks_the_planner(cluster: Cluster, emulator: Any,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A job that lists no regions may run in any region, each checked against its own limits: it is not
    a job for region '*', which a limit for one region would never cover."""
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("h100-b", "cn-east", "nvidia-h100")])
    quota(cluster, [{"deviceClass": "*", "region": "cn-east", "devices": 8}])
    cluster.create_job("wide", {"replicas": {"min": 2}, "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
                                "template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}})
    monkeypatch.setenv("HETEROJOB_KUBECONFIG", str(emulator.kubeconfig))
    monkeypatch.setenv("HETEROJOB_CONSOLE_ADMINS", "local-admin")
    at = edit(AppTest.from_file(PAGE, default_timeout=30).run(), devices=64)
    assert not at.exception
    preview = at.dataframe[2].value  # 0: limits and use, 1: the editor
    assert list(preview["job"]) == ["team-a/wide"] and list(preview["change"]) == ["admitted"]
    assert "cn-east/nvidia-h100: quota 0/8 used" in preview["now"][0]


def test_validation_names_each_row_and_the_fix() -> None:
    from heterojob_console.quotas import validate

    rows = [{"deviceClass": "nvidia-h100", "region": "*", "devices": 16},
            {"deviceClass": "nvidia-h100", "region": "mars", "devices": 2.5},
            {"deviceClass": "", "region": "*", "devices": None},  # an empty row the editor added: skipped
            {"deviceClass": "*", "region": "cn-east", "devices": "lots"}]
    limits, problems = validate(rows, ["nvidia-h100"], ["cn-east"])
    assert limits == [] and problems == [
        "row 2: region 'mars' is not known; use one of *, cn-east",
        "row 2: devices 2.5 must be a whole number >= 0",
        "row 4: devices 'lots' must be a whole number >= 0"]
    limits, problems = validate(rows[:1] + rows[2:3], ["nvidia-h100"], ["cn-east"])
    assert problems == [] and limits == [{"deviceClass": "nvidia-h100", "region": "*", "devices": 16}]
    _, problems = validate(rows[:1] * 2, ["nvidia-h100"], ["cn-east"])
    assert "listed twice" in problems[0] or "two limits" in problems[0]


@pytest.mark.parametrize(("policy", "admitted"), [("", "team-a/young"), ("mlfq", "team-a/young"),
                                                  ("fifo", "team-a/old")])
def test_the_preview_orders_the_queue_by_the_operators_queue_policy(
        cluster: Cluster, emulator: Any, monkeypatch: pytest.MonkeyPatch, policy: str, admitted: str) -> None:
    """Room for one of two waiting jobs: under mlfq (the operator's default) the one with less attained
    service (status.scheduling, as the operator keeps it) goes first, under fifo the older one."""
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100")])
    quota(cluster, [{"deviceClass": "nvidia-h100", "region": "*", "devices": 0}])
    spec = {"replicas": {"min": 1}, "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
            "template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}}
    cluster.create_job("old", spec)
    cluster.custom.patch_namespaced_custom_object_status(GROUP, VERSION, "team-a", "heterojobs", "old", {
        "status": {"scheduling": {"attainedDeviceSeconds": 50 * 3600 * 8}}})  # 400 device-hours: the last level
    cluster.create_job("young", spec)
    monkeypatch.setenv("HETEROJOB_KUBECONFIG", str(emulator.kubeconfig))
    monkeypatch.setenv("HETEROJOB_CONSOLE_ADMINS", "local-admin")
    monkeypatch.setenv("HETEROJOB_QUEUE_POLICY", policy)
    at = edit(AppTest.from_file(PAGE, default_timeout=30).run(), devices=8)
    assert not at.exception and not at.error
    preview = at.dataframe[2].value.set_index("job")
    assert preview.loc[admitted, "change"] == "admitted"
    assert (preview["change"] == "admitted").sum() == 1


def test_a_queue_policy_the_operator_does_not_know_is_said_not_crashed(
        page: AppTest, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETEROJOB_QUEUE_POLICY", "lifo")
    at = edit(page.run(), devices=16)
    assert not at.exception
    assert any("HETEROJOB_QUEUE_POLICY='lifo'" in e.value and "fifo, mlfq" in e.value for e in at.error)
    assert at.checkbox("confirm:team-a") is not None  # the edit itself stays possible


def test_every_problem_names_the_row_the_admin_sees_in_plain_words() -> None:
    """The operator's own spec check (HeteroQuotaSpec: devices <= 1000000, at most 256 limits) is said of the
    editor's rows, counted from 1 with skipped empty rows, never as `spec.limits[0]` in pydantic's words."""
    from heterojob_console.quotas import validate

    empty = {"deviceClass": "", "region": "*", "devices": None}
    rows = [empty, {"deviceClass": "nvidia-h100", "region": "*", "devices": 8},
            {"deviceClass": "*", "region": "cn-east", "devices": 2_000_000}]
    _, problems = validate(rows, ["nvidia-h100"], ["cn-east"])
    assert problems == ["row 3: devices must be less than or equal to 1000000 (got 2000000)"]
    _, problems = validate(rows[:2] + [empty, rows[1]], ["nvidia-h100"], ["cn-east"])
    assert problems == ["row 4: nvidia-h100 in any region is listed twice (also row 2); keep one of the two rows"]
    many = [{"deviceClass": "nvidia-h100", "region": f"r{i}", "devices": 1} for i in range(257)]
    _, problems = validate(many, ["nvidia-h100"], [f"r{i}" for i in range(257)])
    assert problems == ["the table must have at most 256 rows, not 257"]
    assert not any("spec." in p or "Input should" in p for p in problems)


def test_every_quota_of_the_namespace_is_shown_with_the_use_the_operator_counts_and_edited_apart(
        page: AppTest, cluster: Cluster) -> None:
    """README's examples/quota-team-a.yaml beside the demo's quota (demo-team-a): both apply (the operator's
    FleetSource.quotas joins every HeteroQuota of a namespace), so both are shown, each limit beside what the
    namespace's jobs hold under it (engine.capacity.fleet.holdings, quota_usage.used_under), each edited on its own."""
    quota(cluster, [{"deviceClass": "*", "region": "cn-east", "devices": 32}], name="demo-team-a")
    running(cluster, "small", "h100-a")  # 8 H100s in cn-east; the demo quota has no status.used yet
    at = page.run()
    assert not at.exception
    assert [h.value for h in at.subheader] == ["team-a/demo-team-a", "team-a/team-a"]
    demo, mine = at.dataframe[0].value, at.dataframe[2].value  # 1: demo-team-a's editor
    assert (list(demo["limit"]), list(demo["used"]), list(demo["free"])) == ([32], [8], [24])
    assert (list(mine["limit"]), list(mine["used"]), list(mine["free"])) == ([8], [8], [0])
    at.session_state["editor:team-a/demo-team-a"] = {"edited_rows": {0: {"devices": 48}}, "added_rows": [],
                                                     "deleted_rows": []}
    at.run()
    assert not at.exception and not at.error
    at.checkbox("confirm:demo-team-a").check().run()
    at.button("apply:demo-team-a").click().run()
    assert "Applied by local-admin." in at.success[0].value
    assert stored(cluster, "demo-team-a")["spec"]["limits"][0]["devices"] == 48
    assert stored(cluster)["spec"]["limits"][0]["devices"] == 8  # the other quota untouched


def test_an_unreadable_quota_shows_the_limit_the_operator_enforces(page: AppTest, cluster: Cluster) -> None:
    """A spec the operator cannot read (two limits for one class and region: kubectl accepts it, the CRD
    schema does not check it) admits nothing new: kube.convert.quota_limits enforces 0 devices for all."""
    twice = {"deviceClass": "nvidia-h100", "region": "*", "devices": 4}
    quota(cluster, [twice, twice], name="broken")
    running(cluster, "small", "h100-a")
    at = page.run()
    assert not at.exception
    assert any("cannot read this quota's spec" in e.value and "two limits" in e.value for e in at.error)
    broken = at.dataframe[0].value
    assert (list(broken["deviceClass"]), list(broken["limit"]), list(broken["used"])) == (["*"], [0], [8])
