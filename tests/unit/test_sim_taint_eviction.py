"""The emulated taint-eviction controller's decisions on plain data (`sim.cluster.tainteviction.plan`), as
kube-controller-manager v1.32 makes them (pkg/controller/tainteviction/taint_eviction.go: processPodOnNode,
getMinTolerationTime; k8s.io/api core/v1 Toleration.ToleratesTaint), and the DefaultTolerationSeconds rule
(plugin/pkg/admission/defaulttolerationseconds/admission.go)."""

from __future__ import annotations

from typing import Any

from heterojob.sim.cluster.admission import default_tolerations
from heterojob.sim.cluster.nodes import NOT_READY_TAINT, UNREACHABLE_TAINT
from heterojob.sim.cluster.tainteviction import plan, tolerates, toleration_time

UNREACHABLE = {"key": UNREACHABLE_TAINT, "effect": "NoExecute", "timeAdded": "2026-11-23T12:00:00Z"}
DEFAULTS = default_tolerations(None)


def pod(name: str, node: str = "a", tolerations: Any = DEFAULTS, uid: str | None = None) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "uid": uid or f"uid-{name}"},
            "spec": {"nodeName": node, "tolerations": tolerations}}


def node(name: str, *taints: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"taints": list(taints)}}


def test_the_admission_plugin_adds_what_no_toleration_covers() -> None:
    assert [(t["key"], t["tolerationSeconds"]) for t in DEFAULTS] == [(NOT_READY_TAINT, 300), (UNREACHABLE_TAINT, 300)]
    assert default_tolerations(DEFAULTS) == DEFAULTS  # not twice
    keyless = [{"operator": "Exists", "effect": "NoExecute"}]
    assert default_tolerations(keyless) == keyless
    no_schedule = [{"key": UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    assert default_tolerations(no_schedule) == [*no_schedule, *DEFAULTS]  # a NoSchedule one does not count
    assert default_tolerations("all") == "all"  # validation refuses it afterwards


def test_toleration_matching_follows_tolerates_taint() -> None:
    taint = {"key": "k", "value": "v", "effect": "NoExecute"}
    assert tolerates({"key": "k", "operator": "Equal", "value": "v"}, taint)
    assert tolerates({"key": "k", "value": "v", "effect": "NoExecute"}, taint)  # no operator: Equal
    assert not tolerates({"key": "k", "operator": "Equal", "value": "w"}, taint)
    assert tolerates({"operator": "Exists"}, taint)
    assert not tolerates({"key": "k", "operator": "Exists", "effect": "NoSchedule"}, taint)
    assert not tolerates({"key": "other", "operator": "Exists"}, taint)


def test_the_least_used_toleration_seconds_counts_and_none_means_forever() -> None:
    second = {"key": "maintenance", "effect": "NoExecute"}
    both = [UNREACHABLE, second]
    assert toleration_time(DEFAULTS, [UNREACHABLE]) == 300
    assert toleration_time(DEFAULTS, both) == 0  # "maintenance" not tolerated
    assert toleration_time([{"operator": "Exists"}], both) is None
    assert toleration_time([{"key": "maintenance", "operator": "Exists", "tolerationSeconds": 60}, *DEFAULTS],
                           both) == 60
    assert toleration_time([{"key": "maintenance", "operator": "Exists", "tolerationSeconds": -5}, *DEFAULTS],
                           both) == 0
    # the first toleration that matches a taint is the one used (GetMatchingTolerations)
    assert toleration_time([{"key": UNREACHABLE_TAINT, "operator": "Exists"}, *DEFAULTS], [UNREACHABLE]) is None
    assert toleration_time("junk", [UNREACHABLE]) == 0


def test_a_deadline_once_set_stays_and_an_eviction_is_not_repeated() -> None:
    nodes = [node("a", UNREACHABLE)]
    first = plan([pod("p")], nodes, {}, frozenset(), 0.0)
    assert first.due == {("ns", "p", "uid-p"): 300.0} and not first.evict
    # a longer toleration added meanwhile does not move it (kubernetes/kubernetes#102993)
    longer = [{"key": UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 900}]
    later = plan([pod("p", tolerations=longer)], nodes, first.due, first.fired, 200.0)
    assert later.due == first.due
    fired = plan([pod("p")], nodes, later.due, later.fired, 300.0)
    assert fired.evict == (("ns", "p", "uid-p"),) and not fired.due
    again = plan([pod("p")], nodes, fired.due, fired.fired, 400.0)
    assert not again.evict and again.fired == fired.fired
    # the same name made again is another pod: its own 300 s
    recreated = plan([pod("p", uid="uid-2")], nodes, again.due, again.fired, 400.0)
    assert recreated.due == {("ns", "p", "uid-2"): 700.0} and recreated.fired == frozenset()


def test_cancellation_when_the_taint_goes_or_the_pod_tolerates_it_forever() -> None:
    due = plan([pod("p"), pod("q")], [node("a", UNREACHABLE)], {}, frozenset(), 0.0).due
    gone = plan([pod("p"), pod("q")], [node("a")], due, frozenset(), 10.0)
    assert sorted(gone.cancelled) == [("ns", "p", "uid-p"), ("ns", "q", "uid-q")] and not gone.due
    forever = [{"key": UNREACHABLE_TAINT, "operator": "Exists"}]
    one = plan([pod("p", tolerations=forever), pod("q")], [node("a", UNREACHABLE)], due, frozenset(), 10.0)
    assert one.cancelled == (("ns", "p", "uid-p"),) and list(one.due) == [("ns", "q", "uid-q")]
    # an untolerated taint added: cancelled and deleted at once
    maintenance = {"key": "maintenance", "effect": "NoExecute"}
    now = plan([pod("q")], [node("a", UNREACHABLE, maintenance)], one.due, one.fired, 20.0)
    assert now.cancelled == (("ns", "q", "uid-q"),) and now.evict == (("ns", "q", "uid-q"),)
    # NoSchedule taints and unbound pods are none of its business
    quiet = plan([pod("r"), pod("s", node="")], [node("a", {**UNREACHABLE, "effect": "NoSchedule"})], {},
                 frozenset(), 0.0)
    assert quiet == plan([], [], {}, frozenset(), 0.0)
