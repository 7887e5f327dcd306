"""What kube-scheduler v1.32's default filters decide for one pod on one node, and the message of a pod that fits
on none (pure functions of plain data; `scheduler.KubeScheduler` acts on them).

Read at kubernetes/kubernetes pkg/scheduler: the filters run in the default profile's order and a node gets the
status of the first that refuses it (framework/runtime RunFilterPlugins):
- NodeUnschedulable: `spec.unschedulable` not tolerated (taint node.kubernetes.io/unschedulable:NoSchedule):
  "node(s) were unschedulable";
- TaintToleration: the first NoSchedule/NoExecute taint the pod does not tolerate:
  "node(s) had untolerated taint {key: value}";
- NodeAffinity: `nodeSelector` and required node affinity (terms ORed, expressions ANDed):
  "node(s) didn't match Pod's node affinity/selector";
- NodeResourcesFit (noderesources/fit.go fitsRequest): "Too many pods", then "Insufficient cpu", "Insufficient
  memory", "Insufficient ephemeral-storage", "Insufficient <extended resource>" for each that does not fit
  allocatable minus what the pods counted on the node request. Only this one leaves preemption a chance.
FitError.Error (framework/types.go): "0/N nodes are available: " and the sorted "<count> <reason>" histogram, then
DefaultPreemption's PostFilter message: "preemption: 0/N nodes are available: " with "<count> No preemption
victims found for incoming pod" (the stand-in never preempts) and "<count> Preemption is not helpful for
scheduling" (nodes refused for a reason preemption cannot change).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from heterojob.sim.cluster.builtin import QuantityError, quantity
from heterojob.sim.cluster.tainteviction import tolerates

Resources = dict[str, int]  # cpu in millicores, every other resource in its unit (bytes, devices)
DEFAULT_SCHEDULER = "default-scheduler"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
UNSCHEDULABLE = "node(s) were unschedulable"
AFFINITY = "node(s) didn't match Pod's node affinity/selector"
_FIXED = ("cpu", "memory", "ephemeral-storage")
MAX_PODS = 110  # the kubelet's default maxPods
HOSTNAME = "kubernetes.io/hostname"


@dataclass(frozen=True)
class FilterVerdict:
    """A filter's refusal of a pod on one node: its reasons; `resolvable` when preemption could change it."""
    reasons: tuple[str, ...] = ()
    resolvable: bool = True

    @property
    def fits(self) -> bool:
        return not self.reasons


FITS = FilterVerdict()


def _amount(name: str, raw: Any) -> int:
    try:
        value = quantity(raw)
    except QuantityError:
        return 0  # the API server refuses such a pod; nothing to count
    return math.ceil(value * 1000) if name == "cpu" else math.ceil(value)


def _container_requests(container: Mapping[str, Any]) -> Resources:
    """A container's requests; a limit without a request is its request (the API server's defaulting)."""
    res = container.get("resources") or {}
    merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    return {k: _amount(k, v) for k, v in merged.items() if isinstance(k, str)}


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """resourcehelper.PodRequests: the containers' sum, at least each init container's (a sidecar, restartPolicy
    Always, adds to the sum), plus the pod's overhead."""
    spec = pod.get("spec") or {}
    total: Resources = {}
    for c in spec.get("containers") or []:
        for k, v in _container_requests(c if isinstance(c, dict) else {}).items():
            total[k] = total.get(k, 0) + v
    sidecars: Resources = {}
    for c in spec.get("initContainers") or []:
        if not isinstance(c, dict):
            continue
        own = _container_requests(c)
        if c.get("restartPolicy") == "Always":
            for k, v in own.items():
                sidecars[k] = sidecars.get(k, 0) + v
                total[k] = total.get(k, 0) + v
        else:
            for k, v in own.items():  # runs alone, beside the sidecars started before it
                total[k] = max(total.get(k, 0), v + sidecars.get(k, 0))
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, 0) + _amount(k, v)
    return {k: v for k, v in total.items() if v > 0}


def allocatable(node: Mapping[str, Any]) -> Resources:
    return {k: _amount(k, v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()}


def add(into: Resources, amounts: Mapping[str, int], sign: int = 1) -> None:
    for k, v in amounts.items():
        into[k] = into.get(k, 0) + sign * v


def _integer(value: Any) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def _requirement(labels: Mapping[str, str], req: Mapping[str, Any]) -> bool:
    key, op, values = req.get("key"), req.get("operator"), req.get("values") or []
    have = labels.get(key) if isinstance(key, str) else None
    if op == "In":
        return have is not None and have in values
    if op == "NotIn":
        return have is None or have not in values
    if op == "Exists":
        return have is not None
    if op == "DoesNotExist":
        return have is None
    if op in ("Gt", "Lt") and have is not None and len(values) == 1:
        mine, bound = _integer(have), _integer(values[0])
        if mine is None or bound is None:
            return False
        return mine > bound if op == "Gt" else mine < bound
    return False


def _term(node: Mapping[str, Any], term: Mapping[str, Any]) -> bool:
    """A NodeSelectorTerm: its expressions on labels and fields (metadata.name) all hold; an empty one none."""
    meta = node.get("metadata") or {}
    expressions = [e for e in term.get("matchExpressions") or [] if isinstance(e, dict)]
    fields = [f for f in term.get("matchFields") or [] if isinstance(f, dict)]
    if not expressions and not fields:
        return False
    labels = meta.get("labels") or {}
    return all(_requirement(labels, e) for e in expressions) and all(
        f.get("key") == "metadata.name" and _requirement({"metadata.name": meta.get("name", "")}, f) for f in fields)


def node_affinity_matches(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """nodeaffinity's RequiredNodeAffinity: every nodeSelector label, and one required term when there are any."""
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if not isinstance(required, dict):
        return True
    return any(_term(node, t) for t in required.get("nodeSelectorTerms") or [] if isinstance(t, dict))


def verdict(pod: Mapping[str, Any], requests: Mapping[str, int], node: Mapping[str, Any],
            used: Mapping[str, int], pods_on_node: int, free: Mapping[str, int] | None = None) -> FilterVerdict:
    """The first refusal of the default filters for `pod` (its `requests`) on `node`, where the pods counted there
    (`pods_on_node` of them) request `used`; FITS when every filter passes. (`free`: the node's allocatable,
    when the caller keeps it parsed.)"""
    spec, node_spec = pod.get("spec") or {}, node.get("spec") or {}
    tolerations = [t for t in spec.get("tolerations") or [] if isinstance(t, dict)]
    if node_spec.get("unschedulable") and not any(
            tolerates(t, {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}) for t in tolerations):
        return FilterVerdict((UNSCHEDULABLE,), False)
    for taint in node_spec.get("taints") or []:
        if isinstance(taint, dict) and taint.get("effect") in ("NoSchedule", "NoExecute") \
                and not any(tolerates(t, taint) for t in tolerations):
            return FilterVerdict(
                (f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}",), False)
    if not node_affinity_matches(pod, node):
        return FilterVerdict((AFFINITY,), False)
    free = allocatable(node) if free is None else free
    reasons = []
    if pods_on_node + 1 > free.get("pods", MAX_PODS):  # a node that reports no `pods`: the kubelet's default
        reasons.append("Too many pods")
    extended = sorted(k for k in requests if k not in _FIXED and k != "pods")
    for name in (*_FIXED, *extended):
        want = requests.get(name, 0)
        if want > 0 and want > free.get(name, 0) - used.get(name, 0):
            reasons.append(f"Insufficient {name}")
    return FilterVerdict(tuple(reasons), True) if reasons else FITS


@dataclass
class Diagnosis:
    """What an attempt found on every node: the refusal histogram and the preemption histogram (FitError)."""
    reasons: Counter[str]
    preemption: Counter[str]

    @classmethod
    def empty(cls) -> Diagnosis:
        return cls(Counter(), Counter())

    def count(self, v: FilterVerdict, sign: int = 1) -> None:
        """Add (or, with sign -1, take back) one node's verdict."""
        if v.fits:
            return
        for r in v.reasons:
            self.reasons[r] += sign
        self.preemption[NO_VICTIMS if v.resolvable else NOT_HELPFUL] += sign


def _histogram(counts: Counter[str]) -> str:
    return ", ".join(sorted(f"{n} {reason}" for reason, n in counts.items() if n > 0))


def message(diagnosis: Diagnosis, nodes: int) -> str:
    """FitError.Error() with DefaultPreemption's message, e.g. "0/8 nodes are available: 8 Insufficient memory.
    preemption: 0/8 nodes are available: 8 No preemption victims found for incoming pod."."""
    out = f"0/{nodes} nodes are available:"
    if (filters := _histogram(diagnosis.reasons)):
        out += f" {filters}."
    out += f" preemption: 0/{nodes} nodes are available:"
    if (preemption := _histogram(diagnosis.preemption)):
        out += f" {preemption}."
    return out


def score(requests: Mapping[str, int], node: Mapping[str, Any], used: Mapping[str, int]) -> float:
    """NodeResourcesFit's default LeastAllocated score over cpu and memory (higher: emptier after placing)."""
    free = allocatable(node)
    parts = [(free[k] - used.get(k, 0) - requests.get(k, 0)) / free[k] for k in ("cpu", "memory") if free.get(k)]
    return sum(parts) / len(parts) if parts else 0.0


def pinned_hostnames(pod: Mapping[str, Any]) -> set[str] | None:
    """The hostnames (label kubernetes.io/hostname) the pod's nodeSelector or every required affinity term names
    with In: no other node can fit it (so those are tried first); None when it is not pinned so."""
    spec = pod.get("spec") or {}
    if (named := (spec.get("nodeSelector") or {}).get(HOSTNAME)) is not None:
        return {str(named)}
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms = [t for t in (required or {}).get("nodeSelectorTerms") or [] if isinstance(t, dict)] \
        if isinstance(required, dict) else []
    names: set[str] = set()
    for term in terms:
        values = [e.get("values") or [] for e in term.get("matchExpressions") or []
                  if isinstance(e, dict) and e.get("key") == HOSTNAME and e.get("operator") == "In"]
        if not values:
            return None
        names |= {str(v) for v in values[0]}
    return names if terms else None


def schedulable(pod: Mapping[str, Any]) -> bool:
    """A pod this scheduler places: not bound, not being deleted, not finished, and naming it (or no scheduler)."""
    spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
    return (not spec.get("nodeName") and not meta.get("deletionTimestamp")
            and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and (spec.get("schedulerName") or DEFAULT_SCHEDULER) == DEFAULT_SCHEDULER)


def counted(pod: Mapping[str, Any]) -> bool:
    """A pod whose requests count on its node (bound, not Succeeded/Failed; a Terminating one still holds them)."""
    return bool((pod.get("spec") or {}).get("nodeName")) and \
        (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def diagnose(pod: Mapping[str, Any], requests: Mapping[str, int],
             nodes: Iterable[tuple[Mapping[str, Any], Mapping[str, int], int, Mapping[str, int] | None]]
             ) -> tuple[Diagnosis, list[Any]]:
    """Every node's verdict (`nodes`: node, what its pods request, how many, its allocatable or None): the
    diagnosis of the refusals and the nodes that fit."""
    found, fits = Diagnosis.empty(), []
    for node, used, count, free in nodes:
        v = verdict(pod, requests, node, used, count, free)
        if v.fits:
            fits.append(node)
        else:
            found.count(v)
    return found, fits
