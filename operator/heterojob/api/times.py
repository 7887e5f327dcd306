"""RFC 3339 timestamps as written in statuses and Events, to and from unix seconds."""

from __future__ import annotations

from datetime import datetime, timezone


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def timestamp(value: object) -> float | None:
    """Unix seconds of an RFC 3339 string, or None when absent or unreadable (status is untrusted input)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()
