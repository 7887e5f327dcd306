"""The SDK: a real numpy training loop migrated mid-run ends where an uninterrupted run ends, acknowledging with
its pod's own service account token under the per-job Role the operator makes (kube/access.py), as on a real
cluster (the emulator enforces RBAC for the tokens it issues: sim/cluster/auth.py); an ack the API server refuses
is retried while training goes on; the operator under its shipped ClusterRole may grant that Role."""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
from pathlib import Path
from typing import Any

import kubernetes
import numpy as np
import pytest
import yaml

from heterojob.constants import ANNOTATION_CHECKPOINT_ACK, ANNOTATION_MIGRATE
from heterojob_sdk import ApiError, Checkpointer, PodClient, read_annotations
from heterojob.sim.cluster.harness import Emulator, OperatorRunner, apply
from heterojob.sim.cluster.nodes import node
from tests.conftest import Cluster, eventually

spec_ = importlib.util.spec_from_file_location("train_numpy", Path(__file__).parents[2] / "examples" / "train_numpy.py")
assert spec_ is not None and spec_.loader is not None
train_numpy = importlib.util.module_from_spec(spec_)
spec_.loader.exec_module(train_numpy)

STEPS = 400
ROOT = Path(__file__).resolve().parents[2]


def test_downward_api_annotations_file_is_read(tmp_path: Path) -> None:
    (tmp_path / "annotations").write_text(
        'heterojob.io/node="h100-1"\nheterojob.io/checkpoint-request="g1-17"\nodd="say \\"hi\\""\n')
    assert read_annotations(tmp_path / "annotations") == {
        "heterojob.io/node": "h100-1", "heterojob.io/checkpoint-request": "g1-17", "odd": 'say "hi"'}


def env_of(pod: Any) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env if e.value is not None}


def pod_token(cluster: Cluster, pod: Any) -> str:
    """What the kubelet mounts in the pod: a token of the pod's service account, bound to the pod (TokenRequest)."""
    request = {"spec": {"expirationSeconds": 3600, "boundObjectRef": {
        "kind": "Pod", "apiVersion": "v1", "name": pod.metadata.name, "uid": pod.metadata.uid}}}
    return cluster.core.create_namespaced_service_account_token(
        pod.spec.service_account_name, pod.metadata.namespace, request).status.token


def checkpointer(cluster: Cluster, pod: Any, tmp_path: Path, token: str | None = None,
                 **kwargs: Any) -> Checkpointer:
    env = env_of(pod)
    client = PodClient(cluster.api.configuration.host, token=token or pod_token(cluster, pod))
    return Checkpointer(directory=env["HETEROJOB_CHECKPOINT_DIR"], pod=env["HETEROJOB_POD_NAME"],
                        namespace=env["HETEROJOB_NAMESPACE"], podinfo=tmp_path / "no-downward-api",
                        api=client, poll_s=0.02, **kwargs, resume_from=env.get("HETEROJOB_RESUME_FROM"))


@pytest.mark.harness
def test_training_migrated_mid_run_ends_where_an_uninterrupted_run_ends(cluster: Cluster, operator: Any,
                                                                        tmp_path: Path) -> None:
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    cluster.create_job("fit", {
        "priority": "high", "replicas": {"min": 1}, "devices": [{"deviceClass": "nvidia-h100", "perReplica": 8}],
        "checkpoint": {"timeoutSeconds": 30, "storage": f"file://{tmp_path}/ckpt"},
        "template": {"spec": {"containers": [{"name": "main", "image": "train:cuda12"}]}}})
    [first] = eventually(lambda: cluster.pods("fit"), what="pod")
    cluster.set_pod_phase(first.metadata.name, "Running")
    eventually(lambda: (cluster.job("fit").get("status") or {}).get("phase") == "Running", what="Running")

    stop = threading.Event()
    out: dict[str, Any] = {}
    ckpt = checkpointer(cluster, first, tmp_path)
    worker = threading.Thread(target=lambda: out.update(a=train_numpy.train(STEPS, ckpt, stop, step_s=0.01)))
    worker.start()
    eventually(lambda: ckpt._last_poll > 0 and len(out) == 0 and ckpt, what="training under way")
    time.sleep(0.8)  # some 80 steps in
    cluster.custom.patch_namespaced_custom_object("heterojob.io", "v1alpha1", "team-a", "heterojobs", "fit",
                                                  {"metadata": {"annotations": {ANNOTATION_MIGRATE: "test"}}})
    new = eventually(lambda: [p for p in cluster.pods("fit") if p.metadata.labels["heterojob.io/generation"] == "2"],
                     timeout=20, what="the new pod")
    stop.set()  # the old pod is gone: its process ends
    worker.join(timeout=10)
    _, stopped_at, losses_a = out["a"]
    ack = eventually(lambda: (cluster.job("fit")["status"].get("checkpoint") or {}).get("last"), what="last")
    saved_step = ack["step"]
    assert 0 < saved_step < STEPS and stopped_at >= saved_step
    # the SDK reported the bytes save() wrote; the operator carried them into status (one rank: that figure)
    assert ack["sizeBytes"] == (Path(ack["uri"].removeprefix("file://")) / "state.npz").stat().st_size > 0
    assert ack["saveSeconds"] >= 0

    resumed = checkpointer(cluster, new[0], tmp_path)
    assert resumed.resume_from == ack["uri"]
    role = kubernetes.client.RbacAuthorizationV1Api(cluster.api).read_namespaced_role("fit-heterojob", "team-a")
    assert role.rules[0].resource_names == [new[0].metadata.name]  # the new gang's: the old one's names lapsed
    with pytest.raises(ApiError) as lapsed:  # the old pod's token no longer reaches anything (its pod is gone)
        ckpt._client().get_pod("team-a", first.metadata.name)
    assert lapsed.value.status in (401, 403)
    w_b, end_b, losses_b = train_numpy.train(STEPS, resumed)
    w_ref, end_ref, losses_ref = train_numpy.train(STEPS)
    assert end_b == end_ref == STEPS
    assert losses_b[0][0] == saved_step + 1  # continues from the checkpoint, not from step 1
    loss_at_save = dict(losses_a)[saved_step]
    assert losses_b[0][1] < losses_ref[0][1] / 10 and abs(losses_b[0][1] - loss_at_save) < loss_at_save * 2 + 0.1
    np.testing.assert_allclose(w_b, w_ref)  # the same weights as a run that never moved
    pods = cluster.pods("fit")
    assert all(ANNOTATION_CHECKPOINT_ACK not in (p.metadata.annotations or {}) for p in pods
               if p.metadata.labels["heterojob.io/generation"] == "2")


def job_spec(tmp_path: Path, replicas: int = 1, **checkpoint: Any) -> dict[str, Any]:
    return {"priority": "high", "replicas": {"min": replicas},
            "devices": [{"deviceClass": "nvidia-h100", "perReplica": 4}],
            "checkpoint": {"timeoutSeconds": 60, "storage": f"file://{tmp_path}/ckpt", **checkpoint},
            "template": {"spec": {"containers": [{"name": "main", "image": "train:cuda12"}]}}}


def downward_api(cluster: Cluster, pod: str, podinfo: Path, stop: threading.Event) -> None:
    """What the kubelet does for the pod's downward-API volume: its annotations, `key="value"` lines."""
    while not stop.wait(0.05):
        annotations = cluster.core.read_namespaced_pod(pod, "team-a").metadata.annotations or {}
        text = "".join(f'{k}="{v}"\n' for k, v in sorted(annotations.items()))
        (podinfo / "annotations.tmp").write_text(text)
        (podinfo / "annotations.tmp").replace(podinfo / "annotations")


def forbidden(call: Any) -> str:
    with pytest.raises(ApiError) as refused:
        call()
    assert refused.value.status == 403, refused.value
    return refused.value.message


@pytest.mark.harness
def test_a_pod_may_ack_on_its_own_gang_and_nothing_else(cluster: Cluster, operator: Any) -> None:
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    cluster.create_job("a", job_spec(Path("/tmp"), replicas=2))
    cluster.create_job("b", job_spec(Path("/tmp")))
    a0, a1 = eventually(lambda: len(cluster.pods("a")) == 2 and cluster.pods("a"), what="a's pods")
    [b0] = eventually(lambda: cluster.pods("b"), what="b's pod")
    assert {a0.spec.service_account_name, a1.spec.service_account_name} == {"a-heterojob"}
    rbac = kubernetes.client.RbacAuthorizationV1Api(cluster.api)
    role = rbac.read_namespaced_role("a-heterojob", "team-a")
    assert [(r.resources, r.verbs, r.resource_names) for r in role.rules] == [
        (["pods"], ["get", "patch"], ["a-g1-0", "a-g1-1"])]
    uid = cluster.job("a")["metadata"]["uid"]
    for obj in (role, rbac.read_namespaced_role_binding("a-heterojob", "team-a"),
                cluster.core.read_namespaced_service_account("a-heterojob", "team-a")):
        assert [(o.kind, o.uid) for o in obj.metadata.owner_references] == [("HeteroJob", uid)]

    pod = PodClient(cluster.api.configuration.host, token=pod_token(cluster, a0))
    ack = {"metadata": {"annotations": {ANNOTATION_CHECKPOINT_ACK: "x;1;s3://c/x/"}}}
    assert pod.get_pod("team-a", "a-g1-0")["metadata"]["name"] == "a-g1-0"
    pod.patch_pod("team-a", "a-g1-0", ack)
    pod.patch_pod("team-a", "a-g1-1", ack)  # its gang
    assert forbidden(lambda: pod.patch_pod("team-a", b0.metadata.name, ack)) == (
        f'pods "{b0.metadata.name}" is forbidden: User "system:serviceaccount:team-a:a-heterojob" cannot patch '
        'resource "pods" in API group "" in the namespace "team-a"')
    forbidden(lambda: pod._request("GET", "/api/v1/namespaces/team-a/pods"))  # no list
    forbidden(lambda: pod._request("DELETE", "/api/v1/namespaces/team-a/pods/a-g1-1"))  # no delete
    forbidden(lambda: pod._request("GET", "/apis/heterojob.io/v1alpha1/namespaces/team-a/heterojobs/a"))
    forbidden(lambda: pod._request("POST", "/api/v1/namespaces/team-a/pods", {"metadata": {"name": "x"}}))

    cluster.delete_job("a")  # the access goes with the job (owner references)
    eventually(lambda: not any(r.metadata.name == "a-heterojob"
                               for r in rbac.list_namespaced_role("team-a").items), what="a's Role collected")
    with pytest.raises(ApiError) as gone:
        pod.get_pod("team-a", "a-g1-0")
    assert gone.value.status == 401  # its pod (and account) are gone: the token is no longer valid


@pytest.mark.harness
def test_an_ack_the_api_server_refuses_is_retried_and_training_goes_on(cluster: Cluster, operator: Any,
                                                                        tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    cluster.create_job("fit", job_spec(tmp_path, intervalSeconds=1))
    cluster.create_job("other", job_spec(tmp_path))
    [first] = eventually(lambda: cluster.pods("fit"), what="pod")
    [other] = eventually(lambda: cluster.pods("other"), what="the other job's pod")
    cluster.set_pod_phase(first.metadata.name, "Running")
    # the pod runs with another job's account (as with the namespace's shared one): its ack is refused (403);
    # the request reaches it through the downward-API file, which a stand-in kubelet keeps
    stop = threading.Event()
    podinfo = tmp_path / "podinfo"
    podinfo.mkdir()
    downward = threading.Thread(target=downward_api, args=(cluster, first.metadata.name, podinfo, stop))
    downward.start()
    ckpt = checkpointer(cluster, first, tmp_path, token=pod_token(cluster, other), retry_first_s=0.2,
                        retry_max_s=0.4)
    ckpt.annotations_file = podinfo / "annotations"
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = train_numpy.train(100_000, ckpt, stop, step_s=0.005)
        except BaseException as exc:  # noqa: BLE001 - what the SDK must never do
            out["raised"] = exc

    with caplog.at_level(logging.WARNING, logger="heterojob.sdk"):
        worker = threading.Thread(target=run)
        worker.start()
        try:
            eventually(lambda: ckpt._ack_retry.failures >= 3, timeout=30, what="three refused acks")
            assert ckpt.pending_ack is not None and worker.is_alive()
            assert "could not acknowledge checkpoint" in caplog.text and "HTTP 403" in caplog.text
            assert "may not get/patch its own pod" in caplog.text
            assert not (cluster.job("fit")["status"].get("checkpoint") or {}).get("last")
            saved_at = len(list((tmp_path / "ckpt").rglob("state.npz")))
            assert saved_at == 1  # saved once; the ack alone is retried
            ckpt._client().token = pod_token(cluster, first)  # the right account: the next retry goes through
            last = eventually(lambda: (cluster.job("fit")["status"].get("checkpoint") or {}).get("last"),
                              timeout=20, what="the checkpoint recorded")
            assert last["uri"].startswith(f"file://{tmp_path}/ckpt/fit/") and worker.is_alive()
        finally:
            stop.set()
            worker.join(timeout=10)
            downward.join(timeout=10)
    assert "raised" not in out and out["result"][1] > last["step"]  # trained on past the refused acks


@pytest.mark.harness
def test_the_operator_under_its_shipped_role_grants_each_job_its_access(cluster: Cluster, emulator: Emulator,
                                                                        tmp_path: Path) -> None:
    """The operator as its own ServiceAccount, with manifests/base/rbac-operator.yaml as shipped: RBAC lets it
    grant a job's pods only what it holds itself; without `get` on pods it could not, and says so."""
    cluster.seed([node(f"h100-{i}", "cn-east", "nvidia-h100") for i in range(2)])
    shipped = [d for d in yaml.safe_load_all((ROOT / "manifests/base/rbac-operator.yaml").read_text()) if d]
    for obj in shipped:
        if obj["kind"] in ("ServiceAccount", "Role", "RoleBinding"):
            obj["metadata"]["namespace"] = "heterojob-system"  # what the kustomization sets
    apply(cluster.api, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "heterojob-system"}},
                        *shipped])
    token = cluster.core.create_namespaced_service_account_token(
        "heterojob-operator", "heterojob-system", {"spec": {"expirationSeconds": 3600}}).status.token
    config = yaml.safe_load(emulator.kubeconfig.read_text())
    config["users"][0]["user"]["token"] = token
    (tmp_path / "operator.yaml").write_text(yaml.safe_dump(config))
    with OperatorRunner(tmp_path / "operator.yaml") as runner:
        cluster.create_job("fit", job_spec(tmp_path, intervalSeconds=1))
        [pod] = eventually(lambda: cluster.pods("fit"), what="pod")
        assert pod.spec.service_account_name == "fit-heterojob"
        cluster.set_pod_phase(pod.metadata.name, "Running")
        ckpt = checkpointer(cluster, pod, tmp_path)
        assert eventually(lambda: ckpt.maybe_checkpoint(5, lambda uri: 0), timeout=20, what="an ack")
        last = eventually(lambda: (cluster.job("fit")["status"].get("checkpoint") or {}).get("last"), what="last")
        assert last["step"] == 5 and last["sizeBytes"] == 0

        rbac = kubernetes.client.RbacAuthorizationV1Api(cluster.api)  # the admin's
        role = rbac.read_cluster_role("heterojob-operator")
        for rule in role.rules:
            if rule.resources == ["pods"]:
                rule.verbs = [v for v in rule.verbs if v != "get"]
        rbac.replace_cluster_role("heterojob-operator", role)
        cluster.create_job("late", job_spec(tmp_path))
        status = eventually(lambda: (cluster.job("late").get("status") or {}).get("phase") == "Failed"
                            and cluster.job("late")["status"], what="refused")
        assert "the API server refused Role late-heterojob" in status["message"]
        assert "attempting to grant RBAC permissions not currently held" in status["message"]
        assert not cluster.pods("late")
    assert "Forbidden" not in runner.output.split("late-heterojob")[0]
