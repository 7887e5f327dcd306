"""What a training script imports to take part in checkpoints and resume (DESIGN.md, checkpoint protocol).

    from heterojob.sdk import Checkpointer

    ckpt = Checkpointer()
    state = load(ckpt.resume_from) if ckpt.resume_from else fresh()
    for step in range(state.step, total):
        train_one_step(state)
        ckpt.maybe_checkpoint(step + 1, lambda uri: save(state, uri))

`maybe_checkpoint` is cheap to call every step: it looks for a request at most every `poll_s` seconds,
in the downward-API annotations file the operator mounts at /etc/heterojob/annotations, falling back to
the pod's own annotations through the API. On a new request it calls `save(uri)` with
`$HETEROJOB_CHECKPOINT_DIR/<id>/` (spec.checkpoint.storage + the job's name) and answers with the pod annotation
`heterojob.io/checkpoint-ack: "<id>;<step>;<uri>;size=<bytes>"` (the pod's service account may patch its own
pod). `save` may return the number of bytes this rank wrote (0 when it writes nothing, e.g. every rank but
0 in plain data parallelism): the operator sums the ranks' sizes into `status.checkpoint.last.sizeBytes`,
and weighs that against the links between regions before moving the job (docs/multicluster.md). When
`save` returns None the ack carries no size and ends at the URI, as earlier SDKs wrote it (the operator
reads both forms); the planner then assumes spec.checkpoint.sizeHint, else devices x device memory.

With `checkpoint_on_eviction=True` (main thread only: it installs a SIGTERM handler) a rank evicted by a drain
(its pod carries DisruptionTarget reason EvictionByEvictionAPI, which the API server adds before it deletes the
pod) keeps training through its grace period until it has answered the checkpoint the operator asks for, then
exits (code 143, as SIGTERM would); any other SIGTERM ends it at the next `maybe_checkpoint`. The kubelet kills
it at the end of the grace period (terminationGracePeriodSeconds) if no request came.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from heterojob.constants import (ANNOTATION_CHECKPOINT_ACK, ANNOTATION_CHECKPOINT_REQUEST, CHECKPOINT_SIZE_MAX,
                                 EVICTED_BY_EVICTION_API)

log = logging.getLogger("heterojob.sdk")

_LINE = re.compile(r'^([^=]+)="(.*)"$')


def read_annotations(path: Path) -> dict[str, str]:
    """The downward API's `key="value"` lines (values escaped as Go strings: \\" and \\\\)."""
    out: dict[str, str] = {}
    try:
        text = path.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m:
            out[m.group(1)] = m.group(2).replace('\\"', '"').replace("\\\\", "\\")
    return out


class Checkpointer:
    def __init__(self, *, directory: str | None = None, pod: str | None = None, namespace: str | None = None,
                 podinfo: str | Path | None = None, api: Any = None, poll_s: float = 1.0,
                 resume_from: str | None = None, clock: Callable[[], float] = time.monotonic,
                 checkpoint_on_eviction: bool = False) -> None:
        """Everything defaults to what the operator puts in the pod's environment."""
        env = os.environ
        self.directory = (directory or env.get("HETEROJOB_CHECKPOINT_DIR")
                          or f"file:///tmp/heterojob/{env.get('HETEROJOB_JOB', 'job')}").rstrip("/")
        self.pod = pod or env.get("HETEROJOB_POD_NAME") or env.get("HOSTNAME", "")
        self.namespace = namespace or env.get("HETEROJOB_NAMESPACE", "default")
        self.resume_from: str | None = resume_from or env.get("HETEROJOB_RESUME_FROM") or None
        self.annotations_file = Path(podinfo or env.get("HETEROJOB_PODINFO", "/etc/heterojob")) / "annotations"
        self.poll_s = poll_s
        self._clock = clock
        self._api = api
        self._last_poll = float("-inf")
        self._answered: set[str] = set()
        self.terminating = False  # SIGTERM came (with checkpoint_on_eviction)
        self._evicted: bool | None = None  # whether that SIGTERM is an eviction's (read once, from the pod)
        if checkpoint_on_eviction:
            signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum: int, frame: object) -> None:
        self.terminating = True

    def _was_evicted(self) -> bool:
        """Whether this pod carries DisruptionTarget=True reason EvictionByEvictionAPI (a drain's eviction)."""
        try:
            pod = self._core().read_namespaced_pod(self.pod, self.namespace)
        except Exception:  # noqa: BLE001 - no API (or no permission): end as SIGTERM would
            return False
        return any(c.type == "DisruptionTarget" and c.status == "True" and c.reason == EVICTED_BY_EVICTION_API
                   for c in (pod.status.conditions or []))

    def _core(self) -> Any:
        if self._api is None:
            import kubernetes

            kubernetes.config.load_incluster_config()
            self._api = kubernetes.client.ApiClient()
        import kubernetes

        return kubernetes.client.CoreV1Api(self._api)

    def requested(self) -> str | None:
        """The id of a checkpoint the operator asks for and this process has not answered yet."""
        wanted = read_annotations(self.annotations_file).get(ANNOTATION_CHECKPOINT_REQUEST)
        if wanted is None:
            try:
                pod = self._core().read_namespaced_pod(self.pod, self.namespace)
                wanted = (pod.metadata.annotations or {}).get(ANNOTATION_CHECKPOINT_REQUEST)
            except Exception:  # noqa: BLE001 - no API (or no permission): only the file counts
                wanted = None
        return wanted if wanted and wanted not in self._answered else None

    def maybe_checkpoint(self, step: int, save: Callable[[str], int | None]) -> str | None:
        """At a step boundary: save and acknowledge if a checkpoint is asked for; the URI saved, or None.
        `save(uri)` may return the bytes this rank wrote (reported with the ack). After SIGTERM (with
        `checkpoint_on_eviction`) it raises SystemExit: at once unless the pod was evicted, else once answered."""
        if self.terminating and self._evicted is None:
            self._evicted = self._was_evicted()
        if self.terminating and not self._evicted:
            raise SystemExit(EXIT_SIGTERM)
        now = self._clock()
        if now - self._last_poll < self.poll_s:
            return None
        self._last_poll = now
        wanted = self.requested()
        if wanted is None:
            return None
        uri = f"{self.directory}/{wanted}/"
        size = _size(save(uri))
        ack = f"{wanted};{step};{uri}" + (f";size={size}" if size is not None else "")
        self._core().patch_namespaced_pod(self.pod, self.namespace, {"metadata": {"annotations": {
            ANNOTATION_CHECKPOINT_ACK: ack}}})
        self._answered.add(wanted)
        if self.terminating:
            raise SystemExit(EXIT_SIGTERM)  # saved within the grace period: the drain may go on
        return uri


EXIT_SIGTERM = 128 + signal.SIGTERM  # what a process killed by SIGTERM reports


def _size(value: object) -> int | None:
    """What `save` returned, as bytes for the ack; anything but a whole number of bytes is left out (logged):
    the checkpoint still counts, only its size is unknown."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= CHECKPOINT_SIZE_MAX:
        log.warning("heterojob: save() returned %r, not a number of bytes >= 0; the ack carries no size",
                    value if not isinstance(value, str) else value[:32])
        return None
    return value
