"""What a training script imports to take part in checkpoints and resume (docs/architecture.md, checkpoints).

    from heterojob_sdk import Checkpointer

    ckpt = Checkpointer()
    state = load(ckpt.resume_from) if ckpt.resume_from else fresh()
    for step in range(state.step, total):
        train_one_step(state)
        ckpt.maybe_checkpoint(step + 1, lambda uri: save(state, uri))

`maybe_checkpoint` is cheap to call every step: it looks for a request at most every `poll_s` seconds,
in the downward-API annotations file the operator mounts at /etc/heterojob/annotations, falling back to
the pod's own annotations through the API. On a new request it calls `save(uri)` with
`$HETEROJOB_CHECKPOINT_DIR/<id>/` (spec.checkpoint.storage + the job's name) and answers with the pod annotation
`heterojob.io/checkpoint-ack: "<id>;<step>;<uri>;size=<bytes>"`, with, in the same write,
`heterojob.io/checkpoint-save-time: "<id>;start=<unix s>;end=<unix s>"` (when this rank began and finished
saving, so the operator's `saveSeconds` is the ranks' own save, not its observation), written with the pod's service account (the
operator's per-job Role lets it get and patch its own gang's pods and nothing else). `save` may return the
number of bytes this rank wrote (0 when it writes nothing, e.g. every rank but 0 in plain data parallelism):
the operator sums the ranks' sizes into `status.checkpoint.last.sizeBytes`, and weighs that against the links
between regions before moving the job (docs/multicluster.md). When `save` returns None the ack carries no size
and ends at the URI (the operator reads both forms); the planner then assumes spec.checkpoint.sizeHint, else
devices x device memory.

Nothing here raises into the training loop. An acknowledgement the API server refuses or does not answer
(403, 5xx, a timeout, no API server at all) is logged and retried with backoff (1 s doubling to 60 s) from the
next calls, without saving again; a `save` that raises is logged with its traceback and asked again after the
same backoff; a pod that cannot be read (no downward-API file and a 403) is logged when the failure starts or
changes, and at least every 5 minutes while it lasts.

With `checkpoint_on_eviction=True` (main thread only: it installs a SIGTERM handler) a rank evicted by a drain
(its pod carries DisruptionTarget reason EvictionByEvictionAPI, which the API server adds before it deletes the
pod) keeps training through its grace period until its checkpoint is acknowledged, then exits (SystemExit 143,
as SIGTERM would); any other SIGTERM ends it at the next `maybe_checkpoint`. The kubelet kills it at the end of
the grace period (terminationGracePeriodSeconds) if no request came or no ack went through.

Every `maybe_checkpoint(step, ...)` (or `report(step)`, for a loop that checkpoints elsewhere) also counts the
step into the Prometheus metric `heterojob_training_steps_total`, served on `$HETEROJOB_METRICS_PORT` (or
`metrics_port=`) when set: the operator reads each job's step rate from it, without any checkpoint
(metrics.py; docs/telemetry.md, "Training steps"). Off when no port is given.
"""

from __future__ import annotations

import logging
import math
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

from heterojob_sdk import metrics as step_metrics
from heterojob_sdk.podapi import SERVICE_ACCOUNT_DIR, ApiError, PodAPI, PodClient
from heterojob_sdk.protocol import (ANNOTATION_CHECKPOINT_ACK, ANNOTATION_CHECKPOINT_SAVE_TIME, ANNOTATION_CHECKPOINT_REQUEST, CHECKPOINT_SIZE_MAX,
                                    EVICTED_BY_EVICTION_API, EXIT_SIGTERM)

log = logging.getLogger("heterojob.sdk")

_LINE = re.compile(r'^([^=]+)="(.*)"$')
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 60.0
REPEAT_LOG_S = 300.0  # a lasting read failure is logged again this often
HINT_403 = ("the pod's service account may not get/patch its own pod: run it under the job's ServiceAccount "
            "the operator creates (do not set automountServiceAccountToken: false; see docs/operations.md, "
            '"What a training pod may do")')


def read_annotations(path: Path) -> dict[str, str]:
    """The downward API's `key="value"` lines (values escaped as Go strings: \\" and \\\\)."""
    out: dict[str, str] = {}
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return out
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m:
            out[m.group(1)] = m.group(2).replace('\\"', '"').replace("\\\\", "\\")
    return out


class Backoff:
    """Exponential backoff on a clock: `ready()` until a failure, then not before the delay has passed."""

    def __init__(self, clock: Callable[[], float], first_s: float = RETRY_FIRST_S, max_s: float = RETRY_MAX_S
                 ) -> None:
        self._clock, self.first_s, self.max_s = clock, first_s, max_s
        self.failures = 0
        self.next_at = -math.inf

    def ready(self) -> bool:
        return self._clock() >= self.next_at

    def failed(self) -> float:
        """Record a failure; the delay before the next attempt."""
        delay = min(self.max_s, self.first_s * 2 ** min(self.failures, 32))
        self.failures += 1
        self.next_at = self._clock() + delay
        return delay

    def succeeded(self) -> None:
        self.failures, self.next_at = 0, -math.inf


class Checkpointer:
    def __init__(self, *, directory: str | None = None, pod: str | None = None, namespace: str | None = None,
                 podinfo: str | Path | None = None, api: PodAPI | None = None, poll_s: float = 1.0,
                 resume_from: str | None = None, clock: Callable[[], float] = time.monotonic,
                 checkpoint_on_eviction: bool = False, retry_first_s: float = RETRY_FIRST_S,
                 retry_max_s: float = RETRY_MAX_S, metrics_port: int | None = None, metrics_host: str = "") -> None:
        """Everything defaults to what the operator puts in the pod's environment; `api` to the in-cluster
        API server (`PodClient.in_cluster()`, made at first use); `metrics_port` to $HETEROJOB_METRICS_PORT
        (unset or 0: the step metric is not served)."""
        env = os.environ
        self.directory = (directory or env.get("HETEROJOB_CHECKPOINT_DIR")
                          or f"file:///tmp/heterojob/{env.get('HETEROJOB_JOB', 'job')}").rstrip("/")
        self.pod = pod or env.get("HETEROJOB_POD_NAME") or env.get("HOSTNAME", "")
        self.namespace = namespace or env.get("HETEROJOB_NAMESPACE") or _own_namespace() or "default"
        self.resume_from: str | None = resume_from or env.get("HETEROJOB_RESUME_FROM") or None
        self.annotations_file = Path(podinfo or env.get("HETEROJOB_PODINFO", "/etc/heterojob")) / "annotations"
        self.poll_s = poll_s
        self._clock = clock
        self._api = api
        self._last_poll = -math.inf
        self._answered: set[str] = set()  # ids saved (acknowledged, or their ack pending)
        self.pending_ack: tuple[str, str] | None = None  # (id, ack) saved but not yet written to the pod
        self._save_time = ""  # "<id>;start=<s>;end=<s>": when this rank saved it (written with its ack)
        self._ack_retry = Backoff(clock, retry_first_s, retry_max_s)
        self._save_retry = Backoff(clock, retry_first_s, retry_max_s)
        self._read_retry = Backoff(clock, retry_first_s, retry_max_s)
        self._read_logged: tuple[str, float] | None = None  # (the read failure logged, when)
        self.terminating = False  # SIGTERM came (with checkpoint_on_eviction)
        self._evicted: bool | None = None  # whether that SIGTERM is an eviction's (read once, from the pod)
        if checkpoint_on_eviction:
            signal.signal(signal.SIGTERM, self._on_sigterm)
        self.metrics: step_metrics.StepMetrics | None = None
        try:
            port = step_metrics.port_from(metrics_port if metrics_port is not None
                                          else env.get(step_metrics.METRICS_PORT_ENV))
            if port is not None:
                self.metrics = step_metrics.serve(port, metrics_host)
        except Exception:  # noqa: BLE001 - the metric is an extra: never a reason not to train
            log.exception("heterojob: the step metric could not be started; training goes on without it")

    def report(self, step: int) -> None:
        """Count `step` into the step metric (a no-op without a metrics port); never raises."""
        if self.metrics is None:
            return
        try:
            self.metrics.report(step)
        except Exception:  # noqa: BLE001 - never into the training loop
            log.exception("heterojob: counting step %r failed; training goes on", step)

    def _on_sigterm(self, signum: int, frame: object) -> None:
        self.terminating = True

    def _client(self) -> PodAPI:
        if self._api is None:
            self._api = PodClient.in_cluster()  # ApiError when not in a pod: asked again next time
        return self._api

    def _was_evicted(self) -> bool:
        """Whether this pod carries DisruptionTarget=True reason EvictionByEvictionAPI (a drain's eviction)."""
        try:
            pod = self._client().get_pod(self.namespace, self.pod)
        except Exception as exc:  # noqa: BLE001 - no API (or no permission): end as SIGTERM would
            log.warning("heterojob: SIGTERM, and pod %s/%s cannot be read to tell an eviction (%s): exiting",
                        self.namespace, self.pod, _why(exc))
            return False
        conditions = ((pod.get("status") or {}).get("conditions") or []) if isinstance(pod, dict) else []
        return any(isinstance(c, dict) and c.get("type") == "DisruptionTarget" and c.get("status") == "True"
                   and c.get("reason") == EVICTED_BY_EVICTION_API for c in conditions)

    def requested(self) -> str | None:
        """The id of a checkpoint the operator asks for and this process has not answered yet (None on any
        failure: logged, never raised)."""
        try:
            wanted = read_annotations(self.annotations_file).get(ANNOTATION_CHECKPOINT_REQUEST)
            if wanted is None:
                wanted = self._requested_through_api()
            return wanted if wanted and wanted not in self._answered else None
        except Exception:  # noqa: BLE001 - never into the training loop
            log.exception("heterojob: looking for a checkpoint request failed; training goes on")
            return None

    def _requested_through_api(self) -> str | None:
        if not self._read_retry.ready():
            return None
        try:
            pod = self._client().get_pod(self.namespace, self.pod)
        except Exception as exc:  # noqa: BLE001 - logged when it starts, changes, and every REPEAT_LOG_S
            delay = self._read_retry.failed()
            self._log_read_failure(exc, delay)
            return None
        if self._read_logged is not None:
            log.info("heterojob: pod %s/%s can be read again", self.namespace, self.pod)
            self._read_logged = None
        self._read_retry.succeeded()
        annotations = (pod.get("metadata") or {}).get("annotations") if isinstance(pod, dict) else None
        value = (annotations or {}).get(ANNOTATION_CHECKPOINT_REQUEST)
        return value if isinstance(value, str) else None

    def _log_read_failure(self, exc: BaseException, delay: float) -> None:
        why = _why(exc)
        now = self._clock()
        if self._read_logged is not None and self._read_logged[0] == why and now - self._read_logged[1] < REPEAT_LOG_S:
            return
        self._read_logged = (why, now)
        source = ("and there is no downward-API file " + str(self.annotations_file)
                  if not self.annotations_file.exists() else "(the downward-API file still counts)")
        who = f"pod {self.namespace}/{self.pod}" if self.pod else \
            "its pod (no HETEROJOB_POD_NAME or HOSTNAME: not in a pod?)"
        log.warning("heterojob: cannot read %s for checkpoint requests %s: %s%s; trying again in %.3gs, "
                    "training goes on", who, source, why,
                    f"; {HINT_403}" if getattr(exc, "status", None) == 403 else "", delay)

    def maybe_checkpoint(self, step: int, save: Callable[[str], int | None]) -> str | None:
        """At a step boundary: save and acknowledge if a checkpoint is asked for; the URI saved, or None.
        `save(uri)` may return the bytes this rank wrote (reported with the ack). After SIGTERM (with
        `checkpoint_on_eviction`) it raises SystemExit: at once unless the pod was evicted, else once its
        checkpoint is acknowledged. Nothing else is raised: failures are logged and retried. The step is
        counted into the step metric (`report`) on every call."""
        self.report(step)
        if self.terminating and self._evicted is None:
            self._evicted = self._was_evicted()
        if self.terminating and not self._evicted:
            raise SystemExit(EXIT_SIGTERM)
        try:
            return self._step(step, save)
        except Exception:  # noqa: BLE001 - never into the training loop
            log.exception("heterojob: checkpoint handling failed at step %d; training goes on", step)
            return None

    def _step(self, step: int, save: Callable[[str], int | None]) -> str | None:
        if self.pending_ack is not None and self._ack_retry.ready() and self._acknowledge() and self.terminating:
            raise SystemExit(EXIT_SIGTERM)  # the retried ack went through within the grace period
        now = self._clock()
        if now - self._last_poll < self.poll_s or not self._save_retry.ready():
            return None
        self._last_poll = now
        wanted = self.requested()
        if wanted is None:
            return None
        uri = f"{self.directory}/{wanted}/"
        started = time.time()  # when this rank began and finished saving, by its clock (the operator's saveSeconds)
        try:
            size = _size(save(uri))
        except Exception:  # noqa: BLE001 - the user's save: logged with its traceback, asked again later
            delay = self._save_retry.failed()
            log.exception("heterojob: save(%r) for checkpoint %s raised; trying again in %.3gs, training goes on",
                          uri, wanted, delay)
            return None
        self._save_retry.succeeded()
        self._answered.add(wanted)
        self.pending_ack = (wanted, f"{wanted};{step};{uri}" + (f";size={size}" if size is not None else ""))
        self._save_time = f"{wanted};start={started:.3f};end={time.time():.3f}"
        self._ack_retry.succeeded()  # a new ack goes at once, whatever the last one met
        if self._acknowledge() and self.terminating:
            raise SystemExit(EXIT_SIGTERM)  # saved within the grace period: the drain may go on
        return uri

    def _acknowledge(self) -> bool:
        """Write the pending ack on the pod; False (logged, retried with backoff) when that fails."""
        assert self.pending_ack is not None
        wanted, ack = self.pending_ack
        try:
            annotations = {ANNOTATION_CHECKPOINT_ACK: ack}
            if self._save_time.startswith(f"{wanted};"):
                annotations[ANNOTATION_CHECKPOINT_SAVE_TIME] = self._save_time
            self._client().patch_pod(self.namespace, self.pod, {"metadata": {"annotations": annotations}})
        except Exception as exc:  # noqa: BLE001 - 403, 5xx, timeouts, no API: retried, training goes on
            delay = self._ack_retry.failed()
            log.warning("heterojob: could not acknowledge checkpoint %s on pod %s/%s (attempt %d): %s%s; "
                        "trying again in %.3gs, training goes on", wanted, self.namespace, self.pod,
                        self._ack_retry.failures, _why(exc),
                        f"; {HINT_403}" if getattr(exc, "status", None) == 403 else "", delay)
            return False
        if self._ack_retry.failures:
            log.info("heterojob: checkpoint %s acknowledged after %d failed attempt(s)", wanted,
                     self._ack_retry.failures)
        self._ack_retry.succeeded()
        self.pending_ack = None
        return True


def _why(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, ApiError) else f"{type(exc).__name__}: {exc}"


def _own_namespace() -> str | None:
    try:
        return (SERVICE_ACCOUNT_DIR / "namespace").read_text().strip() or None
    except OSError:
        return None


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


__all__ = ["Backoff", "Checkpointer", "read_annotations"]
