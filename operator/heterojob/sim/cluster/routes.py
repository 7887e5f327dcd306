"""The emulator's request addresses: a resource URL parsed (`Route`), the resource it names (`ResourceKind`), an
object's key in its resource, and the qualified name kube-apiserver's errors give a resource. The first step of every
request (serving.py): what is asked of which resource."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Route:
    group: str
    version: str
    plural: str
    namespace: str | None
    name: str | None
    subresource: str | None


def parse_route(path: str) -> Route | None:
    """Resource URLs only (`/api/v1/...`, `/apis/g/v/...` with a plural); None for discovery paths."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 3 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else None
    sub = "/".join(rest[2:]) or None
    return Route(group, version, plural, namespace, name, sub)


@dataclass(frozen=True)
class ResourceKind:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    status_subresource: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)


Key = tuple[str | None, str]  # (namespace, name)


def is_discovery(path: str) -> bool:
    """The paths kmock answers: `/api`, `/apis`, `/apis/{group}` (the group/version lists are served here)."""
    parts = [p for p in path.split("/") if p]
    return parts in (["api"], ["apis"]) or (len(parts) == 2 and parts[0] == "apis")


def qualified(kind: ResourceKind) -> str:
    """`schema.GroupResource.String()`: `heterojobs.heterojob.io`, `pods`."""
    return f"{kind.plural}.{kind.group}" if kind.group else kind.plural
