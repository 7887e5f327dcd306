"""RBAC as the operator meets it, on both sites (tests/tier/conftest.py): what its own account may do, as `kubectl
auth can-i` answers it, and a RoleBinding naming a Role not made yet."""

from __future__ import annotations

import json

import kubernetes
import pytest

from tests.tier.conftest import Flow

pytestmark = pytest.mark.tier

# (`kubectl auth can-i` arguments, the answer under manifests/base/rbac-operator.yaml), as kube-apiserver v1.36.2
# answers them
CAN_I = [
    ("create pods -n {ns}", "yes"), ("delete pods -n {ns}", "yes"), ("create pods/eviction -n {ns}", "no"),
    ("patch heterojobs.heterojob.io/status -n {ns}", "yes"),
    ("create rolebindings.rbac.authorization.k8s.io -n {ns}", "yes"),
    ("list nodes", "yes"), ("create events -n {ns}", "yes"),
    ("create leases.coordination.k8s.io -n heterojob-system", "yes"),
    ("create leases.coordination.k8s.io -n {ns}", "no"), ("list secrets -n {ns}", "no"),
    ("get secrets -n heterojob-system", "no"), ("bind roles.rbac.authorization.k8s.io -n {ns}", "no"),
    ("escalate roles.rbac.authorization.k8s.io -n {ns}", "no"),
    ("delete nodes", "no"), ("get /healthz", "yes"),
]


def as_operator(flow: Flow) -> str:
    """A kubeconfig holding the operator's token only (a client certificate beside it would win)."""
    assert flow.site.operator_kubeconfig is not None
    return str(flow.site.operator_kubeconfig)


def test_access_reviews_answer_for_the_operators_account_as_rbac_does(flow: Flow) -> None:
    """What `kubectl auth can-i` asks (a SelfSubjectAccessReview), sent with the operator's token. (kubectl itself
    sends no bearer token to the emulator's plain-HTTP endpoint: docs/emulator.md, what the emulator does not do.)"""
    ns = flow.namespace("team")
    operator = kubernetes.config.new_client_from_config(config_file=as_operator(flow))
    reviews = kubernetes.client.AuthorizationV1Api(operator)
    answers = {}
    for query, _ in CAN_I:
        verb, what, *rest = query.format(ns=ns).split()
        if what.startswith("/"):
            spec: dict[str, object] = {"nonResourceAttributes": {"verb": verb, "path": what}}
        else:
            resource, _, sub = what.partition("/")
            plural, _, group = resource.partition(".")
            spec = {"resourceAttributes": {"verb": verb, "resource": plural, "group": group, "subresource": sub,
                                           "namespace": rest[1] if rest else ""}}
        answers[query] = "yes" if reviews.create_self_subject_access_review({"spec": spec}).status.allowed else "no"
    assert answers == dict(CAN_I)
    who = kubernetes.client.AuthenticationV1Api(operator).create_self_subject_review({})
    assert who.status.user_info.username == "system:serviceaccount:heterojob-system:heterojob-operator"
    operator.close()


def test_a_rolebinding_naming_a_role_not_made_yet_is_refused_without_bind(flow: Flow) -> None:
    """What every job's first gang met on a real cluster: the operator holds no `bind`, so the API server reads the
    Role a binding names, and refuses the binding while that Role is not there; once it is, the binding passes."""
    ns = flow.namespace("team")
    operator = kubernetes.config.new_client_from_config(config_file=as_operator(flow))
    rbac = kubernetes.client.RbacAuthorizationV1Api(operator)
    binding = {"metadata": {"name": "early"}, "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "later"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}]}
    with pytest.raises(kubernetes.client.ApiException) as refused:
        rbac.create_namespaced_role_binding(ns, binding)
    assert refused.value.status == 404
    assert json.loads(refused.value.body)["message"] == 'rolebindings.rbac.authorization.k8s.io "later" not found'
    rbac.create_namespaced_role(ns, {"metadata": {"name": "later"}, "rules": [
        {"apiGroups": [""], "resources": ["pods"], "resourceNames": ["p"], "verbs": ["get"]}]})
    rbac.create_namespaced_role_binding(ns, binding)
    operator.close()
