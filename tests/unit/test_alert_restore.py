"""Reading the firing alerts back from Alertmanager's API v2 at start (alerts/active.py, alerts/restore.py).

The fixture is Alertmanager 0.25.0's answer to `GET /api/v2/alerts` (Debian's prometheus-alertmanager, the
shape of api/v2/openapi.yaml `gettableAlerts`), hand-written after what that binary answered for alerts posted
to it: `startsAt` truncated to milliseconds in the sender's offset, `endsAt` the resolve time (not the
webhook's zero time), no `generatorURL` when empty, `status.state` active/suppressed with the silences and
inhibitions. The webhook that Alertmanager sent for the same alert is `WEBHOOK_ALERT` (nanoseconds).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from aiohttp import web

from heterojob.alerts.active import firing
from heterojob.alerts.payload import Alert, parse
from heterojob.alerts.receiver import AlertReceiver
from heterojob.alerts.restore import Restorer, RestoreError, read, shown
from heterojob.metrics import OperatorMetrics
from heterojob.sim.telemetry.prometheus import free_port

XID = {"alertname": "HeteroJobGPUFatalXID", "Hostname": "g0", "UUID": "GPU-1", "severity": "critical"}
WEBHOOK_ALERT = {"status": "firing", "labels": XID,
                 "annotations": {"summary": "GPU GPU-1 on g0: fatal XID 79", "heterojob_action": "migrate-now"},
                 "startsAt": "2026-11-23T12:00:00.123456789+08:00", "endsAt": "0001-01-01T00:00:00Z",
                 "generatorURL": "", "fingerprint": "56f68162160295ae"}


def v2(fingerprint: str, labels: dict[str, Any], *, state: str = "active", silenced: list[str] | None = None,
       inhibited: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    """One gettableAlert as Alertmanager 0.25.0 writes it."""
    return {"annotations": {"summary": "x"}, "endsAt": "2026-11-23T12:24:31.289Z", "fingerprint": fingerprint,
            "receivers": [{"name": "heterojob"}], "startsAt": "2026-11-23T04:00:01.500Z",
            "status": {"inhibitedBy": inhibited or [], "silencedBy": silenced or [], "state": state},
            "updatedAt": "2026-11-23T12:19:31.289Z", "labels": labels, **extra}


ANSWER_025: list[Any] = [
    {**v2("56f68162160295ae", XID), "annotations": WEBHOOK_ALERT["annotations"],
     "startsAt": "2026-11-23T12:00:00.123+08:00"},
    v2("4c07226785d7c631", {"alertname": "HeteroJobGPUOverheat", "Hostname": "g1"}, state="suppressed",
       silenced=["9cecfa5f-948a-4076-8c06-82033158ce55"]),
    v2("0a0b0c0d0e0f1011", {"alertname": "HeteroJobNPUUnhealthy", "node": "n1"}, state="suppressed",
       inhibited=["1122334455667788"]),
    {**v2("1a1b1c1d1e1f2021", {"alertname": "HeteroJobDeviceVanished", "node": "g2"}),
     "status": {"state": "active", "silencedBy": [], "inhibitedBy": [], "mutedBy": ["night"]}},  # newer versions
    {k: v for k, v in v2("2a2b2c2d2e2f3031", {"alertname": "A"}).items() if k != "startsAt"},
    v2("3a3b3c3d3e3f4041", {"alertname": "B", "gpu": 3}),
    v2("4a4b4c4d4e4f5051", {"alertname": "C"}, startsAt="2026-11-23T04:00:01"),  # no offset
    v2("5a5b5c5d5e5f6061", {"alertname": "D"}, state="exploded"),
    "not an alert",
    v2("6a6b6c6d6e6f7071", {"alertname": "HeteroJobGPUOverheat", "node": "g3"}, state="unprocessed",
       generatorURL="http://prometheus/graph?g0.expr=x"),
]


def test_the_v2_answer_maps_to_the_webhooks_alert_and_skips_what_the_webhook_would_not_send() -> None:
    alerts, skipped = firing(ANSWER_025)
    [webhook] = parse({"version": "4", "groupKey": "{}:{}", "status": "firing", "alerts": [WEBHOOK_ALERT]}).alerts
    assert [a.fingerprint for a in alerts] == ["56f68162160295ae", "6a6b6c6d6e6f7071"]
    assert alerts[0] == webhook and alerts[0].key == webhook.key  # one episode, whichever way it came
    assert alerts[1].status == "firing" and alerts[1].generator_url == "http://prometheus/graph?g0.expr=x"
    reasons = {s.index: s.reason for s in skipped}
    assert reasons[1].startswith("silenced by 9cecfa5f-948a-4076-8c06-82033158ce55")
    assert reasons[2].startswith("inhibited by 1122334455667788")
    assert reasons[3].startswith("muted by night")
    assert reasons[4].startswith("startsAt: Field required")
    assert reasons[5].startswith("labels.gpu: Input should be a valid string")
    assert reasons[6].startswith("startsAt: Input should have timezone info")
    assert reasons[7].startswith("status.state: Input should be")
    assert reasons[8].startswith("(entry): Input should be a valid dictionary")
    assert str(skipped[0]).startswith("[1] (4c07226785d7c631): silenced by")


def test_an_answer_that_is_not_a_list_is_an_error_naming_the_api() -> None:
    with pytest.raises(ValueError, match=r"expected a JSON array of alerts \(Alertmanager API v2 /api/v2/alerts\)"):
        firing({"status": "success", "data": []})  # e.g. the URL of a Prometheus


def test_webhook_episodes_are_kept_to_the_millisecond_as_the_api_writes_them() -> None:
    nanos = Alert.model_validate(WEBHOOK_ALERT)
    millis = Alert.model_validate({**WEBHOOK_ALERT, "startsAt": "2026-11-23T04:00:00.123Z"})
    assert nanos.starts_at == millis.starts_at and nanos.starts_at.microsecond == 123000
    later = Alert.model_validate({**WEBHOOK_ALERT, "startsAt": "2026-11-23T04:00:00.124Z"})
    assert later.starts_at > nanos.starts_at


def test_restored_alerts_and_webhooks_of_one_episode_are_handled_once() -> None:
    """Restore, then the webhook's repeat of the same episode: nothing new; its resolve: handled. And a
    webhook heard before the restore makes the restored copy a duplicate."""
    handled: list[tuple[str, str]] = []

    async def handle(a: Alert) -> None:
        handled.append((a.fingerprint, a.status))

    async def run() -> tuple[dict[str, int], dict[str, int], OperatorMetrics]:
        metrics = OperatorMetrics()
        receiver = AlertReceiver(handle, None, metrics)
        alerts, _ = firing(ANSWER_025)
        first = await receiver.restore(alerts)
        port = await receiver.start("127.0.0.1", 0)
        import aiohttp
        async with aiohttp.ClientSession() as session:
            for a in (WEBHOOK_ALERT, {**WEBHOOK_ALERT, "status": "resolved", "endsAt": "2026-11-23T04:10:00Z"}):
                note = {"version": "4", "groupKey": "{}:{}", "status": a["status"], "alerts": [a]}
                async with session.post(f"http://127.0.0.1:{port}/alerts", json=note) as r:
                    assert r.status == 200
        await receiver.queue.join()
        again = await receiver.restore(alerts)  # the resolved episode is stale; the other still known
        await receiver.stop()
        return first, again, metrics

    first, again, metrics = asyncio.run(run())
    assert first == {"new": 2, "duplicate": 0, "stale": 0, "deferred": 0}
    assert again == {"new": 0, "duplicate": 1, "stale": 1, "deferred": 0}
    assert handled == [("56f68162160295ae", "firing"), ("6a6b6c6d6e6f7071", "firing"),
                       ("56f68162160295ae", "resolved")]
    assert metrics.alerts_restored.labels("new")._value.get() == 2


def test_restored_alerts_are_handled_together_so_every_mark_comes_before_any_act() -> None:
    """The operator's handler marks a dead node at once, then writes to the jobs it names (which pokes them):
    a job leaving one restored dead node must not be placed on another one the restore has not marked yet."""
    steps: list[str] = []

    async def handle(a: Alert) -> None:
        steps.append(f"mark {a.labels['Hostname']}")
        await asyncio.sleep(0.01)  # the job's status write
        steps.append(f"act {a.labels['Hostname']}")

    alerts = [Alert.model_validate({**WEBHOOK_ALERT, "fingerprint": f"f{i}", "labels": {**XID, "Hostname": f"g{i}"}})
              for i in range(3)]
    asyncio.run(AlertReceiver(handle, None, OperatorMetrics()).restore(alerts))
    assert steps[:3] == ["mark g0", "mark g1", "mark g2"] and sorted(steps[3:]) == ["act g0", "act g1", "act g2"]


async def _serve(handler: Any) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_get("/am/api/v2/alerts", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://user:pw@127.0.0.1:{port}/am"


@pytest.mark.parametrize(("answer", "message"), [
    (lambda r: web.json_response(ANSWER_025), None),
    (lambda r: web.Response(status=404, text="404 page not found"),
     "has no such API (HTTP 404) (is it Alertmanager 0.16 or newer"),
    (lambda r: web.Response(status=500, text="boom"), "answered HTTP 500"),
    (lambda r: web.Response(text="<html>"), "the answer is not JSON"),
    ("slow", "timed out after 0.3 s"),
])
def test_read_asks_for_active_unsilenced_uninhibited_alerts_and_names_every_failure(answer: Any, message: str | None
                                                                                    ) -> None:
    seen: list[Any] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append((dict(request.query), request.headers.get("Authorization", "")))
        if answer == "slow":
            await asyncio.sleep(2)
            return web.json_response([])
        return answer(request)

    async def run() -> object:
        runner, url = await _serve(handler)
        try:
            return await asyncio.to_thread(read, url + "/", 0.3)
        finally:
            await runner.cleanup()

    if message is None:
        assert asyncio.run(run()) == ANSWER_025
        assert seen[0][0] == {"active": "true", "silenced": "false", "inhibited": "false"}
        assert seen[0][1].startswith("Basic ")  # credentials in the URL are basic auth
    else:
        with pytest.raises(RestoreError, match=message.replace("(", r"\(").replace(")", r"\)")):
            asyncio.run(run())


def test_an_absent_alertmanager_is_a_warning_naming_the_url_and_the_fix_then_a_retry(caplog: Any) -> None:
    fed: list[list[Alert]] = []

    async def feed(alerts: list[Alert]) -> dict[str, int]:
        fed.append(alerts)
        return {"new": len(alerts)}

    url = f"http://admin:hunter2@127.0.0.1:{free_port()}"

    async def run() -> Restorer:
        restorer = Restorer(url, 0.5, feed, retry_s=(0.05, 0.1))
        task = asyncio.get_running_loop().create_task(restorer.run())
        await asyncio.wait_for(restorer.first_done.wait(), 5)
        await asyncio.sleep(0.3)  # a few retries, none of them a crash
        assert not task.done()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return restorer

    with caplog.at_level(logging.INFO, logger="heterojob.alerts"):
        restorer = asyncio.run(run())
    assert not restorer.done and fed == []
    ours = [r for r in caplog.records if r.name == "heterojob.alerts"]
    warnings = [r.getMessage() for r in ours if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and len(ours) > 1  # once; the retries log at info
    assert f"Alertmanager at http://127.0.0.1:{url.rsplit(':', 1)[1]}: connection refused" in warnings[0]
    assert "--alertmanager-url" in warnings[0] and "hunter2" not in caplog.text
    assert shown("https://a:b@am.example:9093/x") == "https://am.example:9093/x"


@pytest.mark.parametrize(("url", "logged"), [
    ("https://a:b@am.example:9093/x", "https://am.example:9093/x"),
    ("http://u:p@[::1]:9093", "http://[::1]:9093"),  # IPv6 kept in brackets
    ("http://u:hunter2@/x", "http:///x"),  # no host: logged all the same
    ("http://u:hunter2@am:99999", "http://am:99999"),  # a port out of range
    ("http://am:9093", "http://am:9093"),
])
def test_a_logged_url_never_shows_its_credentials_nor_raises(url: str, logged: str) -> None:
    assert shown(url) == logged


@pytest.mark.parametrize("url", ["alertmanager:9093", "ftp://am:9093", "http://u:hunter2@/x",
                                 "http://u:hunter2@am:99999", "http://[::1", "http://am:0"])
def test_a_broken_alertmanager_url_is_refused_at_start_with_what_to_give(
        url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Before, a URL without a host or with a bad port crashed the startup handler's log line (TypeError,
    ValueError in `shown`), and one without a scheme was retried for ever with a warning."""
    from heterojob.cli import parser

    with pytest.raises(SystemExit):
        parser().parse_args(["operator", "run", "--alerts-port", "9094", "--alertmanager-url", url])
    err = capsys.readouterr().err
    assert "--alertmanager-url" in err and "alertmanager-operated.monitoring.svc:9093" in err
    assert "hunter2" not in err
    args = parser().parse_args(["operator", "run", "--alertmanager-url", " http://u:p@am.monitoring:9093 "])
    assert args.alertmanager_url == "http://u:p@am.monitoring:9093"


def test_an_alert_the_handler_cannot_take_yet_is_forgotten_and_handed_in_again() -> None:
    """The operator's handler raises NotReady while its controller is not built. Before, such an alert was
    dropped yet remembered as seen: the webhook's re-send of the same episode was a duplicate, never handled.
    Now its episode is forgotten (the re-send is new), and it is handed in again, de-duplicated again then:
    the latest state of its fingerprint wins."""
    from heterojob.alerts.receiver import NotReady

    ready = False
    handled: list[tuple[str, str]] = []

    async def handle(a: Alert) -> None:
        if not ready:
            raise NotReady("the controller is not running after 0.1 s")
        handled.append((a.fingerprint, a.status))

    firing_ = Alert.model_validate(WEBHOOK_ALERT)
    resolved = Alert.model_validate({**WEBHOOK_ALERT, "status": "resolved", "endsAt": "2026-11-23T04:10:00Z"})
    other = Alert.model_validate({**WEBHOOK_ALERT, "fingerprint": "f2", "labels": {**XID, "Hostname": "g2"}})

    async def run() -> tuple[dict[str, int], dict[str, int], int, OperatorMetrics]:
        nonlocal ready
        metrics = OperatorMetrics()
        receiver = AlertReceiver(handle, None, metrics, retry_s=3600)
        first = await receiver.restore([firing_, other])
        again = await receiver.restore([firing_])  # not remembered: new again (and deferred again)
        await receiver._process(resolved)  # a later state of the first heard (webhook) meanwhile, deferred too
        ready = True
        taken = await receiver.retry_deferred()
        await receiver.stop()
        return first, again, taken, metrics

    first, again, taken, metrics = asyncio.run(run())
    assert first == {"new": 2, "duplicate": 0, "stale": 0, "deferred": 2}
    assert again == {"new": 1, "duplicate": 0, "stale": 0, "deferred": 1}
    # each fingerprint once, in its latest state: the first one's firing is superseded by its resolve
    assert taken == 2 and sorted(handled) == [("56f68162160295ae", "resolved"), ("f2", "firing")]
    assert metrics.alerts_deferred._value.get() == 4


def test_deferred_alerts_are_retried_on_their_own_and_a_newer_state_heard_meanwhile_wins() -> None:
    from heterojob.alerts.receiver import NotReady

    ready = asyncio.Event()
    handled: list[tuple[str, str]] = []

    async def handle(a: Alert) -> None:
        if not ready.is_set():
            raise NotReady("not yet")
        handled.append((a.fingerprint, a.status))

    firing_ = Alert.model_validate(WEBHOOK_ALERT)
    resolved = Alert.model_validate({**WEBHOOK_ALERT, "status": "resolved", "endsAt": "2026-11-23T04:10:00Z"})

    async def run() -> None:
        receiver = AlertReceiver(handle, None, OperatorMetrics(), retry_s=0.05)
        await receiver.restore([firing_])
        ready.set()
        await receiver.restore([resolved])  # taken at once: the deferred firing is now stale
        await asyncio.sleep(0.2)  # the retry has run
        await receiver.stop()

    asyncio.run(run())
    assert handled == [("56f68162160295ae", "resolved")]


def test_a_symptom_counts_from_its_firing_episode_and_a_later_episode_is_a_new_firing() -> None:
    """`controller.alerts.episode`: Alertmanager names an alert by its label set's fingerprint and each
    firing episode by its startsAt (a firing that begins after the stored one resolved replaces it; one that
    overlaps is merged, keeping the earlier startsAt)."""
    from datetime import UTC, datetime

    from heterojob.api.job_status import AlertSymptom
    from heterojob.controller.alerts import episode, episode_key
    from heterojob.api.times import timestamp

    t1 = datetime(2026, 11, 23, 10, 0, 0, 123000, tzinfo=UTC)
    t2 = datetime(2026, 11, 23, 11, 0, 0, 456000, tzinfo=UTC)
    now = timestamp("2026-11-23T12:00:00Z") or 0.0
    assert episode(None, t1, now) == "2026-11-23T10:00:00Z"  # first heard: since its episode began
    assert episode(None, t2, timestamp("2026-11-23T10:30:00Z") or 0.0) == "2026-11-23T10:30:00Z"  # clock ahead
    known = AlertSymptom(fingerprint="f", since="2026-11-23T10:00:05Z", starts_at=episode_key(t1))
    assert known.starts_at == "2026-11-23T10:00:00.123Z"
    assert episode(known, t1, now) == "2026-11-23T10:00:05Z"  # the same episode heard again keeps its since
    assert episode(known, t2, now) == "2026-11-23T11:00:00Z"  # fired again: a new firing
    assert episode(AlertSymptom(fingerprint="f", since="x", starts_at=episode_key(t2)), t1, now) is None  # stale
    # an entry from before startsAt was kept: since is when the old episode was heard while it fired
    legacy = AlertSymptom(fingerprint="f", since="2026-11-23T10:05:00Z")
    assert episode(legacy, t1, now) == "2026-11-23T10:05:00Z"
    assert episode(legacy, t2, now) == "2026-11-23T11:00:00Z"


def test_an_alert_whose_handling_fails_with_an_api_error_is_handed_in_again_and_given_up_after_a_bound(
        caplog: pytest.LogCaptureFixture) -> None:
    """Before, only NotReady was deferred: a 503 from the API server while handling left the episode
    remembered, so every re-send of it (repeat_interval, the restore) was a duplicate and the job never got the
    symptom. Now a failed alert is forgotten and handed in again; a state that fails MAX_FAILURES times in a row
    is given up once (one warning, counted) and its re-sends are duplicates, so it cannot loop for ever."""
    from heterojob.alerts.receiver import MAX_FAILURES

    failures = {"56f68162160295ae": 1, "bad": 10**6}
    handled: list[str] = []

    async def handle(a: Alert) -> None:
        if failures.get(a.fingerprint, 0) > 0:
            failures[a.fingerprint] -= 1
            raise RuntimeError("(503) Reason: Service Unavailable")
        handled.append(a.fingerprint)

    once = Alert.model_validate(WEBHOOK_ALERT)
    bad = Alert.model_validate({**WEBHOOK_ALERT, "fingerprint": "bad", "labels": {**XID, "Hostname": "g9"}})

    async def run() -> tuple[dict[str, int], dict[str, int], int, OperatorMetrics]:
        metrics = OperatorMetrics()
        receiver = AlertReceiver(handle, None, metrics, retry_s=3600)
        first = await receiver.restore([once, bad])
        taken = await receiver.retry_deferred()  # the API answers again: the first is handled now
        for _ in range(MAX_FAILURES):
            await receiver.retry_deferred()
        assert not receiver._deferred  # given up: no more rounds
        again = await receiver.restore([once, bad])  # both remembered now: duplicates
        await receiver.stop()
        return first, again, taken, metrics

    with caplog.at_level(logging.INFO, logger="heterojob.alerts"):
        first, again, taken, metrics = asyncio.run(run())
    assert first["deferred"] == 2 and taken == 1 and handled == ["56f68162160295ae"]
    assert again == {"new": 0, "duplicate": 2, "stale": 0, "deferred": 0}
    assert failures["bad"] == 10**6 - MAX_FAILURES  # tried exactly MAX_FAILURES times
    assert metrics.alerts_given_up._value.get() == 1
    given_up = [r for r in caplog.records if "given up" in r.getMessage()]
    assert len(given_up) == 1 and "bad" in given_up[0].getMessage()
    # one line per round, not one per alert: the first round deferred two alerts in one line
    rounds = [r.getMessage() for r in caplog.records if "not taken yet" in r.getMessage()]
    assert rounds[0].startswith("2 alert(s)") and len(rounds) == MAX_FAILURES - 1  # the last try gave up
