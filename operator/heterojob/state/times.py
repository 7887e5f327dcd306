"""Moved to `heterojob.api.times` (the wire format of statuses and Events). Kept only for
`controller/admission.py`, whose rewrite imports `heterojob.api.times`; delete with it."""

from heterojob.api.times import iso, timestamp

__all__ = ["iso", "timestamp"]
