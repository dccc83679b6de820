"""Fixtures for the prefix-source tests: every store-backed test runs on the memory and the local
store, with file modification times taken from a manual clock."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from state_store.storage import LocalObjectStore, MemoryObjectStore
from state_store.testing import ManualClock
from tests.unit.sources_prefix.support import T0, Landing


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture(params=["memory", "local"])
def landing(request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock) -> Landing:
    if request.param == "memory":
        landing = Landing(None, clock)
        landing.store = MemoryObjectStore(f"prefix-{uuid.uuid4().hex}", now_ms=landing.stamp_ms)
        return landing
    return Landing(LocalObjectStore(tmp_path / "store", fsync=False), clock)
