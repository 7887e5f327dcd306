"""Moved to `heterojob.state.knowledge` (reading statuses into what the policy knows). Kept only for
`controller/admission.py`, whose rewrite imports `heterojob.state.knowledge`; delete with it."""

from heterojob.state.knowledge import Knower

__all__ = ["Knower"]
