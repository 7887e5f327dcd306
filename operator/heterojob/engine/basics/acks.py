"""A rank's answer to a checkpoint request (the pod annotation `heterojob.io/checkpoint-ack`), and what the
answers of a gang say together. Pure.

The ack is `<id>;<step>;<uri>` (any SDK), optionally followed by `;key=value` fields, each at most once and in
any order: `size=<bytes>` (the bytes this rank wrote) and `start=<unix s>;end=<unix s>` (when this rank began and
finished saving, by its own clock; decimals allowed). The URI may hold ';' itself: only trailing fields with a
known key (and no '/' in the value) are read as fields. A field that does not read is ignored (`problems` says
why), never the ack. The operator reads every form: an ack without times gives no save time of the ranks' own,
and the operator's observation stands in for it (request to the last ack it saw).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from heterojob.constants import CHECKPOINT_SIZE_MAX

SIZE_MAX = CHECKPOINT_SIZE_MAX
SAVE_MAX_S = 7 * 86400.0  # a save said to take longer is not believed (status.checkpoint.last.saveSeconds' bound)
FIELDS = ("size", "start", "end")


@dataclass(frozen=True)
class Ack:
    step: int
    uri: str
    size_bytes: int | None = None  # the bytes this rank wrote; None: not said, or not readable
    problem: str = ""  # why a field that was given is ignored ("; "-joined)
    start: float | None = None  # when this rank began saving (unix seconds, its clock); None: not said
    end: float | None = None  # when it finished; both or neither (a pair that does not read is dropped)


def parse_ack(value: str, wanted: str) -> Ack | None:
    """The ack of checkpoint `wanted`, or None (another id, malformed)."""
    parts = value.split(";", 2)
    if len(parts) != 3 or parts[0] != wanted or not parts[2]:
        return None
    try:
        step = int(parts[1])
    except ValueError:
        return None
    rest, fields = parts[2], {}
    while True:
        head, sep, last = rest.rpartition(";")
        key, eq, raw = last.partition("=")
        if not sep or not head or not eq or key not in FIELDS or key in fields or "/" in raw:
            break
        fields[key], rest = raw, head
    problems: list[str] = []
    size = _size(fields.get("size"), problems)
    start, end = _times(fields.get("start"), fields.get("end"), problems)
    return Ack(step, rest, size, "; ".join(problems), start, end)


def with_save_time(ack: Ack | None, raw: str, wanted: str) -> Ack | None:
    """`ack` with the save time the SDK writes beside it (`heterojob.io/checkpoint-save-time`,
    "<id>;start=<s>;end=<s>") when the ack carries none of its own; a value of another checkpoint, or one that
    does not read, adds nothing."""
    if ack is None or ack.start is not None or not raw.startswith(f"{wanted};"):
        return ack
    fields = dict(part.partition("=")[::2] for part in raw[len(wanted) + 1:].split(";"))
    start, end = _times(fields.get("start"), fields.get("end"), [])
    return replace(ack, start=start, end=end) if start is not None else ack


def _size(raw: str | None, problems: list[str]) -> int | None:
    if raw is None:
        return None
    try:
        n = int(raw)
    except ValueError:
        problems.append(f"size {raw[:32]!r} is not a whole number of bytes; ignored")
        return None
    if not 0 <= n <= SIZE_MAX:
        problems.append(f"size {n} is out of range; ignored")
        return None
    return n


def _times(start: str | None, end: str | None, problems: list[str]) -> tuple[float | None, float | None]:
    if start is None and end is None:
        return None, None
    try:
        a, b = float(start or ""), float(end or "")
    except ValueError:
        problems.append(f"start {str(start)[:32]!r} / end {str(end)[:32]!r} are not both unix seconds; ignored")
        return None, None
    if not (math.isfinite(a) and math.isfinite(b) and 0 < a <= b and b - a <= SAVE_MAX_S):
        problems.append(f"start {a:.6g} / end {b:.6g} do not make a save time; ignored")
        return None, None
    return a, b


@dataclass(frozen=True)
class SaveTime:
    """When a gang saved, from its ranks' own words."""

    seconds: float  # from the first rank's start to the last rank's end (at least the slowest rank's own span)
    started: float  # the first rank's start (unix seconds)
    ended: float  # the last rank's end


def save_time(acks: Iterable[Ack]) -> SaveTime | None:
    """The gang's save from every rank's start and end; None when a rank did not say both (an older SDK)."""
    spans = [(a.start, a.end) for a in acks]
    if not spans or any(s is None or e is None for s, e in spans):
        return None
    starts = [s for s, _ in spans if s is not None]
    ends = [e for _, e in spans if e is not None]
    slowest = max(e - s for s, e in spans if s is not None and e is not None)
    # clocks of different nodes may disagree a little: never less than one rank measured on its own clock
    return SaveTime(max(slowest, max(ends) - min(starts)), min(starts), max(ends))


def recorded(save: SaveTime | None, asked: float | None, now: float) -> tuple[float | None, float]:
    """(saveSeconds, when it completed) for status.checkpoint.last: the ranks' own save time, bounded by what
    the operator saw (from its request to `now`, when it read the last ack), and the ranks' end put within that
    span; without the ranks' times, the operator's observation (which counts any time it was down)."""
    if save is None:
        return (round(max(0.0, now - asked), 1) if asked is not None else None), now
    seconds = min(save.seconds, max(0.0, now - asked)) if asked is not None else save.seconds
    ended = min(now, max(save.ended, asked if asked is not None else save.ended))
    return round(seconds, 1), ended


def ignored_fields(acks: Mapping[int, Ack]) -> list[str]:
    """Each rank's ignored fields, for the log."""
    return [f"rank {r}: {a.problem}" for r, a in sorted(acks.items()) if a.problem]
