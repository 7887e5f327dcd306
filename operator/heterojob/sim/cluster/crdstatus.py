"""The status apiextensions-apiserver's controllers give a CustomResourceDefinition once it serves it (v1.32,
pkg/controller/status/naming_controller.go and establish/establishing_controller.go): the names accepted
(`NamesAccepted` True, reason NoConflicts) and the resource established (`Established` True, reason
InitialNamesAccepted), `acceptedNames` = spec.names, `storedVersions` holding the storage version. The emulator
serves a CRD the moment it is stored, so it writes this status then; `kubectl wait --for condition=Established`
returns at once, as it does within moments on a real server. Name conflicts between CRDs are not checked."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any


def established(crd: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The CRD's status after the naming and establishing controllers ran (transition times kept from `old`)."""
    spec = crd.get("spec") or {}
    previous = {c.get("type"): c for c in ((old or {}).get("conditions") or []) if isinstance(c, Mapping)}
    now = datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def condition(type_: str, reason: str, message: str) -> dict[str, Any]:
        was = previous.get(type_) or {}
        since = was.get("lastTransitionTime") if was.get("status") == "True" else None
        return {"type": type_, "status": "True", "reason": reason, "message": message,
                "lastTransitionTime": since or now}

    stored = [v.get("name") for v in spec.get("versions") or [] if isinstance(v, Mapping) and v.get("storage")]
    versions = list(dict.fromkeys([*((old or {}).get("storedVersions") or []), *stored]))
    return {"conditions": [condition("NamesAccepted", "NoConflicts", "no conflicts found"),
                           condition("Established", "InitialNamesAccepted", "the initial names have been accepted")],
            "acceptedNames": dict(spec.get("names") or {}), "storedVersions": versions}
