"""The periodic re-read of Alertmanager's active alerts (alerts/sync.py, `AlertReceiver.sync`): a held firing
alert no longer listed is resolved, a listed one unknown here is taken; missing data never resolves.
Alerts are in the shape Alertmanager 0.25.0's webhook and API v2 give them (see test_alert_restore.py)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from heterojob.alerts.payload import Alert
from heterojob.alerts.receiver import AlertReceiver
from heterojob.alerts.sync import Held, plan
from heterojob.metrics import OperatorMetrics

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def alert(fingerprint: str, starts: str = "2026-11-23T04:00:01.500Z", status: str = "firing") -> Alert:
    return Alert.model_validate({"status": status, "labels": {"alertname": "HeteroJobGPUFatalXID", "Hostname": "g0"},
                                 "annotations": {"heterojob_action": "migrate-now"}, "startsAt": starts,
                                 "endsAt": "0001-01-01T00:00:00Z", "fingerprint": fingerprint})


def test_a_held_alert_no_longer_active_is_resolved_and_an_unknown_active_one_taken() -> None:
    held = {"a": Held(alert("a"), 1.0), "b": Held(alert("b"), 2.0)}
    p = plan(held, [alert("b"), alert("c")], set(), began=10.0, now=NOW)
    assert [(a.fingerprint, a.status, a.ends_at) for a in p.resolve] == [("a", "resolved", "2026-11-23T12:00:00.000000Z")]
    assert p.resolve[0].labels == held["a"].alert.labels and p.resolve[0].starts_at == held["a"].alert.starts_at
    assert [a.fingerprint for a in p.take] == ["c"] and p.kept == []


def test_a_new_episode_of_a_held_alert_is_taken_not_resolved() -> None:
    held = {"a": Held(alert("a"), 1.0)}
    later = alert("a", "2026-11-23T05:00:00.000Z")
    p = plan(held, [later], set(), began=10.0, now=NOW)
    assert p.resolve == [] and p.take == [later]


def test_missing_data_never_resolves() -> None:
    held = {"a": Held(alert("a"), 1.0), "late": Held(alert("late"), 10.0)}
    # heard after the read began: the list may predate its firing
    assert [a.fingerprint for a in plan(held, [], set(), began=10.0, now=NOW).resolve] == ["a"]
    assert plan(held, [], set(), began=10.0, now=NOW).kept == ["late"]
    # its entry was listed but unreadable; an unreadable entry without a fingerprint may be any of them
    assert plan(held, [], {"a"}, began=11.0, now=NOW).resolve[0].fingerprint == "late"
    assert plan(held, [], {""}, began=11.0, now=NOW).resolve == []


def test_the_receiver_resolves_what_alertmanager_no_longer_lists_and_a_later_listing_is_new_again() -> None:
    handled: list[tuple[str, str]] = []

    async def handle(a: Alert) -> None:
        handled.append((a.fingerprint, a.status))

    async def scenario() -> None:
        receiver = AlertReceiver(handle, None, OperatorMetrics())
        await receiver.restore([alert("a"), alert("b")])
        counts = await receiver.sync([alert("b")], set(), began=float("inf"))
        assert counts["resolved"] == 1 and handled[-1] == ("a", "resolved")
        assert await receiver.sync([alert("b")], set(), began=float("inf")) == {"resolved": 0, "kept": 0}
        # Alertmanager lists the same episode again (restarted, Prometheus re-sent it): taken again, not stale
        counts = await receiver.sync([alert("a"), alert("b")], set(), began=float("inf"))
        assert counts["new"] == 1 and handled[-1] == ("a", "firing")
        # a real resolve webhook after the sync's resolve changes nothing more than the resolve did
        await receiver._process(alert("a", status="resolved"))
        assert await receiver.sync([alert("b")], set(), began=float("inf")) == {"resolved": 0, "kept": 0}

    asyncio.run(scenario())
    assert handled.count(("a", "resolved")) == 2 and handled.count(("b", "firing")) == 1


def test_only_a_resolve_that_lifts_a_nodes_hold_says_so_so_the_waiting_jobs_are_looked_at_again() -> None:
    from heterojob.controller.alerts import AlertSymptoms

    symptoms = AlertSymptoms(None, None, lambda _: None, None)  # type: ignore[arg-type]  # node_alert uses none
    assert symptoms.node_alert("a", True, "migrate-now", "g0", "xid", "GPU-1") is False
    assert symptoms.node_alert("a", True, "migrate-now", "g0", "xid", "GPU-1") is False  # a repeat lifts nothing
    assert symptoms.node_alert("b", False, "migrate", "g1", "hot") is False  # never held
    assert symptoms.node_alert("a", False, "migrate-now", "g0", "xid", "GPU-1") is True
    assert symptoms.dead() == {} and symptoms.node_alert("a", False, "migrate-now", "g0", "xid") is False
