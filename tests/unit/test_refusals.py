"""What a refused create means (issue 33, items 2, 3 and 8a): a refusal the cluster itself clears (a missing
ServiceAccount, a quota) backs off and retries as Kubernetes' ReplicaSet and Job controllers do; a policy that
refuses the pod as written fails the job until its spec is edited; a 409 is this job's object only when its
controller is this job."""

from __future__ import annotations

from heterojob.api.job import Phase
from heterojob.engine.execution.lifecycle import Action, after_edit
from heterojob.kube.api import foreign
from heterojob.kube.refusals import classify

# kube-apiserver v1.32's words (plugin/pkg/admission/serviceaccount, pod-security-admission, resourcequota)
NO_DEFAULT_ACCOUNT = ('pods "train-g1-0" is forbidden: error looking up service account team-a/default: '
                      'serviceaccount "default" not found')
NO_ACCOUNT_OLD = ('pods "train-g1-0" is forbidden: service account team-a/default was not found, retry after the '
                  'service account is created')
POD_SECURITY = ('pods "train-g1-0" is forbidden: violates PodSecurity "baseline:latest": privileged (container '
                '"main" must not set securityContext.privileged=true)')


def test_a_missing_service_account_is_transient_a_pod_security_refusal_is_not() -> None:
    for message in (NO_DEFAULT_ACCOUNT, NO_ACCOUNT_OLD,
                    'pods "x" is forbidden: error looking up service account team-a/trainer: serviceaccount '
                    '"trainer" not found'):
        verdict = classify(403, message)
        assert not verdict.permanent and verdict.message == message
    assert classify(403, POD_SECURITY).permanent
    assert classify(403, 'admission webhook "policy.example.com" denied the request: no latest tags').permanent
    assert not classify(403, 'pods "x" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, '
                             'limited: pods=1').permanent
    assert not classify(403, 'pods "x" is forbidden: User "system:serviceaccount:heterojob-system:heterojob" '
                             'cannot create resource "pods" in API group "" in the namespace "team-a"').permanent
    assert not classify(403, 'services "train" is forbidden: User "system:serviceaccount:heterojob-system:heterojob" '
                             'cannot get resource "services" in API group "" in the namespace "team-a"').permanent
    assert not classify(403, 'pods "x" is forbidden: unable to create new content in namespace team-a because it '
                             'is being terminated').permanent
    assert classify(422, 'Pod "x" is invalid: spec.containers[0].env[0].name: Invalid value').permanent
    assert not classify(500, "etcdserver: request timed out").permanent
    assert classify(None, "").message == "no answer"


def _obj(uid: str | None, deleting: bool = False) -> dict[str, object]:
    meta: dict[str, object] = {"name": "train", "namespace": "team-a"}
    if uid is not None:
        meta["ownerReferences"] = [{"apiVersion": "heterojob.io/v1alpha1", "kind": "HeteroJob", "name": "train",
                                    "uid": uid, "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"kind": "Service", "metadata": meta}


def test_a_409_is_this_jobs_object_only_when_its_controller_is_this_job() -> None:
    assert foreign(_obj("new"), _obj("new")) is None  # made by an earlier pass: idempotent
    old = foreign(_obj("new"), _obj("old"))  # an earlier HeteroJob of the name, awaiting garbage collection
    assert old is not None and "uid old" in old and "created once it is gone" in old
    assert "no controller" in (foreign(_obj("new"), _obj(None)) or "")  # someone else's Service of the name
    assert "being deleted" in (foreign(_obj("new"), _obj("new", deleting=True)) or "")
    # a member cluster: objects are made without an owner (the HeteroJob is not there)
    assert foreign(_obj(None), _obj(None)) is None
    assert foreign(_obj(None), _obj(None, deleting=True)) is not None


def test_an_edit_revives_a_job_whose_pods_were_refused_for_good() -> None:
    revived = after_edit(Phase.FAILED, "PodRejected", spec_valid=True)
    assert revived is not None and revived.action == Action.REVALIDATED and revived.reason == "SpecEdited"
    assert after_edit(Phase.FAILED, "PodRejected", spec_valid=False) is None  # refused as InvalidSpec instead
    assert after_edit(Phase.FAILED, "BackoffLimitExceeded", spec_valid=True) is None  # ran and failed: stays
    assert after_edit(Phase.RUNNING, None, spec_valid=True) is None
