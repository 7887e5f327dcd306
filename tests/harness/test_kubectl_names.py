"""Real kubectl (v1.32, installed) against the emulator's discovery: the singular name names one resource.

With the category `heterojob` equal to HeteroJob's singular name, kubectl expands `heterojob` as the
category and answers `error: you must specify only one resource` to `kubectl get heterojob NAME`
(reproduced here with the CRDs as they were)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from heterojob.sim.cluster.harness import Emulator
from tests.conftest import Cluster
from tests.harness.test_harness_lifecycle import job_spec

pytestmark = [pytest.mark.harness,
              pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")]


def kubectl(emulator: Emulator, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", *args], env={**os.environ, "KUBECONFIG": str(emulator.kubeconfig)},
                          capture_output=True, text=True, timeout=60)


def test_get_and_describe_by_the_singular_name(emulator: Emulator, cluster: Cluster) -> None:
    cluster.seed([])
    cluster.create_job("demo", job_spec())
    got = kubectl(emulator, "get", "heterojob", "demo", "-n", "team-a", "-o", "name")
    assert got.returncode == 0 and got.stdout.strip() == "heterojob.heterojob.io/demo", got.stderr
    assert kubectl(emulator, "get", "hj", "demo", "-n", "team-a", "-o", "name").returncode == 0
    described = kubectl(emulator, "describe", "heterojob", "demo", "-n", "team-a")
    assert described.returncode == 0 and "Kind:         HeteroJob" in described.stdout, described.stderr
