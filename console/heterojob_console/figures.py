"""The console's plotly figures (a job's timeline, a device's history), built from the tables of `jobs` and
`devices`; no I/O here. The Overview map and the Devices heat map are SVG drawings (`svg`)."""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go


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
    # none of a device's series goes below 0: an idle or failed device's flat 0 was drawn on a -1..1 axis
    fig.update_yaxes(rangemode="nonnegative")
    return fig
