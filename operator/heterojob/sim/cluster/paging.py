"""List pagination (`limit`, `continue`), as kube-apiserver v1.32 serves it from etcd (k8s.io/apiserver
pkg/storage/etcd3 store.go GetList, pkg/storage continue.go).

Items come in key order (`<namespace>/<name>`); a page of `limit` items carries `metadata.continue` (base64url of
`{"v":"meta.k8s.io/v1","rv":<list resourceVersion>,"start":"<next key>\\u0000"}`) and, when no selector filters the
list, `metadata.remainingItemCount`. A continue token that does not decode is 400 BadRequest ("continue key is not
valid: ..."); a continue token with `resourceVersion` is 400 too. Unlike etcd, the emulator keeps no old
revisions: a continued list reads the current objects after the token's key (no 410 Expired, and no snapshot).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from heterojob.sim.cluster.errors import ApiError


def key_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name', '')}" if namespace else str(meta.get("name", ""))


def encode(rv: int, start: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start + "\x00"}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode(token: str) -> tuple[int, str]:
    try:
        raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        if not isinstance(raw, dict) or raw.get("v") != "meta.k8s.io/v1":
            raise ValueError("continue key is not valid: incorrect encoded start resourceVersion (version "
                             "meta.k8s.io/v1)")
        start = str(raw.get("start") or "")
        if not start:
            raise ValueError("continue key is not valid: encoded start key empty")
        return int(raw.get("rv") or 0), start
    except ValueError as exc:
        message = str(exc) if str(exc).startswith("continue key is not valid") else \
            f"continue key is not valid: {exc}"
        raise ApiError(400, "BadRequest", message) from None
    except (binascii.Error, TypeError, UnicodeDecodeError) as exc:
        raise ApiError(400, "BadRequest", f"continue key is not valid: {exc}") from None


@dataclass(frozen=True)
class Page:
    limit: int
    start: str | None  # key to start from (inclusive), from the continue token
    rv: int | None

    @classmethod
    def of(cls, query: Mapping[str, str], current_rv: int) -> Page:
        raw_limit = query.get("limit") or "0"
        try:
            limit = int(raw_limit)
        except ValueError:
            raise ApiError(400, "BadRequest", f'invalid value "{raw_limit}" for "limit"') from None
        token = query.get("continue")
        if not token:
            return cls(max(limit, 0), None, None)
        if query.get("resourceVersion") not in (None, "", "0"):
            raise ApiError(400, "BadRequest", "specifying resource version is not allowed when using continue")
        rv, start = decode(token)
        return cls(max(limit, 0), start, rv)

    def cut(self, items: list[dict[str, Any]], current_rv: int, with_remaining: bool
            ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """This page's items (key order when paging) and the list metadata."""
        rv = self.rv if self.rv is not None else current_rv
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if not self.limit and self.start is None:
            return items, meta
        ordered = sorted(items, key=key_of)
        if self.start is not None:
            ordered = [i for i in ordered if key_of(i) >= self.start]
        if not self.limit or len(ordered) <= self.limit:
            return ordered, meta
        page = ordered[:self.limit]
        meta["continue"] = encode(rv, key_of(page[-1]))
        if with_remaining:
            meta["remainingItemCount"] = len(ordered) - self.limit
        return page, meta
