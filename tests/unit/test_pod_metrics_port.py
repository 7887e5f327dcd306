"""The step metric's opt-in (kube/manifests.pod): a training container that declares the port named
`heterojob-steps` is told its number in $HETEROJOB_METRICS_PORT, which the SDK serves the metric on; a container
without it is told nothing, so the SDK serves nothing (docs/telemetry.md, "Training steps")."""

from __future__ import annotations

from typing import Any

from heterojob.api.job import HeteroJobSpec
from heterojob.engine.capacity.fleet import DeviceClass, RegionInfo
from heterojob.kube.manifests import pod


def build(containers: list[dict[str, Any]]) -> dict[str, Any]:
    spec = HeteroJobSpec.model_validate({
        "replicas": {"min": 1}, "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
        "template": {"spec": {"containers": containers}}})
    job = {"metadata": {"name": "train", "namespace": "team-a", "uid": "u1"}}
    return pod(job, spec, cls=DeviceClass("nvidia-h100", "nvidia.com/gpu"), region=RegionInfo("cn-east", {}),
               alternative_index=0, node="n1", node_hostname="n1", rank=0, world_size=1, generation=3,
               per_replica=8)


def env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


def test_a_container_declaring_the_steps_port_is_told_its_number() -> None:
    main = {"name": "main", "image": "train:1", "ports": [{"name": "http", "containerPort": 8080},
                                                          {"name": "heterojob-steps", "containerPort": 9402}]}
    side = {"name": "side", "image": "sidecar:1"}
    p = build([main, side])
    first, second = p["spec"]["containers"]
    assert env(first)["HETEROJOB_METRICS_PORT"] == "9402"
    assert "HETEROJOB_METRICS_PORT" not in env(second)
    assert first["ports"][1] == {"name": "heterojob-steps", "containerPort": 9402}  # the PodMonitor's port name


def test_without_the_port_the_sdk_is_told_nothing_and_serves_nothing() -> None:
    p = build([{"name": "main", "image": "train:1", "ports": [{"name": "http", "containerPort": 8080}]}])
    assert "HETEROJOB_METRICS_PORT" not in env(p["spec"]["containers"][0])
    assert env(p["spec"]["containers"][0])["HETEROJOB_POD_NAME"] == "train-g3-0"
