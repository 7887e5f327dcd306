"""A job deleted while its gang is made (controller/pods.py): nothing more is made for it once its deletion is
seen, and what was made goes at once (no half gang waits for the garbage collector); a pass on a body older than
the deletion (making missing ranks after the collector took the pods) asks the API server before it makes any."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from heterojob.api.common import parse_spec
from heterojob.api.job import HeteroJobSpec
from heterojob.controller.pods import Pods
from heterojob.controller.status import StatusWriter
from heterojob.engine.capacity.fleet import DeviceClass, Fleet, Node
from heterojob.kube.api import Kube
from heterojob.state.cache import Cache
from heterojob.state.job_status import read_status

SPEC = {"replicas": {"min": 2}, "devices": [{"deviceClass": "h100", "perReplica": 1}],
        "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}}
FLEET = Fleet(nodes={n: Node(n, {"topology.kubernetes.io/region": "east"}, {"nvidia.com/gpu": 8}) for n in ("a", "b")},
              classes={"h100": DeviceClass("h100", "nvidia.com/gpu")})


def _job() -> dict[str, Any]:
    return {"apiVersion": "heterojob.io/v1alpha1", "kind": "HeteroJob",
            "metadata": {"namespace": "team-a", "name": "train", "uid": "u-1", "generation": 1}, "spec": SPEC,
            "status": {"phase": "Admitted", "observedGeneration": 1, "placement": {
                "region": "east", "deviceClass": "h100", "replicas": 2, "perReplica": 1, "nodes": ["a", "b"],
                "generation": 1}}}


class FakeKube:
    """What `Pods.create` calls of a `Kube`; `during_create` runs as the gang's first object is created."""

    def __init__(self, job: dict[str, Any], during_create: Callable[[], None] = lambda: None) -> None:
        self.job: dict[str, Any] | None = job
        self.during_create = during_create
        self.written: dict[tuple[str, str, str], str] = {}
        self.remember = lambda key, digest: Kube.remember(self, key, digest)  # type: ignore[arg-type]
        self.made: list[str] = []
        self.deleted: list[str] = []
        self.status_writes = 0
        self.events: list[str] = []

    async def send(self, route: str, body: Any = None, **where: str) -> Any:
        return {}  # the access objects: created

    async def create(self, obj: Mapping[str, Any]) -> bool:
        self.during_create()
        self.during_create = lambda: None
        await asyncio.sleep(0)
        self.made.append(f"{obj['kind']}/{obj['metadata']['name']}")
        return True

    async def delete_pod(self, namespace: str, name: str) -> None:
        self.deleted.append(f"Pod/{name}")

    async def delete_service(self, wanted: Mapping[str, Any]) -> bool:
        self.deleted.append(f"Service/{wanted['metadata']['name']}")
        return True

    async def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.job

    async def job_pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return []

    async def patch_job_status(self, namespace: str, name: str, status: Mapping[str, Any],
                               resource_version: str | None = None) -> dict[str, Any] | None:
        self.status_writes += 1
        return self.job

    def post_event(self, job: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append(reason)


def _pods(kube: FakeKube) -> Pods:
    return Pods(kube, StatusWriter(kube), Cache(), lambda: FLEET, lambda _: None, lambda: None)  # type: ignore[arg-type]


def _create(pods: Pods, job: dict[str, Any], confirm: bool = False) -> None:
    asyncio.run(pods.create(job, parse_spec(HeteroJobSpec, SPEC), read_status(job), (0, 1), FLEET, confirm=confirm))


def test_a_gang_made_for_a_job_whose_deletion_is_seen_meanwhile_is_taken_back() -> None:
    job = _job()
    kube = FakeKube(job)
    pods = _pods(kube)
    kube.during_create = lambda: pods.deleted("u-1")  # its DELETED event arrives while the gang is made
    _create(pods, job)
    assert sorted(kube.made) == ["Pod/train-g1-0", "Pod/train-g1-1", "Service/train"]
    assert sorted(kube.deleted) == sorted(kube.made)  # no half gang, no Service left
    assert kube.status_writes == 0 and kube.events == []
    kube.made.clear()
    _create(pods, job)  # a pass still running on its last body makes nothing
    assert kube.made == []


def test_a_pass_making_missing_ranks_on_a_body_older_than_the_deletion_makes_nothing() -> None:
    job = _job()
    kube = FakeKube(job)
    kube.job = None  # deleted: the garbage collector took its pods, whose events started this pass
    pods = _pods(kube)
    _create(pods, job, confirm=True)
    assert kube.made == [] and pods.gone(job)
    kube.job = {**_job(), "metadata": {**_job()["metadata"], "uid": "u-2"}}  # another job of the name since
    old = {**_job(), "metadata": {**_job()["metadata"], "uid": "u-3"}}
    _create(pods, old, confirm=True)
    assert kube.made == []
    _create(pods, kube.job, confirm=True)  # the new one is made
    assert sorted(kube.made) == ["Pod/train-g1-0", "Pod/train-g1-1", "Service/train"]


def test_a_refusal_of_a_job_deleted_meanwhile_takes_back_what_was_made_and_writes_nothing() -> None:
    """The ServiceAccount collected with the deleted job: admission refuses the pods, the Service was made."""
    from kubernetes.client import ApiException

    job = _job()
    kube = FakeKube(job)
    pods = _pods(kube)
    made = kube.create

    async def refuse_pods(obj: Mapping[str, Any]) -> bool:
        if obj["kind"] == "Pod":
            kube.job = None
            raise ApiException(status=403, reason='serviceaccount "train-heterojob" not found')
        return await made(obj)

    kube.create = refuse_pods  # type: ignore[method-assign]
    _create(pods, job)
    assert kube.made == ["Service/train"] and "Service/train" in kube.deleted
    assert kube.status_writes == 0 and kube.events == []


def test_a_pass_its_jobs_deletion_overtook_leaves_nothing_of_the_job_in_the_cache() -> None:
    """Its DELETED event forgot the job while the pass awaited the API server; what the pass recorded after that
    (the holding its status says) must not keep the job's room taken for ever."""
    from heterojob.controller.reconcile import Controller
    from heterojob.engine.capacity.fleet import Allocation
    from heterojob.state.views import FleetSource

    key, job = "team-a/train", _job()

    async def scene() -> Controller:
        ctl = Controller(FakeKube(job), FleetSource(nodes=dict, classes=dict, regions=dict,  # type: ignore[arg-type]
                                                    foreign_usage=dict))
        ctl.known.fetched(key, {**job, "metadata": {**job["metadata"], "resourceVersion": "7"}})

        async def a_pass(namespace: str, name: str, body: Any, fresh: bool) -> bool:
            ctl.forget(key, "u-1")  # the DELETED event, handled meanwhile
            ctl.cache.entry(key).allocation = Allocation("nvidia.com/gpu", {"a": 1, "b": 1}, "team-a", "h100", "east")
            return False

        ctl.reconcile = a_pass  # type: ignore[method-assign]
        await ctl.reconcile_key(key)
        return ctl

    ctl = asyncio.run(scene())
    assert key not in ctl.cache.entries
