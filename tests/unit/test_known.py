"""`controller.known`: which watch events start a pass, and which body a pass reads, on plain data."""

from __future__ import annotations

import asyncio
from typing import Any

from heterojob.controller.known import Known, as_written, defaulted, merged
from heterojob.controller.status import STATUS_SCHEMA

KEY = "ns/job"


def body(rv: str, status: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "job", "resourceVersion": rv, "generation": 1, **meta},
            "spec": {"replicas": {"min": 1}}, "status": status or {}}


def in_pass(known: Known, read: dict[str, Any], step: Any, settled: bool) -> bool:
    """Run `step(known)` as the job's own pass on `read` (in a task, as the work queue runs a pass); what
    `end` answers (another pass?)."""
    async def run() -> bool:
        token = known.begin(KEY, read)
        step(known)
        return known.end(KEY, token, settled)
    return asyncio.run(run())


def test_a_merge_patch_deletes_merges_and_replaces() -> None:
    assert merged({"a": 1, "b": {"c": 1, "d": 2}, "l": [1]}, {"a": None, "b": {"c": 3}, "l": [2]}) == \
        {"b": {"c": 3, "d": 2}, "l": [2]}


def test_an_answer_is_as_written_with_the_crds_defaults_and_not_with_anyone_elses_write() -> None:
    base = body("5")
    sent = {"phase": "Admitted", "scheduling": {"attainedDeviceSeconds": 0.0, "promoted": False}}
    # the API server fills the schema's defaults (status.restarts, status.scheduling.accountedGeneration)
    answer = {**body("9"), "status": defaulted(sent, STATUS_SCHEMA)}
    assert answer["status"]["restarts"] == 0 and answer["status"]["scheduling"]["accountedGeneration"] == 0
    assert as_written(base, sent, answer, STATUS_SCHEMA)
    assert not as_written(base, sent, answer)  # without the schema the defaults look like someone else's write
    edited = {**answer, "spec": {"replicas": {"min": 2}}}
    assert not as_written(base, sent, edited, STATUS_SCHEMA)
    by_hand = {**answer, "status": {**answer["status"], "message": "written by hand"}}
    assert not as_written(base, sent, by_hand, STATUS_SCHEMA)
    annotated = {**answer, "metadata": {**answer["metadata"], "annotations": {"a": "b"}}}
    assert not as_written(base, sent, annotated, STATUS_SCHEMA)


def test_the_echo_of_a_settled_write_starts_no_pass_and_the_pass_reads_the_answer() -> None:
    known = Known()
    assert known.event(KEY, body("5"))  # a new version: a pass looks
    assert not known.event(KEY, body("5"))  # the same again (a watch's listing and its ADDED): asked already
    read = known.read(KEY)
    assert read is not None and read["metadata"]["resourceVersion"] == "5"
    sent = {"phase": "Admitted"}
    answer = body("9", sent)

    def step(k: Known) -> None:
        k.written(KEY, answer, read, sent)
        assert not k.event(KEY, answer)  # the echo while the pass runs: its end decides

    assert not in_pass(known, read, step, settled=True)
    assert not known.event(KEY, answer)  # the echo after the pass
    assert known.read(KEY) == answer
    assert known.event(KEY, body("10", sent))  # anything newer does start a pass


def test_a_write_the_pass_does_not_settle_is_looked_at_once_more() -> None:
    known = Known()
    known.event(KEY, body("5"))
    read = known.read(KEY)
    assert read is not None
    sent = {"phase": "Running"}
    answer = body("9", sent)
    assert in_pass(known, read, lambda k: k.written(KEY, answer, read, sent), settled=False)
    assert not in_pass(known, answer, lambda k: None, settled=False)  # that pass wrote nothing: acted on it
    assert not known.event(KEY, answer)


def test_an_answer_with_someone_elses_write_in_it_does_not_settle() -> None:
    known = Known()
    known.event(KEY, body("5"))
    read = known.read(KEY)
    assert read is not None
    sent = {"phase": "Admitted"}
    answer = body("9", {**sent, "message": "written by hand"})  # their write landed between our read and ours
    assert in_pass(known, read, lambda k: k.written(KEY, answer, read, sent), settled=True)
    known.event(KEY, body("7", {"message": "written by hand"}))  # their write's event comes after our answer
    assert known.read(KEY) == answer  # older than what is known: the next pass reads the answer


def test_a_write_made_outside_the_jobs_own_pass_is_followed_by_a_pass() -> None:
    known = Known()
    known.event(KEY, body("5"))
    read = known.read(KEY)
    assert read is not None
    assert not in_pass(known, read, lambda k: None, settled=False)
    sent = {"checkpoint": {"pending": {"id": "g1-1"}}}
    answer = body("9", sent)
    known.written(KEY, answer, read, sent)  # e.g. another job's pass asking this one for a checkpoint
    assert known.event(KEY, answer)


def test_a_later_step_of_the_pass_writes_onto_the_answer_to_an_earlier_one() -> None:
    known = Known()
    known.event(KEY, body("5"))
    read = known.read(KEY)
    assert read is not None
    first, second = {"phase": "Admitted"}, {"conditions": [{"type": "PodsCreated", "status": "True"}]}
    a1 = body("9", first)
    a2 = body("11", {**first, **second})

    def step(k: Known) -> None:
        k.written(KEY, a1, read, first)
        base = k.base(KEY, read)  # the step holds `read`: it writes onto the first answer
        assert base == a1
        k.written(KEY, a2, base, second)

    assert not in_pass(known, read, step, settled=True)
    assert not known.event(KEY, a1) and not known.event(KEY, a2)


def test_a_resync_reads_the_api_server_and_a_version_that_is_no_integer_turns_the_cache_off() -> None:
    known = Known()
    known.event(KEY, body("5"))
    known.stale(KEY)
    assert known.read(KEY) is None
    known.fetched(KEY, body("6"))
    assert known.read(KEY) == body("6")
    assert known.event("ns/other", body("abc"))
    assert known.read("ns/other") is None
    assert known.event("ns/other", body("abc"))  # every event starts a pass that reads the API server
