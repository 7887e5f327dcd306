"""The console's SVG figures (map, heat map) as data: what they draw, independent of a browser."""

from __future__ import annotations

import base64
import io
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
from PIL import Image

from heterojob_console import svg
from tests.console.test_console import SVG


def grid(rows: int, columns: int) -> pd.DataFrame:
    times = pd.date_range("2026-01-01T10:00Z", periods=columns, freq="60s")
    values = np.arange(rows * columns, dtype=float).reshape(rows, columns) % 101
    return pd.DataFrame(values, index=[f"node-{i:03d}" for i in range(rows)], columns=times)


def test_a_small_heat_map_has_a_hover_value_per_cell() -> None:
    frame = grid(3, 4)
    frame.iloc[1, 2] = np.nan  # no sample: no cell, not a 0
    root = ET.fromstring(svg.heat_map(frame, "node", minutes=10))
    titles = [r.findtext(f"{SVG}title") for r in root.iter(f"{SVG}rect") if r.findtext(f"{SVG}title")]
    assert len(titles) == 11 and "node-000 · 10:03 UTC: 3%" in titles
    labels = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "label"]
    assert labels == ["node-000", "node-001", "node-002"]


def test_a_big_heat_map_is_one_image_a_pixel_per_cell_with_a_hover_text_per_row() -> None:
    frame = grid(120, 60)
    frame.iloc[7, 9] = np.nan
    body = svg.heat_map(frame, "node", minutes=60)
    root = ET.fromstring(body)
    image = next(root.iter(f"{SVG}image"))
    png = Image.open(io.BytesIO(base64.b64decode(image.get("href", "").split(",", 1)[1])))
    assert png.size == (60, 120)
    assert png.getpixel((9, 7))[3] == 0 and png.getpixel((0, 0))[3] == 255  # missing: transparent
    assert png.getpixel((0, 0))[:3] == tuple(int(svg.colour("Viridis", 0)[k:k + 2], 16) for k in (1, 3, 5))
    rows = [r.findtext(f"{SVG}title") for r in root.iter(f"{SVG}rect") if r.findtext(f"{SVG}title")]
    assert len(rows) == 120 and rows[0].startswith("node-000: now 59%")
    assert len(body) < 80_000  # a region's nodes over an hour, resent every refresh


def test_text_in_a_drawing_stays_text_through_markdown() -> None:
    assert svg._t("a*b_c$d [e] <f>") == "a&#42;b&#95;c&#36;d &#91;e&#93; &lt;f&gt;"


def test_the_fleets_hour_is_an_image_not_a_thousand_elements() -> None:
    frame = grid(16, 60)  # 11 regions' classes over an hour: 960 cells were 960 hover rectangles (125 KB)
    frame.index = [f"region-{i} · nvidia-h100" for i in range(16)]
    body = svg.heat_map(frame, "region/class", minutes=60)
    root = ET.fromstring(body)
    hover = [r for r in root.iter(f"{SVG}rect") if r.findtext(f"{SVG}title")]
    assert len(list(root.iter(f"{SVG}image"))) == 1 and len(hover) == 16  # a hover text a row
    assert len(body) < 20_000
