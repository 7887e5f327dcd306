"""A ResourceQuota's status, as kube-controller-manager v1.32's resource quota controller keeps it.

`pkg/controller/resourcequota` (syncResourceQuota) sets `status.hard` to `spec.hard` and `status.used` to the
namespace's usage of every resource `spec.hard` names (0 when none); the evaluators it uses
(`pkg/quota/v1/evaluator/core`): `pods`/`count/pods` and the compute resources (`requests.*`, `limits.*`, `cpu`,
`memory`, `ephemeral-storage`) over the pods not Succeeded or Failed; `count/<resource>[.<group>]` and the
legacy names (`services`, `configmaps`, `secrets`, ...) count objects. Quantities are printed in
resource.Quantity's canonical form (`500m`, `2k`, `1536Mi`). A pure function of the quota and the namespace's
objects; the emulator (storage.py `_sync_quotas`) stores its answer whenever a change in the namespace alters it
(the controller's resync).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any

from heterojob.sim.cluster.admission import pod_usage
from heterojob.sim.cluster.builtin import QuantityError, quantity

# legacy object-count names (pkg/quota/v1/evaluator/core: services, configmaps, ...): the resource they count
LEGACY_COUNTS = {"services": "services", "configmaps": "configmaps", "secrets": "secrets",
                 "persistentvolumeclaims": "persistentvolumeclaims", "resourcequotas": "resourcequotas",
                 "replicationcontrollers": "replicationcontrollers"}
_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_DECIMAL = (("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3))


def canonical(amount: Decimal, binary: bool = False) -> str:
    """resource.Quantity's String(): the largest suffix that keeps an integer (binary ones for Ki/Mi/Gi inputs)."""
    if amount == 0:
        return "0"
    if amount != amount.to_integral_value():
        milli = amount * 1000
        if milli == milli.to_integral_value():
            return f"{int(milli)}m"
        return format(amount.normalize(), "f")
    whole = int(amount)
    for suffix, size in _BINARY if binary else _DECIMAL:
        if whole % size == 0:
            return f"{whole // size}{suffix}"
    return str(whole)


def _is_binary(raw: Any) -> bool:
    return isinstance(raw, str) and raw.rstrip().endswith("i")


def status(quota: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], count: Callable[[str], int]
           ) -> dict[str, dict[str, str]]:
    """`{"hard": ..., "used": ...}` for `quota`, given the namespace's pods and `count("plural[.group]")`."""
    hard = (quota.get("spec") or {}).get("hard") or {}
    live = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    usage: dict[str, Decimal] = {}
    binary: dict[str, bool] = {}
    for pod in live:
        try:
            for key, amount in pod_usage(pod).items():
                usage[key] = usage.get(key, Decimal(0)) + amount
        except QuantityError:
            continue
        for c in (pod.get("spec") or {}).get("containers") or []:
            for section in ("requests", "limits"):
                for name, raw in (((c or {}).get("resources") or {}).get(section) or {}).items():
                    binary.setdefault(f"{section}.{name}", _is_binary(raw))
    out_hard: dict[str, str] = {}
    used: dict[str, str] = {}
    for key, raw in hard.items():
        try:
            out_hard[key] = canonical(quantity(raw), _is_binary(raw))
        except QuantityError:
            out_hard[key] = str(raw)
        if key.startswith("count/") or key in LEGACY_COUNTS:
            resource = key.removeprefix("count/") if key.startswith("count/") else LEGACY_COUNTS[key]
            amount = Decimal(len(live)) if resource == "pods" else Decimal(count(resource))
        else:
            amount = usage.get(key, Decimal(0))
        wide = key if "." in key else f"requests.{key}"
        used[key] = canonical(amount, binary.get(wide, _is_binary(raw)))
    return {"hard": out_hard, "used": used}
