"""Pods: create a placement's gang (and its headless Service), delete pods, give devices back.

Called by the reconcile pass (missing ranks, cleanup) and by admission (a new placement). Creation is
idempotent by name, so a pass that runs again after a crash creates only what is missing.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from kubernetes.client import ApiException

from heterojob.api.job import HeteroJobSpec, Phase
from heterojob.api.job_status import HeteroJobStatus, Reservation
from heterojob.constants import LABEL_HOSTNAME, LABEL_REGION
from heterojob.controller.decisionlog import decided
from heterojob.controller.status import StatusPatch, StatusWriter
from heterojob.state.job_status import read_status
from heterojob.engine.capacity.fleet import Fleet, RegionInfo
from heterojob.engine.execution.lifecycle import REASON_POD_REJECTED, SchedulingVerdict
from heterojob.kube import access, convert, manifests
from heterojob.kube.api import Kube, OwnedElsewhere
from heterojob.api.conditions import MESSAGE_MAX
from heterojob.kube.members import Members
from heterojob.kube.refusals import Refusal, classify
from heterojob.state.cache import Cache
from heterojob.engine.basics.phases import MOVING
from heterojob.state.requests import MOVES, reservation
from heterojob.api.times import iso

log = logging.getLogger("heterojob.controller")


DELETED_KEPT = 10_000  # uids of deleted jobs remembered: a pass still running on one's last body makes nothing for it
BACKOFF_FIRST_S = 10.0
BACKOFF_MAX_S = 600.0
KEEP_ROOM_ATTEMPTS = 3  # refusals in a row a gang keeps its room through (`_kept_room`)
UNSCHEDULABLE = "Unschedulable"  # lifecycle.scheduling's reason while the scheduler refuses a rank


def refusal(error: BaseException) -> Refusal:
    """What an API server's refusal of a create means (`kube.refusals`: permanent for invalid objects and
    policies such as PodSecurity; a ResourceQuota, a missing service account, conflicts, overload pass)."""
    if isinstance(error, ApiException):
        return classify(error.status, _api_message(error))
    if isinstance(error, OwnedElsewhere):
        return Refusal(False, str(error))
    return Refusal(False, f"{type(error).__name__}: {error}")


def _api_message(error: ApiException) -> str:
    try:
        return str(json.loads(error.body or "{}").get("message") or error.reason or "")
    except (ValueError, AttributeError):
        return str(error.reason or error.body or "")


class Pods:
    def __init__(self, kube: Kube, writer: StatusWriter, cache: Cache, fleet: Callable[[], Fleet],
                 poke: Callable[[str], None], room_freed: Callable[[], None],
                 members: Members | None = None,
                 watched: Callable[[str, str], Iterable[Mapping[str, Any]]] | None = None) -> None:
        self.kube = kube
        self.watched = watched  # (namespace, job) -> its pods in this cluster as the watch has them; None: list them
        self.members = members  # member clusters (kube/members.py); None: every pod in `kube`'s cluster
        self._where: dict[str, str | None] = {}  # job key -> the cluster its pods were last listed or made in
        self.writer = writer
        self.cache = cache
        self.fleet = fleet
        self.poke = poke
        self.room_freed = room_freed  # waiting jobs get another look
        self._serviceless: set[str] = set()  # finished jobs whose Service this operator has deleted
        self._deleted: collections.OrderedDict[str, None] = collections.OrderedDict()  # uids of deleted jobs

    def route(self, cluster: str | None) -> Kube:
        """The `Kube` of a placement's `cluster` (None: the operator's own)."""
        return self.members.kube_for(cluster) if self.members is not None else self.kube

    def cluster_for(self, region: str) -> str | None:
        """The member cluster a new placement in `region` goes to; None: the operator's own cluster."""
        return self.members.cluster_of(region) if self.members is not None else None

    def kube_of(self, key: str | None) -> Kube:
        """The `Kube` holding the job's pods, as of its last listing or creation."""
        return self.route(self._where.get(key)) if key is not None else self.kube

    async def list(self, namespace: str, name: str, cluster: str | None, fresh: bool = True
                   ) -> list[Mapping[str, Any]]:
        """The job's pods in its placement's `cluster` (remembered for the pass's deletes and annotations): in this
        cluster as the watch has them, in a member cluster as its last poll listed them (`kube.members`), with this
        operator's own creates and deletes since (`kube.ownpods`), unless `fresh` (read from the API server: a
        resync round's safety net)."""
        key = f"{namespace}/{name}"
        self._where[key] = cluster
        if not fresh and cluster is None and self.watched is not None:
            return self.kube.own_pods.merged(namespace, name, self.watched(namespace, name))
        polled = self.members.pods_of(cluster, namespace, name) if not fresh and cluster and self.members else None
        if polled is not None:
            return self.route(cluster).own_pods.merged(namespace, name, polled)
        return list(await self.route(cluster).job_pods(namespace, name))

    def has_pods(self, key: str) -> bool:
        """Whether the watch still has pods of the job (in this cluster; a member's are not followed here)."""
        namespace, _, name = key.partition("/")
        return self.watched is not None and any(True for _ in self.watched(namespace, name))

    def forget(self, key: str) -> None:
        self._where.pop(key, None)
        self._serviceless.discard(key)

    def deleted(self, uid: str | None) -> None:
        """The job of `uid` is deleted (its DELETED event, or the API server said so): a pass still running on its
        last body makes nothing more for it, and what such a pass made goes (`create`)."""
        if not uid:
            return
        self._deleted[uid] = None
        self._deleted.move_to_end(uid)
        while len(self._deleted) > DELETED_KEPT:
            self._deleted.popitem(last=False)

    def gone(self, job: Mapping[str, Any]) -> bool:
        """Whether the job this body describes is known to be deleted (`deleted`)."""
        uid = (job.get("metadata") or {}).get("uid")
        return bool(uid) and uid in self._deleted

    async def drop_service(self, job: dict[str, Any]) -> None:
        """A finished or failed job's headless Service is deleted with its gang: nothing resolves through it
        any more, and it counts against the namespace's `services` ResourceQuota (as a Job's pods go, kept only
        for their logs). Level-triggered from the job's terminal passes, once per job and operator; a job placed
        again (a revived one) makes it again with its next gang."""
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if key in self._serviceless:
            return
        kube = self.kube_of(key)
        svc = manifests.service(job)
        if kube is not self.kube:  # a member cluster: made without an owner (`create`)
            svc["metadata"].pop("ownerReferences", None)
        try:
            if await kube.delete_service(svc):
                decided(key, "delete-service", f"the finished job's Service {meta['name']} deleted")
        except ApiException as exc:
            if exc.status != 403:
                raise  # the pass is retried
            # an operator upgraded before its Role: said once, not retried on every pass of every finished job
            log.warning("job %s: the finished job's Service %s is left: %s (the operator's Role needs get and "
                        "delete on services)", key, meta["name"], _api_message(exc))
        self._serviceless.add(key)

    async def create(self, job: dict[str, Any], spec: HeteroJobSpec, status: HeteroJobStatus,
                     ranks: Sequence[int], fleet: Fleet | None = None, confirm: bool = False) -> None:
        """Create the pods of `ranks` (and the Service with a whole gang) for the job's placement.

        A job deleted while its gang is made gets nothing more once its deletion is seen (its DELETED event, or
        the API server's answer to the status write or read that follows a refusal or a backoff), and what was
        made for it goes at once: no half gang stays (the garbage collector would take it, a moment later).
        `confirm`: the job's body may be older than its deletion (a pass making missing ranks on the last watch
        event's body, e.g. after the garbage collector took its pods): the job is read from the API server first.
        An admission has just written the placement, so it needs no such read."""
        p = status.placement
        assert p is not None
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if self.gone(job) or (confirm and await self._fresh(job) is None):
            return
        fleet = fleet or self.fleet()
        cls = fleet.classes.get(p.device_class)
        alt_index = next((i for i, a in enumerate(spec.devices) if a.device_class == p.device_class), None)
        if cls is None or alt_index is None:
            message = f"device class {p.device_class} vanished; placing again"
            decided(key, "replace", message)
            await self.writer.write(job, StatusPatch(status).phase(Phase.PENDING, None, message).set(placement=None))
            self.poke(key)
            return
        region = fleet.regions.get(p.region) or RegionInfo(p.region, {LABEL_REGION: p.region})
        objs: list[dict[str, Any]] = [manifests.service(job)] if len(ranks) == p.replicas else []
        self._serviceless.discard(key)  # placed again: its Service is made with the gang (and goes when it ends)
        resume = status.checkpoint.last.uri if status.checkpoint and status.checkpoint.last else None
        for rank in ranks:
            node = p.nodes[rank]
            node_obj = fleet.nodes.get(node)
            hostname = node_obj.labels.get(LABEL_HOSTNAME, node) if node_obj else node
            objs.append(manifests.pod(
                job, spec, cls=cls, region=region, alternative_index=alt_index, node=node,
                node_hostname=hostname, rank=rank, world_size=p.replicas, generation=p.generation,
                per_replica=p.per_replica, resume_from=resume))
        kube = self.route(p.cluster)
        self._where[key] = p.cluster
        owner: dict[str, Any] | None = None  # of its access objects: the HeteroJob (None), in a member its Service
        refused: list[tuple[dict[str, Any], BaseException]] = []
        made: list[dict[str, Any]] = []  # what this call created (not what was there already)
        if kube is not self.kube:  # a member cluster: the HeteroJob is not there for an owner to point at
            for obj in objs:
                obj["metadata"].pop("ownerReferences", None)
            owner, refused, made = await _member_owner(kube, job, objs)
        gang = [manifests.pod_name(meta["name"], p.generation, r) for r in range(p.replicas)]
        if not refused:  # what its pods may do (kube/access.py)
            refused = await access.grant(kube, job, [o for o in objs if o["kind"] == "Pod"], gang, owner)
        if not refused and not self.gone(job):
            results = await asyncio.gather(*(kube.create(o) for o in objs), return_exceptions=True)
            refused = [(o, r) for o, r in zip(objs, results, strict=True) if isinstance(r, BaseException)]
            made += [o for o, r in zip(objs, results, strict=True) if r is True]
        for _, error in refused:
            if isinstance(error, asyncio.CancelledError):
                raise error
        if self.gone(job):
            await self._take_back(key, kube, made)
            return
        if not refused:
            patch = StatusPatch(status)
            if status.migration is not None and status.phase not in MOVING:
                patch.set(migration=None)  # a move's new gang exists: the move has landed
            if status.backoff is not None or _condition(status, "PodsCreated") not in (None, "True"):
                # a refusal's condition ends with the gang that passes (after a backoff, or a revived job's)
                current = await self._current_conditions(job, status)
                if current is None:
                    await self._take_back(key, kube, made)
                    return
                patch = StatusPatch(current).set(**patch.fields)
                patch.set(backoff=None).condition("PodsCreated", "True", "Created", f"{p.replicas} pods created")
            if patch and not await self.writer.write(job, patch):
                self.deleted(meta.get("uid"))
                await self._take_back(key, kube, made)
            return
        await self._refused(job, status, refused, [o["metadata"]["name"] for o in objs if o["kind"] == "Pod"], made)

    async def _take_back(self, key: str, kube: Kube, made: Sequence[dict[str, Any]]) -> None:
        """A job deleted while its gang was made: what was made for it goes now (its pods, its Service, each only
        if it is still the one made: `Kube.delete_service`). A failure is left to the garbage collector."""
        namespace = key.split("/", 1)[0]
        results = await asyncio.gather(*(kube.delete_pod(namespace, o["metadata"]["name"]) if o["kind"] == "Pod"
                                         else kube.delete_service(o) for o in made), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        for error in failed:
            if isinstance(error, asyncio.CancelledError):
                raise error
        if self.cache.release(key):
            self.room_freed()
        decided(key, "abandon", f"the job was deleted while its gang was made: {len(made) - len(failed)} object(s) "
                f"made for it deleted" + (f", {len(failed)} left to the garbage collector" if failed else ""))

    async def _refused(self, job: dict[str, Any], status: HeteroJobStatus,
                       refused: Sequence[tuple[dict[str, Any], BaseException]], asked: Sequence[str] = (),
                       made: Sequence[dict[str, Any]] = ()) -> None:
        """A gang is all or nothing: any refused pod or Service takes the whole placement back. A refusal
        that will not pass without an edit (invalid, PodSecurity) fails the job with the API server's words;
        one that may (a ResourceQuota, a missing service account, a foreign object of the name, conflicts,
        overload; `kube.refusals`) waits and retries, backing off."""
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        obj, error = refused[0]
        verdict = refusal(error)
        access.forget(self.kube_of(key), job)  # the next gang writes them again: one may be what is missing
        what = f"{obj['kind']} {obj['metadata']['name']}"
        cluster = status.placement.cluster if status.placement else None
        attempts = (status.backoff.attempts if status.backoff else 0) + 1
        keep = _kept_room(status, verdict.permanent, attempts)
        if keep is not None:  # the room stays the job's while it backs off (reserved before it is released)
            self.cache.reserve(key, self.cache.entry(key).allocation)
        else:
            self.cache.unreserve(key)
        try:
            mine = [p.name for p in map(convert.pod_view, await self.kube_of(key).job_pods(meta["namespace"],
                                                                                          meta["name"]))
                    if p is not None and status.placement and p.generation == status.placement.generation]
            await self.release(key, mine)
        except Exception as exc:  # noqa: BLE001 - only a member that stopped answering is let go of here
            if cluster is None or self.members is None:
                raise
            # the member stopped answering while the gang was made: whatever it created of `asked` is a
            # leftover of a job placed elsewhere, removed by kube.members when it answers again
            log.warning("job %s: the member cluster %s does not answer (%s); %d pod(s) asked there are left to "
                        "its leftover cleanup", key, cluster, type(exc).__name__, len(asked))
            if self.cache.release(key):
                self.room_freed()
        current = await self._current_conditions(job, status)
        if current is None:  # deleted meanwhile (a refusal may be its doing: its ServiceAccount collected with it)
            await self._take_back(key, self.kube_of(key), made)
            return
        status = current
        patch = StatusPatch(status).set(placement=None)
        refused_words = f"the API server refused {what}: {verdict.message}"
        if verdict.permanent:
            message = refused_words
            patch.phase(Phase.FAILED, REASON_POD_REJECTED, message).set(backoff=None)
            # the placement is taken back: Admitted says so (the status admission read, and its conditions, may
            # predate the placement, e.g. False/NoRoom from the wait before it)
            patch.condition("Admitted", "False", "PodRejected", message)
            patch.condition("PodsCreated", "False", "Rejected", message)
            await self.writer.write(job, patch)
            self.kube.post_event(job, "Warning", "PodRejected", message)
            decided(key, "fail", message, reason="PodRejected")
            return
        delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (attempts - 1))
        message = f"{refused_words}; placing again in {delay:.0f}s"
        phase = Phase.PENDING
        if status.migration is not None and status.phase in (*MOVING, Phase.ADMITTED):
            # a move's new gang refused (admission keeps status.migration until the gang exists, so a restarted
            # operator that finds the placement without pods knows it too): still that move, so its next
            # placement avoids the nodes it left and keeps to its region and class, its history entry stays
            # open and the request it serves stays recorded in it (the landing closes both)
            phase = status.phase if status.phase in MOVING else _moving_phase(status)
            patch.set(migration=status.migration.model_dump(by_alias=True, exclude_none=True),
                      handled=dict(status.handled))
            history = patch.history_entries()
            if history and history[-1].get("action") in MOVES:
                history[-1].pop("to", None)
        patch.phase(phase, "PodsRefused", message).set(
            backoff={"attempts": attempts, "until": iso(time.time() + delay), "reason": verdict.message,
                     "reserved": keep.model_dump(by_alias=True) if keep is not None else None})
        # conditions and the Event say the refusal in stable words (no countdown): rewritten only when it changes
        patch.condition("Admitted", "False", "PodsRefused", f"{refused_words}; placing again after a backoff")
        patch.condition("PodsCreated", "False", "Refused", refused_words)
        await self.writer.write(job, patch)
        self.kube.post_event(job, "Warning", "PodsRefused", refused_words)
        decided(key, "back-off", message, attempts=attempts)

    async def scheduling(self, job: dict[str, Any], status: HeteroJobStatus, verdict: SchedulingVerdict | None) -> bool:
        """Say kube-scheduler's verdict on the current gang (`lifecycle.scheduling`): condition PodsScheduled and,
        for a gang waiting to start (Admitted), the job's message; a Warning Event `Unschedulable` when it turns
        False or its words change. Written only on a change (a True only ends a False). True when it wrote."""
        if verdict is None:
            return False
        # as the condition keeps it: a longer message would never read back equal, and be written on every pass
        verdict = replace(verdict, message=verdict.message[:MESSAGE_MAX])
        old = next((c for c in status.conditions if c.type == "PodsScheduled"), None)
        said = old is not None and (old.status, old.reason, old.message) == (verdict.status, verdict.reason,
                                                                             verdict.message)
        patch = StatusPatch(status)
        if not said and (old is not None or verdict.status == "False"):
            patch.condition("PodsScheduled", verdict.status, verdict.reason, verdict.message)
        if status.phase == Phase.ADMITTED and status.message != verdict.message and (
                verdict.status == "False" or status.reason == UNSCHEDULABLE):
            patch.phase(Phase.ADMITTED, verdict.reason, verdict.message)
        if not patch:
            return False
        if not await self.writer.write(job, patch):
            return False
        meta = job["metadata"]
        if not said and verdict.status == "False":
            self.kube.post_event(job, "Warning", "Unschedulable", verdict.message)
            decided(f"{meta['namespace']}/{meta['name']}", "unschedulable", verdict.message, reason=verdict.reason)
        return True

    async def _current_conditions(self, job: dict[str, Any], status: HeteroJobStatus) -> HeteroJobStatus | None:
        """`status` with the job's conditions as they are now; None when the job is deleted (`_fresh`). A
        placement's caller holds the status it read before it wrote the placement (Admitted True): a patch of
        conditions built on that copy would write the wait's old Admitted False back over it. Read again (only
        where a create ends a refusal or is refused)."""
        fresh = await self._fresh(job)
        if fresh is None:
            return None
        return status.model_copy(update={"conditions": read_status(fresh).conditions})

    async def _fresh(self, job: Mapping[str, Any]) -> dict[str, Any] | None:
        """The job as the API server has it now; None (and remembered as deleted) when it is gone, being deleted,
        or another object of its name (another uid) stands in its place."""
        meta = job["metadata"]
        fresh = await self.kube.get_job(meta["namespace"], meta["name"])
        now = (fresh or {}).get("metadata") or {}
        if fresh is None or now.get("deletionTimestamp") or (meta.get("uid") and now.get("uid") != meta.get("uid")):
            self.deleted(meta.get("uid"))
            return None
        return fresh

    async def delete(self, namespace: str, pods: Sequence[str], key: str | None = None) -> None:
        kube = self.kube_of(key)
        await asyncio.gather(*(kube.delete_pod(namespace, p) for p in pods))

    async def release(self, key: str, pods: Sequence[str]) -> None:
        """Delete `pods` and give the job's devices back to the cache (waiting jobs get another look)."""
        await self.delete(key.split("/", 1)[0], pods, key)
        if self.cache.release(key):
            self.room_freed()


def _condition(status: HeteroJobStatus, type_: str) -> str | None:
    """The status (True, False, Unknown) of the job's condition `type_`; None without one."""
    return next((c.status for c in status.conditions if c.type == type_), None)


def _kept_room(status: HeteroJobStatus, permanent: bool, attempts: int) -> Reservation | None:
    """The room a gang refused for a passing reason keeps for its next attempt: where it was placed, for its first
    `KEEP_ROOM_ATTEMPTS` refusals in a row. Given back at once, it went to the next job in the queue, often the one
    this gang preempted (placed again within seconds, then preempted a second time after the backoff). A moving
    job keeps what its move reserved instead (status.migration); a refusal that will not pass keeps nothing, nor
    one that keeps coming back (a ResourceQuota nobody raises must not hold devices for good)."""
    p = status.placement
    if p is None or permanent or attempts > KEEP_ROOM_ATTEMPTS or (
            status.migration is not None and status.phase in (*MOVING, Phase.ADMITTED)):
        return None
    return reservation(p.region, p.device_class, p.per_replica, p.nodes)


def _moving_phase(status: HeteroJobStatus) -> Phase:
    """The phase of the move a placement landed (its history entry's action): Resizing or Migrating."""
    last = status.history[-1].action if status.history else None
    return Phase.RESIZING if last == "resize" else Phase.MIGRATING


async def _member_owner(kube: Kube, job: Mapping[str, Any], objs: list[dict[str, Any]]
                        ) -> tuple[dict[str, Any] | None, list[tuple[dict[str, Any], BaseException]],
                                   list[dict[str, Any]]]:
    """In a member cluster the job's access objects (`kube.access`) are owned by its headless Service there,
    which lives as long as its gang there (deleted when the job ends, removed with what it leaves when it goes,
    `kube.members`), so the member's garbage collector takes them with it. The Service is made first (this
    gang's, taken out of `objs`) or read, for its uid: (its owner reference, what was refused, what was made)."""
    meta = job["metadata"]
    svc = next((o for o in objs if o["kind"] == "Service"), None)
    made: list[dict[str, Any]] = []
    found: Mapping[str, Any] | None = None
    try:
        if svc is not None:  # its answer (or the one there already) says its uid: no read after it
            objs.remove(svc)
            created, found = await kube.create_read(svc)
            if created:
                made.append(svc)
        if not (found or {}).get("metadata"):  # a gang's missing ranks: the Service made before
            try:
                found = await kube.send("read_namespaced_service", namespace=meta["namespace"], name=meta["name"])
            except ApiException as exc:
                if exc.status != 404:
                    raise
                svc = manifests.service(job)  # gone meanwhile (by hand, a leftover cleanup): made again
                svc["metadata"].pop("ownerReferences", None)
                created, found = await kube.create_read(svc)
                if created:
                    made.append(svc)
    except Exception as exc:  # noqa: BLE001 - refused as any object of the gang is (`_refused`)
        return None, [(svc or manifests.service(job), exc)], made
    uid = ((found if isinstance(found, Mapping) else {}).get("metadata") or {}).get("uid")
    if not uid:
        return None, [(svc or manifests.service(job), ValueError("the member's Service came back without a uid"))], made
    return {"apiVersion": "v1", "kind": "Service", "name": meta["name"], "uid": uid}, [], made
