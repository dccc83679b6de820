"""Stores verify data files on upload (``put_verified``, through ``checksums.put_checked``): the
local store checksums the staged temp file before its create-only link and fsync; the in-memory
store checksums the bytes it keeps. A mismatch raises ChecksumMismatchError and writes nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from state_store.core import checksums
from state_store.core.checksums import checksum_of, put_checked
from state_store.core.ports import (
    ChecksumMismatchError,
    ObjectAlreadyExists,
    ObjectStore,
    TransientStoreError,
)
from state_store.storage import LocalObjectStore, MemoryObjectStore
from state_store.testing import Fault, FaultyObjectStore

DATA = b"state file bytes " * 100
KEY = "job/shared/op/file.arrow"


@pytest.fixture(params=["local", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    return LocalObjectStore(tmp_path / "store") if request.param == "local" else MemoryObjectStore("v")


@pytest.mark.parametrize("create_only", [False, True])
def test_an_upload_whose_bytes_do_not_match_the_writers_checksum_is_refused(
    store: ObjectStore, create_only: bool
) -> None:
    wrong = checksum_of(DATA + b"!")
    with pytest.raises(ChecksumMismatchError, match=rf"upload of '{KEY}' .* refused: .* nothing was written"):
        put_checked(store, KEY, DATA, wrong, create_only=create_only)
    assert store.head(KEY) is None
    version = put_checked(store, KEY, DATA, checksum_of(DATA), create_only=create_only)
    assert store.get(KEY).data == DATA and store.head(KEY).version == version  # type: ignore[union-attr]


def test_a_mismatch_is_a_transient_store_error_the_step_retries() -> None:
    assert issubclass(ChecksumMismatchError, TransientStoreError)


def test_create_only_verified_uploads_keep_the_ports_rules(store: ObjectStore) -> None:
    first = put_checked(store, KEY, DATA, checksum_of(DATA), create_only=True)
    assert put_checked(store, KEY, DATA, checksum_of(DATA), create_only=True) == first  # lost response
    with pytest.raises(ObjectAlreadyExists):
        put_checked(store, KEY, b"other", checksum_of(b"other"), create_only=True)


def test_old_sha256_checksums_are_verified_with_sha256(store: ObjectStore) -> None:
    put_checked(store, KEY, DATA, checksum_of(DATA, checksums.SHA256))
    with pytest.raises(ChecksumMismatchError, match="checksum sha256:"):
        put_checked(store, KEY + "2", DATA, checksum_of(b"x", checksums.SHA256))


def test_a_malformed_checksum_is_refused_before_anything_is_written(store: ObjectStore) -> None:
    with pytest.raises(checksums.ChecksumError, match="checksum 'nope' is invalid: expected '<algorithm>:"):
        put_checked(store, KEY, DATA, "nope")
    with pytest.raises(checksums.ChecksumUnavailableError, match=r"'md7' is unknown .* upgrade Epochal"):
        put_checked(store, KEY, DATA, "md7:" + "0" * 32)
    assert store.head(KEY) is None


def test_the_local_store_checksums_the_staged_file_not_the_callers_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bytes that change between the writer's buffer and the disk (here: the staged file altered
    after it was written) are refused before the file becomes visible; no temp file is left."""
    store = LocalObjectStore(tmp_path / "store")
    stage = LocalObjectStore._stage

    def damaged_stage(self: LocalObjectStore, key: str, data: bytes) -> Path:
        tmp = stage(self, key, data)
        raw = bytearray(tmp.read_bytes())
        raw[7] ^= 0x04
        tmp.write_bytes(bytes(raw))
        return tmp

    monkeypatch.setattr(LocalObjectStore, "_stage", damaged_stage)
    for create_only in (True, False):
        with pytest.raises(ChecksumMismatchError, match="the staged file has checksum blake3:"):
            put_checked(store, KEY, DATA, checksum_of(DATA), create_only=create_only)
    assert store.head(KEY) is None
    assert os.listdir(tmp_path / "store" / ".epochal-internal" / "tmp") == []
    monkeypatch.undo()
    store.put(KEY, DATA)  # plain writes are not checksummed: protocol documents have their own
    assert store.get(KEY).data == DATA


def test_a_bit_flip_on_the_way_in_is_refused_by_a_verifying_store_and_silent_otherwise() -> None:
    verifying = FaultyObjectStore(MemoryObjectStore("f1"), [Fault("bitflip", key_glob="*.arrow")], seed=1)
    with pytest.raises(ChecksumMismatchError):
        put_checked(verifying, KEY, DATA, checksum_of(DATA), create_only=True)
    assert verifying.injected == [("put_if_absent", KEY, "bitflip")]
    assert verifying.inner.head(KEY) is None

    class Plain:  # a store without verified uploads: put_checked falls back to a plain put
        def __init__(self) -> None:
            self.inner = MemoryObjectStore("f2")

        def __getattr__(self, name: str) -> object:
            if name == "put_verified":
                raise AttributeError(name)
            return getattr(self.inner, name)

    silent = FaultyObjectStore(Plain(), [Fault("bitflip", key_glob="*.arrow")], seed=1)  # type: ignore[arg-type]
    put_checked(silent, KEY, DATA, checksum_of(DATA))
    assert silent.get(KEY).data != DATA  # stored corrupted: found later by a restore or the audit
