"""The SDK: a real numpy training loop migrated mid-run ends where an uninterrupted run ends."""

from __future__ import annotations

import importlib.util
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from heterojob.constants import ANNOTATION_CHECKPOINT_ACK, ANNOTATION_MIGRATE
from heterojob_sdk import Checkpointer, PodClient, read_annotations
from heterojob.sim.cluster.nodes import node
from tests.conftest import Cluster, eventually

spec_ = importlib.util.spec_from_file_location("train_numpy", Path(__file__).parents[2] / "examples" / "train_numpy.py")
assert spec_ is not None and spec_.loader is not None
train_numpy = importlib.util.module_from_spec(spec_)
spec_.loader.exec_module(train_numpy)

STEPS = 400


def test_downward_api_annotations_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "annotations").write_text(
        'heterojob.io/node="h100-1"\nheterojob.io/checkpoint-request="g1-17"\nodd="say \\"hi\\""\n')
    assert read_annotations(tmp_path / "annotations") == {
        "heterojob.io/node": "h100-1", "heterojob.io/checkpoint-request": "g1-17", "odd": 'say "hi"'}


def env_of(pod: Any) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env if e.value is not None}


def checkpointer(cluster: Cluster, pod: Any, tmp_path: Path) -> Checkpointer:
    env = env_of(pod)
    return Checkpointer(directory=env["HETEROJOB_CHECKPOINT_DIR"], pod=env["HETEROJOB_POD_NAME"],
                        namespace=env["HETEROJOB_NAMESPACE"], podinfo=tmp_path / "no-downward-api",
                        api=PodClient(cluster.api.configuration.host, token="emulator"), poll_s=0.02, resume_from=env.get("HETEROJOB_RESUME_FROM"))


@pytest.mark.harness
def test_training_migrated_mid_run_ends_where_an_uninterrupted_run_ends(cluster: Cluster, operator: Any,
                                                                        tmp_path: Path) -> None:
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    cluster.create_job("fit", {
        "priority": "high", "replicas": {"min": 1}, "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
        "checkpoint": {"timeoutSeconds": 30, "storage": f"file://{tmp_path}/ckpt"},
        "template": {"spec": {"containers": [{"name": "main", "image": "train:cuda12"}]}}})
    [first] = eventually(lambda: cluster.pods("fit"), what="pod")
    cluster.set_pod_phase(first.metadata.name, "Running")
    eventually(lambda: (cluster.job("fit").get("status") or {}).get("phase") == "Running", what="Running")

    stop = threading.Event()
    out: dict[str, Any] = {}
    ckpt = checkpointer(cluster, first, tmp_path)
    worker = threading.Thread(target=lambda: out.update(a=train_numpy.train(STEPS, ckpt, stop, step_s=0.01)))
    worker.start()
    eventually(lambda: ckpt._last_poll > 0 and len(out) == 0 and ckpt, what="training under way")
    time.sleep(0.8)  # some 80 steps in
    cluster.custom.patch_namespaced_custom_object("heterojob.io", "v1alpha1", "team-a", "heterojobs", "fit",
                                                  {"metadata": {"annotations": {ANNOTATION_MIGRATE: "test"}}})
    new = eventually(lambda: [p for p in cluster.pods("fit") if p.metadata.labels["heterojob.io/generation"] == "2"],
                     timeout=20, what="the new pod")
    stop.set()  # the old pod is gone: its process ends
    worker.join(timeout=10)
    _, stopped_at, losses_a = out["a"]
    ack = eventually(lambda: (cluster.job("fit")["status"].get("checkpoint") or {}).get("last"), what="last")
    saved_step = ack["step"]
    assert 0 < saved_step < STEPS and stopped_at >= saved_step
    # the SDK reported the bytes save() wrote; the operator carried them into status (one rank: that figure)
    assert ack["sizeBytes"] == (Path(ack["uri"].removeprefix("file://")) / "state.npz").stat().st_size > 0
    assert ack["saveSeconds"] >= 0

    resumed = checkpointer(cluster, new[0], tmp_path)
    assert resumed.resume_from == ack["uri"]
    w_b, end_b, losses_b = train_numpy.train(STEPS, resumed)
    w_ref, end_ref, losses_ref = train_numpy.train(STEPS)
    assert end_b == end_ref == STEPS
    assert losses_b[0][0] == saved_step + 1  # continues from the checkpoint, not from step 1
    loss_at_save = dict(losses_a)[saved_step]
    assert losses_b[0][1] < losses_ref[0][1] / 10 and abs(losses_b[0][1] - loss_at_save) < loss_at_save * 2 + 0.1
    np.testing.assert_allclose(w_b, w_ref)  # the same weights as a run that never moved
    pods = cluster.pods("fit")
    assert all(ANNOTATION_CHECKPOINT_ACK not in (p.metadata.annotations or {}) for p in pods
               if p.metadata.labels["heterojob.io/generation"] == "2")
