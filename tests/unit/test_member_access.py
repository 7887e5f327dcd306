"""In a member cluster a job's access objects are owned by its Service there (`controller.pods._member_owner`):
the Service is made first and its uid read from that answer; a gang's missing ranks read it, and make it again when
it is gone, rather than give the running ranks up."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from kubernetes.client import ApiException

from heterojob.controller.pods import _member_owner
from heterojob.kube import manifests

JOB = {"apiVersion": "heterojob.io/v1alpha1", "kind": "HeteroJob",
       "metadata": {"namespace": "team-a", "name": "far", "uid": "job-uid"}}


class Member:
    def __init__(self, read: BaseException | None = None) -> None:
        self.read, self.created, self.reads = read, [], 0

    async def create_read(self, obj: Mapping[str, Any]) -> tuple[bool, Mapping[str, Any]]:
        self.created.append(obj)
        return True, {**obj, "metadata": {**obj["metadata"], "uid": f"svc-{len(self.created)}"}}

    async def send(self, call: str, **where: Any) -> Mapping[str, Any]:
        assert call == "read_namespaced_service" and where == {"namespace": "team-a", "name": "far"}
        self.reads += 1
        if self.read is not None:
            raise self.read
        return {"metadata": {"name": "far", "uid": "svc-old"}}


def owner(member: Member, objs: list[dict[str, Any]]) -> tuple[Any, ...]:
    return asyncio.run(_member_owner(member, JOB, objs))  # type: ignore[arg-type]  # what it calls, only


def test_a_new_gangs_service_is_made_first_and_owns_its_access_objects_with_no_read() -> None:
    svc = manifests.service(JOB)
    svc["metadata"].pop("ownerReferences")
    objs = [svc, {"kind": "Pod", "metadata": {"name": "far-g1-0"}}]
    member = Member()
    ref, refused, made = owner(member, objs)
    assert ref == {"apiVersion": "v1", "kind": "Service", "name": "far", "uid": "svc-1"} and not refused
    assert made == [svc] and [o["kind"] for o in objs] == ["Pod"] and member.reads == 0


def test_missing_ranks_read_the_service_and_make_it_again_when_it_is_gone() -> None:
    member = Member()
    assert owner(member, [])[0]["uid"] == "svc-old" and member.created == []
    gone = Member(read=ApiException(status=404))
    ref, refused, made = owner(gone, [])
    assert ref["uid"] == "svc-1" and not refused and [o["kind"] for o in made] == ["Service"]
    assert "ownerReferences" not in gone.created[0]["metadata"]  # no HeteroJob in the member to point at
    down = Member(read=ApiException(status=500))
    ref, refused, made = owner(down, [])
    assert ref is None and [o["kind"] for o, _ in refused] == ["Service"] and made == []
