"""Delta sink tests: a real delta-rs table in a temp folder, the job store in memory."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from state_store.core.ports import ObjectStore
from state_store.storage import MemoryObjectStore


@pytest.fixture
def store() -> ObjectStore:
    return MemoryObjectStore(f"delta-sink-{uuid.uuid4().hex}")


@pytest.fixture
def table(tmp_path: Path) -> Path:
    return tmp_path / "orders"
