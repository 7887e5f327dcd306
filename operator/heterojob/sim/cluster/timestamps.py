"""Timestamps as the API server writes them (`metadata.creationTimestamp`, `deletionTimestamp`, conditions'
`lastTransitionTime`): whole seconds, UTC, RFC 3339."""

from __future__ import annotations

import datetime


def now(after_s: float = 0.0) -> str:
    at = datetime.datetime.now(tz=datetime.UTC) + datetime.timedelta(seconds=after_s)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_stamp(stamp: str | None, less: int | None) -> float | None:
    """Unix seconds of a deletionTimestamp as this server writes it, less a grace period (None: either missing
    or unreadable)."""
    if stamp is None or less is None:
        return None
    try:
        at = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()
    except (TypeError, ValueError):
        return None
    return at - less


def iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
