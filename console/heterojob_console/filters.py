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
