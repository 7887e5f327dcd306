"""The reconcile pass's flows that repair or re-read a job rather than step it along its lifecycle: a spec edited
since it was last read, a finished phase written over running pods (status is untrusted), a member cluster
that stopped answering. Part of `Controller` (`controller.reconcile`), in a module of their own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from heterojob.api.job import HeteroJobSpec, HeteroJobStatus, Phase
from heterojob.controller.decisionlog import decided
from heterojob.controller.status import StatusPatch, where
from heterojob.engine import lifecycle, spec_changes

if TYPE_CHECKING:
    from heterojob.controller.reconcile import Controller

    _Base = Controller
else:
    _Base = object


class Repairs(_Base):
    """`Controller`'s passes that repair: mixed into it."""

    async def _spec_edited(self, job: dict[str, Any], status: HeteroJobStatus, spec: HeteroJobSpec | None
                           ) -> None:
        """The spec was edited since status.observedGeneration: record that it was read (observedGeneration,
        observedSpec) and, for a job holding a placement, say in an Event which changed fields apply now and
        which at its next placement (`engine.spec_changes`). The pass then runs again on the new spec (an
        invalid edit is refused there, as on creation)."""
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        generation = meta.get("generation")
        after = spec_changes.digests(job.get("spec"))
        patch = StatusPatch(status).set(observedGeneration=generation, observedSpec=after)
        revived = lifecycle.after_edit(status.phase, status.reason, spec is not None)
        if revived is not None:  # its pods were refused for good: the edit may fix them, so it is placed again
            patch.phase(Phase.PENDING, revived.reason, revived.message).set(completionTime=None)
            patch.condition("PodsCreated", "Unknown", revived.reason, revived.message)
        if not await self.writer.write(job, patch):
            return
        if revived is not None:
            self.kube.post_event(job, "Normal", "SpecEdited", revived.message)
            decided(key, "revive", revived.message, reason=revived.reason)
        change = spec_changes.changes(status.observed_spec, after) if status.observed_spec else None
        held = status.placement is not None and not (status.phase is not None and status.phase.terminal)
        if change is not None and spec is not None and held:
            message = change.message(int(generation or 0))
            self.kube.post_event(job, "Normal", change.reason, message)
            decided(key, "spec-edited", message, reason=change.reason)
        self.poke(key)

    @staticmethod
    def _alive(status: HeteroJobStatus, pods: list[lifecycle.PodView]) -> list[lifecycle.PodView]:
        """The placement's pods that still run while the status says the job finished (`_repair`'s case)."""
        p = status.placement
        if p is None or not (status.phase and status.phase.terminal):
            return []
        return [v for v in pods if v.generation == p.generation and not v.deleting
                and v.phase in ("Pending", "Running")]

    async def _repair(self, job: dict[str, Any], status: HeteroJobStatus, pods: list[lifecycle.PodView]) -> bool:
        """Status is untrusted: a finished phase while the placement's pods still run (someone wrote it) is
        repaired from the pods, before the cache would give their devices away. True when it wrote."""
        alive = self._alive(status, pods)
        p = status.placement
        if not alive or p is None:
            return False
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        phase = Phase.RUNNING if len(alive) == p.replicas and all(v.phase == "Running" for v in alive) \
            else Phase.ADMITTED
        message = (f"status said {status.phase.value} while {len(alive)} pod(s) of generation {p.generation} "
                   f"still run: repaired from the pods")
        await self.writer.write(job, StatusPatch(status).phase(phase, "StatusRepaired", message).set(
            completionTime=None))
        self.kube.post_event(job, "Warning", "StatusRepaired", message)
        decided(key, "repair", message)
        self.poke(key)
        return True

    async def _member_away(self, job: dict[str, Any], status: HeteroJobStatus, now: float) -> None:
        """The job's member cluster does not answer. Before its loss timeout nothing is done (a slow member
        is not a fault); after it, the job is lost there and placed again from its last checkpoint: an
        involuntary move. Its pods there are not waited for: `kube.members` removes them when it returns."""
        assert self.members is not None and status.placement is not None and status.placement.cluster is not None
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        p = status.placement
        if not self.members.lost(p.cluster, now):
            self.queue.wake_at(key, self.members.lost_at(p.cluster))
            return
        if status.phase is not None and status.phase.terminal:
            return  # it finished there: nothing to move
        resume = status.checkpoint.last if status.checkpoint else None
        message = (f"the member cluster of region {p.cluster} is lost ({self.members.problem(p.cluster)}); "
                   f"placing the job again from " + (f"checkpoint {resume.id}" if resume else "the start"))
        last = resume.model_dump(by_alias=True, exclude_none=True) if resume else None
        patch = StatusPatch(status).phase(Phase.MIGRATING, "MemberLost", message).set(
            placement=None, checkpoint={"pending": None, "last": last} if status.checkpoint else None,
            migration={"exclude": [], "reason": message, "replicas": p.replicas,  # its nodes are not at fault
                       "trigger": "memberLost", "involuntary": True})
        patch.history("migrate", message, where(status)).condition("Ready", "False", "MemberLost", message)
        if not await self.writer.write(job, patch):
            return
        self.kube.post_event(job, "Warning", "MemberLost", message)
        decided(key, "member-lost", message, reason="MemberLost")
        if self.cache.release(key):
            self.poke_pending()
        self.poke(key)

