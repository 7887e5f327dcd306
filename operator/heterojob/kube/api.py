"""The Kubernetes calls the operator makes.

The calls of every pass (jobs, pods, Services, access objects, Events) go out on the event loop through aiohttp,
the HTTP client Kopf's own watches use, with the kubeconfig's address, TLS and credentials (`Endpoint`); the
rest (lists and reads of the member poll, Secrets) through the kubernetes client on a bounded thread pool
(`Kube.call`). Both share one client-side rate limit (`RateLimit`)."""

from __future__ import annotations

import asyncio
import datetime
import functools
import json
import logging
import re
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import kubernetes
import urllib3
from aiolimiter import AsyncLimiter
from kubernetes.client import ApiException

from heterojob.api.names import LABEL_VALUE_RE
from heterojob.constants import API_VERSION, GROUP, LABEL_JOB, VERSION
from heterojob.kube.ownpods import OwnPods, answer_body
from heterojob.kube.recorder import EventRecorder
from heterojob.kube.routes import JSON, ROUTES, Endpoint, headers

log = logging.getLogger(__name__)
T = TypeVar("T")
_LABEL_VALUE = re.compile(LABEL_VALUE_RE)  # a valid label value
WRITTEN = 30_000  # objects whose last write `Kube.written` remembers (3 per job: its access objects)


def now_iso() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def load_client(kubeconfig: str | None = None, pool: int = 32) -> kubernetes.client.ApiClient:
    """In-cluster when running in a pod and no kubeconfig is given; otherwise the kubeconfig."""
    config = kubernetes.client.Configuration()
    if kubeconfig is None:
        try:
            kubernetes.config.load_incluster_config(client_configuration=config)
        except kubernetes.config.ConfigException:
            kubernetes.config.load_kube_config(client_configuration=config)
    else:
        kubernetes.config.load_kube_config(config_file=kubeconfig, client_configuration=config)
    config.connection_pool_maxsize = pool
    return kubernetes.client.ApiClient(config)


def _read_through(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(...)`; an answer asked for unread (`_preload_content=False`, to skip the client's deserialization) is
    read to its end here, in the worker, so its connection goes back to the pool (urllib3 releases it only then:
    an answer left unread closes its connection when collected, and every such call would open a new one)."""
    result = fn(*args, **kwargs)
    if isinstance(result, urllib3.BaseHTTPResponse):
        result.data  # noqa: B018 - kept on the response for the caller
    return result


class Unanswered(Exception):
    """A cluster the operator may not call now (a member known not to answer: `kube.members.MemberKube`)."""


# a call the API server did not answer (timed out, refused, cut): retried, said in one line
UNANSWERED = (TimeoutError, ConnectionError, aiohttp.ClientConnectionError, Unanswered)


class Conflict(Exception):
    """The object changed since the version a write was based on; read it again and retry."""


@dataclass(frozen=True)
class RateLimit:
    """The client-side rate limit of API calls, as Kubernetes controllers set it (client-go's token bucket):
    `qps` calls a second on average, up to `burst` at once. qps <= 0: unlimited.

    The default is a guard against a runaway loop, not the budget of a small controller: this operator does what
    Kueue (20 QPS, burst 30) and the Job controller (kube-controller-manager's 20/30, per controller) split between
    them, creating every gang's pods, Service and access objects itself (7-8 calls per admission), and an API server
    protects itself with API Priority and Fairness (GA in 1.29; controller-runtime turned its client-side limit off
    by default for that reason). 500 a second is an admission burst of about 60 jobs a second sustained."""

    qps: float = 500.0
    burst: int = 1000

    def limiter(self) -> AsyncLimiter | None:
        return AsyncLimiter(max(1, self.burst), max(1, self.burst) / self.qps) if self.qps > 0 else None


class OwnedElsewhere(Exception):
    """An object of the name exists and is not the owner's (or is being deleted): created once it is gone."""


def controller_uid(obj: Mapping[str, Any]) -> str | None:
    """The uid of the object's controller (its ownerReference with `controller: true`), if any."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return next((str(r.get("uid")) for r in refs if isinstance(r, Mapping) and r.get("controller")), None)


def foreign(wanted: Mapping[str, Any], found: Mapping[str, Any]) -> str | None:
    """Why the object `found` under `wanted`'s name is not the one `wanted` describes (None: it is): being deleted,
    or held by another controller than `wanted`'s owner. Without an owner in `wanted` (a member cluster, where
    the HeteroJob is not), any object of the name that is not being deleted is taken as the one made before."""
    if (found.get("metadata") or {}).get("deletionTimestamp"):
        return "is being deleted; created once it is gone"
    mine, theirs = controller_uid(wanted), controller_uid(found)
    if mine is None or theirs == mine:
        return None
    if theirs is None:
        return ("exists and has no controller: it is not this HeteroJob's (delete it, or rename the job); "
                "created once it is gone")
    return (f"belongs to another owner (uid {theirs}), an earlier HeteroJob of this name whose dependents "
            f"the garbage collector has not deleted yet; created once it is gone")


class Kube:
    def __init__(self, client: kubernetes.client.ApiClient, workers: int = 16,
                 rate: RateLimit | None = None) -> None:
        self.client = client
        self._rate = rate or RateLimit()
        self._limiter: tuple[asyncio.AbstractEventLoop, AsyncLimiter | None] | None = None  # one per event loop
        self.core = kubernetes.client.CoreV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="heterojob-api")
        self._background: set[asyncio.Task[Any]] = set()
        self.events = EventRecorder(lambda *args, **kwargs: self.send(*args, **kwargs))  # `send` as it is then
        self.written: dict[tuple[str, str, str], str] = {}  # (kind, namespace, name) -> digest of what it wrote last
        self.own_pods = OwnPods()  # pods this client wrote whose watch event has not come yet
        # the proxy as the environment gives it now, kept: the kubeconfig's token refresh hook, which `headers` runs
        # before every call, sets the host again, and the client then reads the proxy variables anew each time (a
        # tenth of a millisecond a call, about 10% of the operator's CPU in an admission burst)
        client.configuration.proxy = client.configuration.proxy
        self._endpoint = Endpoint.of(client.configuration)
        self._connections = max(workers, int(client.configuration.connection_pool_maxsize or 0), 16)
        self._http: tuple[asyncio.AbstractEventLoop, aiohttp.ClientSession, aiohttp.TCPConnector] | None = None
        self._slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None  # one per event loop

    timeout: float | None = None  # seconds a call may take once it has a connection (None: no bound)

    async def _acquire(self) -> None:
        """A token of the rate limit (one limiter per event loop)."""
        loop = asyncio.get_running_loop()
        if self._limiter is None or self._limiter[0] is not loop:
            self._limiter = (loop, self._rate.limiter())
        if self._limiter[1] is not None:
            await self._limiter[1].acquire()

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn` of the kubernetes client, on the thread pool (reads whose answer the client parses)."""
        await self._acquire()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(_read_through, fn, *args, **kwargs))

    def guard(self) -> None:
        """Raises instead of calling when the cluster is known not to answer (a member: `MemberKube`)."""

    def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._http is None or self._http[0] is not loop:
            connector = aiohttp.TCPConnector(limit=self._connections, ssl=self._endpoint.ssl)
            self._http = (loop, aiohttp.ClientSession(connector=connector), connector)
        return self._http[1]

    def _slot(self) -> asyncio.Semaphore:
        """One of the client's connections. A call waits here for one, and its timeout counts only from then: in a
        burst of placements a member's creates queue behind its 16 connections, and that wait in the operator's own
        queue is not the member's slowness (counted in, it timed out creates the member had answered, and each such
        gang backed off for 10 s and was placed again)."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots[0] is not loop:
            self._slots = (loop, asyncio.Semaphore(self._connections))
        return self._slots[1]

    async def request(self, method: str, path: str, body: Any = None, content_type: str = JSON,
                      query: Mapping[str, str] | None = None) -> Any:
        """One call on the event loop; the answer's JSON (None when empty). An answer of 400 or above raises
        `ApiException` with its status, reason and body, as the kubernetes client does."""
        await self._acquire()
        self.guard()
        async with self._slot():
            self.guard()  # found not to answer while this call waited for a connection: it fails at once
            return await self._request(method, path, body, content_type, query)

    async def _request(self, method: str, path: str, body: Any, content_type: str,
                       query: Mapping[str, str] | None) -> Any:
        sent = {"Accept": JSON, **headers(self.client.configuration)}
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            sent["Content-Type"] = content_type
        try:
            async with self._session().request(method, self._endpoint.base + path, data=data, params=query,
                                               headers=sent, timeout=aiohttp.ClientTimeout(total=self.timeout),
                                               proxy=self._endpoint.proxy,
                                               server_hostname=self._endpoint.server_hostname) as answer:
                raw = await answer.read()
                if answer.status >= 400:
                    error = ApiException(status=answer.status, reason=answer.reason,
                                         body=raw.decode("utf-8", errors="replace"))
                    error.headers = answer.headers
                    raise error
        except TimeoutError:
            if self.timeout is None:
                raise
            raise TimeoutError(f"the API server did not answer {method} {path} within {self.timeout:g} s") from None
        return json.loads(raw) if raw else None

    async def send(self, route: str, body: Any = None, query: Mapping[str, str] | None = None, **where: str) -> Any:
        """`request` of the call the kubernetes client names `route` (`kube.routes.ROUTES`); `where` fills its path
        (namespace, name, plural)."""
        method, path, content_type = ROUTES[route]
        return await self.request(method, path.format(group=GROUP, version=VERSION, **where), body, content_type,
                                  query)

    def remember(self, key: tuple[str, str, str], digest: str) -> None:
        """`written[key] = digest`, the oldest forgotten first beyond `WRITTEN` objects."""
        self.written.pop(key, None)
        self.written[key] = digest
        while len(self.written) > WRITTEN:
            self.written.pop(next(iter(self.written)))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.events.close()
        if self._http is None:
            return
        loop, session, _ = self._http
        self._http = None
        if loop.is_running():  # the operator's cleanup, on its loop
            task = loop.create_task(session.close())
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        elif not loop.is_closed():
            loop.run_until_complete(session.close())

    # --- HeteroJobs --------------------------------------------------------------------------------

    async def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            job: dict[str, Any] = await self.send("get_namespaced_custom_object", namespace=namespace, plural="heterojobs", name=name)
            return job
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def list_jobs(self) -> list[dict[str, Any]]:
        listed = await self.send("list_cluster_custom_object", plural="heterojobs")
        return list(listed.get("items") or [])

    async def patch_job_status(self, namespace: str, name: str, status: Mapping[str, Any],
                               resource_version: str | None = None) -> dict[str, Any] | None:
        """Merge-patch `status`; None when the job is gone.

        With `resource_version`, the write happens only if nobody wrote since (else `Conflict`): for
        writers that hold a possibly stale copy, so a list such as conditions is never clobbered.
        """
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            answer: dict[str, Any] = await self.send("patch_namespaced_custom_object_status", body,
                                                     namespace=namespace, plural="heterojobs", name=name)
            return answer
        except ApiException as exc:
            if exc.status == 404:
                return None
            if exc.status == 409:
                raise Conflict(f"{namespace}/{name} changed since resourceVersion {resource_version}") from None
            raise

    # --- pods and services ---------------------------------------------------------------------------

    async def job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        if not _LABEL_VALUE.match(job):
            return []  # no pod can carry it as a label value, and the API server refuses the selector (400)
        listed = await self.send("list_namespaced_pod", query={"labelSelector": f"{LABEL_JOB}={job}"},
                                 namespace=namespace)
        return list(listed.get("items") or [])

    async def create(self, obj: Mapping[str, Any]) -> bool:
        """Create a pod or Service; False when this owner's object of that name exists already (creation is
        idempotent by name). A 409 is checked as Kubernetes' controllers check a controllerRef: an object of
        that name held by another owner (an earlier HeteroJob of the same name whose dependents the garbage
        collector has not deleted yet) or being deleted raises `OwnedElsewhere`, to be retried once it is gone."""
        return (await self.create_read(obj))[0]

    async def create_read(self, obj: Mapping[str, Any]) -> tuple[bool, Mapping[str, Any] | None]:
        """`create`, and the object as the API server holds it (its answer, or the one found under the name;
        None when an answer did not read as an object)."""
        meta = obj["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        pod = obj["kind"] == "Pod"
        create, read = ("create_namespaced_pod", "read_namespaced_pod") if pod else \
            ("create_namespaced_service", "read_namespaced_service")
        for _ in range(2):  # once more when the one in the way went between the 409 and the read
            try:
                if pod:
                    self.own_pods.making.add((namespace, name))
                made = await self.send(create, obj, namespace=namespace)
                if pod:
                    self.own_pods.written(namespace, name, answer_body(made))
                return True, made if isinstance(made, Mapping) else None
            except ApiException as exc:
                if exc.status != 409:
                    raise
            finally:
                self.own_pods.making.discard((namespace, name))
            try:
                found = await self.send(read, namespace=namespace, name=name)
            except ApiException as exc:
                if exc.status == 404:
                    continue
                raise
            why = foreign(obj, found)
            if why is None:
                return False, found if isinstance(found, Mapping) else None
            raise OwnedElsewhere(f"{obj['kind']} {namespace}/{name} already exists and {why}")
        raise OwnedElsewhere(f"{obj['kind']} {namespace}/{name} already exists and is being replaced; created once "
                             f"it is gone")

    async def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> bool:
        """Merge `annotations` into a pod's (None removes one); False when the pod is gone."""
        try:
            answer = await self.send("patch_namespaced_pod", {"metadata": {"annotations": dict(annotations)}},
                                     namespace=namespace, name=name)
            self.own_pods.written(namespace, name, answer_body(answer))
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise

    async def annotate_job(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        try:
            await self.send("patch_namespaced_custom_object", {"metadata": {"annotations": dict(annotations)}},
                            namespace=namespace, plural="heterojobs", name=name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    async def patch_quota_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        try:
            await self.send("patch_namespaced_custom_object_status", {"status": dict(status)}, namespace=namespace,
                            plural="heteroquotas", name=name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    # --- AcceleratorClasses and the discovery report ----------------------------------------------------

    async def patch_class_status(self, name: str, status: Mapping[str, Any]) -> None:
        """Merge-patch an AcceleratorClass's status (a class that is gone is skipped)."""
        try:
            await self.send("patch_cluster_custom_object_status", {"status": dict(status)},
                            plural="acceleratorclasses", name=name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    async def create_class(self, obj: Mapping[str, Any]) -> bool:
        """Create an AcceleratorClass; False when one of that name exists already."""
        try:
            await self.send("create_cluster_custom_object", dict(obj), plural="acceleratorclasses")
            return True
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise

    async def write_config_map(self, namespace: str, name: str, data: Mapping[str, str],
                               labels: Mapping[str, str] | None = None) -> None:
        """Create or update (merge-patch `data`) a ConfigMap, e.g. the discovery report."""
        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})}, "data": dict(data)}
        try:
            await self.send("patch_namespaced_config_map", {"data": dict(data)}, namespace=namespace, name=name)
            return
        except ApiException as exc:
            if exc.status != 404:
                raise
        try:
            await self.send("create_namespaced_config_map", body, namespace=namespace)
        except ApiException as exc:
            if exc.status != 409:  # created meanwhile: the next sync patches it
                raise

    async def delete_pod(self, namespace: str, name: str) -> None:
        try:
            answer = await self.send("delete_namespaced_pod", namespace=namespace, name=name)
            self.own_pods.deleted(namespace, name, answer_body(answer))
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.own_pods.deleted(namespace, name, None)

    async def delete_service(self, wanted: Mapping[str, Any]) -> bool:
        """Delete the Service of `wanted`'s name when it is the one `wanted` describes (its owner's: `foreign`),
        with a uid precondition so a Service made again meanwhile stays; False when there is none to delete."""
        meta = wanted["metadata"]
        try:
            where = {"namespace": meta["namespace"], "name": meta["name"]}
            found = await self.send("read_namespaced_service", **where)
            if foreign(wanted, found) is not None:
                return False
            await self.send("delete_namespaced_service", {"preconditions": {"uid": found["metadata"]["uid"]}}, **where)
            return True
        except ApiException as exc:
            if exc.status in (404, 409):  # gone, or another one of the name since the read
                return False
            raise

    # --- Events --------------------------------------------------------------------------------------

    def post_event(self, job: Mapping[str, Any], type_: str, reason: str, message: str,
                   involved: tuple[str, str] = (API_VERSION, "HeteroJob")) -> None:
        """A Kubernetes Event on the job, written in the background, in order, one at a time and aggregated with
        its repeats (`kube.recorder`): a failed post never blocks a decision."""
        self.events.post(job, involved, type_, reason, message, now_iso())
