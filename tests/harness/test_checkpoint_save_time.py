"""`status.checkpoint.last.saveSeconds` is the ranks' own save time (issue 33 item 7): it feeds the transfer
model's cost of a move, and counted the operator's downtime when the operator restarted while the ranks saved."""

from __future__ import annotations

import time
from typing import Any

import pytest

from heterojob.constants import ANNOTATION_CHECKPOINT_ACK, ANNOTATION_CHECKPOINT_REQUEST
from heterojob.sim.cluster.harness import OperatorRunner
from heterojob.api.times import timestamp
from tests.conftest import Cluster, eventually
from tests.harness.test_fault_sequences import asked_to_move
from tests.harness.test_migration import status

pytestmark = pytest.mark.harness


def test_a_checkpoint_saved_while_the_operator_was_down_records_the_ranks_save_time(cluster: Cluster,
                                                                                     emulator: Any) -> None:
    with OperatorRunner(emulator.kubeconfig):
        _, requested = asked_to_move(cluster)
    # the operator is down; the rank saves in 2 s and answers as the SDK does, saying when it saved
    ckpt = requested.metadata.annotations[ANNOTATION_CHECKPOINT_REQUEST]
    end = time.time()
    cluster.core.patch_namespaced_pod(requested.metadata.name, "team-a", {"metadata": {"annotations": {
        ANNOTATION_CHECKPOINT_ACK: f"{ckpt};10;s3://ckpt/{ckpt}/;size=4096;start={end - 2:.3f};end={end:.3f}"}}})
    time.sleep(5)  # ... and the operator comes back later
    with OperatorRunner(emulator.kubeconfig) as again:
        last = eventually(lambda: ((status(cluster, "mover").get("checkpoint") or {}).get("last") or {})
                          .get("id") == ckpt and status(cluster, "mover")["checkpoint"]["last"], timeout=20,
                          what="the checkpoint recorded")
        assert last["saveSeconds"] == 2.0, last  # the ranks' 2 s, not the 5 s and more the operator was away
        completed = timestamp(last["time"])
        assert completed is not None and completed <= end + 1, last  # when the ranks finished, not when it looked
        assert last["sizeBytes"] == 4096 and last["step"] == 10
    assert "Traceback" not in again.output
