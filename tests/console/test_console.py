"""The console's overview page, rendered by Streamlit's AppTest against the emulator."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from heterojob.sim.cluster.nodes import node
from tests.conftest import Cluster

HOME = str(files("heterojob_console") / "Home.py")


def test_overview_shows_kpis_map_and_jobs(cluster: Cluster, emulator: object, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    cluster.seed([node("h100-a", "cn-east", "nvidia-h100"), node("npu-a", "cn-north", "ascend-910b")])
    cluster.create_job("train", {"devices": [{"deviceClass": "nvidia-h100"}],
                                 "template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}})
    monkeypatch.setenv("HETEROJOB_KUBECONFIG", str(emulator.kubeconfig))  # type: ignore[attr-defined]
    at = AppTest.from_file(HOME, default_timeout=30).run()
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Devices"] == "16" and metrics["Nodes ready"] == "2/2"
    assert metrics["Allocated"] == "0%" and metrics["Quota in use"] == "none"
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    geo = charts[0]["data"][0]
    assert geo["type"] == "scattergeo" and sorted(geo["text"]) == ["cn-east", "cn-north", "eu-west"]
    assert "allocated %=" in geo["hovertemplate"]  # each region says how much of it is allocated
    assert list(at.dataframe[0].value["name"]) == ["train"]


def test_unreachable_api_shows_a_page_not_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from heterojob.sim.cluster.apiserver import kubeconfig
    import yaml

    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump(kubeconfig("http://127.0.0.1:9")))  # nothing listens on port 9
    monkeypatch.setenv("HETEROJOB_KUBECONFIG", str(config))
    at = AppTest.from_file(HOME, default_timeout=60).run()
    assert not at.exception
    assert "The Kubernetes API cannot be read" in at.error[0].value
