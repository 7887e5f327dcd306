"""kube/caches.py: the pods' cache keeps each job's pods and the devices other pods hold, through any order of
listings and watch events, equal to what the pods it holds say; the operator is told of every job pod's event."""

from __future__ import annotations

import random
from typing import Any

import kubernetes

from heterojob.constants import LABEL_GENERATION, LABEL_JOB
from heterojob.kube import convert
from heterojob.kube.caches import Caches, pod_entry, serves
from heterojob.kube.ownpods import kept


def pod(name: str, rv: int, node: str | None, gpus: int = 1, job: str | None = None, phase: str = "Running",
        namespace: str = "team-a") -> dict[str, Any]:
    labels = {LABEL_JOB: job} if job else {"app": "other"}
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": str(rv), "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "main", "resources": {
                "limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": phase}}


def caches(told: list[tuple[Any, ...]] | None = None) -> Caches:
    return Caches(kubernetes.client.ApiClient(), lambda body: None,
                  on_job_pod=(lambda *args: told.append(args)) if told is not None else None)


def expected(bodies: dict[tuple[str, str], dict[str, Any]]) -> tuple[dict[Any, int], dict[Any, list[Any]]]:
    """What the pods held say: summed usage of the pods heterojob does not manage, each job's pods."""
    used: dict[Any, int] = {}
    jobs: dict[Any, list[Any]] = {}
    for (namespace, _name), body in bodies.items():
        for key, n in convert.pod_usage(body).items():
            used[key] = used.get(key, 0) + n
        job = body["metadata"]["labels"].get(LABEL_JOB)
        if job:
            jobs.setdefault((namespace, job), []).append(kept(body))
    return used, jobs


def test_usage_and_job_pods_follow_any_order_of_events_and_relists() -> None:
    rng = random.Random(7)
    cache = caches()
    informer = cache.pods.informers[0]
    live: dict[tuple[str, str], dict[str, Any]] = {}
    rv = 0
    for step in range(600):
        rv += 1
        name = f"p{rng.randrange(30)}"
        key = ("team-a", name)
        roll = rng.random()
        if roll < 0.05:  # a relist (after a 410 Gone) that finds a different set of pods
            live = {k: v for k, v in live.items() if rng.random() < 0.7}
            informer.replace({k: e for k, v in live.items() if (e := pod_entry(v)) is not None})
        elif roll < 0.3 and key in live:
            informer.apply("DELETED", key, pod_entry(live.pop(key)))
        elif roll < 0.35:
            informer.apply("DELETED", key, pod_entry(pod(name, rv, "n1")))  # a pod never seen, or gone already
            live.pop(key, None)
        else:
            body = pod(name, rv, rng.choice([None, "n1", "n2"]), rng.randrange(1, 9),
                       rng.choice([None, None, "j1", "j2"]), rng.choice(["Running", "Running", "Succeeded"]))
            live[key] = body
            informer.apply("MODIFIED" if rng.random() < 0.5 else "ADDED", key, pod_entry(body))
        used, jobs = expected(live)
        assert cache.foreign_usage() == used, step
        for job in ("j1", "j2"):
            got = sorted(cache.job_pods("team-a", job), key=lambda p: p["metadata"]["name"])
            assert got == sorted(jobs.get(("team-a", job), []), key=lambda p: p["metadata"]["name"]), (step, job)


def test_every_event_of_a_job_pod_is_told_with_the_pod_as_it_came_and_other_pods_are_not() -> None:
    told: list[tuple[Any, ...]] = []
    cache = caches(told)
    informer = cache.pods.informers[0]
    first = pod("j1-0", 5, "n1", job="j1")
    informer.replace({("team-a", "j1-0"): pod_entry(first), ("team-a", "x"): pod_entry(pod("x", 5, "n1"))})
    assert told == [(None, "team-a", "j1-0", "j1", kept(first))]  # a listing's event type is None (as Kopf's)
    informer.apply("MODIFIED", ("team-a", "x"), pod_entry(pod("x", 6, "n2")))
    later = pod("j1-0", 7, "n1", job="j1", phase="Failed")
    informer.apply("MODIFIED", ("team-a", "j1-0"), pod_entry(later))
    final = pod("j1-0", 9, "n1", job="j1", phase="Failed")
    informer.apply("DELETED", ("team-a", "j1-0"), pod_entry(final))
    assert told[1:] == [("MODIFIED", "team-a", "j1-0", "j1", kept(later)),
                        ("DELETED", "team-a", "j1-0", "j1", kept(final))]  # its last state, with its version
    assert cache.job_pods("team-a", "j1") == []
    informer.replace({})  # a relist: x is gone too; no job pod was held, nothing told
    assert len(told) == 3 and cache.foreign_usage() == {}


def test_namespace_patterns_watch_every_namespace_and_keep_only_those_served() -> None:
    """`--namespace` names: one informer per namespace; Kopf patterns (globs, `!`): one cluster-wide informer whose
    view keeps only the namespaces the patterns serve, read as Kopf reads them."""
    named = Caches(kubernetes.client.ApiClient(), lambda body: None, namespaces=("team-a", "team-b"))
    assert [i.name for i in named.pods.informers] == ["pods[team-a]", "pods[team-b]"]
    globbed = Caches(kubernetes.client.ApiClient(), lambda body: None, namespaces=("team-*, !*-tmp, team-x-tmp",))
    [informer] = globbed.pods.informers
    assert informer.name == "pods"
    kept_ns = [ns for ns in ("team-a", "team-a-tmp", "team-x-tmp", "other")
               if informer.view(pod("p", 1, "n1", namespace=ns)) is not None]
    assert kept_ns == ["team-a", "team-x-tmp"]
    assert serves(("!kube-*",), "team-a") and not serves(("!kube-*",), "kube-system")


def test_a_heterojobs_events_are_told_whole_and_only_for_the_namespaces_served() -> None:
    """The HeteroJobs' informer tells the controller of every job whole (`on_job`), under Kopf's patterns only of
    the namespaces served; with namespace names, one informer per namespace tells its own."""
    told: list[tuple[Any, ...]] = []
    globbed = Caches(kubernetes.client.ApiClient(), lambda body: None, namespaces=("team-*, !*-tmp",),
                     on_job=lambda event, key, body: told.append((event, key, body)))
    [informer] = globbed.running.informers
    assert informer.on_body is not None
    for ns in ("team-a", "team-a-tmp", "other"):
        body = {"metadata": {"namespace": ns, "name": "j"}}
        informer.on_body("ADDED", f"{ns}/j", body)
    assert told == [("ADDED", "team-a/j", {"metadata": {"namespace": "team-a", "name": "j"}})]
    named = Caches(kubernetes.client.ApiClient(), lambda body: None, namespaces=("team-a", "team-b"),
                   on_job=lambda *args: None)
    assert [i.name for i in named.running.informers] == ["heterojobs[team-a]", "heterojobs[team-b]"]
    assert all(i.on_body is not None for i in named.running.informers)
    assert all(i.on_body is None for i in named.pods.informers)


def deleting(body: dict[str, Any], rv: int) -> dict[str, Any]:
    out = {**body, "metadata": {**body["metadata"], "resourceVersion": str(rv),
                                "deletionTimestamp": "2026-01-01T00:00:30Z"}}
    return out


def test_a_job_pod_being_deleted_holds_its_devices_until_it_is_gone_and_then_room_is_told() -> None:
    """kube-scheduler counts a Terminating pod on its node: so does `leaving_usage`, as the watch has it (a pod not
    bound to a node holds nothing)."""
    rooms: list[int] = []
    cache = Caches(kubernetes.client.ApiClient(), lambda body: None, on_room=lambda: rooms.append(1))
    informer = cache.pods.informers[0]
    a0, b0, pending = pod("a-0", 1, "n1", 8, job="a"), pod("b-0", 2, "n2", 4, job="b"), pod("c-0", 3, None, job="c")
    informer.replace({("team-a", p["metadata"]["name"]): pod_entry(p) for p in (a0, b0, pending)})
    assert cache.leaving_usage() == {}
    informer.apply("MODIFIED", ("team-a", "a-0"), pod_entry(deleting(a0, 4)))  # the watch brings the deletion
    informer.apply("MODIFIED", ("team-a", "b-0"), pod_entry(deleting(b0, 6)))
    informer.apply("MODIFIED", ("team-a", "c-0"), pod_entry(deleting(pending, 5)))  # not bound: holds nothing
    both = {"team-a/a": {0: {("n1", "nvidia.com/gpu"): 8}}, "team-a/b": {0: {("n2", "nvidia.com/gpu"): 4}}}
    assert cache.leaving_usage() == both
    assert cache.foreign_usage() == {} and rooms == []
    informer.apply("DELETED", ("team-a", "a-0"), pod_entry(deleting(a0, 7)))
    assert cache.leaving_usage() == {"team-a/b": {0: {("n2", "nvidia.com/gpu"): 4}}} and rooms == [1]
    informer.apply("MODIFIED", ("team-a", "b-0"), pod_entry(deleting({**b0, "status": {"phase": "Succeeded"}}, 8)))
    assert cache.leaving_usage() == {} and rooms == [1, 1]  # it ended: nothing held, room told
    labelled = pod("a-1", 9, "n3", 2, job="a")
    labelled["metadata"]["labels"][LABEL_GENERATION] = "3"
    informer.apply("MODIFIED", ("team-a", "a-1"), pod_entry(deleting(labelled, 10)))
    assert cache.leaving_usage() == {"team-a/a": {3: {("n3", "nvidia.com/gpu"): 2}}}  # by the gang it belongs to
