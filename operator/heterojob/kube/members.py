"""Member clusters: a `Kube` per Region that names one, its reachability, its nodes and heterojob's pods there.

The manager's one view of its members (docs/multicluster.md). Each member's Nodes, and the pods and Services
labelled `heterojob.io/job` there, are kept by informers (`kube.member_watch`: list, then watch), so a pod's change
reaches its job at once and nothing is listed while nothing changes. Every `poll_seconds` each member, in a task of its
own (a slow member delays nobody), is probed with one small list: the answer (or a request timeout) is its
reachability, written to the Region's `MemberReachable` condition, and leftovers (pods or Services of a job that is
gone or placed elsewhere) are deleted. A member that does not answer for its loss timeout is *lost*; the reconcile pass
re-places its jobs. A slow answer is not a fault: only a request timeout counts. A member that answers again is
listed afresh before it counts as reachable (a watch may have stalled on a connection the partition killed).

Credentials: the kubeconfig is read from the one Secret the Region names, on the manager, and never
logged, written to a status or an Event (messages name the Secret and the key, never the content).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kubernetes
from kubernetes.client import ApiException

from heterojob.api.conditions import same, set_condition
from heterojob.api.times import iso
from heterojob.constants import GROUP, VERSION
from heterojob.engine.capacity.fleet import Node, RegionInfo
from heterojob.failures import describe
from heterojob.kube import access
from heterojob.kube.api import Kube, now_iso
from heterojob.kube.member_client import (KubeconfigInvalid, MemberKube, MemberRef, MembersConfig, MemberUnavailable,
                                          UnusableMember, decode_secret_value, member_configuration, member_ref)
from heterojob.kube.member_watch import MemberWatch

__all__ = ["KubeconfigInvalid", "Member", "MemberKube", "MemberRef", "Members", "MembersConfig", "MemberUnavailable",
           "UnusableMember", "decode_secret_value", "member_configuration", "member_ref"]

log = logging.getLogger(__name__)
CONDITION = "MemberReachable"


def _matches(node: Node, selector: Mapping[str, str]) -> bool:
    return all(node.labels.get(k) == v for k, v in selector.items())


@dataclass
class Member:
    ref: MemberRef
    since: float  # when this manager started following it (a restart gives it a whole timeout)
    kube: MemberKube | None = None
    watch: MemberWatch | None = None  # the informers of `kube`'s cluster
    digest: str = ""  # of the kubeconfig the client was built from
    read_at: float = 0.0  # when the Secret was last read
    last_ok: float | None = None
    reachable: bool = False
    problem: tuple[str, str] = ("NotContacted", "not contacted yet")
    nodes: dict[str, Node] = field(default_factory=dict)  # the watch's, once there is one
    job_pods: dict[str, dict[str, Mapping[str, Any]]] = field(default_factory=dict)  # job -> pod -> `ownpods.kept`
    written: list[dict[str, Any]] | None = None  # the conditions last written to the Region
    contact_written: float = 0.0
    task: asyncio.Task[None] | None = None  # its probe loop


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
        self._fleet: tuple[Any, dict[str, Node], dict[str, Node]] | None = None  # fleet_nodes' inputs and answer

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

    def pods_of(self, cluster: str, namespace: str, job: str) -> list[Mapping[str, Any]] | None:
        """The job's pods in `cluster` as the member's watch has them (what a pass reads of them, `kube.ownpods.kept`);
        None while the member does not answer or before their first listing (a pass then lists them itself)."""
        member = self.members.get(cluster)
        if member is None or not member.reachable or (member.watch is not None and
                                                      not member.watch.pod_informer.synced.is_set()):
            return None
        return list(member.job_pods.get(f"{namespace}/{job}", {}).values())

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
        key = (tuple((r, id(m.nodes), m.watch.nodes_version if m.watch else 0, m.reachable, m.last_ok, m.since)
                     for r, m in self.members.items()), tuple(regions.get(r) for r in self.members))
        if self._fleet is not None and self._fleet[0] == key and self._fleet[1] == local:
            return self._fleet[2]  # asked after every poke of the queue: built again only when its inputs changed
        out = self._fleet_nodes(local, regions)
        self._fleet = (key, dict(local), out)
        return out

    def _fleet_nodes(self, local: Mapping[str, Node], regions: Mapping[str, RegionInfo]) -> dict[str, Node]:
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

    # --- the probe loops ------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="heterojob-members")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *(m.task for m in self.members.values())) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(m.watch.stop() for m in self.members.values() if m.watch is not None))
        for member in self.members.values():
            if member.kube is not None:
                member.kube.close()

    async def _run(self) -> None:
        """Follow the Regions that name members: each member probed by a task of its own."""
        while True:
            try:
                for member in self._follow_refs():
                    if member.task is None or member.task.done():
                        member.task = asyncio.get_running_loop().create_task(
                            self._probe_loop(member), name=f"heterojob-member-{member.ref.region}")
            except Exception as exc:  # noqa: BLE001 - the loop must survive; the next round tries again
                log.warning("following member regions failed: %s: %s", type(exc).__name__, exc)
            await asyncio.sleep(self.config.poll_seconds)

    async def _probe_loop(self, member: Member) -> None:
        while self.members.get(member.ref.region) is member:
            try:
                await self.look(member)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the loop must survive; the next probe tries again
                log.warning("member region %s: probe failed: %s: %s", member.ref.region, type(exc).__name__, exc)
            await asyncio.sleep(self.config.poll_seconds)

    def _follow_refs(self) -> list[Member]:
        """The members the Regions name now; a member no Region names any more (or names differently) is dropped."""
        refs = dict(self.refs())
        now = self.clock()
        for region in [r for r in self.members if r not in refs]:
            self._drop(self.members.pop(region))
        for region, ref in refs.items():
            member = self.members.get(region)
            if member is None or member.ref != ref:
                if member is not None:
                    self._drop(member)
                self.members[region] = Member(ref, since=now)
        return list(self.members.values())

    @staticmethod
    def _drop(member: Member) -> None:
        if member.task is not None:
            member.task.cancel()
        if member.watch is not None:
            member.watch.halt()
        if member.kube is not None:
            member.kube.close()

    async def poll(self) -> None:
        """One look at every member, concurrently (before the first placement, and in tests)."""
        await asyncio.gather(*(self.look(m) for m in self._follow_refs()))

    async def look(self, member: Member) -> None:
        """Probe one member: its client (from its Secret), its watch, whether it answers; its condition written."""
        was = member.reachable
        try:
            await self._client(member)
            await self._probe(member)
            assert member.watch is not None
            if not was:  # first contact, or back: its pods and nodes listed (afresh) before a pass reads them
                await member.watch.fresh(self.config.request_timeout_s, relist=member.last_ok is not None)
        except UnusableMember as problem:
            member.reachable = False
            member.problem = (problem.reason, problem.message)
        else:
            member.reachable = True
            member.last_ok = self.clock()
            count = member.watch.pod_count() if member.watch is not None else 0
            member.problem = ("Reachable", f"{len(member.nodes)} nodes, {count} heterojob pods")
        if member.kube is not None:
            member.kube.answering = member.reachable
        if member.reachable != was:
            log.info("member region %s %s: %s", member.ref.region, "reachable" if member.reachable else
                     "unreachable", member.problem[1])
            # their jobs look again: those with pods there, and those given pods whose event has not come (a pass
            # reads a member job's pods from the watch: none of them would call the member to find it gone)
            self.on_pods(set(member.job_pods) | (member.kube.own_pods.jobs() if member.kube is not None else set()))
            self.on_fleet()
        if member.reachable and member.watch is not None and member.watch.synced():
            try:
                await self._collect(member, member.watch.owners())
            except Exception as exc:  # noqa: BLE001 - removing leftovers is retried at the next probe
                log.warning("member region %s: removing leftovers failed: %s", member.ref.region,
                            type(exc).__name__)
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
                                                       "kubeconfig (docs/multicluster.md, 'Join a member cluster')") from None
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
        config.connection_pool_maxsize = 16  # the client's 8 workers, the probe and the 3 watches, without discarding
        old_kube, old_watch = member.kube, member.watch
        member.kube = kube = MemberKube(kubernetes.client.ApiClient(config), self.config.request_timeout_s)
        member.watch = MemberWatch(ref.region, kube, lambda keys: self.on_pods(keys), lambda: self.on_fleet(),
                                   self.config.request_timeout_s,
                                   previous=old_watch).start()
        member.nodes, member.job_pods = member.watch.nodes, member.watch.job_pods
        member.digest = digest
        if old_watch is not None:
            old_watch.halt()
        if old_kube is not None:
            old_kube.close()

    async def _probe(self, member: Member) -> None:
        """One small list (a node): whether the member answers, and accepts the credentials and the RBAC; then what
        its informers were refused, if anything (a Role that does not let them list or watch)."""
        kube = member.kube
        assert kube is not None and member.watch is not None
        try:
            await kube.call(kube.core.list_node, limit=1, _preload_content=False, _probe=True)
            refused = member.watch.failure()
            if refused is not None:
                raise refused
        except ApiException as exc:
            if exc.status == 401:
                raise UnusableMember("CredentialsRejected", f"the member's API server refused the credentials in "
                                                            f"{member.ref.secret} (401)") from None
            if exc.status == 403:
                raise UnusableMember("MemberForbidden", "the member refuses to list or watch nodes, pods or "
                                                        "Services: apply manifests/multicluster/member.yaml there "
                                                        "(403)") from None
            raise UnusableMember("Unreachable", f"the member's API server answered HTTP {exc.status}") from None
        except Exception as exc:  # noqa: BLE001 - connection refused, timeout, TLS: in words, the detail logged
            log.debug("member region %s: probe failed: %s", member.ref.region, exc)
            raise UnusableMember("Unreachable", f"the member's API server did not answer: "
                                                f"{describe(exc, self.config.request_timeout_s)}") from None

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
                if kind != "Pod" and self.region_of(key) == region:
                    continue  # placed here again meanwhile: the Service of its name is the new gang's (old pods go)
                try:
                    if kind == "Pod":
                        await kube.delete_pod(namespace, obj)
                    else:
                        await kube.call(kube.core.delete_namespaced_service, obj, namespace, _preload_content=False)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
            # the job's account, Role and binding there go with its gang's objects (their member-side owner): its
            # next gang there writes them again instead of trusting what was written before (its first pods were
            # refused for a ServiceAccount not found, and the gang came as generation 3)
            access.forget(kube, {"metadata": {"namespace": namespace, "name": name}})

    async def _write_condition(self, member: Member) -> None:
        """The Region's MemberReachable condition (and lastContact), written only when it changes. A reachable
        member's message only counts its nodes and heterojob pods (live figures, which change with every pod in a
        burst of placements): a new count alone is written with the next lastContact, not at once."""
        now = self.clock()
        reason, message = member.problem
        status = "True" if member.reachable else "False"
        previous = member.written or []
        conditions = set_condition(previous, CONDITION, status, reason, message, now_iso())
        contact_due = member.reachable and now - member.contact_written >= self.config.contact_write_s
        counts_only = member.reachable and _verdicts(previous) == _verdicts(conditions)
        if member.written is not None and (same(previous, conditions) or counts_only) and not contact_due:
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


def _verdicts(conditions: Iterable[Mapping[str, Any]]) -> list[tuple[Any, Any, Any]]:
    """Each condition's type, status and reason (not its message)."""
    return sorted((c.get("type"), c.get("status"), c.get("reason")) for c in conditions)
