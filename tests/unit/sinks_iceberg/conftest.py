"""Iceberg sink tests: a real pyiceberg SQL catalog on SQLite in a temp folder (its warehouse
beside it), the job store in memory."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from state_store.core.ports import ObjectStore
from state_store.storage import MemoryObjectStore


@pytest.fixture
def store() -> ObjectStore:
    return MemoryObjectStore(f"iceberg-sink-{uuid.uuid4().hex}")


@pytest.fixture
def catalog(tmp_path: Path) -> dict[str, str]:
    return {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
        "warehouse": (tmp_path / "warehouse").as_uri(),
    }
