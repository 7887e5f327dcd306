"""The Lease a replica must hold to run the operator (coordination.k8s.io/v1), read and written here.

`acquire()` returns once this replica holds the Lease; `hold()` renews it every `renew_s` and returns
when it could not renew for `renew_deadline_s` (or another replica took it): the caller must then stop
acting at once. `release()` gives it up on a clean shutdown so a standby takes over without waiting for
expiry. Decisions (create, take, renew, wait) are engine.basics.leadership's.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from dataclasses import dataclass

import kubernetes
from kubernetes.client.rest import ApiException

from heterojob.constants import LABEL_ROLE
from heterojob.engine.basics.leadership import LeaseMove, LeaseRecord, next_move

log = logging.getLogger("heterojob.leader")
TIMEOUT = (3.0, 5.0)  # connect, read: a call never outlives the renew deadline


@dataclass(frozen=True)
class LeaseConfig:
    namespace: str
    name: str = "heterojob-operator"
    identity: str = ""
    duration_s: float = 15.0  # a standby takes over this long after the holder's last renewal
    renew_s: float = 2.0  # the holder renews this often
    renew_deadline_s: float = 10.0  # the holder steps down when it could not renew for this long
    retry_s: float = 2.0  # a standby looks at the Lease this often
    pod: str | None = None  # this replica's own pod (in `namespace`): labelled with its role, if given


def _now_micro() -> str:
    return _micro(datetime.datetime.now(tz=datetime.UTC))


def _micro(when: datetime.datetime) -> str:
    """MicroTime as the API writes it (Lease times are MicroTime)."""
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(self, api: kubernetes.client.ApiClient, config: LeaseConfig) -> None:
        self.api = kubernetes.client.CoordinationV1Api(api)
        self.core = kubernetes.client.CoreV1Api(api)
        self.config = config
        self.is_leader = False
        self.last_contact = time.monotonic()  # the last time the API server answered us (for liveness)
        self._seen: tuple[tuple[str | None, str | None, str | None], float] | None = None
        self._record: LeaseRecord | None = None

    def _read(self) -> LeaseRecord | None:
        try:
            lease = self.api.read_namespaced_lease(self.config.name, self.config.namespace, _request_timeout=TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        spec = lease.spec
        return LeaseRecord(spec.holder_identity, float(spec.lease_duration_seconds or self.config.duration_s),
                           spec.renew_time.isoformat() if spec.renew_time else None,
                           lease.metadata.resource_version, int(spec.lease_transitions or 0),
                           _micro(spec.acquire_time) if spec.acquire_time else None)

    def _body(self, record: LeaseRecord | None, taking: bool) -> dict[str, object]:
        now = _now_micro()
        spec: dict[str, object] = {"holderIdentity": self.config.identity,
                                   "leaseDurationSeconds": int(self.config.duration_s), "renewTime": now}
        if taking or record is None:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = (record.transitions + 1) if record is not None else 0
        else:  # a renewal: the same holder since acquireTime
            spec["acquireTime"] = record.acquire_time or now
            spec["leaseTransitions"] = record.transitions
        meta: dict[str, object] = {"name": self.config.name, "namespace": self.config.namespace}
        if record is not None and record.resource_version:
            meta["resourceVersion"] = record.resource_version  # optimistic concurrency: 409 if it moved
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}

    def try_once(self) -> bool:
        """One look at the Lease (blocking: run it in a thread); True when this replica holds it after."""
        record = self._read()
        self.last_contact = time.monotonic()
        now = time.monotonic()
        if record is None or self._seen is None or self._seen[0] != record.fingerprint:
            self._seen = (record.fingerprint if record else (None, None, None), now)
        move = next_move(record, self.config.identity, self._seen[1], now)
        if move == LeaseMove.WAIT:
            return False
        try:
            if move == LeaseMove.CREATE:
                self.api.create_namespaced_lease(self.config.namespace, self._body(None, True), _request_timeout=TIMEOUT)
            else:
                assert record is not None
                body = self._body(record, move == LeaseMove.TAKE)
                self.api.replace_namespaced_lease(self.config.name, self.config.namespace, body,
                                                 _request_timeout=TIMEOUT)
        except ApiException as exc:
            if exc.status in (409, 422):
                return False  # another replica wrote first
            raise
        self.last_contact = time.monotonic()
        if move != LeaseMove.RENEW:
            log.info("leader election: %s now holds Lease %s/%s (%s)", self.config.identity,
                     self.config.namespace, self.config.name, move.value)
        return True

    async def acquire(self) -> None:
        """Wait (as a standby) until this replica holds the Lease."""
        while True:
            try:
                if await asyncio.to_thread(self.try_once):
                    self.is_leader = True
                    return
            except Exception as exc:  # noqa: BLE001 - the API server may be away for a while; keep trying
                log.warning("leader election: cannot read Lease %s/%s: %s", self.config.namespace,
                            self.config.name, _short(exc))
            await asyncio.sleep(self.config.retry_s)

    async def hold(self) -> str:
        """Renew until that fails for renew_deadline_s; returns why leadership ended."""
        last_ok = time.monotonic()
        while True:
            await asyncio.sleep(self.config.renew_s)
            try:
                if await asyncio.to_thread(self.try_once):
                    last_ok = time.monotonic()
                    continue
                self.is_leader = False
                return "another replica holds the Lease now"
            except Exception as exc:  # noqa: BLE001 - a failed renewal is retried until the renew deadline
                log.warning("leader election: renewing Lease %s/%s failed: %s", self.config.namespace,
                            self.config.name, _short(exc))
            if time.monotonic() - last_ok >= self.config.renew_deadline_s:
                self.is_leader = False
                return f"could not renew the Lease for {self.config.renew_deadline_s:.0f}s"

    def label_role(self, role: str) -> None:
        """Label this replica's pod `heterojob.io/role=<role>` (blocking; best effort): the Service selects
        `leader`, so alerts and scrapes reach the replica that acts while every replica stays Ready (a
        leader-only readiness would deadlock a rolling update). A restarted container relabels its pod
        `standby` before it does anything else."""
        if not self.config.pod:
            return
        try:
            self.core.patch_namespaced_pod(self.config.pod, self.config.namespace,
                                           {"metadata": {"labels": {LABEL_ROLE: role}}}, _request_timeout=TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - the Lease decides who acts; the label only routes traffic
            log.warning("could not label pod %s/%s %s=%s: %s", self.config.namespace, self.config.pod, LABEL_ROLE,
                        role, _short(exc))

    def release(self) -> None:
        """Give the Lease up (blocking), so a standby need not wait for it to expire."""
        if not self.is_leader:
            return
        self.is_leader = False
        try:
            record = self._read()
            if record is None or record.holder != self.config.identity:
                return
            body = self._body(record, False)
            body["spec"] = {"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": _now_micro(),
                            "leaseTransitions": record.transitions}
            self.api.replace_namespaced_lease(self.config.name, self.config.namespace, body, _request_timeout=TIMEOUT)
            log.info("leader election: released Lease %s/%s", self.config.namespace, self.config.name)
        except Exception as exc:  # noqa: BLE001 - it expires anyway
            log.warning("leader election: could not release the Lease (it expires in %.0fs): %s",
                        self.config.duration_s, _short(exc))


def _short(exc: BaseException) -> str:
    """One line for the log: an ApiException's status and reason, else the exception's first line."""
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
