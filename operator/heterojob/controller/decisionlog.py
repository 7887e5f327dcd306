"""The decision log: one line per decision, `job=<ns/name> action=<what> key=value ... <message>`.

Logged on `heterojob.decisions` so an SRE can follow (or silence) decisions apart from the operator's
other logs. Every step logs through `decided`, so the format is the same everywhere.
"""

from __future__ import annotations

import logging

log = logging.getLogger("heterojob.decisions")


def decided(job: str, action: str, message: str = "", **fields: object) -> None:
    parts = [f"job={job}", f"action={action}"]
    parts += [f"{k}={v}" for k, v in fields.items() if v is not None]
    if message:
        parts.append(message)
    log.info(" ".join(parts))
