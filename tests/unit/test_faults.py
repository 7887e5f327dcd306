"""What placement's health filter reads (state/faults.py) from a telemetry snapshot and firing alerts, on plain
data; how placement uses it is in test_placement.py, the operator end to end in tests/harness/test_bad_devices.py."""

from __future__ import annotations

from heterojob.alerts.mapping import device_of
from heterojob.engine.capacity.fleet import DeviceClass, Fleet, Node
from heterojob.engine.placing.validation import job_problems
from heterojob.state.faults import faults
from tests.unit.test_telemetry_snapshot import ALL_BUSY, one, results


def hot_and_failed() -> dict:
    res = results(ALL_BUSY, xids={("g0", 1): 79})  # GPU-g0-1 fell off the bus
    res["dcgm:temp"] = [{**s, "value": [0, "97" if s["metric"]["UUID"] == "GPU-g1-0" else "50"]}
                        for s in res["dcgm:temp"]]  # GPU-g1-0 overheats (its clocks throttle)
    return res


def test_the_snapshot_names_failed_devices_and_overheating_nodes() -> None:
    s = one(hot_and_failed())
    assert s.failed_devices == {"g0": frozenset({"GPU-g0-1"})}
    assert s.hot_nodes == {"g1": "GPU-g1-0: overheat 97°C >= 90°C"}
    f = faults(s)
    assert f.failed["g0"].devices == 1 and "fatal XID 79" in f.failed["g0"].why
    assert f.unhealthy == {"g1": "GPU-g1-0: overheat 97°C >= 90°C"}  # an overheating device takes nothing new


def test_a_device_named_by_telemetry_and_by_an_alert_counts_once() -> None:
    labels = {"alertname": "HeteroJobGPUFatalXID", "UUID": "GPU-g0-1", "gpu": "1", "Hostname": "g0"}
    dead = {"g0": {device_of(labels, "g0"): "alert: HeteroJobGPUFatalXID"}}
    assert faults(one(hot_and_failed()), dead).failed["g0"].devices == 1
    other = {"g0": {"GPU-g0-0": "alert: x", "": "alert: a dead device, none named"}}
    assert faults(one(hot_and_failed()), other).failed["g0"].devices == 2  # the unnamed one is one of these
    assert faults(None, hot={"g2": "alert: HeteroJobGPUOverheat"}).unhealthy == {"g2": "alert: HeteroJobGPUOverheat"}


def test_an_alert_naming_no_device_adds_nothing_to_a_failed_device_the_snapshot_shows() -> None:
    """The shipped HeteroJobDeviceVanished is `count by (node)`: no device label, "at least one device of this node
    is gone". With the snapshot already showing GPU-g0-1 failed it is that one: counted twice, a node whose plugin
    withholds one GPU (allocatable 7 of 8) would shut out its 7 healthy ones while the alert fires."""
    vanished = {"alertname": "HeteroJobDeviceVanished", "node": "g0"}
    assert device_of(vanished, "g0") == ""
    dead = {"g0": {device_of(vanished, "g0"): "alert: HeteroJobDeviceVanished"}}
    f = faults(one(hot_and_failed()), dead)
    assert f.failed["g0"].devices == 1
    r = "nvidia.com/gpu"
    g0 = Node("g0", {}, {r: 7}, capacity={r: 8})
    assert Fleet(nodes={"g0": g0}, classes={}, failed=f.failed).keep_off(g0, r) is None
    # alone it still says one device of the node is dead
    assert faults(None, {"g5": {"": "alert: HeteroJobDeviceVanished"}}).failed["g5"].devices == 1


def test_a_vanished_gpu_stops_counting_once_the_node_no_longer_has_it() -> None:
    """GPU-g0-1 falls off the bus: its series vanish while g0's exporter reports GPU-g0-0, and the snapshot
    remembers it FAILED for as long as the Node exists. While capacity still counts it (2/2: kept off until the
    device plugin withholds it; 2/1: the healthy one offered) it counts; once the device plugin restarts or the
    node reboots it is enumerated no more (1/1) and the node offers its healthy GPU again, not shut out until the
    operator restarts. An XID-failed GPU, still reported, keeps counting whatever the capacity. Reproduces NVIDIA
    k8s-device-plugin (v0.17): devices come from NVML enumeration at plugin start, so a GPU fallen off the bus
    (Xid 79) is no longer enumerated after a restart (NVIDIA/k8s-device-plugin#2038); the kubelet's capacity counts
    the devices a plugin registers, healthy or not."""
    first = one(results(ALL_BUSY))
    after = one(results({k: v for k, v in ALL_BUSY.items() if k != ("g0", 1)}), previous=first.devices)
    later = one(results({k: v for k, v in ALL_BUSY.items() if k != ("g0", 1)}), previous=after.devices)
    assert later.failed_devices["g0"] == {"GPU-g0-1"} and later.vanished_devices == {"g0": frozenset({"GPU-g0-1"})}
    failed = faults(later).failed
    r = "nvidia.com/gpu"

    def kept_off(allocatable: int, capacity: int, f: dict = failed) -> bool:
        g0 = Node("g0", {}, {r: allocatable}, capacity={r: capacity})
        return Fleet(nodes={"g0": g0}, classes={}, failed=f).keep_off(g0, r) is not None

    assert kept_off(2, 2)  # the plugin still offers it: a new pod could be handed the dead GPU
    assert not kept_off(1, 2)  # withheld: the healthy one offered
    assert not kept_off(1, 1)  # the plugin enumerates it no more: nothing of it left on the node
    xid = faults(one(hot_and_failed())).failed  # GPU-g0-1 failed by XID 79, still reported
    assert kept_off(1, 1, xid) and not kept_off(1, 2, xid)


def test_an_alert_names_a_device_as_the_snapshot_does() -> None:
    assert device_of({"UUID": "GPU-1", "GPU_I_ID": "2"}, "g0") == "GPU-1/mig-2"
    assert device_of({"id": "3"}, "npu-a") == "npu-a/npu-3"
    assert device_of({"Hostname": "g0"}, "g0") == ""


def test_a_node_with_an_unhealthy_device_still_holds_its_capacity_for_validation() -> None:
    """The user trial: with one GPU of every node withheld (allocatable 7 of capacity 8), a job of 8 per replica
    was failed InvalidSpec while it moved ("more than any node holds"); the nodes still hold 8."""
    h100 = DeviceClass("nvidia-h100", "nvidia.com/gpu", {"gpu": "h100"})
    nodes = [Node(n, {"gpu": "h100"}, {"nvidia.com/gpu": 7}, capacity={"nvidia.com/gpu": 8}) for n in ("a", "b")]
    assert job_problems([("nvidia-h100", 8)], [], [], {h100.name: h100}, set(), nodes) == []
    assert job_problems([("nvidia-h100", 9)], [], [], {h100.name: h100}, set(), nodes)
