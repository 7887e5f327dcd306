"""Table filters whose default is "everything": an empty choice means no filter, so values that appear
after the page first rendered (a phase reached later, a member cluster joined later) are shown, and a
choice a user made stays as it was while other values come and go."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd


def options(known: Iterable[str], present: Iterable[str], chosen: Iterable[str] | None) -> list[str]:
    """The values to offer: the known ones in their order, then any other present now, then what the user
    chose earlier that is no longer present (a choice is never dropped from under them)."""
    out = list(dict.fromkeys(str(v) for v in known))
    out += sorted({str(v) for v in present} - set(out))
    out += [v for v in (chosen or []) if v not in out]
    return out


def keep(frame: pd.DataFrame, column: str, chosen: list[str], keep_missing: bool = False) -> pd.DataFrame:
    """The rows whose `column` is among `chosen`; every row when nothing is chosen. With `keep_missing`,
    rows without a value (a job not placed yet has no member) stay whatever is chosen."""
    if not chosen:
        return frame
    mask = frame[column].isin(chosen)
    if keep_missing:
        mask |= frame[column].isna()
    return frame[mask]


PAGE_ROWS = 100  # a table's page: what a screen scrolls through (10,000 jobs in one grid were 1.4 MB a visit)


def search(frame: pd.DataFrame, text: str, columns: Iterable[str]) -> pd.DataFrame:
    """The rows where any of `columns` contains `text` (case-insensitive, literal); every row for no text."""
    text = text.strip()
    if not text:
        return frame
    mask = pd.Series(False, index=frame.index)
    for column in columns:
        mask |= frame[column].astype("string").str.contains(text, case=False, regex=False, na=False)
    return frame[mask]


def pages(rows: int, size: int | None = None) -> int:
    """How many pages `rows` rows fill (at least one, so an empty table still has its page)."""
    size = size or PAGE_ROWS
    return max(1, -(-rows // size))


def page(frame: pd.DataFrame, number: int, size: int | None = None) -> pd.DataFrame:
    """Page `number` (from 1; past the last, the last) of `frame`, its index 0.. again."""
    size = size or PAGE_ROWS
    number = min(max(number, 1), pages(len(frame), size))
    return frame.iloc[(number - 1) * size:number * size].reset_index(drop=True)
