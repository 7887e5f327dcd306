"""The offline basemap: country outlines (coastlines and borders) from Natural Earth, shipped with a package.

plotly.js draws coastlines from topojson it fetches from cdn.plot.ly, which a disconnected cluster cannot
reach. The console draws them itself instead, as ordinary traces, from Natural Earth's 1:110m admin-0
countries (public domain) as packaged in the pyogrio wheel (`pyogrio/tests/fixtures/naturalearth_lowres`,
copied there from GeoPandas' former `naturalearth_lowres` dataset), read with pyshp. Nothing is fetched.
"""

from __future__ import annotations

from functools import lru_cache
from importlib.resources import files

import shapefile

SOURCE = "pyogrio/tests/fixtures/naturalearth_lowres/naturalearth_lowres.shp"


@lru_cache(maxsize=1)
def _polygons() -> tuple[tuple[tuple[float, float, float, float], list[tuple[float, float]]], ...]:
    """Every ring of every country: (bounding box, points)."""
    path = files("pyogrio").joinpath(SOURCE.split("/", 1)[1])
    out = []
    with shapefile.Reader(str(path)) as reader:
        for shape in reader.shapes():
            parts = list(shape.parts) + [len(shape.points)]
            for a, b in zip(parts, parts[1:]):
                ring = [(float(x), float(y)) for x, y in shape.points[a:b]]
                xs, ys = [p[0] for p in ring], [p[1] for p in ring]
                out.append(((min(xs), min(ys), max(xs), max(ys)), ring))
    return tuple(out)


@lru_cache(maxsize=8)
def outlines(lon_range: tuple[float, float], lat_range: tuple[float, float]
             ) -> tuple[list[float | None], list[float | None]]:
    """(lons, lats) of the country rings touching the box, each ring closed and followed by a None gap."""
    lons: list[float | None] = []
    lats: list[float | None] = []
    for (x0, y0, x1, y1), ring in _polygons():
        if x1 < lon_range[0] or x0 > lon_range[1] or y1 < lat_range[0] or y0 > lat_range[1]:
            continue
        lons += [p[0] for p in ring] + [None]
        lats += [p[1] for p in ring] + [None]
    return lons, lats
