"""The contract suite against the memory, local-directory and (fault-free) faulty adapters."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from state_store.core.ports import ObjectStore
from state_store.storage import LocalObjectStore, MemoryObjectStore
from state_store.testing import FaultyObjectStore
from tests.unit.storage.contract import ObjectStoreContract


class TestMemoryObjectStore(ObjectStoreContract):
    __test__ = True

    @pytest.fixture
    def store(self) -> Iterator[ObjectStore]:
        yield MemoryObjectStore(f"contract-{uuid.uuid4().hex}")


class TestLocalObjectStore(ObjectStoreContract):
    __test__ = True

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[ObjectStore]:
        yield LocalObjectStore(tmp_path / "root")


class TestFaultyStoreWithoutFaults(ObjectStoreContract):
    """The fault-injecting wrapper is behind the same port: unarmed, it must keep the contract."""

    __test__ = True

    @pytest.fixture
    def store(self) -> Iterator[ObjectStore]:
        yield FaultyObjectStore(MemoryObjectStore("faulty-contract"))
