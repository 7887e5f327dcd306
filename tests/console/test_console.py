"""The console's overview page, rendered by Streamlit's AppTest against the emulator."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from importlib.resources import files
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from heterojob.defaults import REGIONS
from heterojob.sim.cluster.nodes import node
from tests.conftest import Cluster

HOME = str(files("heterojob_console") / "Home.py")
SVG_NS = "http://www.w3.org/2000/svg"
SVG = f"{{{SVG_NS}}}"


def svg_of(at: AppTest, cls: str) -> ET.Element:
    """The page's SVG drawing of that class (shown through st.markdown), parsed."""
    body = next(m.value for m in at.markdown if f'class="{cls}"' in m.value)
    return ET.fromstring(body)


def pod(name: str, node_name: str, resource: str, count: int, phase: str = "Running") -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"nodeName": node_name, "containers": [{"name": "m", "image": "i",
                                                             "resources": {"limits": {resource: str(count)}}}]},
            "status": {"phase": phase}}


def test_overview_counts_accelerators_and_cpu_apart_and_maps_every_region(
        cluster: Cluster, emulator: object, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("npu-a", "cn-north", "ascend-910b"),
                  node("cpu-a", "cn-east", "cpu")])
    for body in (pod("p1", "h100-a", "nvidia.com/gpu", 4), pod("p2", "npu-a", "huawei.com/Ascend910", 8),
                 pod("done", "npu-a", "huawei.com/Ascend910", 8, phase="Succeeded"), pod("c", "cpu-a", "cpu", 16)):
        cluster.core.create_namespaced_pod("team-a", body)  # the API server drops status on create:
        cluster.core.patch_namespaced_pod_status(body["metadata"]["name"], "team-a", {"status": body["status"]})
    cluster.create_job("train", {"devices": [{"deviceClass": "nvidia-h100"}],
                                 "template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}})
    monkeypatch.setenv("HETEROJOB_KUBECONFIG", str(emulator.kubeconfig))  # type: ignore[attr-defined]
    monkeypatch.delenv("HETEROJOB_PROMETHEUS_URL", raising=False)
    at = AppTest.from_file(HOME, default_timeout=30).run()
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Accelerators"] == "16"  # 8 GPUs + 8 NPUs; the 64 CPU cores are not devices
    assert metrics["Accelerators allocated"] == "75%"  # 4 + 8 held of 16; the finished pod holds nothing
    assert metrics["CPU cores allocated"] == "25%" and metrics["Nodes ready"] == "3/3"
    assert metrics["Jobs waiting"] == "1" and metrics["Accelerator utilization"] == "-"
    drawing = svg_of(at, "fleet-map")
    land = drawing.find(f"{SVG}path[@class='land']")
    assert land is not None and land.get("d", "").count("L") > 500  # outlines drawn from shipped data
    cities = [t.text for t in drawing.iter(f"{SVG}text") if t.get("class") == "city"]
    assert sorted(cities) == sorted(r["location"]["city"] for r in REGIONS.values()) and len(REGIONS) == 11  # every Region on the map, with or without nodes
    links = [e for e in drawing.iter(f"{SVG}line") if e.get("class") == "link"]
    assert len(links) == 15 and any("800 Gbit/s" in (e.findtext(f"{SVG}title") or "") for e in links)
    assert "http" not in ET.tostring(drawing, encoding="unicode").replace(SVG_NS, "")  # nothing fetched
    regions = next(m.value for m in at.markdown if 'class="summary regions"' in m.value)  # an HTML table, not a grid
    rows = ET.fromstring(regions[regions.index("<table"):]).find("tbody")
    assert rows is not None and len(rows) == len(REGIONS)
    east = next(r for r in rows if r[0].text == "cn-east")
    assert [c.text for c in east][2:4] == ["8", "4"] and "50%" in ET.tostring(east[4], encoding="unicode")


def test_unreachable_api_shows_a_page_not_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from heterojob.sim.cluster.apiserver import kubeconfig
    import yaml

    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump(kubeconfig("http://127.0.0.1:9")))  # nothing listens on port 9
    monkeypatch.setenv("HETEROJOB_KUBECONFIG", str(config))
    at = AppTest.from_file(HOME, default_timeout=60).run()
    assert not at.exception
    assert at.error[0].value == "The Kubernetes API cannot be read: connection refused (nothing listens there)."
    # in words, not urllib3's MaxRetryError text
