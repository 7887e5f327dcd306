"""API errors as a real API server words them: `Status` objects and field errors.

Shapes follow k8s.io/apimachinery (v1.32): `pkg/util/validation/field/errors.go` (`<field>: <Type>: <value>:
<detail>`, values printed like Go's `%v`/`%q`) and `pkg/api/errors` `NewInvalid` (422, reason `Invalid`,
message `<Kind>.<group> "<name>" is invalid: <error>` or `... is invalid: [<e1>, <e2>]`, one `details.causes`
entry per field error).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, dict(details or {})

    def status(self) -> dict[str, Any]:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "details": self.details, "code": self.code}


_OMIT = object()
_TYPE_WORDS = {"FieldValueRequired": "Required value", "FieldValueInvalid": "Invalid value",
               "FieldValueNotSupported": "Unsupported value", "FieldValueDuplicate": "Duplicate value",
               "FieldValueForbidden": "Forbidden", "FieldValueTooLong": "Too long", "FieldValueTooMany": "Too many",
               "FieldValueTypeInvalid": "Invalid value", "FieldValueNotFound": "Not found"}
_NO_VALUE = {"FieldValueRequired", "FieldValueForbidden", "FieldValueTooLong"}


def go_value(value: Any) -> str:
    """A JSON value printed the way field errors print it (Go `%v` for numbers/bools, `%q` for strings)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)
    if isinstance(value, int):
        return str(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class FieldError:
    type: str  # the CauseType, e.g. FieldValueInvalid
    field: str
    value: Any = _OMIT
    detail: str = ""

    def body(self) -> str:
        text = _TYPE_WORDS[self.type]
        if self.type not in _NO_VALUE and self.value is not _OMIT:
            text = f"{text}: {go_value(self.value)}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"


def required(field: str, detail: str = "") -> FieldError:
    return FieldError("FieldValueRequired", field, detail=detail)


def invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", field, value, detail)


def not_supported(field: str, value: Any, allowed: Iterable[str]) -> FieldError:
    quoted = ", ".join(json.dumps(v) for v in allowed)
    return FieldError("FieldValueNotSupported", field, value, f"supported values: {quoted}" if quoted else "")


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", field, detail=detail)


def duplicate(field: str, value: Any) -> FieldError:
    return FieldError("FieldValueDuplicate", field, value)


def too_long(field: str, max_length: int) -> FieldError:
    return FieldError("FieldValueTooLong", field, detail=f"may not be more than {max_length} bytes")


def too_many(field: str, actual: int, max_items: int) -> FieldError:
    return FieldError("FieldValueTooMany", field, actual, f"must have at most {max_items} items")


def invalid_object(kind: str, group: str, name: str, errors: Iterable[FieldError]) -> ApiError:
    """422 Invalid with the aggregated message (duplicates dropped, as `ErrorList.ToAggregate` does)."""
    unique: list[FieldError] = []
    seen: set[str] = set()
    for error in errors:
        if str(error) not in seen:
            seen.add(str(error))
            unique.append(error)
    qualified = f"{kind}.{group}" if group else kind
    if not unique:
        message = f'{qualified} "{name}" is invalid'
    elif len(unique) == 1:
        message = f'{qualified} "{name}" is invalid: {unique[0]}'
    else:
        message = f'{qualified} "{name}" is invalid: [{", ".join(str(e) for e in unique)}]'
    causes = [{"reason": e.type, "message": e.body(), "field": e.field} for e in unique]
    return ApiError(422, "Invalid", message, {"name": name, "group": group, "kind": kind, "causes": causes})


def forbidden_request(plural: str, group: str, name: str, why: str) -> ApiError:
    """403 Forbidden from admission: `pods "x" is forbidden: <why>`."""
    resource = f"{plural}.{group}" if group else plural
    return ApiError(403, "Forbidden", f'{resource} "{name}" is forbidden: {why}',
                    {"name": name, "group": group, "kind": plural})
