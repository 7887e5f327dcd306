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
