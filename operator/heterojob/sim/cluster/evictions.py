"""The Eviction API (`POST pods/{name}/eviction`, what `kubectl drain` calls) and PodDisruptionBudget arithmetic.

Follows kube-apiserver v1.32 `pkg/registry/core/pod/storage/eviction.go`: a pod that is Pending, Succeeded,
Failed or being deleted is deleted without consulting budgets; more than one matching budget answers a 500
Status; an unready pod is deleted when its budget is met; otherwise the budget's `disruptionsAllowed` must be
above 0 or the answer is 429 TooManyRequests ("Cannot evict pod as it would violate the pod's disruption
budget.", cause `DisruptionBudget`: "The disruption budget NAME needs D healthy pods and has C currently").

The emulator runs no disruption controller (kube-controller-manager's `pkg/controller/disruption`), so the
budget's status is computed here, when an eviction asks, the way that controller computes it -- except that the
expected pod count is the number of pods the budget selects (the controller reads the scale of the pods'
controllers for `maxUnavailable` and percentages).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from heterojob.constants import EVICTED_BY_EVICTION_API
from heterojob.sim.cluster.errors import ApiError
from heterojob.sim.cluster.selectors import label_selector_matcher

MORE_THAN_ONE = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."
# the condition eviction.go's addConditionAndDeletePod writes before it deletes (PodDisruptionConditions: on by
# default since v1.26, GA in v1.31); not on a dry run
CONDITION = {"type": "DisruptionTarget", "status": "True", "reason": EVICTED_BY_EVICTION_API,
             "message": "Eviction API: evicting"}


@dataclass(frozen=True)
class Budget:
    expected: int
    desired_healthy: int
    current_healthy: int

    @property
    def disruptions_allowed(self) -> int:
        return max(0, self.current_healthy - self.desired_healthy) if self.expected > 0 else 0

    def status(self, generation: int, disrupted: Mapping[str, str] | None = None) -> dict[str, Any]:
        allowed = self.disruptions_allowed
        status: dict[str, Any] = {
            "observedGeneration": generation, "expectedPods": self.expected, "desiredHealthy": self.desired_healthy,
            "currentHealthy": self.current_healthy, "disruptionsAllowed": allowed,
            "conditions": [{"type": "DisruptionAllowed", "status": "True" if allowed > 0 else "False",
                            "reason": "SufficientPods" if allowed > 0 else "InsufficientPods",
                            "message": "", "observedGeneration": generation}]}
        if disrupted:
            status["disruptedPods"] = dict(disrupted)
        return status


def is_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _resolve(value: Any, total: int, round_up: bool) -> int:
    """An intstr: an int, or a percentage of `total` (`intstr.GetScaledValueFromIntOrPercent`)."""
    if isinstance(value, str) and value.endswith("%"):
        scaled = int(value[:-1] or 0) * total / 100
        return math.ceil(scaled) if round_up else math.floor(scaled)
    return int(value)


def budget(pdb: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> Budget:
    """What the disruption controller would write into the budget's status, for the pods it selects."""
    spec = pdb.get("spec") or {}
    matches = label_selector_matcher(spec.get("selector"))
    selected = [p for p in pods if matches(p)]
    healthy = sum(1 for p in selected if is_ready(p) and not (p.get("metadata") or {}).get("deletionTimestamp"))
    expected = len(selected)
    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _resolve(spec["maxUnavailable"], expected, True))
    elif spec.get("minAvailable") is not None:
        desired = _resolve(spec["minAvailable"], expected, True)
    else:
        desired = expected  # neither set: the API defaults nothing, the controller treats it as minAvailable 100%
    return Budget(expected, desired, healthy)


def matching_budgets(pod: Mapping[str, Any], pdbs: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    namespace = (pod.get("metadata") or {}).get("namespace")
    return [b for b in pdbs if (b.get("metadata") or {}).get("namespace") == namespace
            and label_selector_matcher((b.get("spec") or {}).get("selector"))(pod)]


def with_condition(pod: Mapping[str, Any], now: str) -> dict[str, Any]:
    """The pod's status with DisruptionTarget set as `podutil.UpdatePodCondition` sets it (the transition time
    changes only when the status does)."""
    status = dict(pod.get("status") or {})
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    old = next((c for c in conditions if c.get("type") == CONDITION["type"]), None)
    since = old.get("lastTransitionTime") if old is not None and old.get("status") == CONDITION["status"] else now
    status["conditions"] = [*(c for c in conditions if c is not old), {**CONDITION, "lastTransitionTime": since}]
    return status


def can_ignore_budgets(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed", "Pending") or bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def too_many_requests(message: str, retry_after: int, cause: str) -> ApiError:
    """`errors.NewTooManyRequests` with the `DisruptionBudget` cause eviction.go appends."""
    details: dict[str, Any] = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    return ApiError(429, "TooManyRequests", message, details)


@dataclass(frozen=True)
class EvictionVerdict:
    """Delete the pod (and write `budget_status` into `budget_name`'s status when set), or refuse."""
    refusal: ApiError | None = None
    failure_status: dict[str, Any] | None = None  # a Status returned with code 500 (more than one budget)
    budget_name: str | None = None
    budget_status: dict[str, Any] | None = None


def decide(pod: Mapping[str, Any], pdbs: list[Mapping[str, Any]], pods: list[Mapping[str, Any]],
           now: str) -> EvictionVerdict:
    if can_ignore_budgets(pod):
        return EvictionVerdict()
    found = matching_budgets(pod, pdbs)
    if len(found) > 1:
        return EvictionVerdict(failure_status={"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                        "message": MORE_THAN_ONE, "code": 500})
    if not found:
        return EvictionVerdict()
    pdb = found[0]
    name = pdb["metadata"]["name"]
    generation = int(pdb["metadata"].get("generation") or 1)
    computed = budget(pdb, [p for p in pods if p["metadata"].get("namespace") == pod["metadata"].get("namespace")])
    if not is_ready(pod) and computed.current_healthy >= computed.desired_healthy and computed.desired_healthy > 0:
        return EvictionVerdict(budget_name=name, budget_status=computed.status(generation))
    if computed.disruptions_allowed == 0:
        return EvictionVerdict(refusal=too_many_requests(
            VIOLATION, 0, f"The disruption budget {name} needs {computed.desired_healthy} healthy pods and has "
            f"{computed.current_healthy} currently"), budget_name=name, budget_status=computed.status(generation))
    disrupted = {**((pdb.get("status") or {}).get("disruptedPods") or {}), pod["metadata"]["name"]: now}
    after = Budget(computed.expected, computed.desired_healthy, computed.current_healthy - 1)
    return EvictionVerdict(budget_name=name, budget_status=after.status(generation, disrupted))
