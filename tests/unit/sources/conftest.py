"""Fixtures for the source tests: every file-log test runs on the memory and the local-disk store."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from state_store.core.ports import ObjectStore
from state_store.storage import LocalObjectStore, MemoryObjectStore

EVENTS = pa.schema(
    [
        pa.field("event_id", pa.string(), nullable=False),
        pa.field("user_id", pa.string(), nullable=True),
        pa.field("event_time", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("value", pa.int64(), nullable=False),
    ]
)
"""A small schema with one optional field, used by the file-log tests."""

T0 = 1_700_000_000_000


def events(first: int, count: int) -> list[dict[str, object]]:
    """Records whose ids say their intended offset: ``e<offset>``."""
    return [
        {"event_id": f"e{o}", "user_id": f"u{o % 3}", "event_time": T0 + o, "value": o * 10}
        for o in range(first, first + count)
    ]


@pytest.fixture(params=["memory", "local"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "memory":
        return MemoryObjectStore(f"sources-{uuid.uuid4().hex}")
    return LocalObjectStore(tmp_path / "store", fsync=False)
