"""Fixtures: the API emulator (its own process, once per session, reset per test) and the operator."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes
import pytest

from heterojob.constants import GROUP, LABEL_JOB, VERSION
from heterojob.sim.cluster.harness import Emulator, OperatorRunner, apply, seed


@pytest.fixture(scope="session")
def emulator() -> Iterator[Emulator]:
    with Emulator() as emu:
        yield emu


@pytest.fixture
def api(emulator: Emulator) -> Iterator[kubernetes.client.ApiClient]:
    emulator.reset()
    client = emulator.client()
    yield client
    client.close()


@pytest.fixture
def cluster(api: kubernetes.client.ApiClient) -> Cluster:
    # CRDs first, before any operator starts: a CRD created while Kopf starts its CRD watch can be
    # missed, and the operator then never watches HeteroJobs (a flaky test, seen once in a few runs)
    from heterojob.api import crds

    apply(api, [crds.crd(r) for r in crds.RESOURCES])
    return Cluster(api)


@pytest.fixture
def operator(emulator: Emulator, cluster: Cluster) -> Iterator[OperatorRunner]:
    """The operator running against the (already seeded, by the test) emulator."""
    with OperatorRunner(emulator.kubeconfig) as runner:
        yield runner


class Cluster:
    """What a test does with the cluster, through the real `kubernetes` client."""

    def __init__(self, api: kubernetes.client.ApiClient) -> None:
        self.api = api
        self.core = kubernetes.client.CoreV1Api(api)
        self.custom = kubernetes.client.CustomObjectsApi(api)

    def seed(self, nodes: list[dict[str, Any]], namespaces: tuple[str, ...] = ("team-a",)) -> None:
        seed(self.api, namespaces=namespaces, nodes=nodes)

    def create_job(self, name: str, spec: dict[str, Any], namespace: str = "team-a") -> dict[str, Any]:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "HeteroJob",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec}
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "heterojobs", body)

    def job(self, name: str, namespace: str = "team-a") -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "heterojobs", name)

    def delete_job(self, name: str, namespace: str = "team-a") -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "heterojobs", name)

    def pods(self, job: str, namespace: str = "team-a") -> list[kubernetes.client.V1Pod]:
        items = self.core.list_namespaced_pod(namespace, label_selector=f"{LABEL_JOB}={job}").items
        return sorted(items, key=lambda p: p.metadata.name)

    def set_pod_phase(self, name: str, phase: str, namespace: str = "team-a", exit_code: int | None = None) -> None:
        status: dict[str, Any] = {"phase": phase}
        if exit_code is not None:
            status["containerStatuses"] = [{"name": "main", "ready": False, "restartCount": 0, "image": "x",
                                            "imageID": "", "state": {"terminated": {"exitCode": exit_code,
                                                                                    "reason": "Error"}}}]
        self.core.patch_namespaced_pod_status(name, namespace, {"status": status})

    def events(self, job: str, namespace: str = "team-a") -> list[kubernetes.client.CoreV1Event]:
        return [e for e in self.core.list_namespaced_event(namespace).items if e.involved_object.name == job]


def eventually(check: Callable[[], Any], timeout: float = 15.0, interval: float = 0.05, what: str = "") -> Any:
    """Poll `check` until it returns something truthy (and return that), or fail with its last result."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or check}; last: {last!r}")
