"""The clock of the emulated cluster's simulated components (the kubelet, the taint-eviction controller): each is
a `step(now)` run on its own thread every `interval` seconds with `time.monotonic()`; tests call `step` with a
clock of their own instead (a step times nothing by any other clock; wall-clock time only stamps what it writes)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Self

log = logging.getLogger(__name__)


class Stepping:
    def __init__(self, name: str, interval: float) -> None:
        self.name = name
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def step(self, now: float) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        """Stepped by its own thread (not by hand)."""
        return self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.step(time.monotonic())
            except Exception as exc:  # noqa: BLE001 - a simulated component keeps going, as a real one retries
                log.warning("%s step failed: %s", self.name, exc)
            self._stop.wait(self.interval)
