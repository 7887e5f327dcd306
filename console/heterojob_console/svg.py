"""The Overview's fleet map and the Devices page's utilization heat map as SVG drawings.

Why not plotly here: Streamlit loads plotly.js (a 4.7 MB module) the first time a page shows a plotly
chart, and evaluating it is the largest single task of the page in Chrome's trace (2.5 s of the
Overview's 6.7 s at load 10 on 2 cores; close to a second on a quiet machine), more than the rest of the
page. These two figures need no zoom or editing, only drawing and hover text, which SVG gives natively
(`<title>`: the browser's own tooltip). Colours come from plotly's colour scales, the coastlines from `basemap`; the figures on the
other pages (the Gantt timeline, a device's history) stay plotly charts. Shown with `st.markdown` (`show`):
`st.html`'s sanitizer drops SVG.
"""

from __future__ import annotations

import base64
import io
import math
from functools import lru_cache
from html import escape

import numpy as np
import pandas as pd
import streamlit as st
from PIL import Image
from plotly.colors import sample_colorscale

from heterojob_console.basemap import outlines

LAND, SEA, BORDER, LINK, MOVE, UNKNOWN = "#eceae4", "#dbe7f0", "#9a9a9a", "#5b7c99", "#d62728", "#c8c8c8"
ALLOCATION_SCALE, UTILIZATION_SCALE = "RdYlGn_r", "Viridis"
WIDTH = 900  # the drawing's own units; the SVG scales to the page's width (viewBox)
# a heat map of up to this many cells draws each with its hover text; a bigger one is a PNG with a hover text per row.
# Each cell is an element the browser builds through Streamlit's Markdown (its HTML parser and React): the fleet's
# 16 region/class rows over an hour (960 cells, 125 KB) cost a Chromium tab 1.2 s more than the same map as a PNG
# (11 KB) at load 24 on 2 cores
CELL_TITLES = 240


@lru_cache(maxsize=4)
def _palette(scale: str) -> tuple[str, ...]:
    """The scale at 0, 1, ... 100 % as #rrggbb."""
    rgb = sample_colorscale(scale, [i / 100 for i in range(101)], colortype="tuple")
    return tuple("#" + "".join(f"{round(255 * c):02x}" for c in colour) for colour in rgb)


def colour(scale: str, value: float | None, top: float = 100.0) -> str:
    """The scale's colour at value/top (to the percent); grey for no value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return UNKNOWN
    return _palette(scale)[round(100 * min(max(float(value) / top, 0.0), 1.0))]


# st.markdown shows the SVG (st.html's sanitizer drops SVG); these would still read as Markdown or LaTeX
_MARKDOWN = str.maketrans({c: f"&#{ord(c)};" for c in "*_`~$[]\\\n"})


def _t(text: object) -> str:
    """Text for an SVG element or attribute: HTML-escaped, and inert as Markdown."""
    return escape(str(text), quote=True).translate(_MARKDOWN)


def show(svg: str) -> None:
    """Put an SVG drawing on the page."""
    st.markdown(svg, unsafe_allow_html=True)


def _gradient(ident: str, scale: str) -> str:
    stops = "".join(f'<stop offset="{i * 10}%" stop-color="{colour(scale, i * 10)}"/>' for i in range(11))
    return f'<linearGradient id="{ident}" x1="0" y1="1" x2="0" y2="0">{stops}</linearGradient>'


def _colourbar(x: float, y: float, height: float, ident: str, title: str, size: int = 11, end: bool = False) -> str:
    ticks = "".join(f'<text x="{x + 18}" y="{y + height - height * v / 100 + 4:.1f}" font-size="{size - 1}">{v}</text>'
                    for v in (0, 50, 100))
    return (f'<text x="{x + 12 if end else x}" y="{y - 8}" font-size="{size}" '
            f'text-anchor="{"end" if end else "start"}">{_t(title)}</text>'
            f'<rect x="{x}" y="{y}" width="12" height="{height}" fill="url(#{ident})" stroke="#666" '
            f'stroke-width="0.5"/>{ticks}')


class Mercator:
    """lon/lat -> x/y in the drawing, one scale for both axes (the map is not stretched)."""

    def __init__(self, lon_range: tuple[float, float], lat_range: tuple[float, float], width: float) -> None:
        self.lon0, self.top = lon_range[0], self._y(lat_range[1])
        self.k = width / math.radians(lon_range[1] - lon_range[0])
        self.width, self.height = width, (self.top - self._y(lat_range[0])) * self.k

    @staticmethod
    def _y(lat: float) -> float:
        lat = max(min(lat, 85.0), -85.0)
        return math.log(math.tan(math.pi / 4 + math.radians(lat) / 2))

    def __call__(self, lon: float, lat: float) -> tuple[float, float]:
        return math.radians(lon - self.lon0) * self.k, (self.top - self._y(lat)) * self.k


def box(regions: pd.DataFrame, margin: float = 6.0) -> tuple[tuple[float, float], tuple[float, float]]:
    """(lon range, lat range) around the regions, with a margin in degrees."""
    if regions.empty:
        return (-180.0, 180.0), (-60.0, 80.0)
    lat, lon = regions["latitude"], regions["longitude"]
    return ((float(lon.min()) - margin, float(lon.max()) + margin),
            (float(lat.min()) - margin, float(lat.max()) + margin))


def _land(project: Mercator, lon_range: tuple[float, float], lat_range: tuple[float, float]) -> str:
    """The Natural Earth rings touching the box as one path (coordinates rounded to a tenth of a unit:
    finer than a pixel at any width the page gives the map)."""
    lons, lats = outlines(lon_range, lat_range)
    parts: list[str] = []
    ring: list[str] = []
    for lon, lat in zip(lons, lats):
        if lon is None or lat is None:
            if ring:
                parts.append("M" + "L".join(ring) + "Z")
            ring = []
            continue
        x, y = project(lon, lat)
        ring.append(f"{x:.1f} {y:.1f}")
    return (f'<path class="land" d="{"".join(parts)}" fill="{LAND}" stroke="{BORDER}" stroke-width="0.7" '
            'fill-rule="evenodd"/>')


def fleet_map(regions: pd.DataFrame, links: pd.DataFrame, moves: pd.DataFrame) -> str:
    """Regions sized by accelerators and coloured by allocation, the links with their bandwidth (width)
    and latency, and the cross-region moves as red arcs, on Natural Earth outlines. Hover text on every
    region, link and arc. `regions`: kpis.by_region rows with coordinates; `moves`: data.moves rows."""
    lon_range, lat_range = box(regions)
    project = Mercator(lon_range, lat_range, WIDTH)
    legend_h = 30
    height = project.height + legend_h
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="fleet-map" viewBox="0 0 {WIDTH} {height:.0f}" '
           f'width="100%" font-family="sans-serif" role="img" '
           f'aria-label="map of the fleet\'s regions">',
           f'<defs>{_gradient("hj-allocated", ALLOCATION_SCALE)}'
           f'<marker id="hj-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
           f'orient="auto-start-reverse"><path d="M0 0L10 5L0 10z" fill="{MOVE}"/></marker></defs>',
           f'<rect width="{WIDTH}" height="{project.height:.0f}" fill="{SEA}"/>',
           _land(project, lon_range, lat_range)]
    where = {r.region: project(r.longitude, r.latitude) for r in regions.itertuples()}
    top = float(links["bandwidth_gbps"].max()) if not links.empty else 1.0
    for link in links.itertuples():
        if link.a not in where or link.b not in where:
            continue
        (x0, y0), (x1, y1) = where[link.a], where[link.b]
        width = 1 + 5 * float(link.bandwidth_gbps or 0) / (top or 1.0)
        out.append(f'<line class="link" x1="{x0:.1f}" y1="{y0:.1f}" x2="{x1:.1f}" y2="{y1:.1f}" stroke="{LINK}" '
                   f'stroke-width="{width:.1f}" stroke-opacity="0.6"><title>{_t(link.a)} ↔ {_t(link.b)}: '
                   f'{link.bandwidth_gbps:g} Gbit/s, {link.latency_ms:g} ms</title></line>')
    if not moves.empty:
        counted = moves.groupby(["from", "to"]).agg(n=("job", "size"), jobs=("job", lambda j: ", ".join(j[:5])))
        for (a, b), row in counted.iterrows():
            if a not in where or b not in where:
                continue
            (x0, y0), (x1, y1) = where[a], where[b]
            bend = 0.25 * math.hypot(x1 - x0, y1 - y0)
            cx, cy = (x0 + x1) / 2, (y0 + y1) / 2 - bend
            out.append(f'<path class="move" d="M{x0:.1f} {y0:.1f}Q{cx:.1f} {cy:.1f} {x1:.1f} {y1:.1f}" fill="none" '
                       f'stroke="{MOVE}" stroke-width="{1.5 + min(int(row.n), 6):.1f}" stroke-dasharray="4 3" '
                       f'marker-end="url(#hj-arrow)"><title>{_t(a)} → {_t(b)}: {int(row.n)} job(s) moved in the '
                       f'last hour ({_t(row.jobs)})</title></path>')
    biggest = max(float(regions["accelerators"].clip(lower=0).max()), 1.0) if not regions.empty else 1.0
    for r in regions.itertuples():
        x, y = where[r.region]
        radius = (10 + 40 * (max(float(r.accelerators), 0.0) / biggest) ** 0.5) / 2
        pct = None if pd.isna(r.allocated_pct) else float(r.allocated_pct)
        tip = (f"{r.city} ({r.region})\naccelerators {int(r.accelerators)} ({r.mix or 'none'})\n"
               f"allocated {int(r.held)} = {'-' if pct is None else f'{pct:.0f}%'}\nCPU cores {int(r.cpu_cores)}")
        out.append(f'<g class="region"><title>{_t(tip)}</title>'
                   f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{radius:.1f}" fill="{colour(ALLOCATION_SCALE, pct)}" '
                   f'stroke="#333" stroke-width="1"/>'
                   f'<text class="city" x="{x:.1f}" y="{y - radius - 4:.1f}" font-size="16" text-anchor="middle" '
                   f'paint-order="stroke" stroke="white" stroke-width="3">{_t(r.city)}</text></g>')
    out.append(_colourbar(WIDTH - 50, 34, 140, "hj-allocated", "allocated %", size=14, end=True))
    y = project.height + 21
    out.append(f'<line x1="4" y1="{y - 5}" x2="34" y2="{y - 5}" stroke="{LINK}" stroke-width="3" stroke-opacity="0.6"/>'
               f'<text x="40" y="{y}" font-size="14">links (width: bandwidth, up to {top:g} Gbit/s)</text>'
               f'<line x1="400" y1="{y - 5}" x2="430" y2="{y - 5}" stroke="{MOVE}" stroke-width="2" '
               f'stroke-dasharray="4 3"/><text x="436" y="{y}" font-size="14">cross-region moves, last hour</text>')
    out.append("</svg>")
    return "".join(out)


def heat_map(frame: pd.DataFrame, label: str, minutes: int | None = None) -> str:
    """Utilization (0-100 %) heat map: one row per index entry, one column per sample time (the frame's
    columns, timestamps, evenly spaced as a range query returns them). The height follows the rows, so
    hundreds stay readable (the page scrolls); the time axis spans the whole window, however few samples
    there are yet. Up to CELL_TITLES cells, each cell is a rectangle with its value as hover text; a bigger
    grid (a region's nodes, a day) is one PNG image, a pixel per cell, with a hover text per row."""
    times = [pd.Timestamp(c) for c in frame.columns]
    rows = [str(i) for i in frame.index]
    label_w = min(300, 12 + 7.0 * max((len(r) for r in rows), default=4))  # a 40-character GPU UUID whole
    row_h, top_pad, axis_h, bar_w = 20, 8, 34, 60
    plot_w = WIDTH - label_w - bar_w
    end = max(times) if times else pd.Timestamp.now(tz="UTC")
    step = (times[1] - times[0]).total_seconds() if len(times) > 1 else 60.0
    start = end - pd.Timedelta(minutes=minutes) if minutes else (min(times) if times else end)
    span = max((end - start).total_seconds() + step, step)
    px_s = plot_w / span
    height = top_pad + row_h * len(rows) + axis_h
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="heat-map" viewBox="0 0 {WIDTH} {height}" width="100%" '
           f'font-family="sans-serif" role="img" aria-label="utilization heat map by {_t(label)}">',
           f'<defs>{_gradient("hj-util", UTILIZATION_SCALE)}</defs>']
    values = frame.to_numpy(dtype=float, na_value=float("nan"))
    for i, row in enumerate(rows):
        out.append(f'<text class="label" x="{label_w - 6:.0f}" y="{top_pad + i * row_h + row_h / 2 + 4}" '
                   f'font-size="11" text-anchor="end">{_t(row)}</text>')
    if values.size <= CELL_TITLES:
        cell_w = max(step * px_s, 1.0)
        out.append('<g class="cells">')
        for i, row in enumerate(rows):
            y = top_pad + i * row_h
            for j, t in enumerate(times):
                v = values[i, j]
                if math.isnan(v):
                    continue
                x = label_w + (t - start).total_seconds() * px_s
                out.append(f'<rect x="{x:.1f}" y="{y}" width="{cell_w + 0.3:.1f}" height="{row_h - 1}" '
                           f'fill="{colour(UTILIZATION_SCALE, v)}"><title>{_t(row)} · {t:%H:%M} UTC: {v:.0f}%'
                           f'</title></rect>')
        out.append("</g>")
    elif times:
        x0 = label_w + (times[0] - start).total_seconds() * px_s
        out.append(f'<image class="cells" x="{x0:.1f}" y="{top_pad}" width="{len(times) * step * px_s:.1f}" '
                   f'height="{row_h * len(rows)}" preserveAspectRatio="none" style="image-rendering:pixelated" '
                   f'href="{_png(values, UTILIZATION_SCALE)}"/>')
        for i, row in enumerate(rows):
            seen = values[i][~pd.isna(values[i])]
            tip = (f"{row}: now {seen[-1]:.0f}%, mean {seen.mean():.0f}%, max {seen.max():.0f}% over the window"
                   if len(seen) else f"{row}: no samples")
            out.append(f'<rect x="{x0:.1f}" y="{top_pad + i * row_h}" width="{len(times) * step * px_s:.1f}" '
                       f'height="{row_h}" fill="transparent"><title>{_t(tip)}</title></rect>')
    axis_y = top_pad + row_h * len(rows)
    out.append(f'<line x1="{label_w}" y1="{axis_y}" x2="{label_w + plot_w}" y2="{axis_y}" stroke="#888"/>')
    for k in range(6):
        t = start + pd.Timedelta(seconds=(span - step) * k / 5)
        x = label_w + (t - start).total_seconds() * px_s
        out.append(f'<line x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{axis_y + 4}" stroke="#888"/>'
                   f'<text x="{x:.1f}" y="{axis_y + 16}" font-size="10" text-anchor="middle">{t:%H:%M}</text>')
    out.append(f'<text x="{label_w + plot_w / 2:.0f}" y="{axis_y + 30}" font-size="11" text-anchor="middle">'
               f'time (UTC) · rows: {_t(label)}</text>')
    out.append(_colourbar(WIDTH - bar_w + 16, top_pad + 14, max(60, min(160, row_h * len(rows) - 20)), "hj-util",
                          "util %"))
    out.append("</svg>")
    return "".join(out)


def _png(values: np.ndarray, scale: str) -> str:
    """The grid as a data: URI PNG, a pixel per cell in the scale's colours (no value: transparent)."""
    palette = np.array([[int(h[k:k + 2], 16) for k in (1, 3, 5)] for h in _palette(scale)], dtype=np.uint8)
    known = ~np.isnan(values)
    index = np.clip(np.rint(np.nan_to_num(values)), 0, 100).astype(int)
    rgba = np.zeros((*values.shape, 4), dtype=np.uint8)
    rgba[..., :3] = palette[index]
    rgba[..., 3] = np.where(known, 255, 0)
    buf = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
