"""Each console test starts with empty Streamlit caches (the console caches the cluster for a few seconds
per kubeconfig, and every test's emulator has the same kubeconfig path) and with no member cluster
remembered from another test. `member`: an API emulator of its own for a module's member-cluster tests
(the fleet they build: tests/console/member_fleet.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import streamlit as st

from heterojob.sim.cluster.harness import Emulator
from heterojob_console import devices, members


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    st.cache_resource.clear()
    st.cache_data.clear()
    members.forget()
    devices.forget()
    yield


@pytest.fixture(scope="module")
def member() -> Iterator[Emulator]:
    with Emulator() as emu:
        yield emu
