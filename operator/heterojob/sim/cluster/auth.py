"""Service account tokens and RBAC, as kube-apiserver v1.32 applies them to what pods send.

Authentication. `POST /api/v1/namespaces/NS/serviceaccounts/SA/token` (TokenRequest, what the kubelet asks for a
pod's projected token and `kubectl create token` sends) issues a token for `system:serviceaccount:NS:SA`, groups
`system:serviceaccounts`, `system:serviceaccounts:NS` and `system:authenticated`; bound to a pod
(`spec.boundObjectRef`), it carries the extras `authentication.kubernetes.io/pod-name` and `pod-uid` (and
`node-name` when the pod is bound to a node), as pkg/serviceaccount/claims.go does. Such a token is refused
(401 Unauthorized) once it expires, its ServiceAccount is deleted (or re-created: another uid), or its pod is.
Any other bearer token, and a request without one, stands for the cluster's admin (`system:masters`), as the
emulator's own kubeconfig always has: the operator, kubectl and the tests act as before.

Authorization (pkg/registry/rbac/validation, plugin/pkg/auth/authorizer/rbac): a service account's request is
allowed when a ClusterRoleBinding, or a RoleBinding in the request's namespace, binds a subject matching it
(ServiceAccount, User or Group) to a Role/ClusterRole with a rule that covers the verb, API group, resource
(`res`, `res/sub`, `*`, `*/sub`) and, when the rule names `resourceNames`, the object's name (never a create,
list, watch or deletecollection). Bootstrap roles every authenticated user holds: discovery, `/version`,
`/healthz`, OpenAPI (every non-resource GET) and the self reviews (system:basic-user). A refusal is 403 with
RBAC's message: `pods "p" is forbidden: User "system:serviceaccount:ns:sa" cannot patch resource "pods" in API
group "" in the namespace "ns"`. Creating or updating a Role/ClusterRole, or a binding, is refused unless the user
holds every permission it grants (or the `escalate`/`bind` verb), with the message of ConfirmNoEscalation; a
binding whose Role does not exist is refused 404 unless the user may `bind` it (the escalation check must read the
Role), as kube-apiserver answers: `rolebindings.rbac.authorization.k8s.io "<role>" not found`.
Not emulated: aggregated ClusterRoles, other bootstrap roles, Node/Webhook authorizers, audiences, impersonation.
"""

from __future__ import annotations

import base64
import datetime
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from heterojob.sim.cluster.errors import ApiError

PREFIX = "emulator-sa."  # the tokens this module issues; any other token is the admin's
RBAC = "rbac.authorization.k8s.io"
ROLE_KINDS = {(RBAC, "roles"): "Role", (RBAC, "clusterroles"): "ClusterRole"}
BINDING_KINDS = {(RBAC, "rolebindings"): "RoleBinding", (RBAC, "clusterrolebindings"): "ClusterRoleBinding"}
NO_NAME_VERBS = {"create", "list", "watch", "deletecollection"}  # resourceNames never restrict these
BASIC_USER = [{"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews",
                                                                      "selfsubjectrulesreviews"], "verbs": ["create"]},
              {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]}]
Store = Callable[[tuple[str, str]], Mapping[tuple[str | None, str], dict[str, Any]]]


@dataclass(frozen=True)
class User:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, list[str]] = field(default_factory=dict)

    @property
    def admin(self) -> bool:
        return "system:masters" in self.groups

    def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {"username": self.name, "groups": list(self.groups)}
        if self.uid:
            out["uid"] = self.uid
        if self.extra:
            out["extra"] = {k: list(v) for k, v in self.extra.items()}
        return out


ADMIN = User("emulator", groups=("system:masters", "system:authenticated"))


@dataclass(frozen=True)
class Issued:
    user: User
    namespace: str
    account_uid: str
    pod: tuple[str, str] | None  # (name, uid) of the pod it is bound to
    expires: float


@dataclass
class Tokens:
    issued: dict[str, Issued] = field(default_factory=dict)

    def request(self, store: Store, namespace: str, account: str, body: Any) -> dict[str, Any]:
        """A TokenRequest for `namespace/account`: the request with its status (token, expirationTimestamp)."""
        account_uid = _account_uid(store, namespace, account)
        if account_uid is None:
            raise ApiError(404, "NotFound", f'serviceaccounts "{account}" not found',
                           {"name": account, "kind": "serviceaccounts"})
        spec = (body or {}).get("spec") if isinstance(body, dict) else None
        spec = spec if isinstance(spec, dict) else {}
        seconds = spec.get("expirationSeconds", 3600)
        if not isinstance(seconds, int) or seconds < 600:
            raise ApiError(422, "Invalid", f'TokenRequest.authentication.k8s.io "{account}" is invalid: '
                           f"spec.expirationSeconds: Invalid value: {seconds}: may not specify a duration less "
                           "than 10 minutes", {"name": account, "group": "authentication.k8s.io",
                                               "kind": "TokenRequest"})
        extra: dict[str, list[str]] = {}
        bound = spec.get("boundObjectRef")
        pod_ref = None
        if isinstance(bound, dict) and bound:
            if bound.get("kind") != "Pod":
                raise ApiError(400, "BadRequest", f"cannot bind token to object of type {bound.get('kind')} "
                                                  "(the emulator binds tokens to pods only)")
            pod = store(("", "pods")).get((namespace, str(bound.get("name"))))
            if pod is None or (bound.get("uid") and bound["uid"] != pod["metadata"]["uid"]):
                raise ApiError(404, "NotFound", f'pods "{bound.get("name")}" not found',
                               {"name": bound.get("name"), "kind": "pods"})
            pod_ref = (pod["metadata"]["name"], pod["metadata"]["uid"])
            extra = {"authentication.kubernetes.io/pod-name": [pod_ref[0]],
                     "authentication.kubernetes.io/pod-uid": [pod_ref[1]]}
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                extra["authentication.kubernetes.io/node-name"] = [node]
        token = PREFIX + secrets.token_urlsafe(24)
        extra["authentication.kubernetes.io/credential-id"] = [f"JTI={secrets.token_hex(16)}"]
        user = User(f"system:serviceaccount:{namespace}:{account}", account_uid,
                    ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"), extra)
        expires = time.time() + seconds
        self.issued[token] = Issued(user, namespace, account_uid, pod_ref, expires)
        stamp = datetime.datetime.fromtimestamp(expires, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "metadata": {"name": account, "namespace": namespace, "creationTimestamp": None},
                "spec": {**spec, "expirationSeconds": seconds}, "status": {"token": token,
                                                                        "expirationTimestamp": stamp}}

    def long_lived(self, store: Store, namespace: str, account: str) -> str | None:
        """A token of `namespace/account` that does not expire (a legacy token Secret's); None: no such account."""
        account_uid = _account_uid(store, namespace, account)
        if account_uid is None:
            return None
        token = PREFIX + secrets.token_urlsafe(24)
        user = User(f"system:serviceaccount:{namespace}:{account}", account_uid,
                    ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"))
        self.issued[token] = Issued(user, namespace, account_uid, None, float("inf"))
        return token

    def authenticate(self, store: Store, authorization: str | None) -> User:
        """The user a request's `Authorization` header stands for; 401 for an issued token no longer valid."""
        token = authorization[7:].strip() if authorization and authorization.lower().startswith("bearer ") else ""
        if not token.startswith(PREFIX):
            return ADMIN
        got = self.issued.get(token)
        if got is not None and got.expires < time.time():
            del self.issued[token]
            got = None
        if got is not None:
            account_uid = _account_uid(store, got.namespace, got.user.name.rsplit(":", 1)[1])
            pod = store(("", "pods")).get((got.namespace, got.pod[0])) if got.pod else None
            if account_uid != got.account_uid or (
                    got.pod is not None and (pod is None or pod["metadata"]["uid"] != got.pod[1])):
                got = None
        if got is None:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        return got.user


SA_TOKEN_SECRET = "kubernetes.io/service-account-token"
SA_NAME, SA_UID = "kubernetes.io/service-account.name", "kubernetes.io/service-account.uid"


def fill_token_secret(tokens: Tokens, store: Store, secret: dict[str, Any]) -> None:
    """The token controller (kube-controller-manager's serviceaccount-token): a new Secret of type
    `kubernetes.io/service-account-token` naming an account gets a long-lived token of it, the namespace and the
    account's uid. Not emulated: `ca.crt` (the emulator serves plain HTTP), a Secret made before its account (the
    real controller fills it once the account exists), the token lapsing when the Secret is deleted."""
    meta = secret.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if secret.get("type") != SA_TOKEN_SECRET or not annotations.get(SA_NAME):
        return
    namespace = str(meta.get("namespace") or "")
    token = tokens.long_lived(store, namespace, str(annotations[SA_NAME]))
    if token is None:
        return
    annotations[SA_UID] = _account_uid(store, namespace, str(annotations[SA_NAME]))
    meta["annotations"] = annotations
    secret["data"] = {**(secret.get("data") or {}), "token": base64.b64encode(token.encode()).decode(),
                      "namespace": base64.b64encode(namespace.encode()).decode()}


def _account_uid(store: Store, namespace: str, name: str) -> str | None:
    """The ServiceAccount's uid; `default` counts as there even when not stored, as the emulator's ServiceAccount
    admission takes it (the controller-manager creates it in every namespace)."""
    sa = store(("", "serviceaccounts")).get((namespace, name))
    if sa is not None:
        return str(sa["metadata"]["uid"])
    namespaces = store(("", "namespaces"))
    return f"default-account-of-{namespace}" if name == "default" and (None, namespace) in namespaces else None


# --- RBAC ----------------------------------------------------------------------------------------------------

def _subject_matches(subject: Mapping[str, Any], user: User) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "ServiceAccount":
        return user.name == f"system:serviceaccount:{subject.get('namespace')}:{name}"
    if kind == "User":
        return user.name == name
    if kind == "Group":
        return name in user.groups
    return False


def _rule_allows(rule: Mapping[str, Any], verb: str, group: str, resource: str, sub: str | None,
                 name: str | None) -> bool:
    verbs, groups, resources = (rule.get(k) or [] for k in ("verbs", "apiGroups", "resources"))
    if "*" not in verbs and verb not in verbs:
        return False
    if "*" not in groups and group not in groups:
        return False
    combined = f"{resource}/{sub}" if sub else resource
    if not ("*" in resources or combined in resources or (sub and f"*/{sub}" in resources)):
        return False
    names = rule.get("resourceNames") or []
    return not names or (verb not in NO_NAME_VERBS and name is not None and name in names)


def rules_of(store: Store, user: User, namespace: str | None) -> Iterable[Mapping[str, Any]]:
    """Every rule `user` holds in `namespace` (None: cluster-wide rules only)."""
    yield from BASIC_USER
    roles, cluster_roles = store((RBAC, "roles")), store((RBAC, "clusterroles"))
    bindings = [b for b in store((RBAC, "clusterrolebindings")).values()]
    if namespace:
        bindings += [b for (ns, _), b in store((RBAC, "rolebindings")).items() if ns == namespace]
    for binding in bindings:
        if not any(isinstance(s, dict) and _subject_matches(s, user) for s in binding.get("subjects") or []):
            continue
        ref = binding.get("roleRef") or {}
        role = (cluster_roles.get((None, ref.get("name", ""))) if ref.get("kind") == "ClusterRole"
                else roles.get((binding["metadata"].get("namespace"), ref.get("name", ""))))
        for rule in (role or {}).get("rules") or []:
            if isinstance(rule, dict):
                yield rule


def allowed(store: Store, user: User, verb: str, group: str, resource: str, sub: str | None,
            namespace: str | None, name: str | None) -> bool:
    if user.admin:
        return True
    return any(_rule_allows(r, verb, group, resource, sub, name) for r in rules_of(store, user, namespace))


def verb_of(method: str, query: Mapping[str, str], name: str | None) -> str:
    if method == "GET":
        return "watch" if query.get("watch") in ("true", "1") else "get" if name else "list"
    if method == "DELETE":
        return "delete" if name else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())


def authorize(store: Store, user: User, method: str, query: Mapping[str, str], group: str, plural: str,
              sub: str | None, namespace: str | None, name: str | None) -> None:
    """403 unless `user` may make this resource request."""
    if user.admin:
        return
    verb = verb_of(method, query, name)
    if method == "POST" and sub is None:
        name = None  # a create names no existing object
    if allowed(store, user, verb, group, plural, sub, namespace, name):
        return
    resource = f"{plural}/{sub}" if sub else plural
    where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    why = f'User "{user.name}" cannot {verb} resource "{resource}" in API group "{group}" {where}'
    qualified = f"{plural}.{group}" if group else plural
    subject = f'{qualified} "{name}"' if name else qualified
    raise ApiError(403, "Forbidden", f"{subject} is forbidden: {why}",
                   {"name": name or "", "group": group, "kind": plural})


def confirm_no_escalation(store: Store, user: User, group: str, plural: str, namespace: str | None, name: str,
                          obj: Any) -> None:
    """A Role/ClusterRole write, or a binding's, grants only what the writer holds (else `escalate`/`bind`)."""
    if user.admin or not isinstance(obj, dict):
        return
    if (group, plural) in ROLE_KINDS:
        if allowed(store, user, "escalate", group, plural, None, namespace, name):
            return
        rules = obj.get("rules") or []
    elif (group, plural) in BINDING_KINDS:
        ref = obj.get("roleRef") or {}
        if not isinstance(ref, dict) or not ref:
            return  # a patch that leaves roleRef (immutable) as it is
        bind_plural = "clusterroles" if ref.get("kind") == "ClusterRole" else "roles"
        if allowed(store, user, "bind", RBAC, bind_plural, None, namespace, ref.get("name")):
            return
        role = (store((RBAC, "clusterroles")).get((None, ref.get("name", ""))) if bind_plural == "clusterroles"
                else store((RBAC, "roles")).get((namespace, ref.get("name", ""))))
        if role is None:  # the rule resolver cannot read the Role it binds (its words: the binding's resource)
            raise ApiError(404, "NotFound", f'{plural}.{group} "{ref.get("name", "")}" not found',
                           {"name": ref.get("name", ""), "group": group, "kind": plural})
        rules = role.get("rules") or []
    else:
        return
    missing = []
    for rule in rules if isinstance(rules, list) else []:
        if not isinstance(rule, dict):
            continue
        for g in rule.get("apiGroups") or [""]:
            for res in rule.get("resources") or []:
                base, _, sub = str(res).partition("/")
                for verb in rule.get("verbs") or []:
                    for resource_name in rule.get("resourceNames") or [None]:
                        if not allowed(store, user, verb, g, base, sub or None, namespace, resource_name):
                            missing.append(rule)
    if missing:
        held = " ".join(f'"{g}"' for g in user.groups)
        text = "\n".join(_compact(r) for r in dict((repr(r), r) for r in missing).values())
        qualified = f"{plural}.{group}"
        raise ApiError(403, "Forbidden", f'{qualified} "{name}" is forbidden: user "{user.name}" (groups=[{held}]) is '
                       f"attempting to grant RBAC permissions not currently held:\n{text}",
                       {"name": name, "group": group, "kind": plural})


def _compact(rule: Mapping[str, Any]) -> str:
    parts = []
    for key, label in (("apiGroups", "APIGroups"), ("resources", "Resources"), ("resourceNames", "ResourceNames"),
                       ("verbs", "Verbs")):
        values = rule.get(key) or []
        if values:
            parts.append(f"{label}:[" + ", ".join(f'"{v}"' for v in values) + "]")
    return "{" + ", ".join(parts) + "}"
