"""The access objects a job's pods get (kube/access.py): a ServiceAccount unless the template names one, a Role on
the current gang's pods only, a RoleBinding to the pods' account; all owned by the HeteroJob."""

from __future__ import annotations

import copy
from typing import Any

from heterojob.kube import access

JOB = {"apiVersion": "heterojob.io/v1alpha1", "kind": "HeteroJob",
       "metadata": {"name": "fit", "namespace": "team-a", "uid": "u-1"}}


def pod(rank: int, **spec: Any) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": f"fit-g3-{rank}"}, "spec": {"containers": [], **spec}}


def test_a_job_gets_its_own_account_and_a_role_on_its_gang_only() -> None:
    pods = [pod(1)]
    objs = {o["kind"]: o for o in access.objects(JOB, pods, ["fit-g3-1", "fit-g3-0"])}
    assert pods[0]["spec"]["serviceAccountName"] == "fit-heterojob"
    assert objs["ServiceAccount"]["metadata"]["name"] == "fit-heterojob"
    assert objs["Role"]["rules"] == [{"apiGroups": [""], "resources": ["pods"],
                                      "resourceNames": ["fit-g3-0", "fit-g3-1"], "verbs": ["get", "patch"]}]
    assert objs["RoleBinding"]["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                              "name": "fit-heterojob"}
    assert objs["RoleBinding"]["subjects"] == [{"kind": "ServiceAccount", "name": "fit-heterojob",
                                                "namespace": "team-a"}]
    for obj in objs.values():
        assert obj["metadata"]["namespace"] == "team-a"
        assert obj["metadata"]["labels"]["heterojob.io/job"] == "fit"
        assert [(r["kind"], r["uid"], r["blockOwnerDeletion"]) for r in obj["metadata"]["ownerReferences"]] == [
            ("HeteroJob", "u-1", True)]


def test_a_template_that_names_its_account_keeps_it_and_that_account_is_bound() -> None:
    pods = [pod(0, serviceAccountName="s3-writer"), pod(1, serviceAccountName="s3-writer")]
    before = copy.deepcopy(pods)
    objs = {o["kind"]: o for o in access.objects(JOB, pods, ["fit-g3-0", "fit-g3-1"])}
    assert pods == before and "ServiceAccount" not in objs
    assert objs["RoleBinding"]["subjects"] == [{"kind": "ServiceAccount", "name": "s3-writer",
                                                "namespace": "team-a"}]


class _Api:
    """A Kube's `send` and `written`, over objects kept by name; the first create of a kind may be refused as
    existing (409: one left by an earlier job of the name)."""

    def __init__(self) -> None:
        from heterojob.kube.api import Kube

        self.calls: list[str] = []
        self.objects: dict[str, Any] = {}
        self.written: dict[tuple[str, str, str], str] = {}
        self.remember = lambda key, digest: Kube.remember(self, key, digest)  # type: ignore[arg-type]

    async def send(self, route: str, body: Any = None, **where: str) -> Any:
        from kubernetes.client import ApiException

        self.calls.append(route)
        kind = route.split("_namespaced_")[1]
        name = (body or {}).get("metadata", {}).get("name") or where.get("name")
        if route.startswith("create_"):
            if f"{kind}/{name}" in self.objects:
                raise ApiException(status=409, reason="AlreadyExists")
            self.objects[f"{kind}/{name}"] = body
        elif f"{kind}/{name}" not in self.objects:
            raise ApiException(status=404, reason="NotFound")
        else:
            self.objects[f"{kind}/{name}"] = {**self.objects[f"{kind}/{name}"], **{k: v for k, v in body.items()
                                                                                 if k != "metadata"}}
        return body


def test_a_jobs_next_gang_rewrites_only_its_role_and_a_refused_gang_writes_them_all_again() -> None:
    """A move or restart made six calls for the access objects (three creates refused as existing, three patches);
    what this operator wrote is remembered, so the next gang patches the Role's pod names and nothing else."""
    import asyncio

    api = _Api()

    def gang(generation: int) -> list[str]:
        return [f"fit-g{generation}-{r}" for r in range(2)]

    async def grant(generation: int) -> list[Any]:
        return await access.grant(api, JOB, [pod(0), pod(1)], gang(generation))  # type: ignore[arg-type]

    assert asyncio.run(grant(1)) == []
    assert sorted(api.calls) == ["create_namespaced_role", "create_namespaced_role_binding",
                                 "create_namespaced_service_account"]
    api.calls.clear()
    assert asyncio.run(grant(2)) == []
    assert api.calls == ["patch_namespaced_role"]
    assert api.objects["role/fit-heterojob"]["rules"][0]["resourceNames"] == gang(2)
    api.calls.clear()
    del api.objects["service_account/fit-heterojob"]  # deleted by hand: the gang is refused, then made again
    access.forget(api, JOB)  # type: ignore[arg-type]
    assert asyncio.run(grant(3)) == []
    assert "create_namespaced_service_account" in api.calls and "service_account/fit-heterojob" in api.objects
