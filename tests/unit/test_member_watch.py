"""A member cluster seen through its informers (kube/member_watch.py) and probed (kube/members.py `look`): a pod's
change reaches its job without waiting for a poll, the echo of the operator's own create does not, a 410 Gone lists
the member's pods again, a node's view is built again only when it changed, a pass reads a member job's pods from
the watch, and a member that stops answering is found out by its probe, however much its watch still holds."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client import ApiException

from heterojob.controller.pods import Pods
from heterojob.engine.capacity.fleet import RegionInfo
from heterojob.kube.member_watch import MemberWatch
from heterojob.kube.members import Member, MemberRef, Members, MembersConfig
from heterojob.kube.ownpods import OwnPods
from tests.unit.test_informer import CLOSED, Answer, Server, Stream, until

BOOKMARK = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "1000"}}}


def _node(name: str, version: str, gpus: str = "8") -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": version, "labels": {"heterojob.io/region": "m-east"}},
            "status": {"allocatable": {"nvidia.com/gpu": gpus}, "capacity": {"nvidia.com/gpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def _pod(name: str, job: str, version: str, phase: str = "Pending") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team", "resourceVersion": version,
                         "labels": {"heterojob.io/job": job}}, "spec": {"nodeName": "n0"}, "status": {"phase": phase}}


class _Kube:
    """A member's client: its lists and watches are the fake servers; the probe answers unless `probe` says why not;
    listing a job's pods from the member is a failure of the test (the watch has them)."""

    def __init__(self, servers: dict[str, Server]) -> None:
        self.core = SimpleNamespace(list_node=servers["nodes"], list_pod_for_all_namespaces=servers["pods"],
                                    list_service_for_all_namespaces=servers["services"])
        self.own_pods = OwnPods()
        self.answering = True
        self.probe: BaseException | None = None
        self.probes = 0

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Answer:
        self.probes += 1
        if self.probe is not None:
            raise self.probe
        return Answer({"items": []})

    async def job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        raise AssertionError("listed the member's pods: the watch has them")

    def close(self) -> None:
        pass


class Scene:
    """One member (m-east) with two nodes and one pod of job team/a, its watch started; what it pokes, recorded."""

    def __init__(self) -> None:
        self.servers = {"nodes": Server([[([_node("n0", "1"), _node("n1", "1")], "3")]]),
                        "pods": Server([[([_pod("a-g1-0", "a", "5")], "6")],
                                        [([_pod("a-g1-1", "a", "9")], "20")]]),  # the listing after a 410
                        "services": Server([[([], "2")]])}
        self.streams = {kind: Stream() for kind in self.servers}
        for kind, server in self.servers.items():
            server.watches.put(self.streams[kind])
        self.poked: list[str] = []
        self.fleet = 0
        self.pool = Members(local=None, refs=dict, config=MembersConfig(request_timeout_s=2.0),  # type: ignore[arg-type]
                            on_pods=self.poked.extend, region_of=lambda key: "m-east", on_fleet=self._fleet)
        self.member = self.pool.members["m-east"] = Member(MemberRef("m-east", "heterojob-members", "east",
                                                                     "kubeconfig"), since=0.0)
        self.kube = _Kube(self.servers)
        self.member.kube = self.kube  # type: ignore[assignment]
        self.watch = self.member.watch = MemberWatch("m-east", self.kube, self.pool.on_pods,  # type: ignore[arg-type]
                                                     lambda: self.pool.on_fleet(), 2.0, retry_s=0.05)
        self.member.nodes, self.member.job_pods = self.watch.nodes, self.watch.job_pods

        async def no_secret(member: Member) -> None:  # the client is there: no Secret to read
            return None

        self.pool._client = no_secret  # type: ignore[method-assign]

    def _fleet(self) -> None:
        self.fleet += 1

    def send(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        self.streams[kind].lines.put({"type": event, "object": obj})

    def pods(self, job: str = "a") -> dict[str, str]:
        """The job's pods as a pass reads them from the watch: name -> phase."""
        return {p["metadata"]["name"]: p["status"]["phase"]
                for p in self.pool.pods_of("m-east", "team", job) or []}


@pytest.fixture()
def scene() -> Iterator[Scene]:
    CLOSED.clear()  # set at the end of each test: the fake watches end
    s = Scene()
    yield s
    CLOSED.set()
    s.watch.halt()


def test_a_member_pods_change_reaches_its_job_at_once_and_the_echo_of_a_create_does_not(scene: Scene) -> None:
    async def main() -> None:
        scene.watch.start()
        assert await scene.watch.fresh(5, relist=False)
        scene.member.reachable = True
        assert scene.pods() == {"a-g1-0": "Pending"} and scene.fleet == 1  # one look for the whole listing
        owners = scene.watch.owners()
        assert owners == {"team/a": [("Pod", "a-g1-0")]} and scene.watch.owners() is owners  # asked every probe
        scene.poked.clear()
        scene.send("pods", "MODIFIED", _pod("a-g1-0", "a", "7", phase="Running"))  # the kubelet's news
        await until(lambda: scene.poked == ["team/a"], timeout=2)  # no poll: the watch brought it
        assert scene.pods() == {"a-g1-0": "Running"}
        owners = scene.watch.owners()
        scene.send("services", "ADDED", {"metadata": {"name": "a", "namespace": "team", "resourceVersion": "8",
                                                      "labels": {"heterojob.io/job": "a"}}})
        await until(lambda: scene.watch.owners() is not owners)
        assert scene.watch.owners() == {"team/a": [("Pod", "a-g1-0"), ("Service", "a")]}
        made = {**_pod("a-g1-1", "a", "9"), "kind": "Pod"}
        scene.kube.own_pods.written("team", "a-g1-1", made)  # the operator's create answered ...
        scene.send("pods", "ADDED", _pod("a-g1-1", "a", "9"))  # ... and its watch event is that pod, as made
        await until(lambda: "a-g1-1" in scene.member.job_pods.get("team/a", {}))
        await asyncio.sleep(0.05)
        assert scene.poked == ["team/a"]  # the pass that created it counted it
        # the watch's resourceVersion is gone (410): the pods are listed again, and a pod gone meanwhile goes
        scene.servers["pods"].watches.put(Stream())
        scene.send("pods", "ERROR", {"kind": "Status", "code": 410, "message": "too old resource version"})
        await until(lambda: scene.watch.pod_informer.lists == 2)
        assert scene.pods() == {"a-g1-1": "Pending"} and scene.poked == ["team/a", "team/a"]
        assert len(scene.servers["pods"].list_calls) == 2
        assert all(c["label_selector"] == "heterojob.io/job" for c in scene.servers["pods"].list_calls)

    asyncio.run(main())


def test_a_node_view_is_built_again_only_when_it_changed_and_a_pass_reads_a_member_jobs_pods_from_the_watch(
        scene: Scene) -> None:
    """A node's view is kept while it is unchanged; a pass reads its job's pods as the watch has them, with the
    operator's own creates since (it listed them from the member on every pass before)."""
    async def main() -> None:
        scene.watch.start()
        assert await scene.watch.fresh(5, relist=False)
        member = scene.member
        first = dict(member.nodes)
        scene.send("nodes", "MODIFIED", _node("n1", "4", gpus="7"))  # a device went unhealthy on n1
        await until(lambda: member.nodes["n1"].allocatable == {"nvidia.com/gpu": 7})
        assert member.nodes["n0"] is first["n0"]
        await until(lambda: scene.fleet == 2)  # the planner hears of it
        assert scene.pool.pods_of("m-east", "team", "a") is None  # not reachable yet: a pass lists them itself
        member.reachable = True
        scene.kube.own_pods.written("team", "a-g1-1", {**_pod("a-g1-1", "a", "9"), "kind": "Pod"})  # made since
        pods = Pods(kube=None, writer=None, cache=None, fleet=None, poke=None, room_freed=None,  # type: ignore[arg-type]
                    members=scene.pool)
        scene.pool.kube_for = lambda cluster: scene.kube  # type: ignore[method-assign, assignment, return-value]
        listed = await pods.list("team", "a", "m-east", fresh=False)
        assert sorted(p["metadata"]["name"] for p in listed) == ["a-g1-0", "a-g1-1"]
        assert await pods.list("team", "b", "m-east", fresh=False) == []
        with pytest.raises(AssertionError, match="listed the member's pods"):
            await pods.list("team", "a", "m-east", fresh=True)  # a resync round reads the member itself

    asyncio.run(main())


def test_a_member_that_stops_answering_is_found_by_its_probe_and_listed_afresh_when_it_answers_again(
        scene: Scene) -> None:
    async def main() -> None:
        scene.watch.start()
        pool, member = scene.pool, scene.member
        await pool.look(member)  # first contact: waits for the first listing
        assert member.reachable and member.problem == ("Reachable", "2 nodes, 1 heterojob pods")
        assert scene.pods() == {"a-g1-0": "Pending"}
        scene.poked.clear()
        scene.kube.probe = TimeoutError("timed out")  # frozen: its watch says nothing, still holding everything
        await pool.look(member)
        assert not member.reachable and member.problem[0] == "Unreachable" and not scene.kube.answering
        assert pool.pods_of("m-east", "team", "a") is None  # a pass does not trust the watch's view meanwhile
        assert all(not n.ready for n in pool.nodes().values())  # nothing new lands there
        assert scene.poked == ["team/a"]  # its jobs look again (and find it away)
        # it answers again: listed afresh before it counts as reachable (its watch may have died with the link)
        scene.kube.probe = None
        for kind in scene.servers:
            scene.servers[kind].watches.put(Stream())
        loop = asyncio.get_running_loop()
        loop.call_later(0.2, lambda: [scene.streams[k].lines.put(BOOKMARK) for k in scene.streams])  # wakes reads
        await pool.look(member)
        assert member.reachable and all(i.lists == 2 for i in scene.watch.informers)
        assert scene.pods() == {"a-g1-1": "Pending"}  # the fresh listing's
        # a Role that does not let the informers watch pods: said as such, though the probe's list answered
        scene.watch.pod_informer.failure = ApiException(status=403, reason="Forbidden")
        await pool.look(member)
        assert not member.reachable and member.problem[0] == "MemberForbidden"

    asyncio.run(main())


def test_the_planners_member_nodes_are_built_again_only_when_a_node_or_a_reachability_changed(scene: Scene) -> None:
    """`fleet_nodes` is asked after every poke of the queue (room freed, a fleet event): with nothing changed in the
    members, it answers what it built last, without matching every member node against its Region again."""
    async def main() -> None:
        scene.watch.start()
        assert await scene.watch.fresh(5, relist=False)
        pool, member = scene.pool, scene.member
        member.reachable = True
        regions = {"m-east": RegionInfo("m-east", {"heterojob.io/region": "m-east"})}
        first = pool.fleet_nodes({}, regions)
        assert set(first) == {"n0", "n1"} and all(n.ready for n in first.values())
        assert pool.fleet_nodes({}, regions) is first
        scene.send("nodes", "MODIFIED", _node("n1", "4", gpus="7"))
        await until(lambda: member.nodes["n1"].allocatable == {"nvidia.com/gpu": 7})
        second = pool.fleet_nodes({}, regions)
        assert second is not first and second["n1"].allocatable == {"nvidia.com/gpu": 7}
        member.reachable = False
        assert not any(n.ready for n in pool.fleet_nodes({}, regions).values())
        assert set(pool.fleet_nodes({}, {})) == set()  # its Region gone from the cache: none of its nodes

    asyncio.run(main())


def test_a_member_known_not_to_answer_does_not_fill_the_log_with_its_informers_retries(
        scene: Scene, caplog: pytest.LogCaptureFixture) -> None:
    """Its Region's condition already says it does not answer; a long partition would otherwise log a warning per
    informer every backoff (up to 16 s) for as long as it lasts."""
    async def main() -> None:
        refused = ConnectionRefusedError("connection refused")

        def failing(**kwargs: Any) -> Any:
            raise refused

        for informer in scene.watch.informers:
            informer.list_call = failing
        scene.kube.answering = False
        with caplog.at_level("DEBUG", logger="heterojob.kube.informer"):
            scene.watch.start()
            await until(lambda: all(i.failure is refused for i in scene.watch.informers))
            await asyncio.sleep(0.1)
            scene.kube.answering = True  # answering again: a failure now is news
            await until(lambda: any(r.levelname == "WARNING" for r in caplog.records), timeout=2)
        quiet = [r for r in caplog.records if r.levelname == "DEBUG" and "failed" in r.getMessage()]
        assert len(quiet) >= 3 and all(r.levelname in ("DEBUG", "WARNING") for r in caplog.records)

    asyncio.run(main())


def test_a_reachable_members_pod_count_alone_is_written_with_its_next_contact_not_at_every_probe(scene: Scene) -> None:
    """The condition's message counts the member's nodes and heterojob pods: in a burst of placements it changed at
    every probe (a Region status write per member a second). A change of reachability or reason is written at once."""
    async def main() -> None:
        written: list[dict[str, Any]] = []

        async def call(fn: Any, *args: Any, **kwargs: Any) -> None:
            fn(*args, **kwargs)

        scene.pool.local = SimpleNamespace(  # type: ignore[assignment]
            call=call, custom=SimpleNamespace(patch_cluster_custom_object_status=lambda *a, **k: written.append(
                a[4]["status"])))
        now = [1000.0]
        scene.pool.clock = lambda: now[0]
        scene.watch.start()
        pool, member = scene.pool, scene.member
        await pool.look(member)
        assert [w["conditions"][0]["message"] for w in written] == ["2 nodes, 1 heterojob pods"]
        scene.send("pods", "ADDED", _pod("b-g1-0", "b", "30"))
        await until(lambda: member.watch is not None and member.watch.pod_count() == 2)
        now[0] += 1
        await pool.look(member)
        assert len(written) == 1  # the count alone changed
        now[0] += pool.config.contact_write_s
        await pool.look(member)
        assert len(written) == 2 and written[1]["conditions"][0]["message"] == "2 nodes, 2 heterojob pods"
        assert "lastContact" in written[1]
        scene.kube.probe = TimeoutError("timed out")
        now[0] += 1
        await pool.look(member)
        assert len(written) == 3 and written[2]["conditions"][0]["status"] == "False"  # at once

    asyncio.run(main())
