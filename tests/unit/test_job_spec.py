"""api/job_spec.py: a job's spec is parsed once while its content is unchanged, and a spec that changes (in
place, or under the same generation) is parsed again."""

from __future__ import annotations

import pytest

from heterojob.api import job_spec as module
from heterojob.api.common import SpecError
from heterojob.api.job_spec import job_spec


def _job(uid: str, generation: int, spec: object) -> dict[str, object]:
    return {"metadata": {"uid": uid, "generation": generation, "namespace": "ns", "name": uid}, "spec": spec}


SPEC = {"devices": [{"deviceClass": "nvidia-h100", "perReplica": 1}], "replicas": {"initial": 1},
        "template": {"spec": {"containers": [{"name": "main", "image": "train:1"}]}}}


def test_the_same_spec_is_parsed_once_and_a_changed_one_again(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = []
    real = module.parse_spec

    def counting(model: object, data: object, prefix: str = "spec") -> object:
        parsed.append(data)
        return real(model, data, prefix)  # type: ignore[arg-type]

    monkeypatch.setattr(module, "parse_spec", counting)
    first = job_spec(_job("u1", 1, SPEC))
    assert job_spec(_job("u1", 1, {**SPEC})) is first and len(parsed) == 1
    edited = {**SPEC, "priority": "high"}
    assert job_spec(_job("u1", 1, edited)).priority.value == "high"  # same generation, new content: parsed again
    assert job_spec(_job("u1", 2, edited)).priority.value == "high" and len(parsed) == 2  # equal: not again
    body = dict(edited)
    got = job_spec(_job("u2", 1, body))
    body["priority"] = "low"  # the caller's dict changed in place: not the one kept
    assert job_spec(_job("u2", 1, body)) is not got and job_spec(_job("u2", 1, body)).priority.value == "low"


def test_a_bad_spec_keeps_raising_its_problems() -> None:
    bad = {**SPEC, "replicas": {"initial": -1}}
    for _ in range(2):
        with pytest.raises(SpecError) as exc:
            job_spec(_job("u3", 1, bad))
        assert any("replicas" in str(p) for p in exc.value.problems)
