"""Each console test starts with empty Streamlit caches: the console caches the cluster for a few seconds
per kubeconfig, and every test's emulator has the same kubeconfig path."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import streamlit as st


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    st.cache_resource.clear()
    st.cache_data.clear()
    yield
