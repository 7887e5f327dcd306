"""Harness fixtures beyond tests/conftest.py's: the member clusters of the multi-cluster tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from heterojob.sim.cluster.harness import Emulator
from tests.harness.members import MEMBERS


@pytest.fixture(scope="module")
def members() -> Iterator[dict[str, Emulator]]:
    """Three member API emulators (`MEMBERS`), each its own process, for one test module."""
    emulators = {name: Emulator() for name in MEMBERS}
    try:
        for emu in emulators.values():
            emu.start()
        yield emulators
    finally:
        for emu in emulators.values():
            emu.resume()  # a test that failed while one was frozen must not leave it stopped
            emu.stop()
