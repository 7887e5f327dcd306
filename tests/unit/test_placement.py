"""The placement engine on plain data: choices, explanations, and invariants under random fleets."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from heterojob.engine.capacity.fleet import Allocation, DeviceClass, Failed, Fleet, Node, usage
from heterojob.engine.placing.placement import Alternative, Request, pack, place
from heterojob.engine.capacity.fleet import Limit, holdings, quota_room
from heterojob.engine.placing.placement import schedule, software_mismatch
from heterojob.engine.disruption.preemption import RunningJob, plan_preemption
from heterojob.engine.disruption.preemption import GrownJob, plan_reclaim

H100 = DeviceClass("nvidia-h100", "nvidia.com/gpu", {"gpu": "h100"}, throughput=1.0)
NPU = DeviceClass("ascend-910b", "huawei.com/Ascend910", {"npu": "910b"}, throughput=0.6)
CLASSES = {c.name: c for c in (H100, NPU)}


def gpu_node(name: str, region: str = "cn-east", devices: int = 8, **kw: object) -> Node:
    return Node(name, {"gpu": "h100", "topology.kubernetes.io/region": region}, {"nvidia.com/gpu": devices}, **kw)


def npu_node(name: str, region: str = "cn-north", devices: int = 8) -> Node:
    return Node(name, {"npu": "910b", "topology.kubernetes.io/region": region}, {"huawei.com/Ascend910": devices})


def fleet(*nodes: Node, used: dict | None = None) -> Fleet:
    return Fleet({n.name: n for n in nodes}, CLASSES, used=used or {})


def request(replicas: int = 2, per: int = 8, classes: tuple[str, ...] = ("nvidia-h100",), **kw: object) -> Request:
    return Request("ns/job", [Alternative(c, per) for c in classes], replicas, **kw)  # type: ignore[arg-type]


def test_whole_gang_in_one_region_one_replica_per_node_when_full_nodes_needed() -> None:
    result = place(request(), fleet(gpu_node("a"), gpu_node("b"), gpu_node("c", region="eu-west")))
    assert result.chosen is not None
    assert result.chosen.region == "cn-east" and sorted(result.chosen.nodes) == ["a", "b"]


def test_placed_message_counts_replicas() -> None:
    assert place(request(replicas=1), fleet(gpu_node("a"))).explain() == \
        "placed on cn-east/nvidia-h100: 1 replica on 1 node(s)"
    assert place(request(), fleet(gpu_node("a"), gpu_node("b"))).explain() == \
        "placed on cn-east/nvidia-h100: 2 replicas on 2 node(s)"


def test_gang_does_not_span_regions() -> None:
    result = place(request(), fleet(gpu_node("a"), gpu_node("c", region="eu-west")))
    assert result.chosen is None
    assert "cn-east/nvidia-h100: room for 1 of 2 replicas (8 free on 1 node(s), 8 per replica)" in result.explain()
    assert "eu-west/nvidia-h100: room for 1 of 2 replicas" in result.explain()


def test_not_ready_cordoned_and_excluded_nodes_are_never_used() -> None:
    nodes = [gpu_node("a", ready=False), gpu_node("b", schedulable=False), gpu_node("c"), gpu_node("d")]
    result = place(request(), fleet(*nodes))
    assert result.chosen is not None and sorted(result.chosen.nodes) == ["c", "d"]
    assert place(request(exclude_nodes=frozenset({"c"})), fleet(*nodes)).chosen is None


def test_devices_already_used_are_not_free() -> None:
    f = fleet(gpu_node("a"), gpu_node("b"), used=usage([Allocation("nvidia.com/gpu", {"a": 4})]))
    assert place(request(), f).chosen is None
    assert place(request(per=4), f).chosen is not None


def test_falls_back_to_the_next_alternative_in_preference_order() -> None:
    f = fleet(gpu_node("a"), npu_node("n1"), npu_node("n2"))
    result = place(request(classes=("nvidia-h100", "ascend-910b")), f)
    assert result.chosen is not None and result.chosen.device_class == "ascend-910b"
    # With room for both, the first alternative wins even though the second has more room.
    f = fleet(gpu_node("a"), gpu_node("b"), npu_node("n1"), npu_node("n2"))
    assert place(request(classes=("nvidia-h100", "ascend-910b")), f).chosen.device_class == "nvidia-h100"


def test_allowed_and_preferred_regions() -> None:
    f = fleet(gpu_node("a"), gpu_node("b"), gpu_node("c", "eu-west"), gpu_node("d", "eu-west"))
    assert place(request(preferred_regions=("eu-west",)), f).chosen.region == "eu-west"
    result = place(request(allowed_regions=("cn-east",)), f)
    assert result.chosen.region == "cn-east"
    result = place(request(allowed_regions=("us-west",)), f)
    assert result.chosen is None and "eu-west/nvidia-h100: region not in spec.regions.allowed" in result.explain()


def test_an_allowed_region_without_the_class_is_named_first() -> None:
    # examples/ascend-pretrain.yaml in the demo: the only allowed region has no node of the class; the
    # message must say so, not just list the regions that are not allowed.
    f = fleet(npu_node("n1", "cn-hohhot"), npu_node("n2", "cn-wuhu"))
    result = place(request(classes=("ascend-910b",), allowed_regions=("cn-north",)), f)
    assert result.chosen is None
    assert result.explain().startswith("no room: cn-north/ascend-910b: no ascend-910b node in this region; ")
    assert "cn-hohhot/ascend-910b: region not in spec.regions.allowed" in result.explain()


def test_unknown_class_is_explained_with_the_known_ones() -> None:
    result = place(request(classes=("nvidia-h200",)), fleet(gpu_node("a")))
    assert result.explain() == "no room: nvidia-h200: unknown AcceleratorClass (known: ascend-910b, nvidia-h100)"


def test_best_fit_packing_keeps_whole_nodes_free() -> None:
    # Node a has 2 free, b has 8 free: a 2-device replica goes to a, leaving b whole.
    assert pack({"a": 2, "b": 8}, 1, 2) == ("a",)
    assert pack({"a": 8, "b": 8}, 4, 4) == ("a", "a", "b", "b")
    assert pack({"a": 3}, 1, 4) is None


node_st = st.builds(
    lambda i, region, devices, ready, schedulable: gpu_node(f"n{i}", region, devices, ready=ready,
                                                            schedulable=schedulable),
    st.integers(0, 10_000), st.sampled_from(["r1", "r2", "r3"]), st.integers(0, 8), st.booleans(), st.booleans())


@settings(max_examples=300, deadline=None)
@given(nodes=st.lists(node_st, min_size=1, max_size=12, unique_by=lambda n: n.name),
       used=st.dictionaries(st.integers(0, 11), st.integers(0, 8)),
       replicas=st.integers(1, 6), per=st.integers(1, 8))
def test_placement_never_exceeds_capacity_or_uses_unusable_nodes(nodes: list[Node], used: dict[int, int],
                                                                 replicas: int, per: int) -> None:
    names = [n.name for n in nodes]
    f = fleet(*nodes, used={(names[i % len(names)], "nvidia.com/gpu"): c for i, c in used.items()})
    result = place(request(replicas, per), f)
    if result.chosen is None:
        assert result.rejections
        return
    chosen = result.chosen
    assert len(chosen.nodes) == replicas
    regions = {f.nodes[n].region for n in chosen.nodes}
    assert len(regions) == 1
    for name, count in chosen.per_node.items():
        node = f.nodes[name]
        assert node.ready and node.schedulable
        assert count <= f.free(name, "nvidia.com/gpu")


def test_a_taint_keyed_by_the_class_resource_is_tolerated_and_any_other_blocks() -> None:
    from heterojob.kube.convert import node_view
    from heterojob.sim.cluster.nodes import node as node_obj

    tainted = node_obj("gpu-1", "cn-east", "nvidia-h100")
    tainted["spec"]["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    view = node_view(tainted)
    assert view.taints == {"nvidia.com/gpu"} and view.schedulable
    h100 = DeviceClass("nvidia-h100", "nvidia.com/gpu", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    f = Fleet({view.name: view}, {h100.name: h100})
    assert place(request(replicas=1), f).chosen is not None  # our pods tolerate nvidia.com/gpu

    tainted["spec"]["taints"].append({"key": "maintenance", "effect": "NoExecute"})
    view = node_view(tainted)
    assert "taint maintenance:NoExecute" in view.reason
    assert place(request(replicas=1), Fleet({view.name: view}, {h100.name: h100})).chosen is None


# --- filters and scorers added for quotas, software, health, queue and preemption -------------------------


H100_SW = DeviceClass("nvidia-h100", "nvidia.com/gpu", {"gpu": "h100"}, 1.0, {"driver": "550.54.15", "cuda": "12.4"})
NPU_SW = DeviceClass("ascend-910b", "huawei.com/Ascend910", {"npu": "910b"}, 0.6, {"cann": "8.0.RC3"})


def test_software_filter_compares_pep440_ranges() -> None:
    assert software_mismatch(H100_SW, {"cuda": ">=12.1"}) is None
    assert software_mismatch(H100_SW, {"cuda": ">=12.6"}) == \
        "cuda 12.4 does not satisfy >=12.6 (the class has 12.4: '>=12.4' would match it)"
    assert software_mismatch(H100_SW, {"cann": ">=8"}) == "needs cann >=8, the class declares no cann version"
    assert software_mismatch(NPU_SW, {"cann": ">=8.0rc1"}) is None  # RC versions are pre-releases
    assert "'twelve' is not a version requirement" in (software_mismatch(H100_SW, {"cuda": "twelve"}) or "")
    f = Fleet({n.name: n for n in (gpu_node("a"), gpu_node("b"), npu_node("n1"), npu_node("n2"))},
              {c.name: c for c in (H100_SW, NPU_SW)})
    req = Request("ns/job", [Alternative("nvidia-h100", 8, {"cuda": ">=12.6"}), Alternative("ascend-910b", 8)], 2)
    result = place(req, f)
    assert result.chosen is not None and result.chosen.device_class == "ascend-910b"
    assert any(str(r).startswith("nvidia-h100: software: cuda 12.4 does not satisfy >=12.6")
               for r in result.rejections)


def test_quota_filter_names_the_limit_and_wildcards_match() -> None:
    limits = [Limit("nvidia-h100", "*", 16, "gpus"), Limit("*", "cn-east", 20, "east")]
    assert quota_room(limits, {}, "nvidia-h100", "cn-east", 16) is None
    held = {("nvidia-h100", "eu-west"): 16}
    assert quota_room(limits, held, "nvidia-h100", "cn-east", 8) == \
        "quota 16/16 used (gpus: nvidia-h100 in any region; needs 8)"
    assert quota_room(limits, {("ascend-910b", "cn-east"): 16}, "nvidia-h100", "cn-east", 8) == \
        "quota 16/20 used (east: * in cn-east; needs 8)"
    assert quota_room(limits, held, "ascend-910b", "eu-west", 100) is None  # nothing limits it


def test_a_wildcard_class_limit_counts_accelerators_never_cpu_cores() -> None:
    """Issue 33 item 8c: 16 cores of a CPU job took 16 of `*/cn-east: 32`. '*' as the class counts GPUs and
    NPUs only; a CPU class (resourceName cpu) counts cores and is limited only by a limit naming it."""
    from heterojob.engine.capacity import quota_usage
    from heterojob.engine.capacity.fleet import cpu_classes

    cpu_class = DeviceClass("cpu", "cpu", {"pool": "cpu"})
    classes = {**CLASSES, "cpu": cpu_class}
    cpu = cpu_classes(classes)
    assert cpu == {"cpu"}
    east = Limit("*", "cn-east", 32, "east")
    held = {("cpu", "cn-east"): 16, ("nvidia-h100", "cn-east"): 8}
    assert quota_usage.used_under(east, held, cpu) == 8  # the cores are not devices
    assert quota_room([east], held, "nvidia-h100", "cn-east", 24, cpu) is None  # all 32 left for accelerators
    assert quota_room([east], held, "nvidia-h100", "cn-east", 32, cpu) == \
        "quota 8/32 used (east: * in cn-east; needs 32)"
    assert quota_room([east], held, "cpu", "cn-east", 1000, cpu) is None  # '*' does not limit cores
    cores = Limit("cpu", "*", 64, "cores")
    assert quota_room([east, cores], held, "cpu", "cn-east", 64, cpu) == \
        "quota 16/64 used (cores: cpu in any region; needs 64)"
    assert quota_usage.summary([east, cores], held, cpu) == "*/cn-east: 8/32, cpu/*: 16/64"
    # in the planner: a CPU job's cores leave the accelerators' room alone
    cpu_node = Node("c1", {"pool": "cpu", "topology.kubernetes.io/region": "cn-east"}, {"cpu": 64})
    f = Fleet({n.name: n for n in (gpu_node("a"), gpu_node("b"), cpu_node)}, classes,
              quotas={"ns": [Limit("*", "cn-east", 16, "east")]}, held={"ns": {("cpu", "cn-east"): 48}})
    assert place(request(), f).chosen is not None  # 16 GPUs fit under 16 although 48 cores are held
    assert place(request(1, 16, ("cpu",)), f).chosen is not None  # and cores are not limited by it


def test_quota_rejection_in_the_job_message() -> None:
    f = Fleet({n.name: n for n in (gpu_node("a"), gpu_node("b"))}, CLASSES,
              quotas={"ns": [Limit("nvidia-h100", "*", 16, "gpus")]}, held={"ns": {("nvidia-h100", "cn-east"): 16}})
    result = place(request(), f)
    assert result.chosen is None
    assert "cn-east/nvidia-h100: quota 16/16 used (gpus: nvidia-h100 in any region; needs 16)" in result.explain()


def test_unhealthy_nodes_are_filtered_and_counted_in_the_message() -> None:
    f = Fleet({n.name: n for n in (gpu_node("a"), gpu_node("b"))}, CLASSES, unhealthy={"b": "GPU-1: fatal XID 79"})
    result = place(request(), f)
    assert result.chosen is None
    assert "1 node(s) not Ready, cordoned, tainted or unhealthy: unhealthy (GPU-1: fatal XID 79)" in result.explain()
    assert place(request(replicas=1), f).chosen.nodes == ("a",)  # type: ignore[union-attr]


def test_packing_prefers_the_region_whose_nodes_it_fills() -> None:
    # cn-east has a half-used node, eu-west two empty ones: a 4-device replica goes where it fills a node
    f = fleet(gpu_node("a"), gpu_node("b", region="eu-west"), gpu_node("c", region="eu-west"),
              used={("a", "nvidia.com/gpu"): 4})
    result = place(request(replicas=1, per=4), f)
    assert result.chosen is not None and result.chosen.nodes == ("a",)


def test_preference_order_outweighs_a_faster_class() -> None:
    slow = DeviceClass("nvidia-a100", "nvidia.com/gpu", {"gpu": "a100"}, throughput=0.45)
    f = Fleet({"x": Node("x", {"gpu": "a100", "topology.kubernetes.io/region": "r"}, {"nvidia.com/gpu": 8}),
               "y": gpu_node("y", region="r")}, {"nvidia-a100": slow, "nvidia-h100": H100})
    # the H100 is twice as fast, but the user listed the A100 first: the user's order wins
    result = place(Request("ns/j", [Alternative("nvidia-a100", 8), Alternative("nvidia-h100", 8)], 1), f)
    assert result.chosen is not None and result.chosen.device_class == "nvidia-a100"


def test_schedule_places_by_priority_then_age() -> None:
    f = fleet(gpu_node("a"))
    low = Request("ns/low", [Alternative("nvidia-h100", 8)], 1, priority=0, created=1.0)
    high = Request("ns/high", [Alternative("nvidia-h100", 8)], 1, priority=2, created=5.0)
    old = Request("ns/old", [Alternative("nvidia-h100", 8)], 1, priority=2, created=2.0)
    results = schedule([low, high, old], f)
    assert results["ns/old"].chosen is not None
    assert results["ns/high"].chosen is None and results["ns/low"].chosen is None


def running(job: str, priority: int, since: float, node: str, devices: int = 8) -> RunningJob:
    return RunningJob(job, priority, since, Allocation("nvidia.com/gpu", {node: devices}, job.split("/")[0],
                                                      "nvidia-h100", "cn-east"))


def test_preemption_takes_the_fewest_and_lowest() -> None:
    jobs = [running("ns/low-old", 0, 100.0, "a"), running("ns/low-young", 0, 500.0, "b"),
            running("ns/medium", 1, 100.0, "c")]
    f = fleet(gpu_node("a"), gpu_node("b"), gpu_node("c"), used=usage(j.allocation for j in jobs))
    urgent = Request("ns/urgent", [Alternative("nvidia-h100", 8)], 1, priority=3)
    plan = plan_preemption(urgent, f, jobs, now=1000.0, min_runtime_s=60)
    assert plan is not None and plan.victims == ("ns/low-young",)  # one job, the lowest, least progress lost
    two = Request("ns/urgent", [Alternative("nvidia-h100", 8)], 2, priority=3)
    plan = plan_preemption(two, f, jobs, now=1000.0, min_runtime_s=60)
    assert plan is not None and sorted(plan.victims) == ["ns/low-old", "ns/low-young"]


def test_preemption_spares_young_equal_and_irrelevant_jobs() -> None:
    jobs = [running("ns/young", 0, 990.0, "a"), running("ns/peer", 2, 0.0, "b")]
    f = fleet(gpu_node("a"), gpu_node("b"), used=usage(j.allocation for j in jobs))
    high = Request("ns/high", [Alternative("nvidia-h100", 8)], 1, priority=2)
    assert plan_preemption(high, f, jobs, now=1000.0, min_runtime_s=60) is None
    npu_only = Request("ns/high", [Alternative("ascend-910b", 8)], 1, priority=3)
    assert plan_preemption(npu_only, f, jobs, now=1000.0, min_runtime_s=0) is None


limit_st = st.builds(Limit, st.sampled_from(["nvidia-h100", "*"]), st.sampled_from(["r1", "r2", "*"]),
                     st.integers(0, 48))


@settings(max_examples=300, deadline=None)
@given(nodes=st.lists(node_st, min_size=1, max_size=10, unique_by=lambda n: n.name),
       limits=st.lists(limit_st, max_size=3), sick=st.sets(st.integers(0, 9), max_size=4),
       jobs=st.lists(st.tuples(st.integers(1, 3), st.sampled_from([1, 2, 4, 8]), st.integers(0, 3),
                               st.sampled_from(["ns-a", "ns-b"])), min_size=1, max_size=8))
def test_a_schedule_never_exceeds_quota_or_capacity_nor_uses_an_unhealthy_node(
        nodes: list[Node], limits: list[Limit], sick: set[int], jobs: list[tuple[int, int, int, str]]) -> None:
    names = [n.name for n in nodes]
    unhealthy = {names[i % len(names)]: "fatal XID 79" for i in sick}
    f = Fleet({n.name: n for n in nodes}, CLASSES, quotas={"ns-a": limits}, unhealthy=unhealthy)
    requests = [Request(f"{ns}/j{i}", [Alternative("nvidia-h100", per)], replicas, priority=prio, created=float(i))
                for i, (replicas, per, prio, ns) in enumerate(jobs)]
    results = schedule(requests, f)
    placed = [(r, results[r.job].chosen) for r in requests if results[r.job].chosen is not None]
    allocations = [c.allocation(r.namespace) for r, c in placed if c is not None]
    per_node = usage(allocations)
    for (node, _), count in per_node.items():
        assert node not in unhealthy
        assert f.nodes[node].ready and f.nodes[node].schedulable
        assert count <= f.nodes[node].allocatable["nvidia.com/gpu"]
    held = holdings(allocations).get("ns-a", {})
    for limit in limits:
        assert sum(n for (c, r), n in held.items() if limit.covers(c, r)) <= limit.devices


# --- reclaiming lent devices ----------------------------------------------------------------------------



def grown(job: str, priority: int, since: float, nodes: dict[str, int], base_replicas: int) -> GrownJob:
    """An elastic job of 8-device replicas grown onto `nodes`; admitted with `base_replicas`."""
    base = Request(job, [Alternative("nvidia-h100", 8)], base_replicas, allowed_regions=("cn-east",),
                   priority=priority)
    return GrownJob(job, priority, since, Allocation("nvidia.com/gpu", nodes, job.split("/")[0], "nvidia-h100",
                                                    "cn-east"), base)


def test_reclaim_shrinks_the_fewest_grown_jobs_back_to_their_admitted_size() -> None:
    lenders = [grown("ns/old", 1, 100.0, {"a": 8, "b": 8}, 1), grown("ns/new", 1, 500.0, {"c": 8, "d": 8}, 1)]
    f = fleet(*(gpu_node(n) for n in "abcd"), used=usage(g.allocation for g in lenders))
    one = Request("ns/waiting", [Alternative("nvidia-h100", 8)], 1, priority=1)
    plan = plan_reclaim(one, f, lenders)
    assert plan is not None and plan.shrink == (("ns/new", 1),)  # the most recently grown gives back one node
    assert "shrinking ns/new to 1 replica(s)" in plan.explain()
    two = Request("ns/waiting", [Alternative("nvidia-h100", 8)], 2, priority=1)
    plan = plan_reclaim(two, f, lenders)
    assert plan is not None and sorted(plan.shrink) == [("ns/new", 1), ("ns/old", 1)]
    three = Request("ns/waiting", [Alternative("nvidia-h100", 8)], 3, priority=1)
    assert plan_reclaim(three, f, lenders) is None  # the admitted replicas are never taken


def test_reclaim_is_for_jobs_of_the_lenders_priority_or_above_and_their_classes() -> None:
    lender = [grown("ns/high", 2, 100.0, {"a": 8, "b": 8}, 1)]
    f = fleet(gpu_node("a"), gpu_node("b"), used=usage(g.allocation for g in lender))
    assert plan_reclaim(Request("ns/low", [Alternative("nvidia-h100", 8)], 1, priority=1), f, lender) is None
    assert plan_reclaim(Request("ns/npu", [Alternative("ascend-910b", 8)], 1, priority=3), f, lender) is None
    plan = plan_reclaim(Request("ns/peer", [Alternative("nvidia-h100", 8)], 1, priority=2), f, lender)
    assert plan is not None and plan.shrink == (("ns/high", 1),) and len(plan.candidate.nodes) == 1


def test_a_yield_ends_when_its_preemptor_is_gone_placed_or_no_longer_above_the_victim() -> None:
    """`engine.disruption.preemption.yield_ends`, as kube-scheduler re-checks a nomination's victims: spec priorities
    (urgent 3 > high 2 > medium 1 > low 0); an equal one displaces only by level (MLFQ)."""
    from heterojob.engine.disruption.preemption import Preemptor, YieldEnd, yield_ends

    assert yield_ends(0, Preemptor(2, waiting=True), by_level=False) is None
    assert yield_ends(0, None, by_level=False) == YieldEnd.PREEMPTOR_GONE
    assert yield_ends(0, Preemptor(2, waiting=False), by_level=True) == YieldEnd.PREEMPTOR_NOT_WAITING
    assert yield_ends(3, Preemptor(2, waiting=True), by_level=True) == YieldEnd.NOT_OUTRANKED  # victim raised
    assert yield_ends(1, Preemptor(0, waiting=True), by_level=True) == YieldEnd.NOT_OUTRANKED  # preemptor lowered
    assert yield_ends(2, Preemptor(2, waiting=True), by_level=False) == YieldEnd.NOT_OUTRANKED  # fifo: equal
    assert yield_ends(2, Preemptor(2, waiting=True), by_level=True) is None  # mlfq: a level displacement holds


def test_a_reclaim_ends_when_the_job_it_shrinks_for_is_gone_placed_or_below_it() -> None:
    """A reclaim (`then=resize` asked by another job) is re-checked as a preemption is. Lent room goes back to
    a job of the same priority or above (`plan_reclaim`), so an equal priority holds whatever the policy."""
    from heterojob.engine.disruption.preemption import Preemptor, Yield, YieldEnd, yield_ends, yield_of

    assert yield_of("resize", "ns/taker") == Yield.RECLAIM and yield_of("preempt", "ns/vip") == Yield.PREEMPT
    assert yield_of("resize", None) is None and yield_of("migrate", "ns/x") is None  # its own resize, a move
    assert (Yield.PREEMPT.cancelled, Yield.RECLAIM.cancelled) == ("PreemptionCancelled", "ReclaimCancelled")
    r = Yield.RECLAIM
    assert yield_ends(1, Preemptor(1, waiting=True), by_level=False, kind=r) is None  # fifo: equal takes it back
    assert yield_ends(1, Preemptor(2, waiting=True), by_level=True, kind=r) is None
    assert yield_ends(1, None, by_level=False, kind=r) == YieldEnd.PREEMPTOR_GONE
    assert yield_ends(1, Preemptor(2, waiting=False), by_level=False, kind=r) == YieldEnd.PREEMPTOR_NOT_WAITING
    assert yield_ends(2, Preemptor(1, waiting=True), by_level=True, kind=r) == YieldEnd.NOT_OUTRANKED

# --- bad devices: failed, overheating, network down -------------------------------------------------------

def test_a_node_whose_device_plugin_withholds_its_failed_gpu_offers_the_rest() -> None:
    """One GPU failed on every node of the region (telemetry or a firing alert says so). Where the device plugin
    has taken it out of allocatable (capacity 8, allocatable 7, as NVIDIA's k8s-device-plugin does on a fatal
    XID), the kubelet hands out only the 7 healthy ones: a replica of 4 fits. Where allocatable still counts it,
    a new pod could be given the dead GPU: the whole node stays out."""
    withheld = [gpu_node(n, devices=7, capacity={"nvidia.com/gpu": 8}) for n in ("a", "b")]
    failed = {n: Failed(1, f"GPU-{n}: fatal XID 79") for n in ("a", "b")}
    f = Fleet({n.name: n for n in withheld}, CLASSES, failed=failed)
    chosen = place(request(replicas=2, per=4), f).chosen
    assert chosen is not None and sorted(chosen.nodes) == ["a", "b"]
    result = place(request(replicas=1, per=8), f)  # 8 per replica: 7 healthy GPUs on each node
    assert result.chosen is None and "room for 0 of 1 replicas (14 free on 2 node(s)" in result.explain()
    counted = Fleet({n: gpu_node(n) for n in ("a", "b")}, CLASSES, failed=failed)  # allocatable still 8
    result = place(request(replicas=1, per=4), counted)
    assert result.chosen is None and "unhealthy (GPU-a: fatal XID 79)" in result.explain()
    two = Fleet({"a": withheld[0]}, CLASSES, failed={"a": Failed(2, "GPU-a: fatal XID 79")})  # only 1 withheld
    assert place(request(replicas=1, per=4), two).chosen is None


def test_an_overheating_node_takes_nothing_new() -> None:
    f = Fleet({n.name: n for n in (gpu_node("a"), gpu_node("b"))}, CLASSES,
              unhealthy={"a": "GPU-a3: overheat 97°C >= 90°C"}, used=usage([Allocation("nvidia.com/gpu", {"a": 4})]))
    chosen = place(request(replicas=1, per=4), f).chosen
    assert chosen is not None and chosen.nodes == ("b",)  # best fit alone would fill a's 4 free GPUs


def npu_fleet(**kw: object) -> Fleet:
    return Fleet({n.name: n for n in (npu_node("n1"), npu_node("n2"), npu_node("n3"))}, CLASSES, **kw)  # type: ignore[arg-type]


def test_a_gang_of_several_replicas_is_not_placed_on_a_chip_whose_network_is_down() -> None:
    """npu-exporter says chip 3 of n1 has its RoCE link down: a job of several replicas would fail at once there
    (its collectives cross that link), so placement leaves n1 out for it, naming the filter; a job of one
    replica needs no network and may use n1."""
    down = {"n1": "n1/npu-3: NPU link status 0 (down)"}
    gang = request(replicas=2, per=8, classes=("ascend-910b",))
    chosen = place(gang, npu_fleet(network_down=down)).chosen
    assert chosen is not None and sorted(chosen.nodes) == ["n2", "n3"]
    result = place(request(replicas=3, per=8, classes=("ascend-910b",)), npu_fleet(network_down=down))
    assert result.chosen is None
    assert ("cn-north/ascend-910b: room for 2 of 3 replicas (16 free on 2 node(s), 8 per replica); 1 node(s) left "
            "out, network down (an Ascend chip's collectives cannot cross it; a job of 3 replicas needs them): "
            "n1: n1/npu-3: NPU link status 0 (down)") in result.explain()
    solo = place(request(replicas=1, per=8, classes=("ascend-910b",)), npu_fleet(network_down=down)).chosen
    assert solo is not None and solo.nodes == ("n1",)  # the first by name among equals: one replica may use it
