"""The simulated exporters' POST /faults answers an unknown node or device by naming it and what exists
(`heterojob demo inject` prints that answer), not with a KeyError repr and the request-body format; and
`heterojob demo inject clear` heals a device, a node or the fleet (what the exporters then serve)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from heterojob.sim.demo.fleet import fleet_nodes
from heterojob.sim.demo.inject import CLEAR, STATE, inject
from heterojob.sim.telemetry.exporters import ExporterFleet


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    exporters = ExporterFleet(fleet_nodes(("cn-hohhot",)), seed=1)
    host, port = exporters.serve()
    try:
        yield f"http://{host}:{port}/faults"
    finally:
        exporters.stop()


def post(url: str, body: dict) -> tuple[int, str]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_unknown_node_is_named_with_the_nodes_that_exist(url: str) -> None:
    code, text = post(url, {"kind": "overheat", "node": "cn-north-ascend-910b-00", "device": 3})
    assert code == 404
    assert "no node 'cn-north-ascend-910b-00'" in text and "cn-hohhot-ascend-910b-00" in text
    assert "KeyError" not in text


def test_device_out_of_range_says_which_devices_exist(url: str) -> None:
    code, text = post(url, {"kind": "overheat", "node": "cn-hohhot-ascend-910b-00", "device": 9})
    assert code == 404 and "has devices 0-7, not 9" in text


def test_bad_kind_and_missing_field_still_show_the_format(url: str) -> None:
    code, text = post(url, {"kind": "melt", "node": "cn-hohhot-ascend-910b-00"})
    assert code == 400 and text.startswith("unknown fault 'melt': one of fatal-xid, ") and "ValueError" not in text
    code, text = post(url, {"kind": "overheat"})
    assert code == 400 and "send {kind:" in text
    assert post(url, {"kind": "overheat", "node": "cn-hohhot-ascend-910b-00", "device": 3})[0] == 200


def test_a_fault_of_another_exporter_is_refused_naming_what_the_node_has(url: str) -> None:
    code, text = post(url, {"kind": "fatal-xid", "node": "cn-hohhot-ascend-910b-00"})
    assert code == 400 and text.strip() == ("fatal-xid is a fault of NVIDIA GPU (dcgm-exporter) nodes; "
                                            "cn-hohhot-ascend-910b-00 has Ascend NPU (npu-exporter) (Ascend910B3)")


def test_inject_names_every_fault_it_knows_before_picking_a_target() -> None:
    from heterojob.cli import parser
    from heterojob.sim.demo.inject import NODE_FAULTS, known
    from heterojob.sim.telemetry.devices import Fault

    with pytest.raises(ValueError, match="unknown fault 'bogus': one of fatal-xid, .*, node-ready, clear$"):
        known("bogus")
    helps = [a.help or "" for a in parser()._subparsers._group_actions[0].choices["demo"]._actions]  # noqa: SLF001 - argparse keeps them there
    fault_help = next(h for h in helps if h.startswith("inject: fatal-xid"))
    assert all(kind in fault_help for kind in [*(f.value for f in Fault), *NODE_FAULTS, "clear"])


# --- `heterojob demo inject clear`: the fleet recovers -----------------------------------------------------------

GPU_NODE, NPU_NODE = "cn-east-nvidia-h100-00", "cn-hohhot-ascend-910b-00"


def scraped(base: str, node: str) -> dict[tuple[str, str], float] | None:
    """(metric, device index) -> value of a node's /metrics as Prometheus scrapes it; None when it answers 503."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(f"{base}/nodes/{node}/metrics", timeout=5) as r:
            text = r.read().decode()
    except urllib.error.HTTPError as exc:
        assert exc.code == 503
        return None
    return {(s.name, s.labels.get("gpu", s.labels.get("id", ""))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture()
def demo(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A simulated fleet's exporters and the state file `heterojob demo inject` finds a running demo by."""
    exporters = ExporterFleet(fleet_nodes(("cn-east", "cn-hohhot")), seed=1)
    host, port = exporters.serve()
    base = f"http://{host}:{port}"
    (tmp_path / STATE).write_text(json.dumps({"exporters": base, "kubeconfig": str(tmp_path / "kubeconfig")}))
    try:
        yield base, tmp_path
    finally:
        exporters.stop()


def test_clear_heals_one_device_and_leaves_the_others_broken(demo: tuple[str, Path]) -> None:
    base, workdir = demo
    inject("fatal-xid", GPU_NODE, 2, 79, workdir)
    inject("overheat", GPU_NODE, 3, 97, workdir)
    inject("npu-unhealthy", NPU_NODE, 1, None, workdir)
    broken = scraped(base, GPU_NODE)
    assert broken is not None and broken[("DCGM_FI_DEV_XID_ERRORS", "2")] == 79
    assert broken[("DCGM_FI_DEV_GPU_TEMP", "3")] == 97

    said = inject(CLEAR, GPU_NODE, 2, None, workdir)
    assert said.startswith(f"cleared every exporter fault on {GPU_NODE} device 2")
    healed = scraped(base, GPU_NODE)
    assert healed is not None and healed[("DCGM_FI_DEV_XID_ERRORS", "2")] == 0  # as after an exporter restart
    assert healed[("DCGM_FI_DEV_GPU_TEMP", "3")] == 97  # another device's fault stays
    assert scraped(base, NPU_NODE)[("npu_chip_info_health_status", "1")] == 0  # type: ignore[index]


def test_clear_a_node_brings_its_exporter_back_and_clear_alone_heals_the_fleet(demo: tuple[str, Path]) -> None:
    base, workdir = demo
    inject("straggle", GPU_NODE, 0, 0.1, workdir)
    inject("exporter-down", GPU_NODE, 0, None, workdir)
    inject("npu-unhealthy", NPU_NODE, 5, None, workdir)
    assert scraped(base, GPU_NODE) is None
    inject(CLEAR, GPU_NODE, None, None, workdir)  # no device: the whole node, its exporter up again
    up = scraped(base, GPU_NODE)
    assert up is not None and all(v == 0 for (m, _), v in up.items() if m == "DCGM_FI_DEV_XID_ERRORS")
    assert scraped(base, NPU_NODE)[("npu_chip_info_health_status", "5")] == 0  # type: ignore[index]
    assert inject(CLEAR, None, None, None, workdir).endswith("on every node: it reports healthy from the next scrape")
    assert scraped(base, NPU_NODE)[("npu_chip_info_health_status", "5")] == 1  # type: ignore[index]
    with urllib.request.urlopen(f"{base}/faults", timeout=5) as r:
        assert json.loads(r.read()) == []


def test_clear_names_an_unknown_node_or_device(demo: tuple[str, Path]) -> None:
    _, workdir = demo
    with pytest.raises(ValueError, match=r"no node 'cn-north-ascend-910b-00' among the simulated exporters \(\d+ accelerator nodes: cn-"):
        inject(CLEAR, "cn-north-ascend-910b-00", None, None, workdir)
    with pytest.raises(ValueError, match="has devices 0-7, not 9"):
        inject(CLEAR, NPU_NODE, 9, None, workdir)
    with pytest.raises(ValueError, match="needs the node"):
        inject(CLEAR, None, 1, None, workdir)


def test_a_pod_keeps_its_devices_and_a_new_one_never_gets_a_device_its_plugin_reports_unhealthy() -> None:
    """The stand-in device plugin allocates as the kubelet does: a pod keeps the devices it was given while it
    holds them (one that failed under it included), and a new pod gets only devices reported healthy, so a GPU
    with a fatal XID is not handed to the next job placed on its node (the demo gave it to every new job)."""
    from heterojob.sim.cluster.nodes import node

    exporters = ExporterFleet([node("g", "cn-east", "nvidia-h100")], seed=1)
    devices = exporters.nodes["g"].devices

    def held(pod: str) -> list[int]:
        return [d.index for d in devices if d.pod == pod]

    exporters.bind({"g": [("t", "a", 2), ("t", "b", 2)]})
    assert (held("a"), held("b")) == ([0, 1], [2, 3])
    exporters.inject("fatal-xid", "g", 0)
    exporters.inject("fatal-xid", "g", 5)
    exporters.bind({"g": [("t", "b", 2)]})  # a ended: b keeps its devices (they are not packed to the front)
    assert held("b") == [2, 3] and held("a") == []
    exporters.bind({"g": [("t", "b", 2), ("t", "c", 4)]})
    assert held("c") == [1, 4, 6, 7]  # never 0 or 5: reported unhealthy (the Node's allocatable is 6)
    assert exporters.unhealthy_devices() == {"g": 2}
    exporters.bind({"g": [("t", "b", 2), ("t", "c", 4), ("t", "d", 2)]})  # more than the healthy free ones
    assert held("d") == [] and held("b") == [2, 3]
    devices[2].xid = 79  # fails under b: still b's (its job is what the fault hits)
    exporters.bind({"g": [("t", "b", 2), ("t", "c", 4)]})
    assert held("b") == [2, 3]
