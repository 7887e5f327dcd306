"""The helper processes a simulation or benchmark starts (emulator, Prometheus, Alertmanager, kubelet): stopping
them politely, then firmly, and reading their CPU."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
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


def cpu_seconds(pid: int | None) -> float:
    """A process's user + system CPU-seconds so far (Linux /proc/<pid>/stat); 0 where /proc does not say."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0
