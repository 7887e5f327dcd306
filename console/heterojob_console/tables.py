"""Small summary tables (the Overview's regions and jobs by phase) as one HTML table each, not a data grid.

Why: Streamlit's data grid (st.dataframe) makes a browser load and compile its grid and Arrow modules (about
1.2 MB of JavaScript) and draw on a canvas; for a table of eleven rows that was most of the Overview's time in the
browser. The Overview's page with its two grids as HTML took 1.9-2.5 s in Chromium where it took 3.5-3.7 s with
grids (load 15-28 on 2 cores; its tab's main thread 0.7-0.9 s against 2.0-2.2 s). Tables that can grow with the
fleet (jobs, nodes, devices) stay grids: they scroll, sort and select.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import pandas as pd

from heterojob_console.svg import _t

ROWS = 60  # a summary that may grow with the fleet (the Devices page's software stacks) is a grid past this many rows

STYLE = ("<style>table.summary{border-collapse:collapse;font-size:14px;width:100%;table-layout:auto}"
         "table.summary th{text-align:left;font-weight:600;color:#555;border-bottom:1px solid #ddd;padding:4px 8px}"
         "table.summary td{border-bottom:1px solid #eee;padding:4px 8px;white-space:nowrap}"
         "table.summary td.n{text-align:right;font-variant-numeric:tabular-nums}table.summary td:last-child{white-space:normal}"
         "table.summary .bar{display:inline-block;width:70px;height:8px;background:#e8e8e8;border-radius:4px;"
         "margin-right:8px;vertical-align:middle}"
         "table.summary .bar i{display:block;height:8px;background:#4a90d9;border-radius:4px}</style>")


@dataclass(frozen=True)
class Column:
    """One column: the frame's `key` under `title`; "text", "number" or "bar" (a value from 0 to `top` drawn as
    a bar beside its value, formatted by `fmt`); `help` as the header's hover text."""

    key: str
    title: str
    kind: str = "text"
    fmt: str = "{:,.0f}"
    top: float = 100.0
    help: str = ""


def _cell(value: object, column: Column) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "<td></td>" if column.kind == "text" else '<td class="n">-</td>'
    if column.kind == "text":
        return f"<td>{_t(value)}</td>"
    shown = _t(column.fmt.format(value))
    if column.kind == "number":
        return f'<td class="n">{shown}</td>'
    number = float(value) if isinstance(value, numbers.Real) else 0.0  # numpy's numbers register as Real
    share = min(max(number / column.top, 0.0), 1.0) if column.top > 0 else 0.0
    return f'<td><span class="bar"><i style="width:{100 * share:.0f}%"></i></span>{shown}</td>'


def html(frame: pd.DataFrame, columns: list[Column], name: str) -> str:
    """The frame's rows as `<table class="summary {name}">` (escaped, inert as Markdown), for `st.markdown`."""
    head = "".join(f'<th title="{_t(c.help)}">{_t(c.title)}</th>' if c.help else f"<th>{_t(c.title)}</th>"
                   for c in columns)
    body = "".join("<tr>" + "".join(_cell(row[c.key], c) for c in columns) + "</tr>"
                   for row in frame.to_dict("records"))
    return f'{STYLE}<table class="summary {_t(name)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
