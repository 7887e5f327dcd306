"""Member clusters: a `Kube` per Region that names one, its reachability, its nodes and heterojob's pods there.

The manager's one view of its members (docs/multicluster.md). Every `poll_seconds` each member is
listed (nodes; pods and Services labelled `heterojob.io/job`): a changed pod pokes its job, leftovers
(pods or Services of a job that is gone or placed elsewhere) are deleted, and the Region's
`MemberReachable` condition is written. A member that does not answer for its loss timeout is *lost*;
the reconcile pass re-places its jobs. A slow answer is not a fault: only a request timeout counts.

Credentials: the kubeconfig is read from the one Secret the Region names, on the manager, and never
logged, written to a status or an Event (messages name the Secret and the key, never the content).
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import kubernetes
import yaml
from kubernetes.client import ApiException

from heterojob.api.common import SpecError, parse_spec
from heterojob.api.region import RegionSpec
from heterojob.constants import GROUP, LABEL_JOB, VERSION
from heterojob.engine.fleet import Node, RegionInfo
from heterojob.kube import convert
from heterojob.kube.api import Kube, Unanswered, now_iso
from heterojob.kube.ownpods import kept
from heterojob.api.conditions import same, set_condition
from heterojob.api.times import iso
from heterojob.failures import describe

log = logging.getLogger(__name__)
T = TypeVar("T")
CONDITION = "MemberReachable"


@dataclass(frozen=True)
class MembersConfig:
    poll_seconds: float = 2.0  # how often each member is listed (pod changes reach the manager this fast)
    loss_timeout_s: float = 900.0  # unreachable this long: lost, its jobs re-placed (MultiKueue's 15 min)
    request_timeout_s: float = 10.0  # one call to a member; longer counts as not answering
    secret_refresh_s: float = 30.0  # a rotated kubeconfig is picked up this fast
    contact_write_s: float = 30.0  # Region status.lastContact is written at most this often


@dataclass(frozen=True)
class MemberRef:
    """Where a member region's kubeconfig is: a key of a Secret in the manager cluster."""

    region: str
    namespace: str
    name: str
    key: str
    loss_timeout_s: float | None = None

    @property
    def secret(self) -> str:
        return f"Secret {self.namespace}/{self.name} (key {self.key!r})"


def member_ref(obj: Mapping[str, Any]) -> MemberRef | None:
    """The member cluster a Region object names, or None (a local region, or an invalid spec)."""
    name = (obj.get("metadata") or {}).get("name", "")
    try:
        spec = parse_spec(RegionSpec, obj.get("spec"))
    except SpecError:
        return None  # convert.region_info logs it
    if spec.cluster is None:
        return None
    ref = spec.cluster.secret_ref
    timeout = spec.cluster.loss_timeout_seconds
    return MemberRef(name, ref.namespace, ref.name, ref.key, float(timeout) if timeout else None)


class KubeconfigInvalid(ValueError):
    """A member kubeconfig that does not load; the message names the Secret, never the content."""


def decode_secret_value(data: str) -> tuple[bytes, str]:
    """A Secret's base64 value and its sha256 digest (to rebuild a client only when the kubeconfig changes)."""
    raw = base64.b64decode(data)
    return raw, hashlib.sha256(raw).hexdigest()


def member_configuration(raw: bytes, secret: str) -> kubernetes.client.Configuration:
    """A client configuration from a member's kubeconfig (the operator's and the console's one reading of it).

    Retries are off: the next poll is the retry, and a timeout means the member did not answer. Raises
    `KubeconfigInvalid` naming `secret` and the loader's first words, never the content (it holds credentials).
    """
    try:
        config_dict = yaml.safe_load(raw)
        if not isinstance(config_dict, dict):
            raise kubernetes.config.ConfigException("not a kubeconfig document")
        config = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config_from_dict(config_dict, client_configuration=config)
    except Exception as exc:  # noqa: BLE001 - never echo the content: the type and the loader's words
        why = str(exc).splitlines()[0][:200] if isinstance(exc, kubernetes.config.ConfigException) else \
            type(exc).__name__
        raise KubeconfigInvalid(f"the kubeconfig in {secret} does not load: {why}") from None
    config.retries = 0
    return config


def _matches(node: Node, selector: Mapping[str, str]) -> bool:
    return all(node.labels.get(k) == v for k, v in selector.items())


class MemberUnavailable(Unanswered):
    """A member region's cluster has no working client now (credentials, or not answering)."""


class MemberKube(Kube):
    """A `Kube` whose every call to the member carries a timeout, and fails at once while the member is
    known not to answer (calls queued behind a partition would otherwise wait their turn to time out)."""

    def __init__(self, client: kubernetes.client.ApiClient, timeout: float, workers: int = 8) -> None:
        super().__init__(client, workers=workers)
        self.timeout = timeout  # `Kube.request`'s bound too
        self.answering = True  # set by `Members` after each poll; its own probes go through regardless

    def guard(self) -> None:
        if not self.answering:
            raise MemberUnavailable("the member cluster does not answer")

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        kwargs.setdefault("_request_timeout", self.timeout)
        probe = kwargs.pop("_probe", False)

        def guarded(*a: Any, **kw: Any) -> T:
            if not (probe or self.answering):
                raise MemberUnavailable("the member cluster does not answer")
            return fn(*a, **kw)

        return await super().call(guarded, *args, **kwargs)


@dataclass
class Member:
    ref: MemberRef
    since: float  # when this manager started following it (a restart gives it a whole timeout)
    kube: MemberKube | None = None
    digest: str = ""  # of the kubeconfig the client was built from
    read_at: float = 0.0  # when the Secret was last read
    last_ok: float | None = None
    reachable: bool = False
    problem: tuple[str, str] = ("NotContacted", "not contacted yet")
    nodes: dict[str, Node] = field(default_factory=dict)
    pods: dict[str, tuple[str, str]] = field(default_factory=dict)  # ns/pod -> (job key, resourceVersion)
    job_pods: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # job key -> its pods (`ownpods.kept`)
    views: dict[str, tuple[str, Node]] = field(default_factory=dict)  # node -> (resourceVersion, its view)
    written: list[dict[str, Any]] | None = None  # the conditions last written to the Region
    contact_written: float = 0.0


class UnusableMember(Exception):
    """Why a member cannot be used: a condition reason and a message for people (never the kubeconfig)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class Members:
    """The member clients, their health, their nodes; routes a region to the `Kube` that serves it."""

    def __init__(self, local: Kube, refs: Callable[[], Mapping[str, MemberRef]], config: MembersConfig | None = None,
                 on_pods: Callable[[Iterable[str]], None] = lambda keys: None,
                 region_of: Callable[[str], str | None] = lambda key: None,
                 on_fleet: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.time) -> None:
        self.local = local
        self.refs = refs
        self.config = config or MembersConfig()
        self.on_pods = on_pods  # job keys whose pods changed in a member
        self.region_of = region_of  # a job's region as the manager's cache knows it (a hint; checked before deleting)
        self.on_fleet = on_fleet  # a member's nodes or reachability changed: waiting jobs look again
        self.clock = clock
        self.members: dict[str, Member] = {}
        self._task: asyncio.Task[None] | None = None
        self._collisions: set[str] = set()
        self._owner: dict[str, str] = {}  # member node -> its member region (as of the last nodes())

    # --- what the controller asks ----------------------------------------------------------------------

    # A placement records its cluster (`status.placement.cluster`, the member Region's name) when it is
    # made, so a Region that gains or loses `spec.cluster` later never sends a job's pods somewhere else.

    def cluster_of(self, region: str) -> str | None:
        """The member cluster a new placement in `region` goes to; None: the manager's own cluster."""
        return region if region in self.members else None

    def kube_for(self, cluster: str | None) -> Kube:
        """The `Kube` of a placement's cluster: the manager's own for None, else the member's."""
        if cluster is None:
            return self.local
        member = self.members.get(cluster)
        if member is None:
            raise MemberUnavailable(f"no Region names member cluster {cluster} any more")
        if member.kube is None:
            raise MemberUnavailable(f"region {cluster}: {member.problem[1]}")
        return member.kube

    def pods_of(self, cluster: str, namespace: str, job: str) -> list[dict[str, Any]] | None:
        """The job's pods in `cluster` as its last poll listed them (what a pass reads of them,
        `kube.ownpods.kept`); None while the member has not answered (a pass then lists them itself)."""
        member = self.members.get(cluster)
        if member is None or not member.reachable:
            return None
        return member.job_pods.get(f"{namespace}/{job}", [])

    def reachable(self, cluster: str) -> bool:
        member = self.members.get(cluster)
        return member is not None and member.reachable

    def lost_at(self, cluster: str) -> float:
        """When `cluster` counts as lost if it does not answer before (at once when no Region names it)."""
        member = self.members.get(cluster)
        if member is None:
            return 0.0
        timeout = member.ref.loss_timeout_s or self.config.loss_timeout_s
        return (member.last_ok if member.last_ok is not None else member.since) + timeout

    def lost(self, cluster: str, now: float) -> bool:
        member = self.members.get(cluster)
        return member is None or (not member.reachable and now >= self.lost_at(cluster))

    def problem(self, cluster: str) -> str:
        member = self.members.get(cluster)
        return member.problem[1] if member is not None else "no Region names it any more"

    def fleet_nodes(self, local: Mapping[str, Node], regions: Mapping[str, RegionInfo]) -> Mapping[str, Node]:
        """The nodes the planner sees: the manager's own, except those a member Region's selector matches
        (that region's pods go to its member), and each member's nodes that its Region's selector matches
        (a member node labelled for another region would send pods to the wrong cluster)."""
        if not self.members:
            return local  # one cluster: exactly what it was
        member_regions = [regions[r] for r in self.members if r in regions]
        out = {name: node for name, node in local.items()
               if not any(_matches(node, r.node_selector) for r in member_regions)}
        for name, node in self.nodes().items():
            info = regions.get(self._owner.get(name, ""))
            if info is not None and _matches(node, info.node_selector) and name not in out:
                out[name] = node
        return out

    def nodes(self) -> dict[str, Node]:
        """Every member's nodes (as last listed); an unreachable member's are not ready, so nothing new
        lands there while the devices its jobs hold stay counted."""
        out: dict[str, Node] = {}
        self._owner = {}
        for region, member in self.members.items():
            for name, node in member.nodes.items():
                if name in out:
                    if name not in self._collisions:
                        self._collisions.add(name)
                        log.warning("node %s of member region %s has the name of another member's node; "
                                    "ignored (node names must be unique across members)", name, region)
                    continue
                out[name] = node if member.reachable else dataclasses.replace(node, ready=False, reason=(
                    f"the member cluster of region {region} is unreachable (no answer since "
                    f"{iso(member.last_ok if member.last_ok is not None else member.since)})"))
                self._owner[name] = region
        return out

    # --- the poll loop ---------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="heterojob-members")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        for member in self.members.values():
            if member.kube is not None:
                member.kube.close()

    async def _run(self) -> None:
        while True:
            try:
                await self.poll()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the loop must survive; the next poll tries again
                log.warning("member poll failed: %s: %s", type(exc).__name__, exc)
            await asyncio.sleep(self.config.poll_seconds)

    async def poll(self) -> None:
        """One look at every member (concurrently: a slow member delays nobody)."""
        refs = dict(self.refs())
        now = self.clock()
        for region in [r for r in self.members if r not in refs]:
            gone = self.members.pop(region)
            if gone.kube is not None:
                gone.kube.close()
        for region, ref in refs.items():
            member = self.members.get(region)
            if member is None or member.ref != ref:
                if member is not None and member.kube is not None:
                    member.kube.close()
                self.members[region] = Member(ref, since=now)
        await asyncio.gather(*(self._poll_one(m) for m in list(self.members.values())))

    async def _poll_one(self, member: Member) -> None:
        was = member.reachable
        try:
            await self._client(member)
            assert member.kube is not None
            await self._list(member)
        except UnusableMember as problem:
            member.reachable = False
            member.problem = (problem.reason, problem.message)
        else:
            member.reachable = True
            member.last_ok = self.clock()
            member.problem = ("Reachable", f"{len(member.nodes)} nodes, {len(member.pods)} heterojob pods")
        if member.kube is not None:
            member.kube.answering = member.reachable
        if member.reachable != was:
            log.info("member region %s %s: %s", member.ref.region, "reachable" if member.reachable else
                     "unreachable", member.problem[1])
            # their jobs look again: those with pods at the last poll, and those given pods since (a pass reads
            # a member job's pods from the poll: none of them would call the member to find it gone)
            self.on_pods({key for key, _ in member.pods.values()}
                         | (member.kube.own_pods.jobs() if member.kube is not None else set()))
            self.on_fleet()
        await self._write_condition(member)

    async def _client(self, member: Member) -> None:
        """(Re)build the member's client from its Secret when there is none or the refresh is due."""
        now = self.clock()
        if member.kube is not None and member.reachable and now - member.read_at < self.config.secret_refresh_s:
            return
        ref = member.ref
        try:
            secret = await self.local.call(self.local.core.read_namespaced_secret, ref.name, ref.namespace,
                                           _request_timeout=self.config.request_timeout_s)
        except ApiException as exc:
            if exc.status == 404:
                raise UnusableMember("SecretNotFound", f"{ref.secret} not found: create it with the member's "
                                                       "kubeconfig (README, 'Join a member cluster')") from None
            if exc.status == 403:
                raise UnusableMember("SecretForbidden", f"the operator may not read {ref.secret}: member kubeconfigs "
                                                        "belong in namespace heterojob-members, where it may") from None
            raise UnusableMember("SecretUnreadable", f"{ref.secret} could not be read: HTTP {exc.status}") from None
        except Exception as exc:  # noqa: BLE001 - the manager's own API server is away; try again
            raise UnusableMember("SecretUnreadable", f"{ref.secret} could not be read: "
                                                     f"{describe(exc, self.config.request_timeout_s)}") from None
        member.read_at = now
        data = (secret.data or {}).get(ref.key)
        if data is None:
            keys = ", ".join(sorted(secret.data or {})) or "none"
            raise UnusableMember("KubeconfigMissing", f"{ref.secret} has no key {ref.key!r} (its keys: {keys}); put "
                                                      "the member's kubeconfig there or set spec.cluster.secretRef.key")
        raw, digest = decode_secret_value(data)
        if member.kube is not None and digest == member.digest:
            return
        try:
            config = member_configuration(raw, ref.secret)
        except KubeconfigInvalid as exc:
            raise UnusableMember("KubeconfigInvalid", str(exc)) from None
        config.connection_pool_maxsize = 16  # the client's 8 workers and the poll, without discarding
        if member.kube is not None:
            member.kube.close()
        member.kube = MemberKube(kubernetes.client.ApiClient(config), self.config.request_timeout_s)
        member.digest = digest

    async def _list(self, member: Member) -> None:
        kube = member.kube
        assert kube is not None
        try:
            nodes = await kube.call(kube.core.list_node, _preload_content=False, _probe=True)
            pods = await kube.call(kube.core.list_pod_for_all_namespaces, label_selector=LABEL_JOB,
                                   _preload_content=False, _probe=True)
            services = await kube.call(kube.core.list_service_for_all_namespaces, label_selector=LABEL_JOB,
                                       _preload_content=False, _probe=True)
        except ApiException as exc:
            if exc.status == 401:
                raise UnusableMember("CredentialsRejected", f"the member's API server refused the credentials in "
                                                            f"{member.ref.secret} (401)") from None
            if exc.status == 403:
                raise UnusableMember("MemberForbidden", "the member refuses to list nodes, pods or Services: apply "
                                                        "manifests/multicluster/member.yaml there (403)") from None
            raise UnusableMember("Unreachable", f"the member's API server answered HTTP {exc.status}") from None
        except Exception as exc:  # noqa: BLE001 - connection refused, timeout, TLS: in words, the detail logged
            log.debug("member region %s: listing failed: %s", member.ref.region, exc)
            raise UnusableMember("Unreachable", f"the member's API server did not answer: "
                                                f"{describe(exc, self.config.request_timeout_s)}") from None
        kube.answering = True  # it answered: the controller's calls (and the deletes below) go through again
        listed = self._node_views(member, json.loads(nodes.data).get("items", []))
        if listed != member.nodes:
            member.nodes = listed
            self.on_fleet()
        seen: dict[str, tuple[str, str]] = {}
        job_pods: dict[str, list[dict[str, Any]]] = {}
        for pod in json.loads(pods.data).get("items", []):
            meta = pod.get("metadata") or {}
            job = (meta.get("labels") or {}).get(LABEL_JOB)
            if job:
                namespace, name = str(meta.get("namespace")), str(meta.get("name"))
                seen[f"{namespace}/{name}"] = (f"{namespace}/{job}", meta.get("resourceVersion", ""))
                job_pods.setdefault(f"{namespace}/{job}", []).append(kept(pod))
                kube.own_pods.seen(namespace, name, pod, None)  # what the listing shows of its own writes
        changed = {key for name, (key, rv) in seen.items() if member.pods.get(name) != (key, rv)}
        changed |= {key for name, (key, _) in member.pods.items() if name not in seen}
        member.pods, member.job_pods = seen, job_pods
        if changed:
            self.on_pods(changed)
        owners: dict[str, list[tuple[str, str]]] = {}
        for name, (key, _) in seen.items():
            owners.setdefault(key, []).append(("Pod", name.split("/", 1)[1]))
        for svc in json.loads(services.data).get("items", []):
            meta = svc.get("metadata") or {}
            job = (meta.get("labels") or {}).get(LABEL_JOB)
            if job:
                owners.setdefault(f"{meta.get('namespace')}/{job}", []).append(("Service", meta.get("name", "")))
        try:
            await self._collect(member, owners)
        except Exception as exc:  # noqa: BLE001 - removing leftovers is retried at the next poll
            log.warning("member region %s: removing leftovers failed: %s", member.ref.region, type(exc).__name__)

    @staticmethod
    def _node_views(member: Member, items: Iterable[Mapping[str, Any]]) -> dict[str, Node]:
        """Each listed Node's view, converted again only when its resourceVersion changed since the last poll."""
        views: dict[str, tuple[str, Node]] = {}
        for item in items:
            meta = item.get("metadata") or {}
            name, version = str(meta.get("name")), str(meta.get("resourceVersion") or "")
            known = member.views.get(name)
            views[name] = known if known is not None and version and known[0] == version else \
                (version, convert.node_view(item))
        member.views = views
        return {name: view for name, (_, view) in views.items()}

    async def _collect(self, member: Member, owners: Mapping[str, list[tuple[str, str]]]) -> None:
        """Delete what heterojob left in the member for jobs that are gone or placed in another region
        (after the member came back from a loss, or a job deleted meanwhile). The manager's job status is
        the truth, read fresh before anything is deleted; the placement is written before pods are made."""
        region = member.ref.region
        kube = member.kube
        assert kube is not None
        for key, objects in owners.items():
            if self.region_of(key) == region:
                continue
            namespace, name = key.split("/", 1)
            job = await self.local.get_job(namespace, name)
            placement = ((job or {}).get("status") or {}).get("placement") or {}
            if job is not None and not (job.get("metadata") or {}).get("deletionTimestamp") \
                    and placement.get("cluster") == region:
                continue
            where = f"placed in {placement['region']}" if placement.get("region") else \
                "not placed" if job is not None else "gone"
            log.info("member region %s: removing %d leftover object(s) of %s (the job is %s)", region, len(objects),
                     key, where)
            for kind, obj in objects:
                try:
                    if kind == "Pod":
                        await kube.delete_pod(namespace, obj)
                    else:
                        await kube.call(kube.core.delete_namespaced_service, obj, namespace, _preload_content=False)
                except ApiException as exc:
                    if exc.status != 404:
                        raise

    async def _write_condition(self, member: Member) -> None:
        """The Region's MemberReachable condition (and lastContact), written only when it changes."""
        now = self.clock()
        reason, message = member.problem
        status = "True" if member.reachable else "False"
        previous = member.written or []
        conditions = set_condition(previous, CONDITION, status, reason, message, now_iso())
        contact_due = member.reachable and now - member.contact_written >= self.config.contact_write_s
        if member.written is not None and same(previous, conditions) and not contact_due:
            return
        body: dict[str, Any] = {"status": {"conditions": conditions}}
        if member.reachable:
            body["status"]["lastContact"] = now_iso()
        try:
            await self.local.call(self.local.custom.patch_cluster_custom_object_status, GROUP, VERSION, "regions",
                                  member.ref.region, body, _request_timeout=self.config.request_timeout_s)
        except Exception as exc:  # noqa: BLE001 - status is best effort; the next poll writes again
            log.warning("could not write status of Region %s: %s", member.ref.region, type(exc).__name__)
            return
        member.written = conditions
        if member.reachable:
            member.contact_written = now
