"""A move that spec.policy.allowCrossRegion keeps in its region says so in the Pending message, rather
than blaming spec.regions.allowed (which the job may not even set: the demo's job-NNNN after its member
cluster is lost)."""

from __future__ import annotations

from heterojob.api.common import parse_spec
from heterojob.api.job import HeteroJobSpec
from heterojob.engine.capacity.fleet import DeviceClass, Fleet, Node
from heterojob.engine.placing.placement import place
from heterojob.state.requests import move_request

NPU = DeviceClass("ascend-910b", "huawei.com/Ascend910", {"npu": "910b"}, throughput=0.6)
JOB = {"metadata": {"name": "j", "namespace": "ns"}}


def spec(policy: dict | None = None, regions: dict | None = None) -> HeteroJobSpec:
    doc = {"devices": [{"deviceClass": "ascend-910b", "perReplica": 8}],
           "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}}
    if policy is not None:
        doc["policy"] = policy
    if regions is not None:
        doc["regions"] = regions
    return parse_spec(HeteroJobSpec, doc)


def fleet() -> Fleet:
    nodes = [Node("lost-0", {"npu": "910b", "topology.kubernetes.io/region": "cn-chengdu"},
                  {"huawei.com/Ascend910": 8}, ready=False),
             Node("ok-0", {"npu": "910b", "topology.kubernetes.io/region": "cn-qingyang"}, {"huawei.com/Ascend910": 8})]
    return Fleet({n.name: n for n in nodes}, {NPU.name: NPU}, used={})


def test_a_move_pinned_by_policy_names_the_policy() -> None:
    request = move_request("ns/j", JOB, spec(), "cn-chengdu", "ascend-910b", (), 1)
    text = place(request, fleet()).explain()
    assert "cn-qingyang/ascend-910b: a move stays in cn-chengdu (spec.policy.allowCrossRegion is false)" in text
    assert "spec.regions.allowed" not in text


def test_spec_regions_allowed_is_still_named_when_it_is_the_reason() -> None:
    request = move_request("ns/j", JOB, spec({"allowCrossRegion": True}, {"allowed": ["cn-chengdu"]}),
                           "cn-chengdu", "ascend-910b", (), 1)
    assert "cn-qingyang/ascend-910b: region not in spec.regions.allowed" in place(request, fleet()).explain()
    allowed_anywhere = move_request("ns/j", JOB, spec({"allowCrossRegion": True}), "cn-chengdu", "ascend-910b", (), 1)
    assert place(allowed_anywhere, fleet()).chosen.region == "cn-qingyang"
