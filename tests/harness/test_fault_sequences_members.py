"""A member cluster that stops answering in the middle of a move (docs/multicluster.md): the move in flight
becomes the member's loss, served once. A partition is a frozen member process (SIGSTOP): its port stays
open and nothing answers, so the manager sees request timeouts, as across a real network partition."""

from __future__ import annotations

import time

import pytest

from heterojob.constants import ANNOTATION_CHECKPOINT_REQUEST, ANNOTATION_MIGRATE, GROUP, VERSION
from heterojob.sim.cluster.harness import Emulator, OperatorRunner
from tests.conftest import Cluster, eventually
from tests.harness.members import FAST, join, spec, status

pytestmark = pytest.mark.harness


def test_a_member_lost_while_its_job_checkpoints_for_a_manual_move_serves_that_request_once(
        cluster: Cluster, emulator: Emulator, members: dict[str, Emulator]) -> None:
    m = join(cluster, members)
    with OperatorRunner(emulator.kubeconfig, members=FAST) as runner:
        cluster.create_job("far", spec(["m-east"], replicas={"min": 1}, checkpoint={"timeoutSeconds": 300}))
        [pod] = eventually(lambda: m["m-east"].pods("far"), what="the pod in m-east")
        m["m-east"].core.patch_namespaced_pod_status(pod.metadata.name, "team-a", {"status": {"phase": "Running"}})
        eventually(lambda: status(cluster, "far").get("phase") == "Running", what="Running")
        cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, "team-a", "heterojobs", "far", {
            "metadata": {"annotations": {ANNOTATION_MIGRATE: "drain"}}})
        eventually(lambda: (m["m-east"].pods("far")[0].metadata.annotations or {}).get(ANNOTATION_CHECKPOINT_REQUEST),
                   what="the move's checkpoint asked in m-east")
        members["m-east"].pause()  # the rank never answers: m-east is gone
        try:
            eventually(lambda: (p := status(cluster, "far").get("placement")) and p["region"] != "m-east",
                       timeout=30, what="placed again outside the lost member")
        finally:
            members["m-east"].resume()
        [new] = eventually(lambda: [p for r in ("m-west", "m-north") for p in m[r].pods("far")], timeout=20,
                           what="the new pod")
        region = status(cluster, "far")["placement"]["region"]
        m[region].core.patch_namespaced_pod_status(new.metadata.name, "team-a", {"status": {"phase": "Running"}})
        eventually(lambda: status(cluster, "far").get("phase") == "Running", what="Running in " + region)
        # the manual request was served by that move: recorded, its annotation let go, no second move waits
        eventually(lambda: ANNOTATION_MIGRATE not in (cluster.job("far")["metadata"].get("annotations") or {}),
                   what="the served request's annotation let go")
        s = status(cluster, "far")
        assert s["handled"].get("migrate") == "drain"
        time.sleep(2)
        s = status(cluster, "far")
        assert [h["action"] for h in s["history"]].count("migrate") == 1
        assert not any(c["type"] == "MoveHeld" and c["status"] == "True" for c in s["conditions"])
        assert not any(e.reason == "MigrationHeld" for e in cluster.events("far"))
        eventually(lambda: not m["m-east"].pods("far"), timeout=20, what="leftovers removed from m-east")
    assert "Traceback" not in runner.output


def test_a_destination_member_that_stops_answering_mid_move_sends_the_job_elsewhere_once(
        cluster: Cluster, emulator: Emulator, members: dict[str, Emulator]) -> None:
    """make before break reserved room in another member; that member freezes before the new gang is made.
    The job (its old gang already gone) must not wait on the frozen member nor run twice when it returns."""
    from tests.harness.test_multicluster_moves import LINKS, ack, checkpointed, run

    m = join(cluster, members, links=LINKS)
    with OperatorRunner(emulator.kubeconfig, members=FAST) as runner:
        cluster.create_job("far", spec(["m-east"], checkpoint={"timeoutSeconds": 300}))
        eventually(lambda: len(m["m-east"].pods("far")) == 2, what="2 pods in m-east")
        run(m["m-east"], "far")
        eventually(lambda: status(cluster, "far").get("phase") == "Running", what="Running")
        checkpointed(cluster, m["m-east"], "far", 10**9)
        cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, "team-a", "heterojobs", "far", {
            "metadata": {"annotations": {ANNOTATION_MIGRATE: "drain"}}})
        reserved = eventually(lambda: ((status(cluster, "far").get("migration") or {}).get("reserved") or {})
                              .get("region"), what="a destination reserved")
        assert reserved != "m-east"
        members[reserved].pause()
        try:
            ack(m["m-east"], "far", 5 * 10**8, step=300)
            placed = eventually(lambda: (p := status(cluster, "far").get("placement")) and p["region"] not in
                                (reserved, "m-east") and status(cluster, "far").get("phase") != "Migrating" and p,
                                timeout=40, what="placed in the third member")
            third = placed["region"]
            eventually(lambda: len(m[third].pods("far")) == 2, what=f"2 pods in {third}")
        finally:
            members[reserved].resume()
        run(m[third], "far")
        eventually(lambda: status(cluster, "far").get("phase") == "Running", what="Running in " + third)
        eventually(lambda: not m[reserved].pods("far"), timeout=20, what=f"nothing left in {reserved}")
        time.sleep(2)
        s = status(cluster, "far")
        assert s["placement"]["region"] == third and [h["action"] for h in s["history"]].count("migrate") == 1
        assert not m["m-east"].pods("far") and len(m[third].pods("far")) == 2
    assert "Traceback" not in runner.output
