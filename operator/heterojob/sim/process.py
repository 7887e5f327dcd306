"""Stopping a helper process the simulation started (emulator, Prometheus, Alertmanager): politely, then firmly."""

from __future__ import annotations

import subprocess
from typing import Any


def stop(proc: subprocess.Popen[Any] | None, grace_s: float = 10.0) -> None:
    """SIGTERM, wait up to `grace_s`, then SIGKILL; nothing when it is gone already."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
