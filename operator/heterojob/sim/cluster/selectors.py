"""Kubernetes label and field selectors, as the API server evaluates them."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from heterojob.sim.cluster.builtin import label_value_errors, qualified_name_errors

Matcher = Callable[[Mapping[str, Any]], bool]

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


# Label selectors as k8s.io/apimachinery v0.32 pkg/labels/selector.go lexes and parses them (its grammar, its
# operators -- including `>` and `<` on integer values -- and its error wording, which the API server returns as
# a 400 and kubectl prints).
_SYMBOLS = "=!(),><"
_OPERATORS = ("!", "!=", "(", ")", ",", "<", "=", "==", ">", "in", "notin")
_BINARY = ("in", "notin", "=", "==", "!=", ">", "<")  # the tokens parseOperator accepts
# its refusal names selection's binaryOperators (`>` and `<` are the operators "gt" and "lt")
_BINARY_NAMES = "in, notin, =, ==, !=, gt, lt"
_END = ("end", "")


def _lex(selector: str) -> list[tuple[str, str]]:
    """Tokens as (kind, literal): kind is "id", "end", "error" or the operator itself."""
    tokens, i, n = [], 0, len(selector)
    while True:
        while i < n and selector[i] in " \t\r\n":
            i += 1
        if i >= n:
            tokens.append(_END)
            return tokens
        if selector[i] in _SYMBOLS:
            j, last = i, None
            while j < n and selector[j] in _SYMBOLS:
                if selector[i:j + 1] in _OPERATORS:
                    last = j + 1
                elif last is not None:
                    break
                j += 1
            if last is None:
                tokens.append(("error", f"error expected: keyword found '{selector[i:j]}'"))
                i = j
            else:
                tokens.append((selector[i:last], selector[i:last]))
                i = last
            continue
        j = i
        while j < n and selector[j] not in _SYMBOLS and selector[j] not in " \t\r\n":
            j += 1
        word = selector[i:j]
        tokens.append((word if word in ("in", "notin") else "id", word))
        i = j


class _Parser:
    def __init__(self, selector: str) -> None:
        self.tokens, self.at = _lex(selector), 0

    def peek(self, values: bool = True) -> tuple[str, str]:
        kind, lit = self.tokens[self.at]
        return ("id" if values and kind in ("in", "notin") else kind), lit

    def take(self, values: bool = True) -> tuple[str, str]:
        found = self.peek(values)
        self.at += 1
        return found

    def requirements(self) -> list[tuple[str, str, set[str]]]:
        out = []
        while True:
            kind, lit = self.peek()
            if kind == "end":
                return out
            if kind not in ("id", "!"):
                raise SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")
            try:
                out.append(self.requirement())
            except SelectorError as exc:
                raise SelectorError(f"unable to parse requirement: {exc}") from None
            kind, lit = self.take()
            if kind == "end":
                return out
            if kind != ",":
                raise SelectorError(f"found '{lit}', expected: ',' or 'end of string'")
            kind, lit = self.peek()
            if kind not in ("id", "!"):
                raise SelectorError(f"found '{lit}', expected: identifier after ','")

    def requirement(self) -> tuple[str, str, set[str]]:
        kind, key = self.take()
        negated = kind == "!"
        if negated:
            kind, key = self.take()
        if kind != "id":
            raise SelectorError(f"found '{key}', expected: identifier")
        if negated:  # `!key` is complete: what follows must be ',' or the end
            _validate(key, "!", set())
            return key, "!", set()
        if self.peek()[0] in ("end", ","):
            _validate(key, "exists", set())
            return key, "exists", set()
        op, lit = self.take(values=False)
        if op not in _BINARY:
            raise SelectorError(f"found '{lit}', expected: {_BINARY_NAMES}")
        values = self.values() if op in ("in", "notin") else self.exact()
        _validate(key, op, values)
        return key, op, values

    def exact(self) -> set[str]:
        if self.peek()[0] in ("end", ","):
            return {""}
        kind, lit = self.take()
        if kind != "id":
            raise SelectorError(f"found '{lit}', expected: identifier")
        return {lit}

    def values(self) -> set[str]:
        kind, lit = self.take()
        if kind != "(":
            raise SelectorError(f"found '{lit}' expected: '('")
        kind, first = self.peek()
        if kind == ")":
            self.take()
            return {""}
        if kind not in ("id", ","):
            raise SelectorError(f"found '{first}', expected: ',', ')' or identifier")
        found: set[str] = set()
        while True:
            kind, lit = self.take()
            if kind == "id":
                found.add(lit)
                nxt, nlit = self.peek()
                if nxt == ")":
                    break
                if nxt != ",":
                    raise SelectorError(f"found '{nlit}', expected: ',' or ')'")
            elif kind == ",":
                if not found:
                    found.add("")
                nxt, _ = self.peek()
                if nxt == ")":
                    found.add("")
                    break
                if nxt == ",":
                    self.take()
                    found.add("")
            else:
                raise SelectorError(f"found '{lit}', expected: ',', or identifier")
        if self.take()[0] != ")":
            raise SelectorError(f"found '{first}', expected: ')'")
        return found


def _validate(key: str, op: str, values: set[str]) -> None:
    """labels.NewRequirement's checks once a term has parsed: the key a qualified name, `>`/`<` values integers,
    every value a label value; its field errors (paths `key`, `values[i]`, `values[i][key]`) aggregated as
    `[a, b]` when there are several."""
    found = [f'key: Invalid value: "{key}": {"; ".join(msgs)}'] if (msgs := qualified_name_errors(key)) else []
    ordered = sorted(values)
    if op in (">", "<"):
        found += [f'values[{i}]: Invalid value: "{value}": for \'Gt\', \'Lt\' operators, the value must be an integer'
                  for i, value in enumerate(ordered) if not re.fullmatch(r"[-+]?[0-9]+", value)]
    for i, value in enumerate(ordered):
        if msgs := label_value_errors(value):
            found.append(f'values[{i}][{key}]: Invalid value: "{value}": {"; ".join(msgs)}')
    if found:
        raise SelectorError(found[0] if len(found) == 1 else f"[{', '.join(found)}]")


def _integer(value: str | None) -> int | None:
    return int(value) if value is not None and re.fullmatch(r"[-+]?[0-9]+", value) else None


def _check(labels: Mapping[str, str], key: str, op: str, values: set[str]) -> bool:
    """labels.Requirement.Matches."""
    if op in ("in", "=", "=="):
        return key in labels and labels[key] in values
    if op in ("notin", "!="):
        return key not in labels or labels[key] not in values
    if op == "exists":
        return key in labels
    if op == "!":
        return key not in labels
    have, want = _integer(labels.get(key)), _integer(next(iter(values)))
    if have is None or want is None:
        return False
    return have > want if op == ">" else have < want


def label_matcher(selector: str | None) -> Matcher:
    """`a=b,c!=d,e,!f,g in (x,y),h notin (z),n>3` against metadata.labels; SelectorError with the real wording."""
    if not selector:
        return lambda _obj: True
    requirements = _Parser(selector).requirements()

    def match(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(_check(labels, key, op, values) for key, op, values in requirements)

    return match


_FALSE_WHEN_UNSET = {"spec.unschedulable", "spec.hostNetwork"}  # Go bools: the field set prints "false"


# Field labels whose value is not the object's field of that path (pkg/registry/core/event/strategy.go v1.32,
# EventToSelectableFields): an Event's `source` is source.component, else reportingController; its
# `reportingComponent` is reportingController (the core/v1 name of events.k8s.io's reportingController).
def _reporting(event: Mapping[str, Any]) -> Any:
    return event.get("reportingComponent") or event.get("reportingController")  # core/v1 or events.k8s.io name


_DERIVED: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "source": lambda o: (o.get("source") or {}).get("component") or _reporting(o),
    "reportingComponent": _reporting,
}


def _field(obj: Mapping[str, Any], path: str) -> str:
    if path in _DERIVED and obj.get("kind") == "Event":
        found = _DERIVED[path](obj)
        return "" if found is None else str(found)
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping):
            current = None
            break
        current = current.get(part)
    if current is None and path in _FALSE_WHEN_UNSET:
        return "false"
    if isinstance(current, bool):
        return "true" if current else "false"
    return "" if current is None else str(current)


# The field labels kube-apiserver v1.32 converts per resource (pkg/apis/*/v1/conversion.go AddFieldLabelConversion*,
# apiextensions' customresource handler for CRs: metadata.name, metadata.namespace and the CRD's selectableFields);
# every other label answers 400 "field label not supported: <label>". Resources not listed here accept any path.
FIELD_LABELS: dict[tuple[str, str], frozenset[str]] = {
    ("", "pods"): frozenset({"metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy",
                             "spec.schedulerName", "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
                             "status.podIP", "status.podIPs", "status.nominatedNodeName"}),
    ("", "nodes"): frozenset({"metadata.name", "spec.unschedulable"}),
    ("", "namespaces"): frozenset({"metadata.name", "status.phase"}),
    ("", "events"): frozenset({"metadata.name", "metadata.namespace", "involvedObject.kind",
                               "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
                               "involvedObject.apiVersion", "involvedObject.resourceVersion",
                               "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"}),
    ("", "secrets"): frozenset({"metadata.name", "metadata.namespace", "type"}),
    ("", "configmaps"): frozenset({"metadata.name", "metadata.namespace"}),
    ("", "services"): frozenset({"metadata.name", "metadata.namespace"}),
    ("", "serviceaccounts"): frozenset({"metadata.name", "metadata.namespace"}),
    ("", "resourcequotas"): frozenset({"metadata.name", "metadata.namespace"}),
    ("apps", "deployments"): frozenset({"metadata.name", "metadata.namespace"}),
    ("apps", "replicasets"): frozenset({"metadata.name", "metadata.namespace", "status.replicas"}),
    ("apps", "statefulsets"): frozenset({"metadata.name", "metadata.namespace", "status.successful"}),
    ("batch", "jobs"): frozenset({"metadata.name", "metadata.namespace", "status.successful"}),
    ("policy", "poddisruptionbudgets"): frozenset({"metadata.name", "metadata.namespace"}),
}
CR_FIELD_LABELS = frozenset({"metadata.name", "metadata.namespace"})


def field_matcher(selector: str | None, allowed: frozenset[str] | None = None) -> Matcher:
    """`metadata.name=x,spec.nodeName!=y`: equality on dotted paths; with `allowed`, other paths are refused
    (as the resource's field label conversion refuses them)."""
    if not selector:
        return lambda _obj: True
    checks: list[Matcher] = []
    for term in _split(selector):
        m = _EQ_EXPR.match(term)
        if not m:
            raise SelectorError(f"invalid field selector: {term!r}")
        path, op, value = m.groups()
        if allowed is not None and path not in allowed:
            raise SelectorError(f"field label not supported: {path}")
        if op == "!=":
            checks.append(lambda o, p=path, v=value: _field(o, p) != v)
        else:
            checks.append(lambda o, p=path, v=value: _field(o, p) == v)
    return lambda obj: all(check(obj) for check in checks)


def label_selector_matcher(selector: Mapping[str, Any] | None) -> Matcher:
    """A `metav1.LabelSelector` object (matchLabels, matchExpressions); an empty or missing one matches nothing
    here (as a PodDisruptionBudget's does in the eviction handler)."""
    if not selector or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        return lambda _obj: False
    terms = [f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        terms.append({"In": f"{key} in ({','.join(values)})", "NotIn": f"{key} notin ({','.join(values)})",
                      "Exists": key, "DoesNotExist": f"!{key}"}.get(op, f"{key} in ()"))
    try:
        return label_matcher(",".join(terms))
    except SelectorError:  # a real server refuses such a selector when the object is written; match nothing
        return lambda _obj: False
