"""The simulated kubelet answers a checkpoint request as this SDK does (with the size), or as an older one."""

from __future__ import annotations

import time
from typing import Any

import kubernetes

from heterojob.constants import ANNOTATION_CHECKPOINT_ACK, ANNOTATION_CHECKPOINT_REQUEST
from heterojob.engine.execution.lifecycle import parse_ack
from heterojob.sim.cluster.kubelet import SIM_RANK_CHECKPOINT_BYTES, Kubelet


class Core:
    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    def patch_namespaced_pod(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        self.patches.append(body)


def pod(env: list[dict[str, str]]) -> dict[str, Any]:
    return {"metadata": {"name": "train-g1-0", "namespace": "team-a",
                         "annotations": {ANNOTATION_CHECKPOINT_REQUEST: "c7"}},
            "spec": {"containers": [{"name": "main", "env": env}]}}


def answer(env: list[dict[str, str]]) -> str:
    kubelet = Kubelet(kubernetes.client.ApiClient(), answer_checkpoints=True, checkpoint_delay=0)
    core = Core()
    kubelet.core = core  # type: ignore[assignment]
    kubelet._answer(pod(env), now=100.0)
    return str(core.patches[0]["metadata"]["annotations"][ANNOTATION_CHECKPOINT_ACK])


def test_the_ack_carries_the_rank_size_unless_an_older_sdk_is_played() -> None:
    ack = parse_ack(answer([]), "c7")
    assert ack is not None and ack.size_bytes == SIM_RANK_CHECKPOINT_BYTES and ack.uri.endswith("/c7/")
    # and when it began and finished saving (unix seconds), as the SDK says them (engine.basics.acks)
    assert ack.start is not None and ack.end is not None and ack.start <= ack.end and not ack.problem
    assert abs(ack.end - time.time()) < 60
    sized = parse_ack(answer([{"name": "HETEROJOB_SIM_CHECKPOINT_BYTES", "value": "1024"}]), "c7")
    assert sized is not None and sized.size_bytes == 1024
    old = answer([{"name": "HETEROJOB_SIM_CHECKPOINT_BYTES", "value": ""}])
    parsed = parse_ack(old, "c7")
    assert old.count(";") == 2 and parsed is not None and parsed.size_bytes is None
