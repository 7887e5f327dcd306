"""The SDK never raises into the training loop: an API server that refuses (403), fails (5xx), does not answer
in time or is not there at all is logged and retried with backoff; a `save` that raises likewise. Against a
stand-in API server (http.server) that answers what each test scripts."""

from __future__ import annotations

import http.server
import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from heterojob_sdk import ANNOTATION_CHECKPOINT_ACK, ANNOTATION_CHECKPOINT_SAVE_TIME, ApiError, Checkpointer, PodClient


class Script:
    """The answers to come, per method (status, delay); the last one repeats. Records what was asked."""

    def __init__(self) -> None:
        self.answers: dict[str, list[tuple[int, float]]] = {"GET": [(200, 0.0)], "PATCH": [(200, 0.0)]}
        self.asked: list[tuple[str, str, Any]] = []
        self.annotations: dict[str, str] = {}

    def next(self, method: str) -> tuple[int, float]:
        queue = self.answers[method]
        return queue.pop(0) if len(queue) > 1 else queue[0]


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            script.asked.append((self.command, self.path, body))
            status, delay = script.next(self.command)
            time.sleep(delay)
            if status == 200 and self.command == "PATCH":
                script.annotations.update(body["metadata"]["annotations"])
            payload = ({"metadata": {"name": "p", "annotations": dict(script.annotations)}} if status == 200 else
                       {"kind": "Status", "code": status, "message": f'pods "p" is forbidden: scripted {status}'})
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass  # the client gave up (timeout)

        do_GET = do_PATCH = _answer

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", script
    httpd.shutdown()
    httpd.server_close()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def requested(tmp_path: Path, wanted: str = "g1-7") -> Path:
    (tmp_path / "annotations").write_text(f'heterojob.io/checkpoint-request="{wanted}"\n')
    return tmp_path


def make(tmp_path: Path, url: str, clock: Clock, timeout_s: float = 2.0, **kw: Any) -> Checkpointer:
    return Checkpointer(directory="file:///ckpt/j", pod="p", namespace="ns", podinfo=tmp_path,
                        api=PodClient(url, token="t", timeout_s=timeout_s), poll_s=0.0, clock=clock, **kw)


@pytest.mark.parametrize("status", [403, 500, 503])
def test_a_refused_ack_is_logged_and_retried_with_backoff_and_training_goes_on(
        tmp_path: Path, server: tuple[str, Script], caplog: pytest.LogCaptureFixture, status: int) -> None:
    url, script = server
    script.answers["PATCH"] = [(status, 0.0), (status, 0.0), (200, 0.0)]
    clock, saves = Clock(), []
    ckpt = make(requested(tmp_path), url, clock)
    with caplog.at_level(logging.WARNING, logger="heterojob.sdk"):
        assert ckpt.maybe_checkpoint(10, lambda uri: saves.append(uri) or 64) == "file:///ckpt/j/g1-7/"
        assert ckpt.pending_ack == ("g1-7", "g1-7;10;file:///ckpt/j/g1-7/;size=64")
        assert f"HTTP {status}" in caplog.text and "trying again in 1s, training goes on" in caplog.text
        assert ("may not get/patch its own pod" in caplog.text) == (status == 403)
        for step in range(11, 20):  # within the backoff: nothing is sent
            assert ckpt.maybe_checkpoint(step, saves.append) is None
        assert [a[0] for a in script.asked] == ["PATCH"]
        clock.now += 1.0
        ckpt.maybe_checkpoint(20, saves.append)  # retried: refused again, now 2 s
        assert "trying again in 2s" in caplog.text and ckpt.pending_ack is not None
        clock.now += 1.0
        ckpt.maybe_checkpoint(21, saves.append)
        assert [a[0] for a in script.asked] == ["PATCH", "PATCH"]
        clock.now += 1.0
        ckpt.maybe_checkpoint(22, saves.append)
    assert ckpt.pending_ack is None and saves == ["file:///ckpt/j/g1-7/"]  # saved once, acknowledged at last
    assert script.annotations[ANNOTATION_CHECKPOINT_ACK] == "g1-7;10;file:///ckpt/j/g1-7/;size=64"
    sent = script.asked[-1][2]["metadata"]["annotations"]
    assert sent[ANNOTATION_CHECKPOINT_ACK] == script.annotations[ANNOTATION_CHECKPOINT_ACK]
    assert set(sent) == {ANNOTATION_CHECKPOINT_ACK, ANNOTATION_CHECKPOINT_SAVE_TIME}  # nothing else of the pod


def test_an_api_server_that_does_not_answer_in_time_costs_the_loop_one_timeout(
        tmp_path: Path, server: tuple[str, Script], caplog: pytest.LogCaptureFixture) -> None:
    url, script = server
    script.answers["PATCH"] = [(200, 1.0)]
    ckpt = make(requested(tmp_path), url, Clock(), timeout_s=0.2)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="heterojob.sdk"):
        assert ckpt.maybe_checkpoint(3, lambda uri: None) == "file:///ckpt/j/g1-7/"
    assert time.monotonic() - started < 0.9 and ckpt.pending_ack is not None
    assert "could not acknowledge checkpoint g1-7" in caplog.text and "timed out" in caplog.text


def test_without_an_api_server_the_loop_runs_and_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    ckpt = Checkpointer(directory="file:///ckpt/j", pod="p", namespace="ns", podinfo=requested(tmp_path), poll_s=0)
    with caplog.at_level(logging.WARNING, logger="heterojob.sdk"):
        assert ckpt.maybe_checkpoint(1, lambda uri: None) == "file:///ckpt/j/g1-7/"
        assert ckpt.maybe_checkpoint(2, lambda uri: None) is None
    assert "KUBERNETES_SERVICE_HOST" in caplog.text and ckpt.pending_ack is not None
    refused = PodClient("http://127.0.0.1:9", timeout_s=0.5)  # nothing listens on the discard port
    with pytest.raises(ApiError) as no_answer:
        refused.get_pod("ns", "p")
    assert no_answer.value.status == 0


def test_without_the_downward_api_file_a_refused_read_is_logged_not_swallowed(
        tmp_path: Path, server: tuple[str, Script], caplog: pytest.LogCaptureFixture) -> None:
    url, script = server
    script.answers["GET"] = [(403, 0.0), (403, 0.0), (500, 0.0), (200, 0.0)]
    script.annotations["heterojob.io/checkpoint-request"] = "g1-9"
    clock = Clock()
    ckpt = make(tmp_path / "absent", url, clock)
    with caplog.at_level(logging.INFO, logger="heterojob.sdk"):
        assert ckpt.requested() is None
        first = caplog.text
        assert "cannot read pod ns/p for checkpoint requests and there is no downward-API file" in first
        assert "HTTP 403" in first and "may not get/patch its own pod" in first
        clock.now += 1.0
        assert ckpt.requested() is None  # the same 403: not logged again so soon
        assert caplog.text.count("cannot read pod") == 1
        clock.now += 2.0
        assert ckpt.requested() is None  # another failure: logged
        assert caplog.text.count("cannot read pod") == 2 and "HTTP 500" in caplog.text
        clock.now += 4.0
        assert ckpt.requested() == "g1-9"
        assert "can be read again" in caplog.text


def test_a_lasting_refusal_is_logged_again_every_few_minutes(tmp_path: Path, server: tuple[str, Script],
                                                            caplog: pytest.LogCaptureFixture) -> None:
    url, script = server
    script.answers["GET"] = [(403, 0.0)]
    clock = Clock()
    ckpt = make(tmp_path / "absent", url, clock)
    with caplog.at_level(logging.WARNING, logger="heterojob.sdk"):
        for _ in range(12):
            ckpt.requested()
            clock.now += 61.0
    assert 2 <= caplog.text.count("cannot read pod") <= 4  # ~every 5 minutes over 12 minutes, not 12 times


def test_a_save_that_raises_is_logged_and_asked_again_later(tmp_path: Path, server: tuple[str, Script],
                                                           caplog: pytest.LogCaptureFixture) -> None:
    url, script = server
    clock, calls = Clock(), []

    def save(uri: str) -> int:
        calls.append(uri)
        if len(calls) == 1:
            raise OSError("disk full")
        return 8

    ckpt = make(requested(tmp_path), url, clock)
    with caplog.at_level(logging.WARNING, logger="heterojob.sdk"):
        assert ckpt.maybe_checkpoint(1, save) is None
        assert "raised; trying again in 1s" in caplog.text and "disk full" in caplog.text
        assert ckpt.maybe_checkpoint(2, save) is None and len(calls) == 1  # backing off
        clock.now += 1.0
        assert ckpt.maybe_checkpoint(3, save) == "file:///ckpt/j/g1-7/"
    assert script.annotations[ANNOTATION_CHECKPOINT_ACK] == "g1-7;3;file:///ckpt/j/g1-7/;size=8"


def test_the_ack_goes_with_when_this_rank_saved_and_the_operator_reads_its_save_time(
        tmp_path: Path, server: tuple[str, Script]) -> None:
    """`saveSeconds` is the ranks' own save (issue: an operator down while they saved counted its downtime in):
    the SDK writes when it began and finished saving beside its ack, and the operator's ack reader takes it."""
    from heterojob.engine.basics.acks import parse_ack, with_save_time

    url, script = server
    ckpt = make(requested(tmp_path), url, Clock())
    before = time.time()
    assert ckpt.maybe_checkpoint(10, lambda uri: time.sleep(0.2) or 64) == "file:///ckpt/j/g1-7/"
    saved = script.annotations[ANNOTATION_CHECKPOINT_SAVE_TIME]
    ack = with_save_time(parse_ack(script.annotations[ANNOTATION_CHECKPOINT_ACK], "g1-7"), saved, "g1-7")
    assert ack is not None and ack.start is not None and ack.end is not None
    assert before - 0.001 <= ack.start < ack.end <= time.time() + 0.001 and ack.end - ack.start >= 0.199  # ms
    assert with_save_time(parse_ack(script.annotations[ANNOTATION_CHECKPOINT_ACK], "g1-7"),
                          saved.replace("g1-7;", "g1-6;"), "g1-7").start is None  # another checkpoint's
