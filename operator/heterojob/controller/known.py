"""What the operator knows of each HeteroJob between passes: the newest body it has seen, and the newest version
a pass has acted on (client-go's informer cache, and its "expectations" of the controller's own writes).

- A pass reads its job from here rather than from the API server: the body the last watch event brought, or the
  answer to the operator's own write (newer than any event before it). A resync round reads every job from the
  API server again (`stale`), whatever the events said.
- The watch event echoing the operator's own status write starts no pass when the pass that wrote settled it:
  that pass did everything the version it wrote calls for (`end`). A pass that wrote and did not settle is
  followed by one more pass, as the echo would have started. A write made outside the job's own pass (another
  job's pass asking it for a checkpoint, the alert receiver, the monitor) is always followed by a pass.
- A write whose answer holds anything the writer did not write (someone else's write in between: a spec edit, a
  status written by hand) never settles: the next pass reads it.

Versions are compared as integers: Kubernetes 1.35 makes a resource's resourceVersions comparable (KEP-5504); a
version that does not read as one turns the cache off for that job (every event starts a pass that reads the
API server, as before).
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_PASS: contextvars.ContextVar[str | None] = contextvars.ContextVar("heterojob_pass", default=None)
_IGNORED_META = ("resourceVersion", "managedFields")  # what any write changes in metadata


def version(body: Mapping[str, Any] | None) -> int | None:
    """The body's resourceVersion as an integer (KEP-5504: positive, no leading zeros); None when it is not one."""
    rv = ((body or {}).get("metadata") or {}).get("resourceVersion")
    if not isinstance(rv, str) or not rv.isdigit() or rv.startswith("0"):
        return None
    return int(rv)


def merged(target: Any, patch: Any) -> Any:
    """`patch` applied to `target` as a JSON merge patch (RFC 7386: None deletes, a mapping merges, the rest
    replaces), without changing either."""
    if not isinstance(patch, Mapping):
        return patch
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merged(out.get(key), value)
    return out


def defaulted(value: Any, schema: Mapping[str, Any] | None) -> Any:
    """`value` with the defaults of its structural `schema` filled in where a field is absent, as the API server
    fills a custom resource's (without changing `value`)."""
    if not schema:
        return value
    if isinstance(value, Mapping):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        out = {k: defaulted(v, props.get(k) or (extra if isinstance(extra, Mapping) else None))
               for k, v in value.items()}
        for key, sub in props.items():
            if key not in out and "default" in sub:
                out[key] = defaulted(sub["default"], sub)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [defaulted(v, schema["items"]) for v in value]
    return value


def as_written(base: Mapping[str, Any], status: Mapping[str, Any], answer: Mapping[str, Any],
               schema: Mapping[str, Any] | None = None) -> bool:
    """Whether `answer` (the API server's answer to a merge patch of `status` onto the job's status) is `base`
    with that patch (and the defaults of the status' structural `schema`) and nothing else: nobody else wrote
    the job in between."""
    if answer.get("spec") != base.get("spec"):
        return False
    meta_a, meta_b = answer.get("metadata") or {}, base.get("metadata") or {}
    if {k: v for k, v in meta_a.items() if k not in _IGNORED_META} != \
            {k: v for k, v in meta_b.items() if k not in _IGNORED_META}:
        return False
    return answer.get("status") == defaulted(merged(base.get("status") or {}, status), schema)


@dataclass
class _Job:
    body: dict[str, Any] | None = None  # the newest body known; None: read it from the API server
    version: int = 0  # its resourceVersion (0: none known)
    acted: int = 0  # the newest version a pass acted on
    asked: int = 0  # the newest version a pass was asked for (a poke: it runs, or runs once more)
    passing: bool = False  # the job's pass runs now
    start: int = 0  # the version the running pass read
    writes: dict[int, bool] = field(default_factory=dict)  # the pass's own writes: version -> as written
    chain: dict[int, dict[str, Any]] = field(default_factory=dict)  # version written onto -> the answer
    blind: bool = False  # a version did not read as an integer: no cache for this job


class Known:
    """Per job key: the newest body and the versions acted on. All calls are on the event loop."""

    def __init__(self, status_schema: Mapping[str, Any] | None = None) -> None:
        self._jobs: dict[str, _Job] = {}
        self.status_schema = status_schema  # the CRD's structural schema of status (its defaults)

    def _job(self, key: str) -> _Job:
        job = self._jobs.get(key)
        if job is None:
            job = self._jobs[key] = _Job()
        return job

    # --- what comes in -------------------------------------------------------------------------------------

    def event(self, key: str, body: Mapping[str, Any]) -> bool:
        """A watch event's body; True when a pass should look (a version newer than any known, or one no pass
        acted on)."""
        job = self._job(key)
        v = version(body)
        if v is None or job.blind:
            job.blind, job.body = True, None
            return True
        if v > job.version:
            job.body, job.version = dict(body), v
        elif v <= max(job.acted, job.asked) or job.passing:
            return False  # acted on or asked for already (a repeat), or the running pass decides at its end
        job.asked = v
        return True

    def read(self, key: str) -> dict[str, Any] | None:
        """The body a pass may use instead of reading the API server; None: read it."""
        job = self._jobs.get(key)
        return None if job is None or job.blind else job.body

    def fetched(self, key: str, body: Mapping[str, Any]) -> None:
        """A body read from the API server (the newest there is when it was read)."""
        job = self._job(key)
        v = version(body)
        if v is None:
            job.blind, job.body = True, None
        elif v >= job.version and not job.blind:
            job.body, job.version = dict(body), v

    def written(self, key: str, answer: Mapping[str, Any] | None, base: Mapping[str, Any] | None = None,
                status: Mapping[str, Any] | None = None) -> None:
        """The API server's answer to the operator's own write of the job. With the `base` it was written onto
        and the `status` merge patch sent, a write whose answer is exactly that may settle its pass."""
        if answer is None:
            return
        job = self._job(key)
        v = version(answer)
        if v is None or job.blind:
            job.blind, job.body = True, None
            return
        if v > job.version:
            job.body, job.version = dict(answer), v
        if _PASS.get() != key or not job.passing:
            return  # not the job's own pass: its echo starts a pass
        exact = base is not None and status is not None and as_written(base, status, answer, self.status_schema)
        job.writes[v] = job.writes.get(v, True) and exact
        based_on = version(base)
        if based_on is not None:
            job.chain[based_on] = dict(answer)

    def base(self, key: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """What a write based on `body` is written onto: the answer to this pass's own earlier write based on
        it (a step that holds the body the pass read, after another step wrote), else `body`."""
        job = self._jobs.get(key)
        if job is None or not job.passing or _PASS.get() != key:
            return body
        seen: set[int] = set()
        while (v := version(body)) is not None and v in job.chain and v not in seen:
            seen.add(v)
            body = job.chain[v]
        return body

    def stale(self, key: str) -> None:
        """Read the job from the API server at its next pass (the resync's safety net)."""
        job = self._jobs.get(key)
        if job is not None:
            job.body = None

    def forget(self, key: str) -> None:
        self._jobs.pop(key, None)

    # --- a pass --------------------------------------------------------------------------------------------

    def begin(self, key: str, body: Mapping[str, Any]) -> contextvars.Token[str | None]:
        """The job's pass starts on `body`."""
        job = self._job(key)
        job.passing, job.start = True, version(body) or 0
        job.writes.clear()
        job.chain.clear()
        return _PASS.set(key)

    def end(self, key: str, token: contextvars.Token[str | None], settled: bool) -> bool:
        """The job's pass ended; `settled`: what it wrote needs no other pass. True when another pass should
        look (a version no pass acted on: its own unsettled write, or anyone else's)."""
        _PASS.reset(token)
        job = self._jobs.get(key)
        if job is None:
            return False
        job.passing = False
        writes, job.chain = job.writes, {}
        job.writes = {}
        if writes and settled and all(writes.values()):
            job.acted = max(job.acted, max(writes))
        else:
            job.acted = max(job.acted, job.start)
        if job.blind or job.version <= max(job.acted, job.asked):
            return False
        job.asked = job.version
        return True

    def abort(self, key: str, token: contextvars.Token[str | None]) -> None:
        """The pass raised: nothing it did counts as acted on (the queue retries it after a backoff)."""
        _PASS.reset(token)
        job = self._jobs.get(key)
        if job is not None:
            job.passing = False
            job.writes.clear()
            job.chain.clear()
