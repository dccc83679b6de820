"""A restore fetches each state file once and verifies and decodes the files on several threads:
the same restore as one thread, and a damaged or missing file is reported as a sequential loop
would report it (the first bad file in fetch order), whichever thread found it first."""

from __future__ import annotations

from typing import Any

import pytest

from spark_jobs.examples.keyed_counts import build_job
from spark_jobs.runtime import state_io
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sources.generator import DEFAULT_START_MS
from state_store.core import JobLayout, load_completed
from state_store.core.keygroups import KeyGroupRange
from state_store.core.manifests import CompletedMetadata
from state_store.core.ports import ObjectData, ObjectNotFound
from state_store.storage import open_store
from state_store.testing import ManualClock

UID = "counts"


class Faulty:
    """The store, with some keys missing or corrupted on read and every get recorded."""

    def __init__(self, inner: Any, concurrent: int) -> None:
        self.inner, self.max_concurrent_reads = inner, concurrent
        self.missing: set[str] = set()
        self.corrupt: set[str] = set()
        self.gets: list[str] = []

    def get(self, key: str) -> ObjectData:
        self.gets.append(key)
        if key in self.missing:
            raise ObjectNotFound(key)
        got = self.inner.get(key)
        if key in self.corrupt:
            return ObjectData(key, b"x" + got.data[1:], got.version)
        return got

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, CompletedMetadata]:
    """Three epochs of keyed counts, a file per key group (so a restore reads many files) and
    delta chains after the first epoch."""
    uri = tmp_path_factory.mktemp("restore").as_uri()
    clock = ManualClock(DEFAULT_START_MS)
    original = state_io.ROWS_PER_FILE
    state_io.ROWS_PER_FILE = 1
    try:
        for _ in range(3):
            job = build_job(keys=2_000, fraction=0.05, max_parallelism=16, parallelism=2)
            clock.advance(10_000)
            report = run_cycle(job, uri, clock)
            assert report.status == "completed" and report.checkpoint_id is not None
    finally:
        state_io.ROWS_PER_FILE = original
    meta = load_completed(open_store(uri), JobLayout(job.job_id), report.checkpoint_id).metadata
    return uri, meta


def _restore(store: Any, meta: CompletedMetadata, threads: int, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(state_io, "VERIFY_THREADS", threads)
    restore, chains = state_io.read_operator_restore(store, meta, UID, KeyGroupRange(0, 15))
    assert restore is not None
    return [(p.key_group_range, p.key_groups) for p in restore.keyed], {
        kg: c.chain for kg, c in chains.items()
    }


@pytest.mark.parametrize("concurrent", [1, 4])
def test_many_threads_restore_what_one_thread_restores_reading_each_file_once(
    checkpoint: tuple[str, CompletedMetadata], concurrent: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, meta = checkpoint
    one = Faulty(open_store(uri), concurrent)
    sequential = _restore(one, meta, 1, monkeypatch)
    many = Faulty(open_store(uri), concurrent)
    assert _restore(many, meta, 4, monkeypatch) == sequential
    assert sorted(many.gets) == sorted(set(many.gets)) == sorted(one.gets)
    assert any(chain.deltas for chain in sequential[1].values()), "the chains have deltas"
    assert len(many.gets) > 8


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("first_fault", ["corrupt", "missing"])
def test_the_first_bad_file_in_fetch_order_is_reported(
    checkpoint: tuple[str, CompletedMetadata],
    threads: int,
    first_fault: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    uri, meta = checkpoint
    probe = Faulty(open_store(uri), 4)
    _restore(probe, meta, 1, monkeypatch)
    order = probe.gets
    store = Faulty(open_store(uri), 4)
    first, later = order[2], order[5]
    getattr(store, first_fault).add(first)
    (store.missing if first_fault == "corrupt" else store.corrupt).add(later)
    expected = "has .* bytes and checksum blake3:" if first_fault == "corrupt" else "cannot be read"
    with pytest.raises(state_io.StateRestoreError, match=f"state file {first} of checkpoint .*{expected}"):
        _restore(store, meta, threads, monkeypatch)


def test_a_checkpoint_restore_trusts_the_key_groups_of_its_verified_files(
    checkpoint: tuple[str, CompletedMetadata], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No restored key is hashed again (Flink trusts its key-group offsets); state built by hand
    (``trusted_key_groups`` False) still has every key checked."""
    import dataclasses

    from spark_jobs.runtime.operators.base import OperatorContext
    from spark_jobs.runtime.operators.keyed import KeyedOperator
    from state_store.core.state import backend as backend_module

    uri, meta = checkpoint
    restored, _ = state_io.read_operator_restore(open_store(uri), meta, UID, KeyGroupRange(0, 15))
    assert restored is not None and restored.trusted_key_groups
    hashed: list[Any] = []
    real = backend_module.stable_hash
    monkeypatch.setattr(backend_module, "stable_hash", lambda key: hashed.append(key) or real(key))
    ctx = OperatorContext("j", 0, 1, 16, KeyGroupRange(0, 15), 0, meta.checkpoint_id + 1)
    backend_module.shared_key_group_cache(16).clear()  # a restarted subtask: a new process
    trusting = KeyedOperator(UID, "user")
    trusting.open(ctx, restored)
    entries = sum(part.num_rows for part in restored.keyed)
    assert entries > 100 and trusting.backend.snapshot().num_rows == entries
    assert hashed == []
    backend_module.shared_key_group_cache(16).clear()
    checking = KeyedOperator(UID, "user")
    checking.open(ctx, dataclasses.replace(restored, trusted_key_groups=False))
    assert len(hashed) >= entries // 2  # each distinct key once (the keys hold one state each)
