"""Kubernetes label and field selectors, as the API server evaluates them."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Matcher = Callable[[Mapping[str, Any]], bool]

_SET_EXPR = re.compile(r"^\s*(!?)([^\s!=,()]+)\s*(?:(in|notin)\s*\(([^)]*)\))?\s*$")
_EQ_EXPR = re.compile(r"^\s*([^\s!=,()]+)\s*(==|=|!=)\s*([^\s!=,()]*)\s*$")


class SelectorError(ValueError):
    pass


def _split(selector: str) -> list[str]:
    """Split on commas that are not inside parentheses: `a in (x,y),b=c` -> two terms."""
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(selector):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            terms.append(selector[start:i])
            start = i + 1
    terms.append(selector[start:])
    return [t for t in terms if t.strip()]


def label_matcher(selector: str | None) -> Matcher:
    """`a=b,c!=d,e,!f,g in (x,y),h notin (z)` against metadata.labels."""
    if not selector:
        return lambda _obj: True
    checks: list[Callable[[Mapping[str, str]], bool]] = []
    for term in _split(selector):
        if m := _EQ_EXPR.match(term):
            key, op, value = m.groups()
            if op == "!=":
                checks.append(lambda ls, k=key, v=value: ls.get(k) != v)
            else:
                checks.append(lambda ls, k=key, v=value: ls.get(k) == v)
        elif m := _SET_EXPR.match(term):
            neg, key, op, values = m.groups()
            if op is None:
                checks.append((lambda ls, k=key: k not in ls) if neg else (lambda ls, k=key: k in ls))
            else:
                if neg:
                    raise SelectorError(f"unable to parse requirement: {term!r}")
                options = {v.strip() for v in values.split(",") if v.strip()}
                if op == "in":
                    checks.append(lambda ls, k=key, o=options: ls.get(k) in o)
                else:
                    checks.append(lambda ls, k=key, o=options: ls.get(k) not in o)
        else:
            raise SelectorError(f"unable to parse requirement: {term!r}")

    def match(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(check(labels) for check in checks)

    return match


def _field(obj: Mapping[str, Any], path: str) -> str:
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping):
            return ""
        current = current.get(part)
    return "" if current is None else str(current)


def field_matcher(selector: str | None) -> Matcher:
    """`metadata.name=x,spec.nodeName!=y`: equality on dotted paths (any field, unlike a real server)."""
    if not selector:
        return lambda _obj: True
    checks: list[Matcher] = []
    for term in _split(selector):
        m = _EQ_EXPR.match(term)
        if not m:
            raise SelectorError(f"invalid field selector: {term!r}")
        path, op, value = m.groups()
        if op == "!=":
            checks.append(lambda o, p=path, v=value: _field(o, p) != v)
        else:
            checks.append(lambda o, p=path, v=value: _field(o, p) == v)
    return lambda obj: all(check(obj) for check in checks)
