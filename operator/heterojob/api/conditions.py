"""Kubernetes-style status conditions: one entry per type, lastTransitionTime kept while status holds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

MESSAGE_MAX = 1024


def set_condition(conditions: Iterable[Mapping[str, Any]], type_: str, status: str, reason: str, message: str,
                  now: str) -> list[dict[str, Any]]:
    """`conditions` with `type_` set; its lastTransitionTime moves only when its status changes."""
    copies = [dict(c) for c in conditions]
    out = [c for c in copies if c.get("type") != type_]
    old = next((c for c in copies if c.get("type") == type_), None)
    since = old.get("lastTransitionTime") if old and old.get("status") == status else now
    out.append({"type": type_, "status": status, "reason": reason, "message": message[:MESSAGE_MAX],
                "lastTransitionTime": since})
    return sorted(out, key=lambda c: c["type"])


def same(a: Iterable[Mapping[str, Any]], b: Iterable[Mapping[str, Any]]) -> bool:
    """Equal but for lastTransitionTime."""
    def key(items: Iterable[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted((c.get("type"), c.get("status"), c.get("reason"), c.get("message")) for c in items)
    return key(a) == key(b)
