"""What a training pod may do: acknowledge checkpoints on its own gang's pods, and nothing else.

The SDK (`heterojob_sdk`) reads its pod and writes the ack annotation with the pod's service account token.
For each job in the operator's own cluster the operator keeps, owned by the HeteroJob (garbage-collected with it):

- a ServiceAccount `<job>-heterojob`, which the gang's pods run as, unless the template names its own account
  (`serviceAccountName`: kept, e.g. for a cloud identity that writes the checkpoints; that account is bound then);
- a Role `<job>-heterojob` allowing `get` and `patch` on `pods` with `resourceNames` = the pods of the current
  generation's gang (rewritten when a new gang is made, so an old gang's names lapse);
- a RoleBinding `<job>-heterojob` binding that Role to the account.

The operator may grant only what it holds (RBAC's escalation check): its ClusterRole has `get` and `patch` on pods
(manifests/base/rbac-operator.yaml). In a member cluster, where the HeteroJob is not, the same objects are owned by
the job's headless Service there (`controller.pods`), so the member's garbage collector takes them with it; the
manager's account there holds the same rights in each job namespace (manifests/multicluster/member.yaml).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes.client import ApiException

from heterojob.constants import LABEL_JOB, LABEL_MANAGED_BY, MANAGED_BY
from heterojob.kube import manifests
from heterojob.kube.api import Kube

RBAC_GROUP = "rbac.authorization.k8s.io"
VERBS = ("get", "patch")  # on the gang's own pods: the SDK reads its pod and writes its ack annotation


def name_for(job: str) -> str:
    """The ServiceAccount, Role and RoleBinding of a job (a job name is a DNS label: this fits every limit)."""
    return f"{job}-heterojob"


def objects(job: Mapping[str, Any], pods: Sequence[dict[str, Any]], gang: Sequence[str],
            owner: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The ServiceAccount (unless the template names an account), Role and RoleBinding that let `gang` (the pod
    names of the current generation) acknowledge; sets `pods`' serviceAccountName to the job's account (pure).
    `owner`: their owner reference (default: the HeteroJob's)."""
    meta = job["metadata"]
    name, namespace = name_for(meta["name"]), meta["namespace"]
    common = {"namespace": namespace, "labels": {LABEL_JOB: meta["name"], LABEL_MANAGED_BY: MANAGED_BY},
              "ownerReferences": [dict(owner) if owner is not None else manifests.owner_reference(job)]}
    named = {(p.get("spec") or {}).get("serviceAccountName") or (p.get("spec") or {}).get("serviceAccount")
             for p in pods}
    account = next(iter(named)) if len(named) == 1 and None not in named else None
    out: list[dict[str, Any]] = []
    if account is None:
        account = name
        for pod in pods:
            pod["spec"]["serviceAccountName"] = name
        out.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, **common}})
    out.append({"apiVersion": f"{RBAC_GROUP}/v1", "kind": "Role", "metadata": {"name": name, **common},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "resourceNames": sorted(gang),
                           "verbs": list(VERBS)}]})
    out.append({"apiVersion": f"{RBAC_GROUP}/v1", "kind": "RoleBinding", "metadata": {"name": name, **common},
                "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]})
    return out


async def grant(kube: Kube, job: Mapping[str, Any], pods: Sequence[dict[str, Any]], gang: Sequence[str],
                owner: Mapping[str, Any] | None = None) -> list[tuple[dict[str, Any], BaseException]]:
    """Create or update the job's access objects before its pods (the ServiceAccount must exist first: admission
    refuses a pod naming a missing one); the object refused and why, else []. `owner`: as `objects`'."""
    objs = objects(job, pods, gang, owner)
    # The account and the Role at once, the RoleBinding after them: an operator without the `bind` verb may bind
    # only a Role that exists (RBAC's escalation check reads the Role the binding names: 404 while it is not
    # there yet); a binding may name an account made a moment later.
    first = [o for o in objs if o["kind"] != "RoleBinding"]
    for batch in (first, [o for o in objs if o["kind"] == "RoleBinding"]):
        results = await asyncio.gather(*(_ensure(kube, obj) for obj in batch), return_exceptions=True)
        for obj, result in zip(batch, results, strict=True):
            if isinstance(result, asyncio.CancelledError):
                raise result
            if isinstance(result, BaseException):  # the caller treats it as a refusal of the gang
                return [(obj, result)]
    return []


def forget(kube: Kube, job: Mapping[str, Any]) -> None:
    """Write the job's access objects again at its next gang, whatever was written before (a gang was refused:
    one of them may be gone, e.g. its ServiceAccount deleted by hand)."""
    meta = job["metadata"]
    for kind in ("ServiceAccount", "Role", "RoleBinding"):
        kube.written.pop((kind, meta["namespace"], name_for(meta["name"])), None)


async def _ensure(kube: Kube, obj: dict[str, Any]) -> None:
    """Create `obj`; when it exists, write what this gang needs into it (the rules or subjects, and this job as
    its owner: one left by an earlier job of the same name, not yet collected, is taken over rather than lost).
    What this operator wrote last is remembered (`Kube.written`): the same object again is not written (a job's
    account and binding across its gangs), and one it made is patched without a create refused first (the Role
    of a new gang): a job's next gang costs one call, not six."""
    meta = obj["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    create, patch = {  # the calls that create the kind and write into one that exists
        "ServiceAccount": ("create_namespaced_service_account", "patch_namespaced_service_account"),
        "Role": ("create_namespaced_role", "patch_namespaced_role"),
        "RoleBinding": ("create_namespaced_role_binding", "patch_namespaced_role_binding"),
    }[obj["kind"]]
    key = (obj["kind"], namespace, name)
    digest = hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()
    last = kube.written.get(key)
    if last == digest:
        return
    body: dict[str, Any] = {"metadata": {"labels": meta["labels"], "ownerReferences": meta["ownerReferences"]}}
    for field in ("rules", "subjects"):
        if field in obj:
            body[field] = obj[field]
    made = last is not None  # by this operator, for this job: written into, not created again
    if not made:
        try:
            await kube.send(create, obj, namespace=namespace)
            kube.remember(key, digest)
            return
        except ApiException as exc:
            if exc.status != 409:
                raise
    try:
        await kube.send(patch, body, namespace=namespace, name=name)
    except ApiException as exc:
        if exc.status != 404 or not made:
            raise
        await kube.send(create, obj, namespace=namespace)  # gone since this operator made it
    kube.remember(key, digest)
