"""The simulated exporters' POST /faults answers an unknown node or device by naming it and what exists
(`heterojob demo inject` prints that answer), not with a KeyError repr and the request-body format."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from heterojob.sim.demo import fleet_nodes
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
    assert post(url, {"kind": "melt", "node": "cn-hohhot-ascend-910b-00"})[0] == 400
    code, text = post(url, {"kind": "overheat"})
    assert code == 400 and "send {kind:" in text
    assert post(url, {"kind": "overheat", "node": "cn-hohhot-ascend-910b-00", "device": 3})[0] == 200
