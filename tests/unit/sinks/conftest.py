"""Every sink test runs on the in-memory and the local-directory store."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from state_store.core.ports import ObjectStore
from state_store.storage import LocalObjectStore, MemoryObjectStore
from state_store.testing import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["memory", "local"])
def store(request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock) -> Iterator[ObjectStore]:
    if request.param == "memory":
        yield MemoryObjectStore(f"sink-{uuid.uuid4().hex}", now_ms=clock.now_ms)
    else:
        yield LocalObjectStore(tmp_path / "store", fsync=False)
