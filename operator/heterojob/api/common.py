"""The base model of every spec and status, and the error report a user can act on."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pydantic
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from heterojob.api.names import DNS1123_LABEL_RE, NAME_MAX

DNS_LABEL = DNS1123_LABEL_RE
DNS_LABEL_MAX = NAME_MAX
# A job's name also names its pods (`<job>-g<generation>-<rank>`) and its headless Service,
# which must stay a DNS label: leave room for the suffix.
JOB_NAME_MAX = 45
MAX_REPLICAS = 1024  # a job's replicas (spec.replicas) and a measured speed's (status.scheduling)


class Model(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are errors (they are usually typos)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_enum_values=False,
        use_attribute_docstrings=True,  # a docstring under a field is its CRD description (kubectl explain)
    )

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class StatusModel(Model):
    """Status is written by the operator; tolerate fields from newer versions instead of failing."""

    model_config = ConfigDict(extra="allow", frozen=False)


@dataclass(frozen=True)
class FieldProblem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class NestedProblems(ValueError):
    """Raised by a field validator that finds several problems below its field: (sub-path, message) each,
    so every problem keeps its own path (`spec.template.spec.containers[0].env: ...`)."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{p}: {m}" for p, m in problems))
        self.problems = problems


@dataclass
class SpecError(Exception):
    """Every problem of one object, each with the field path and what would be accepted."""

    problems: list[FieldProblem] = field(default_factory=list)

    def __str__(self) -> str:
        return "; ".join(str(p) for p in self.problems)

    @property
    def paths(self) -> list[str]:
        return [p.path for p in self.problems]


def _path(prefix: str, loc: tuple[Any, ...]) -> str:
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part).startswith("function-") or part in ("str", "int", "list", "dict"):
            continue  # pydantic's validator-kind segments carry no field information
        else:
            out += f".{part}" if out else str(part)
    return out


def _shorten(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _message(err: Any, model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        accepted = _accepted_fields(model, loc[:-1])
        hint = f" (accepted: {', '.join(accepted)})" if accepted else ""
        return f"unknown field{hint}"
    if kind == "missing":
        return "required field is missing"
    msg = re.sub(r"^(Value error|Assertion failed), ", "", err["msg"])
    if "input" in err and kind not in ("model_type", "dict_type"):
        msg += f" (got {_shorten(err['input'])})"
    elif kind in ("model_type", "dict_type"):
        msg += f" (got {type(err.get('input')).__name__})"
    return msg


def _accepted_fields(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The wire names a nested model at `loc` accepts, to suggest the fix for a typo."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or not (isinstance(current, type) and issubclass(current, BaseModel)):
            continue
        by_alias = {f.alias or n: f for n, f in current.model_fields.items()}
        fld = by_alias.get(part) or current.model_fields.get(part)
        if fld is None:
            return []
        current = _inner_model(fld.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or n for n, f in current.model_fields.items()]
    return []


def _inner_model(annotation: Any) -> Any:
    for arg in getattr(annotation, "__args__", ()) or ():
        inner = _inner_model(arg)
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            return inner
    return annotation


M = TypeVar("M", bound=BaseModel)


def parse_spec(model: type[M], data: Any, prefix: str = "spec") -> M:
    """Parse `data` into `model`, or raise SpecError listing every problem at once."""
    if data is None:
        raise SpecError([FieldProblem(prefix, "required field is missing")])
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            nested = (err.get("ctx") or {}).get("error")
            if isinstance(nested, NestedProblems):
                problems += [FieldProblem(_path(prefix, loc) + sub, message) for sub, message in nested.problems]
                continue
            problems.append(FieldProblem(_path(prefix, loc), _message(err, model, loc)))
        raise SpecError(problems) from None


def check_object_name(name: str | None, max_length: int = DNS_LABEL_MAX) -> list[FieldProblem]:
    if not name:
        return [FieldProblem("metadata.name", "required field is missing")]
    problems = []
    if len(name) > max_length:
        problems.append(FieldProblem("metadata.name", f"must be at most {max_length} characters (got {len(name)})"))
    if not re.match(DNS_LABEL, name):
        problems.append(FieldProblem(
            "metadata.name",
            f"must be a DNS label: lower-case letters, digits and '-', starting and ending with a letter or digit (got {name!r})",
        ))
    return problems


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    type: str
    json_path: str
    description: str = ""
    priority: int = 0


@dataclass(frozen=True)
class ResourceDef:
    """What the CRD generator, the operator and the emulator need to know about one resource."""

    kind: str
    plural: str
    singular: str
    namespaced: bool
    spec: type[BaseModel]
    status: type[BaseModel]
    short_names: tuple[str, ...] = ()
    printer_columns: tuple[PrinterColumn, ...] = ()
    description: str = ""

    @property
    def crd_name(self) -> str:
        from heterojob.constants import GROUP

        return f"{self.plural}.{GROUP}"
