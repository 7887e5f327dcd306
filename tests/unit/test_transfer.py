"""The cost of moving a checkpoint between regions (`engine.capacity.transfer`) and the planner's move paths that use it
(`relocation.plan_move` for voluntary moves, `relocation.plan_relocation` for involuntary ones), on plain data;
the SDK's ack with the checkpoint's size and how the operator reads it (`lifecycle.parse_ack`, status)."""

from __future__ import annotations

import logging

import pytest

from heterojob.api.job import HeteroJobSpec
from heterojob.api.job_status import CheckpointRef, HeteroJobStatus
from heterojob.engine.queue import admission as planner
from heterojob.engine.queue import relocation
from heterojob.engine.capacity import migration, transfer
from heterojob.engine.queue.admission import Outcome
from heterojob.engine.capacity.fleet import Fleet, RegionInfo, usage
from heterojob.engine.execution.lifecycle import Action, AskedCheckpoint, JobView, PodView, decide, parse_ack
from heterojob.engine.placing.placement import Alternative, Request
from heterojob.engine.capacity.transfer import GIB, Link, Move, Reason, Size, SizeSource
from heterojob_sdk import Checkpointer
from tests.unit.test_placement import CLASSES, gpu_node
from heterojob.engine.disruption.holders import Holder

NOW = 100_000.0


def regions(*links: tuple[str, str, float, float]) -> dict[str, RegionInfo]:
    """Regions a, b, c (node label topology.kubernetes.io/region), each link declared on its first region."""
    out = {}
    for name in "abc":
        mine = {there: Link(gbps, ms) for here, there, gbps, ms in links if here == name}
        out[name] = RegionInfo(name, {"topology.kubernetes.io/region": name}, links=mine)
    return out


# --- the cost model ------------------------------------------------------------------------------------


def test_transfer_time_is_size_over_bandwidth_plus_latency_and_save_restore_come_on_top() -> None:
    size = Size(100 * 10**9, SizeSource.REPORTED)  # 100 GB
    c = transfer.cost(size, Link(10, 40), save_s=30.0)
    assert c.transfer_s == pytest.approx(80.04)  # 800 Gbit / 10 Gbit/s + 40 ms
    assert (c.save_s, c.restore_s) == (30.0, 30.0)  # restoring is assumed to take as long as saving
    assert c.total_s == pytest.approx(140.04)
    unmeasured = transfer.cost(size, Link(10, 40), save_s=None, settings=transfer.TransferSettings(storage_gbps=8))
    assert unmeasured.save_s == pytest.approx(100.0)  # 100 GB at 1 GB/s
    local = transfer.cost(size, None, save_s=30.0)
    assert local.transfer_s == 0.0 and "same region" in local.describe()


def test_the_size_is_what_the_sdk_reported_else_the_hint_else_devices_times_memory() -> None:
    assert transfer.checkpoint_size(123, 456, 16, 80.0) == Size(123, SizeSource.REPORTED)
    assert transfer.checkpoint_size(None, 456, 16, 80.0) == Size(456, SizeSource.HINT)
    assert transfer.checkpoint_size(None, None, 16, 64.0) == Size(16 * 64 * GIB, SizeSource.ESTIMATE)
    assert transfer.checkpoint_size(None, None, 2, None).bytes == 2 * 80 * GIB  # the class does not say
    assert transfer.checkpoint_size(0, None, 8, 80.0) == Size(0, SizeSource.REPORTED)  # nothing to carry


def test_a_link_is_read_from_either_region_the_origins_first_else_the_default() -> None:
    r = {"a": RegionInfo("a", {}, links={"b": Link(10, 5)}), "b": RegionInfo("b", {}, links={"a": Link(1, 50)}),
         "c": RegionInfo("c", {}, links={"a": Link(40, 2)})}
    assert transfer.link_between(r, "a", "b") == Link(10, 5)
    assert transfer.link_between(r, "b", "a") == Link(1, 50)
    assert transfer.link_between(r, "a", "c") == Link(40, 2)  # only c declares it
    assert transfer.link_between(r, "b", "c") is None
    default = Link(1, 80, assumed=True)
    assert transfer.link_between(r, "b", "c", transfer.TransferSettings(default_link=default)) == default


def test_a_voluntary_move_goes_only_where_it_saves_more_than_it_costs() -> None:
    r = regions(("a", "b", 100, 10), ("a", "c", 1, 80))
    move = Move("a", Size(250 * 10**9, SizeSource.REPORTED), save_s=60.0, saves_s=1800.0)
    fat, thin, home = transfer.judge(move, "b", r), transfer.judge(move, "c", r), transfer.judge(move, "a", r)
    assert fat.reason == Reason.PAYS and fat.ok  # 20 s transfer + 120 s save and restore < 1800 s
    assert thin.reason == Reason.NOT_WORTH and not thin.ok  # 2000 s over 1 Gbit/s + 120 s > 1800 s
    assert "more than the ~1800s the move would save" in thin.message and "transfer 2000s" in thin.message
    smaller = transfer.judge(Move("a", Size(200 * 10**9, SizeSource.REPORTED), 60.0, 1800.0), "c", r)
    assert smaller.reason == Reason.PAYS  # 1600 s + 120 s: just pays
    assert home.reason == Reason.SAME_REGION and home.ok
    unlinked = transfer.judge(move, "c", regions(("a", "b", 100, 10)))
    assert unlinked.reason == Reason.NO_LINK and "no link from a" in unlinked.message
    manual = transfer.judge(Move("a", move.size, 60.0, saves_s=None), "c", r)
    assert manual.reason == Reason.REQUESTED and manual.ok  # the user's call: not weighed, only costed
    forced = transfer.judge(Move("a", move.size, 60.0, saves_s=1.0, voluntary=False), "c", r)
    assert forced.reason == Reason.INVOLUNTARY and forced.ok


def test_what_a_move_saves_follows_the_symptom_and_the_time_the_job_has_run() -> None:
    assert transfer.slowdown(migration.STRAGGLER, 0.5) == 0.5
    assert transfer.slowdown(migration.OVERHEAT, 0.8) == pytest.approx(0.2)
    assert transfer.slowdown(migration.MANUAL, 0.5) is None  # not weighed
    assert transfer.horizon(600.0) == 3600.0 and transfer.horizon(7200.0) == 7200.0
    assert transfer.saving(7200.0, 0.5) == 3600.0 and transfer.saving(100.0, 3.0) == 100.0


def test_regions_are_tiered_by_transfer_cost_with_unlinked_ones_last() -> None:
    r = regions(("a", "b", 100, 10), ("a", "c", 1, 80))
    r["d"] = RegionInfo("d", {})
    move = Move("a", Size(10**12, SizeSource.ESTIMATE), voluntary=False)
    assert transfer.tiers(move, ["d", "c", "b", "a"], r) == [("a",), ("b",), ("c",), ("d",)]
    assert transfer.tiers(move, ["b", "c", "d"], {}) == [("b", "c", "d")]  # no links at all: one tier


# --- the planner's move paths ------------------------------------------------------------------------


def job(replicas: int = 2, allowed: tuple[str, ...] = ()) -> Request:
    return Request("ns/mover", [Alternative("nvidia-h100", 8)], replicas, allowed_regions=allowed, priority=1)


def fleet(nodes: dict[str, str], r: dict[str, RegionInfo], used: dict[str, int] | None = None) -> Fleet:
    return Fleet({n: gpu_node(n, region) for n, region in nodes.items()}, CLASSES, r,
                 used={(n, "nvidia.com/gpu"): k for n, k in (used or {}).items()})


def test_plan_move_skips_a_region_the_transfer_does_not_pay_for_and_takes_one_that_does() -> None:
    r = regions(("a", "b", 100, 10), ("a", "c", 1, 80))
    f = fleet({"a1": "a", "b1": "b", "b2": "b", "c1": "c", "c2": "c"}, r, used={"a1": 8})
    move = Move("a", Size(400 * 10**9, SizeSource.REPORTED), save_s=30.0, saves_s=1800.0)
    plan = relocation.plan_move(job(), [], [], f, NOW, move=move)
    assert plan.outcome == Outcome.PLACED and plan.candidate.region == "b"
    assert "b: 372.5 GiB (reported by the SDK) over 100 Gbit/s" in plan.message
    # b full: c is the only room, but 400 GB over 1 Gbit/s takes ~53 min against ~30 min saved: held
    busy = fleet({"a1": "a", "b1": "b", "b2": "b", "c1": "c", "c2": "c"}, r, used={"a1": 8, "b1": 8, "b2": 8})
    held = relocation.plan_move(job(), [], [], busy, NOW, move=move)
    assert held.outcome == Outcome.NO_ROOM and held.reason == Reason.NOT_WORTH.value
    assert held.message.startswith("no destination worth the move: c: ") and "3200s" in held.message
    # without the cost model (one-cluster callers), the same fleet moves it to c
    assert relocation.plan_move(job(), [], [], busy, NOW).candidate.region == "c"


def test_plan_move_names_a_missing_link_and_plain_no_room_stays_no_room() -> None:
    r = regions(("a", "b", 100, 10))
    f = fleet({"a1": "a", "c1": "c", "c2": "c"}, r, used={"a1": 8})
    move = Move("a", Size(10**9, SizeSource.REPORTED), save_s=1.0, saves_s=3600.0)
    held = relocation.plan_move(job(), [], [], f, NOW, move=move)
    assert held.reason == Reason.NO_LINK.value and "c: no link from a" in held.message
    full = fleet({"a1": "a", "b1": "b"}, r, used={"a1": 8, "b1": 8})
    nothing = relocation.plan_move(job(), [], [], full, NOW, move=move)
    assert nothing.outcome == Outcome.NO_ROOM and nothing.reason == "" and nothing.message.startswith("no destination:")


def test_plan_move_within_the_region_is_not_weighed() -> None:
    r = regions(("a", "b", 0.001, 1000))
    f = fleet({"a1": "a", "a2": "a", "a3": "a"}, r, used={"a1": 8})
    move = Move("a", Size(10**15, SizeSource.ESTIMATE), save_s=None, saves_s=1.0)
    plan = relocation.plan_move(job(), [], [], f, NOW, move=move)
    assert plan.outcome == Outcome.PLACED and set(plan.candidate.nodes) == {"a2", "a3"}


def test_an_involuntary_move_lands_where_the_transfer_is_cheapest_among_those_that_fit() -> None:
    r = regions(("a", "b", 100, 5), ("a", "c", 1, 80))
    nodes = {"a1": "a", "b1": "b", "b2": "b", "c1": "c", "c2": "c"}
    lost = fleet(nodes, r, used={"a1": 8})  # its old region has no room left
    move = Move("a", Size(500 * 10**9, SizeSource.REPORTED), voluntary=False)
    # c wins on the planner's own scores (equal scores: the last name); the transfer picks b
    assert planner.plan_one(job(), [], [], lost, NOW).candidate.region == "c"
    plan = relocation.plan_relocation(job(), [], [], lost, NOW, move=move)
    assert plan.outcome == Outcome.PLACED and plan.candidate.region == "b"
    assert "the cheapest transfer that fits: b:" in plan.message
    # b full: it still moves, to the dearer c (an involuntary move is never held for its cost)
    crowded = fleet(nodes, r, used={"a1": 8, "b1": 8, "b2": 8})
    assert relocation.plan_relocation(job(), [], [], crowded, NOW, move=move).candidate.region == "c"


def test_an_involuntary_move_keeps_to_its_region_when_its_reserved_healthy_room_and_a_spare_node_fit() -> None:
    r = regions(("a", "b", 100, 5))
    kept = planner.Allocation("nvidia.com/gpu", {"a1": 8}, "ns", "nvidia-h100", "a")  # the healthy rank's node
    mine = Holder("ns/mover", 1, 0.0, kept, waiting=True)
    f = Fleet({n: gpu_node(n, reg) for n, reg in {"a1": "a", "a2": "a", "a3": "a", "b1": "b", "b2": "b"}.items()},
              CLASSES, r, used=usage([kept]))
    dead = Request("ns/mover", [Alternative("nvidia-h100", 8)], 2, exclude_nodes=frozenset({"a2"}), priority=1)
    plan = relocation.plan_relocation(dead, [dead], [mine], f, NOW, move=Move("a", Size(10**12, SizeSource.HINT),
                                                                            voluntary=False))
    assert plan.outcome == Outcome.PLACED and plan.candidate.region == "a" and "a2" not in plan.candidate.nodes


def test_an_involuntary_move_that_fits_nowhere_plans_as_before_and_may_preempt() -> None:
    r = regions(("a", "b", 1, 80))
    running = [Holder("ns/low", 0, 0.0, planner.Allocation("nvidia.com/gpu", {"b1": 8, "b2": 8}, "ns",
                                                                      "nvidia-h100", "b"))]
    f = Fleet({n: gpu_node(n, reg) for n, reg in {"b1": "b", "b2": "b"}.items()}, CLASSES, r,
              used=usage(h.allocation for h in running))
    plan = relocation.plan_relocation(job(), [], running, f, NOW, move=Move("a", Size(1, SizeSource.HINT),
                                                                          voluntary=False))
    assert plan.outcome == Outcome.PREEMPTING and [d.job for d in plan.disruptions] == ["ns/low"]


# --- the SDK's ack and what the operator makes of it --------------------------------------------------


def test_an_ack_may_carry_the_size_and_an_old_three_field_ack_still_parses() -> None:
    assert parse_ack("g1-5;700;s3://ckpt/j/g1-5/", "g1-5") == transfer_ack(700, "s3://ckpt/j/g1-5/")
    assert parse_ack("g1-5;700;s3://ckpt/j/g1-5/;size=1234", "g1-5") == transfer_ack(700, "s3://ckpt/j/g1-5/", 1234)
    assert parse_ack("g1-5;700;s3://b/a;b/;size=9", "g1-5") == transfer_ack(700, "s3://b/a;b/", 9)  # ';' in a URI
    bad = parse_ack("g1-5;700;s3://x/;size=lots", "g1-5")
    assert bad is not None and bad.uri == "s3://x/" and bad.size_bytes is None and "'lots'" in bad.problem
    huge = parse_ack("g1-5;700;s3://x/;size=-4", "g1-5")
    assert huge is not None and huge.size_bytes is None and "out of range" in huge.problem
    assert parse_ack("g1-4;700;s3://x/;size=1", "g1-5") is None and parse_ack("g1-5;x;s3://x/", "g1-5") is None


def transfer_ack(step: int, uri: str, size: int | None = None) -> object:
    from heterojob.engine.execution.lifecycle import Ack

    return Ack(step, uri, size)


def checkpointing(*acks: str) -> JobView:
    pods = tuple(PodView(f"j-g1-{r}", r, 1, "Running", checkpoint_request="c1", checkpoint_ack=a)
                 for r, a in enumerate(acks))
    return JobView(phase=None, reason=None, generation=1, replicas=len(acks), restarts=0, backoff_limit=3, pods=pods,
                   checkpoint=AskedCheckpoint("c1", NOW + 60, "migrate"), now=NOW)


def test_the_checkpoints_size_is_the_sum_over_ranks_and_unknown_when_one_rank_did_not_say() -> None:
    d = decide(checkpointing("c1;9;s3://c/;size=100", "c1;9;s3://c/;size=0", "c1;9;s3://c/;size=50"))
    assert d.action == Action.CHECKPOINT_DONE and d.size_bytes == 150 and d.notes == ()
    old = decide(checkpointing("c1;9;s3://c/;size=100", "c1;9;s3://c/"))  # a rank with an older SDK
    assert old.action == Action.CHECKPOINT_DONE and old.size_bytes is None and old.uri == "s3://c/"
    bad = decide(checkpointing("c1;9;s3://c/;size=100", "c1;9;s3://c/;size=ten"))
    assert bad.action == Action.CHECKPOINT_DONE and bad.size_bytes is None
    assert bad.notes == ("rank 1: size 'ten' is not a whole number of bytes; ignored",)


class FakePods:
    def __init__(self) -> None:
        self.patches: list[dict] = []

    def get_pod(self, namespace: str, name: str) -> dict:
        raise RuntimeError("no API")

    def patch_pod(self, namespace: str, name: str, patch: dict) -> None:
        self.patches.append(patch)


@pytest.mark.parametrize("returned, suffix", [(4096, ";size=4096"), (None, ""), (-1, ""), ("4096", ""),
                                              (True, "")])
def test_the_sdk_acks_what_save_returned_as_the_size_and_leaves_out_anything_else(
        tmp_path, caplog, returned: object, suffix: str) -> None:
    (tmp_path / "annotations").write_text('heterojob.io/checkpoint-request="g1-7"\n')
    fake = FakePods()
    ckpt = Checkpointer(directory="s3://ckpt/j", pod="j-g1-0", namespace="ns", podinfo=tmp_path, api=fake,
                        poll_s=0.0)
    with caplog.at_level(logging.WARNING, logger="heterojob.sdk"):
        assert ckpt.maybe_checkpoint(12, lambda uri: returned) == "s3://ckpt/j/g1-7/"
    ack = fake.patches[0]["metadata"]["annotations"]["heterojob.io/checkpoint-ack"]
    assert ack == f"g1-7;12;s3://ckpt/j/g1-7/{suffix}"
    assert ("not a number of bytes" in caplog.text) == (returned is not None and not suffix)


def test_status_figures_that_do_not_read_are_dropped_not_the_checkpoint() -> None:
    ref = CheckpointRef.model_validate({"id": "c1", "uri": "s3://c/", "sizeBytes": "huge", "saveSeconds": -3})
    assert (ref.uri, ref.size_bytes, ref.save_seconds) == ("s3://c/", None, None)
    status = HeteroJobStatus.model_validate({"checkpoint": {"last": {"id": "c1", "uri": "s3://c/",
                                                                     "sizeBytes": 2**70}}})
    assert status.checkpoint.last.uri == "s3://c/" and status.checkpoint.last.size_bytes is None


def test_the_operator_flags_give_the_default_link_and_storage_speed_or_a_clear_exit() -> None:
    from heterojob.cli import _transfer_settings, parser

    args = parser().parse_args(["operator", "run", "--default-link", "1/80", "--storage-gbps", "16"])
    assert _transfer_settings(args) == transfer.TransferSettings(default_link=Link(1.0, 80.0, assumed=True),
                                                                 storage_gbps=16.0)
    assert _transfer_settings(parser().parse_args(["operator", "run"])) == transfer.TransferSettings()
    with pytest.raises(SystemExit, match="expected GBPS/MS with GBPS > 0"):
        _transfer_settings(parser().parse_args(["operator", "run", "--default-link", "fast"]))


# --- a job with no acked checkpoint: nothing to carry, but its run so far is at stake --------------------


def _spec() -> "HeteroJobSpec":
    from heterojob.api.common import parse_spec
    from heterojob.api.job import HeteroJobSpec

    return parse_spec(HeteroJobSpec, {"devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
                                      "policy": {"allowCrossRegion": True, "stragglerRatio": 0.5},
                                      "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}})


def _iso(t: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(t, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_job_re_placed_from_scratch_prices_no_transfer_and_needs_no_link() -> None:
    from heterojob.state.requests import transfer_move

    # a lost member's job whose checkpoint phase ended without any ack: it restarts from scratch
    status = HeteroJobStatus.model_validate({"phase": "Migrating", "startTime": _iso(NOW - 7200)})
    move = transfer_move(_spec(), status, "a", "nvidia-h100", 2, CLASSES, NOW, transfer.TransferSettings(),
                         voluntary=False)
    assert move.from_scratch
    r = regions(("a", "b", 100, 5))  # c has no link at all
    for region in "bc":
        v = transfer.judge(move, region, r)
        assert v.ok and v.cost is not None and v.cost.total_s == 0.0 and "restarts from scratch" in v.message
    lost = fleet({"a1": "a", "b1": "b", "b2": "b", "c1": "c", "c2": "c"}, r, used={"a1": 8})
    plan = relocation.plan_relocation(job(), [], [], lost, NOW, move=move)
    # no transfer to prefer b for: the planner's own choice, as plan_one makes it (c: equal scores, last name)
    assert plan.candidate.region == planner.plan_one(job(), [], [], lost, NOW).candidate.region == "c"
    assert "transfer" not in plan.message and "GiB" not in plan.message
    # with an acked checkpoint the same move still carries it the cheapest way
    acked = HeteroJobStatus.model_validate({"phase": "Migrating", "checkpoint": {"last": {
        "id": "c1", "uri": "s3://c/1/", "sizeBytes": 500 * 10**9}}})
    carried = transfer_move(_spec(), acked, "a", "nvidia-h100", 2, CLASSES, NOW, transfer.TransferSettings(),
                            voluntary=False)
    assert not carried.from_scratch
    assert relocation.plan_relocation(job(), [], [], lost, NOW, move=carried).candidate.region == "b"


def test_a_voluntary_move_to_another_region_before_any_checkpoint_weighs_the_run_a_restart_would_lose() -> None:
    from heterojob.state.requests import transfer_move

    r = regions(("a", "b", 100, 10))
    size = Size(10 * 10**9, SizeSource.ESTIMATE)
    young = Move("a", size, saves_s=1800.0, checkpointed=False, lost_s=600.0)
    assert transfer.judge(young, "b", r).reason == Reason.PAYS  # 600 s at stake < 1800 s saved
    assert transfer.judge(young, "a", r).reason == Reason.SAME_REGION
    old = Move("a", size, saves_s=1800.0, checkpointed=False, lost_s=5000.0)
    v = transfer.judge(old, "b", r)
    assert v.reason == Reason.LOST_WORK and not v.ok and "~5000s of work" in v.message
    assert transfer.judge(old, "a", r).reason == Reason.SAME_REGION  # within the region: not weighed, as before
    thin = transfer.judge(Move("a", Size(10**13, SizeSource.ESTIMATE), saves_s=1800.0, checkpointed=False,
                               lost_s=600.0), "b", r)
    assert thin.reason == Reason.NOT_WORTH  # and if the checkpoint does come, its transfer must pay too
    # a manual move is the user's call; an acked checkpoint means nothing is lost
    assert transfer.judge(Move("a", size, saves_s=None, checkpointed=False, lost_s=5000.0), "b", r).ok
    assert transfer.judge(Move("a", size, saves_s=1800.0, lost_s=5000.0), "b", r).reason == Reason.PAYS

    # from status: the run since the job's placement (a straggler at ratio 0.5 saves half of max(ran, 1 h))
    placed = {"phase": "Running", "startTime": _iso(NOW - 9000),
              "placement": {"region": "a", "deviceClass": "nvidia-h100", "replicas": 2, "perReplica": 8,
                            "nodes": ["a1", "a2"], "since": _iso(NOW - 5000)}}
    weigh = transfer_move(_spec(), HeteroJobStatus.model_validate(placed), "a", "nvidia-h100", 2, CLASSES, NOW,
                          transfer.TransferSettings(), migration.STRAGGLER)
    assert not weigh.checkpointed and weigh.lost_s == pytest.approx(5000.0) and weigh.saves_s == pytest.approx(4500.0)
    f = fleet({"a1": "a", "a2": "a", "b1": "b", "b2": "b"}, r, used={"a1": 8, "a2": 8})  # only b has room
    held = relocation.plan_move(job(), [], [], f, NOW, move=weigh)
    assert held.outcome == Outcome.NO_ROOM and held.reason == Reason.LOST_WORK.value
    assert held.message.startswith("no destination worth the move: b: no checkpoint acked yet")
    with_ack = HeteroJobStatus.model_validate({**placed, "checkpoint": {"last": {"id": "c", "uri": "s3://c/"}}})
    go = transfer_move(_spec(), with_ack, "a", "nvidia-h100", 2, CLASSES, NOW, transfer.TransferSettings(),
                       migration.STRAGGLER)
    assert relocation.plan_move(job(), [], [], f, NOW, move=go).outcome == Outcome.PLACED
