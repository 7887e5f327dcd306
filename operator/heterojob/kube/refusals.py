"""What an API server's refusal of a create means: it will not pass without an edit (the job fails), or it may
pass by itself (the gang backs off and is placed again). Pure: the status code and the server's message.

Kubernetes' own controllers (ReplicaSet, Job) retry every refused create; heterojob fails a job only where
retrying cannot help until the user edits the spec: an invalid object (400, 422) and a policy that refuses
the pod as written (403 from PodSecurity, an admission webhook or a ValidatingAdmissionPolicy). A 403 that
names something the cluster itself will change passes:
- a ResourceQuota (`exceeded quota`, `failed quota`): other pods end;
- a missing ServiceAccount (`error looking up service account ns/sa: serviceaccount "sa" not found`): a new
  namespace's `default` account is created asynchronously by kube-controller-manager (and again after it
  restarts or lags), and a named one is often applied after the job that uses it;
- the operator's own RBAC (`User "..." cannot create resource "pods"`, or `get` for the read a 409 makes):
  an administrator grants it;
- a namespace being deleted (`because it is being terminated`): the job goes with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# 403 messages that pass without an edit (kube-apiserver v1.32 wording; the second ServiceAccount form is
# the one releases before v1.24 gave; RBAC's "cannot <verb> resource")
TRANSIENT_FORBIDDEN = re.compile("|".join((
    r"exceeded quota",
    r"failed quota",
    r"error looking up service account",
    r"retry after the service account is created",
    r" cannot [a-z]+ resource ",
    r"because it is being terminated",
)))


@dataclass(frozen=True)
class Refusal:
    permanent: bool
    message: str


def classify(status: int | None, message: str) -> Refusal:
    """`status`: the HTTP status of the refusal (None: no answer, e.g. a timeout). Conflicts, throttling,
    server errors and timeouts pass."""
    if status in (400, 422):
        return Refusal(True, message)
    if status == 403:
        return Refusal(TRANSIENT_FORBIDDEN.search(message) is None, message)
    return Refusal(False, message or (f"HTTP {status}" if status else "no answer"))
