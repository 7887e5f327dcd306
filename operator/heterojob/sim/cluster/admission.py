"""Admission refusals a real API server gives pods (v1.32), switched on the way a cluster switches them on.

- PodSecurity: label a namespace `pod-security.kubernetes.io/enforce: baseline|restricted` and pods that
  violate the level are refused (403, `pods "x" is forbidden: violates PodSecurity "restricted:latest": ...`).
- ResourceQuota: create a `ResourceQuota` in a namespace; a pod that would exceed its `spec.hard` (pods,
  requests.*, limits.*, cpu/memory) is refused (403 `exceeded quota: q, requested: ..., used: ..., limited: ...`),
  and a pod that leaves a quota-covered compute resource unspecified too (`failed quota: q: must specify ...`).
- ServiceAccount: a pod naming a service account that does not exist is refused (403 `error looking up service
  account ns/sa: serviceaccount "sa" not found`), `default` too: the controller-manager makes it a moment after
  its namespace (`ApiServerEmulator.account_lag_s`), so a pod created at once in a new namespace may be refused.
Each check is a pure function of the pod, its namespace and the namespace's objects; it returns the reason.

One mutating plugin, on by default in a real server as here: DefaultTolerationSeconds (`default_tolerations`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from heterojob.sim.cluster.builtin import QuantityError, quantity
from heterojob.sim.cluster.nodes import NOT_READY_TAINT, UNREACHABLE_TAINT

ENFORCE = "pod-security.kubernetes.io/enforce"
ENFORCE_VERSION = "pod-security.kubernetes.io/enforce-version"


DEFAULT_TOLERATION_SECONDS = 300  # --default-not-ready-toleration-seconds, --default-unreachable-toleration-seconds


def default_tolerations(tolerations: Any) -> Any:
    """The pod's `spec.tolerations` after the DefaultTolerationSeconds plugin (kube-apiserver v1.32,
    plugin/pkg/admission/defaulttolerationseconds/admission.go; on pods' create and update, not subresources):
    `node.kubernetes.io/not-ready` and `node.kubernetes.io/unreachable`, operator Exists, effect NoExecute,
    tolerationSeconds 300, each appended unless a toleration already covers it (its key, or an empty key; its
    effect NoExecute, or empty). Not a list (refused by validation later): returned as it is."""
    if tolerations is None:
        tolerations = []
    if not isinstance(tolerations, list):
        return tolerations
    out = list(tolerations)
    for key in (NOT_READY_TAINT, UNREACHABLE_TAINT):
        if not any(isinstance(t, dict) and (t.get("key") or "") in (key, "")
                   and (t.get("effect") or "") in ("NoExecute", "") for t in tolerations):
            out.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                        "tolerationSeconds": DEFAULT_TOLERATION_SECONDS})
    return out


def _containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for key in ("initContainers", "containers") for c in spec.get(key) or [] if isinstance(c, dict)]


def _names(cs: Iterable[Mapping[str, Any]]) -> str:
    names = [f'"{c.get("name")}"' for c in cs]
    return ("container " if len(names) == 1 else "containers ") + ", ".join(names)


def pod_security(pod: Mapping[str, Any], namespace: Mapping[str, Any] | None) -> str | None:
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    level = labels.get(ENFORCE)
    if level not in ("baseline", "restricted"):
        return None
    spec = pod.get("spec") or {}
    psc = spec.get("securityContext") or {}
    cs = _containers(spec)
    out: list[str] = []
    privileged = [c for c in cs if (c.get("securityContext") or {}).get("privileged")]
    if privileged:
        out.append(f"privileged ({_names(privileged)} must not set securityContext.privileged=true)")
    hostns = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    if hostns:
        out.append(f"host namespaces ({', '.join(hostns)})")
    host_path = [v.get("name") for v in spec.get("volumes") or [] if isinstance(v, dict) and "hostPath" in v]
    if host_path:
        out.append("hostPath volumes (volume" + ("s " if len(host_path) > 1 else " ")
                   + ", ".join(f'"{n}"' for n in host_path) + ")")
    host_ports = [(c, p.get("hostPort")) for c in cs for p in c.get("ports") or [] if p.get("hostPort")]
    if host_ports:
        out.append("hostPort (" + ", ".join(f'container "{c.get("name")}" uses hostPort {p}' for c, p in host_ports)
                   + ")")
    if level == "restricted":
        escalate = [c for c in cs if (c.get("securityContext") or {}).get("allowPrivilegeEscalation") is not False]
        if escalate:
            out.append(f"allowPrivilegeEscalation != false ({_names(escalate)} must set "
                       "securityContext.allowPrivilegeEscalation=false)")
        caps = [c for c in cs if "ALL" not in (((c.get("securityContext") or {}).get("capabilities") or {})
                                               .get("drop") or [])]
        if caps:
            out.append(f'unrestricted capabilities ({_names(caps)} must set securityContext.capabilities.drop=["ALL"])')
        nonroot = [c for c in cs if (c.get("securityContext") or {}).get("runAsNonRoot") is not True
                   and not (psc.get("runAsNonRoot") is True
                            and (c.get("securityContext") or {}).get("runAsNonRoot") is not False)]
        if nonroot:
            out.append(f"runAsNonRoot != true (pod or {_names(nonroot)} must set securityContext.runAsNonRoot=true)")
        pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
        seccomp = [c for c in cs if ((c.get("securityContext") or {}).get("seccompProfile") or {}).get("type",
                                                                                                     pod_seccomp)
                   not in ("RuntimeDefault", "Localhost")]
        if seccomp:
            out.append(f"seccompProfile (pod or {_names(seccomp)} must set securityContext.seccompProfile.type to "
                       '"RuntimeDefault" or "Localhost")')
    if not out:
        return None
    version = labels.get(ENFORCE_VERSION) or "latest"
    return f'violates PodSecurity "{level}:{version}": ' + ", ".join(out)


def pod_usage(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    usage: dict[str, Decimal] = {"pods": Decimal(1), "count/pods": Decimal(1)}
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = (c or {}).get("resources") or {}
        limits = res.get("limits") or {}
        requests = {**limits, **(res.get("requests") or {})}
        for name, raw in requests.items():
            usage[f"requests.{name}"] = usage.get(f"requests.{name}", Decimal(0)) + quantity(raw)
            if name in ("cpu", "memory", "ephemeral-storage"):
                usage[name] = usage.get(name, Decimal(0)) + quantity(raw)
        for name, raw in limits.items():
            usage[f"limits.{name}"] = usage.get(f"limits.{name}", Decimal(0)) + quantity(raw)
    return usage


def _fmt(amount: Decimal) -> str:
    return str(int(amount)) if amount == amount.to_integral_value() else format(amount.normalize(), "f")


def resource_quota(pod: Mapping[str, Any], quotas: Iterable[Mapping[str, Any]],
                   pods: Iterable[Mapping[str, Any]]) -> str | None:
    try:
        wanted = pod_usage(pod)
    except QuantityError:
        return None  # decoding refuses it first
    live = [p for p in pods if ((p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))]
    for q in sorted(quotas, key=lambda q: q["metadata"]["name"]):
        hard = (q.get("spec") or {}).get("hard") or {}
        name = q["metadata"]["name"]
        missing = []
        for key in sorted(hard):
            if key.startswith(("requests.", "limits.")) or key in ("cpu", "memory"):
                section, _, res = key.partition(".") if "." in key else ("requests", "", key)
                if res in ("cpu", "memory") and key not in wanted:
                    who = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []
                           if res not in (((c.get("resources") or {}).get(section) or {}) if section == "limits"
                                          else {**((c.get("resources") or {}).get("limits") or {}),
                                                **((c.get("resources") or {}).get("requests") or {})})]
                    missing.append(f"{section}.{res} for: {','.join(who)}")
        if missing:
            return f"failed quota: {name}: must specify " + "; ".join(dict.fromkeys(missing))
        used: dict[str, Decimal] = {}
        for other in live:
            try:
                for key, amount in pod_usage(other).items():
                    used[key] = used.get(key, Decimal(0)) + amount
            except QuantityError:
                continue
        over = [key for key in sorted(hard) if key in wanted
                and used.get(key, Decimal(0)) + wanted[key] > quantity(hard[key])]
        if over:
            return (f"exceeded quota: {name}, requested: " + ",".join(f"{k}={_fmt(wanted[k])}" for k in over)
                    + ", used: " + ",".join(f"{k}={_fmt(used.get(k, Decimal(0)))}" for k in over)
                    + ", limited: " + ",".join(f"{k}={hard[k]}" for k in over))
    return None


def service_account(pod: Mapping[str, Any], namespace: str, accounts: Iterable[str]) -> str | None:
    sa = (pod.get("spec") or {}).get("serviceAccountName") or "default"
    if sa in set(accounts):
        return None
    return f'error looking up service account {namespace}/{sa}: serviceaccount "{sa}" not found'
