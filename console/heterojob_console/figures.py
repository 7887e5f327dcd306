"""The console's figures (plotly), built from the tables of `data`, `kpis` and `devices`; no I/O here."""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from heterojob_console.basemap import outlines

LAND, SEA, BORDER = "#eceae4", "#dbe7f0", "#9a9a9a"
SCALE = "RdYlGn_r"


def _box(lat: pd.Series, lon: pd.Series, margin: float = 6.0) -> tuple[tuple[float, float], tuple[float, float]]:
    if lat.empty:
        return (-180.0, 180.0), (-60.0, 80.0)
    return ((float(lon.min()) - margin, float(lon.max()) + margin),
            (float(lat.min()) - margin, float(lat.max()) + margin))


def fleet_map(regions: pd.DataFrame, links: pd.DataFrame, moves: pd.DataFrame, height: int = 560) -> go.Figure:
    """Regions sized by accelerators and coloured by allocation, the links with their bandwidth, and the
    cross-region moves as arcs, on Natural Earth outlines (no topojson fetched: geo layers are off)."""
    lon_range, lat_range = _box(regions["latitude"], regions["longitude"])
    fig = go.Figure()
    lons, lats = outlines(lon_range, lat_range)
    fig.add_trace(go.Scattergeo(lon=lons, lat=lats, mode="lines", fill="toself", fillcolor=LAND,
                                line={"color": BORDER, "width": 0.7}, hoverinfo="skip", name="basemap",
                                showlegend=False, uid="basemap"))
    where = regions.set_index("region")
    top = float(links["bandwidth_gbps"].max()) if not links.empty else 1.0
    for i, (bandwidth, group) in enumerate(links.groupby("bandwidth_gbps")):  # one trace per line width
        lon: list[float | None] = []
        lat: list[float | None] = []
        text: list[str | None] = []
        for link in group.itertuples():
            if link.a not in where.index or link.b not in where.index:
                continue
            a, b = where.loc[link.a], where.loc[link.b]
            label = f"{link.a} ↔ {link.b}: {link.bandwidth_gbps:g} Gbit/s, {link.latency_ms:g} ms"
            lon += [a.longitude, (a.longitude + b.longitude) / 2, b.longitude, None]
            lat += [a.latitude, (a.latitude + b.latitude) / 2, b.latitude, None]
            text += [label, label, label, None]
        fig.add_trace(go.Scattergeo(
            lon=lon, lat=lat, mode="lines", line={"color": "#5b7c99", "width": 1 + 5 * float(bandwidth) / top},
            opacity=0.6, hoverinfo="text", text=text, name=f"links ({bandwidth:g} Gbit/s)", legendgroup="links",
            showlegend=True))
    if not moves.empty:
        counted = moves.groupby(["from", "to"]).agg(n=("job", "size"), jobs=("job", lambda j: ", ".join(j[:5])))
        for (a_name, b_name), row in counted.iterrows():
            if a_name not in where.index or b_name not in where.index:
                continue
            a, b = where.loc[a_name], where.loc[b_name]
            mid_lon, mid_lat = (a.longitude + b.longitude) / 2, (a.latitude + b.latitude) / 2
            bend = 0.18 * ((b.longitude - a.longitude) ** 2 + (b.latitude - a.latitude) ** 2) ** 0.5
            fig.add_trace(go.Scattergeo(
                lon=[a.longitude, mid_lon, b.longitude], lat=[a.latitude, mid_lat + bend, b.latitude],
                mode="lines+markers", line={"color": "#d62728", "width": 1.5 + row.n, "dash": "dot"},
                marker={"size": [0, 0, 9], "symbol": "triangle-up", "color": "#d62728"},
                hoverinfo="text", text=f"{a_name} → {b_name}: {row.n} job(s) moved in the last hour ({row.jobs})",
                name="moves (1 h)", legendgroup="moves", showlegend=(a_name, b_name) == counted.index[0]))
    size = regions["accelerators"].clip(lower=0)
    fig.add_trace(go.Scattergeo(
        lon=regions["longitude"], lat=regions["latitude"], mode="markers+text", text=regions["city"],
        textposition="top center", name="regions", showlegend=False, uid="regions",
        marker={"size": 10 + 40 * (size / max(float(size.max()), 1.0)) ** 0.5, "color": regions["allocated_pct"],
                "cmin": 0, "cmax": 100, "colorscale": SCALE, "line": {"color": "#333", "width": 1},
                "colorbar": {"title": "allocated %", "thickness": 12}},
        customdata=regions[["region", "accelerators", "held", "allocated_pct", "mix", "cpu_cores"]].to_numpy(),
        hovertemplate=("<b>%{text}</b> (%{customdata[0]})<br>accelerators %{customdata[1]} "
                       "(%{customdata[4]})<br>allocated %{customdata[2]} = %{customdata[3]}%"
                       "<br>CPU cores %{customdata[5]}<extra></extra>")))
    fig.update_geos(visible=False, bgcolor=SEA, projection_type="mercator",
                    lonaxis_range=list(lon_range), lataxis_range=list(lat_range))
    fig.update_layout(height=height, margin={"l": 0, "r": 0, "t": 30, "b": 0},
                      legend={"orientation": "h", "y": -0.01, "yanchor": "top", "x": 0}, paper_bgcolor="white")
    return fig


def heat_map(frame: pd.DataFrame, label: str, minutes: int | None = None) -> go.Figure:
    """Utilization heat map; the height follows the rows, so hundreds stay readable (the page scrolls).
    The time axis spans the whole window, however few samples there are yet."""
    height = max(260, min(22 * len(frame) + 120, 6000))
    fig = px.imshow(frame, aspect="auto", color_continuous_scale="Viridis", zmin=0, zmax=100,
                    labels={"x": "time", "y": label, "color": "util %"})
    fig.update_layout(height=height, margin={"l": 0, "r": 0, "t": 20, "b": 0})
    fig.update_yaxes(dtick=1 if len(frame) <= 200 else None)
    if minutes and len(frame.columns):
        end = pd.Timestamp(frame.columns.max())
        fig.update_xaxes(range=[end - pd.Timedelta(minutes=minutes), end + pd.Timedelta(seconds=30)])
    return fig


def gantt(segments: pd.DataFrame, moves: pd.DataFrame) -> go.Figure:
    """Phases as bars on a time axis, moves and checkpoints as markers."""
    fig = px.timeline(segments, x_start="start", x_end="end", y="where", color="phase",
                      hover_data={"detail": True})
    if not moves.empty:
        fig.add_trace(go.Scatter(x=moves["time"], y=moves["where"], mode="markers", name="event",
                                 marker={"symbol": "diamond", "size": 11, "color": "#222"},
                                 text=moves["what"] + ": " + moves["detail"], hoverinfo="text+x"))
    fig.update_yaxes(autorange="reversed", title=None)
    fig.update_layout(height=160 + 30 * segments["where"].nunique(), margin={"l": 0, "r": 0, "t": 20, "b": 0})
    return fig


def series(frame: pd.DataFrame, title: str, unit: str) -> go.Figure:
    fig = px.line(frame, x="time", y="value", labels={"value": unit or title}, title=title, markers=len(frame) < 40)
    fig.update_layout(height=220, margin={"l": 0, "r": 0, "t": 40, "b": 0})
    return fig
