"""What an edit of a HeteroJob's spec changes, and when each change takes effect. Pure.

Step of the pipeline: at the start of a reconcile pass, when metadata.generation is past
status.observedGeneration, the controller compares the spec's per-field digests (`digests`) with those
recorded at observedGeneration (status.observedSpec) and says what it read (`Change`, an Event).

As with Kueue and the Kubeflow training operator, an admitted gang keeps what it was placed with: its size,
class, region and pod template change at its next placement (a restart, a move, a preemption), never by
restarting a running gang behind the user's back. What the operator reads on every pass applies at once
(`NOW`). An invalid edit is refused by validation as before (the job ends Failed, naming the field).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from heterojob.engine.placing.placement import listed

# spec fields read on every pass, and what they change there
NOW: Mapping[str, str] = {
    "priority": "queue order and preemption",
    "replicas.max": "how far it may grow",
    "checkpoint": "the next checkpoint",
    "policy": "migration and resize decisions",
    "backoffLimit": "the next replica failure",
    "workload": "its speed estimates",
}
REASON_DEFERRED = "SpecChangeDeferred"  # some change waits for the next placement
REASON_APPLIED = "SpecChangeApplied"  # every change applies now


def digests(spec: Any) -> dict[str, str]:
    """A short digest of each top-level spec field (replicas per sub-field), for status.observedSpec."""
    if not isinstance(spec, Mapping):
        return {}
    fields = {str(k): v for k, v in spec.items() if k != "replicas"}
    replicas = spec.get("replicas")
    if isinstance(replicas, Mapping):
        fields.update({f"replicas.{k}": v for k, v in replicas.items()})
    elif "replicas" in spec:
        fields["replicas"] = replicas
    return {k: hashlib.sha256(json.dumps(v, sort_keys=True, separators=(",", ":"), default=str).encode()
                              ).hexdigest()[:16] for k, v in sorted(fields.items())}


@dataclass(frozen=True)
class Change:
    now: tuple[str, ...]  # fields that apply at once
    deferred: tuple[str, ...]  # fields that apply at the next placement or restart

    @property
    def reason(self) -> str:
        return REASON_DEFERRED if self.deferred else REASON_APPLIED

    def message(self, generation: int) -> str:
        parts = []
        if self.deferred:
            parts.append(f"{listed(self.deferred, 6)} at the next placement or restart (the running gang keeps "
                         f"its size, class, region and pod template)")
        if self.now:
            parts.append(f"{listed([f'{f} now ({NOW[f]})' for f in self.now], 6)}")
        return f"spec generation {generation} read: " + "; ".join(parts)


def changes(before: Mapping[str, str], after: Mapping[str, str]) -> Change | None:
    """The fields whose digests differ (added or removed too); None when none does."""
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if not changed:
        return None
    return Change(tuple(c for c in changed if c in NOW), tuple(c for c in changed if c not in NOW))
