"""Completion takes each state file's checksum from its ack and reads no state file back (issue 20):
its presence and size come from folder listings (or one HEAD per file on stores read one at a
time). The opt-in ``deep_verify`` (old name ``verify_sha256``) still reads every file back."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

from spark_jobs.runtime.cycle import run_cycle
from state_store.core import CheckpointConfig, JobLayout, TaskId, load_completed
from state_store.core.ports import ObjectData, ObjectInfo
from state_store.storage import MemoryObjectStore
from tests.unit.core.helpers import Job, make_job
from tests.unit.runtime.support import STEP_MS, new_clock, small_job

TASKS = tuple(TaskId("op", i) for i in range(40))


class CallCounter:
    """An in-memory store counting every call by (operation, kind of key); ``concurrent``: it
    declares ``max_concurrent_reads`` (the coordinator then lists folders for the size checks)."""

    def __init__(self, concurrent: bool) -> None:
        self.inner = MemoryObjectStore(f"count-{uuid.uuid4().hex}")
        if concurrent:
            self.max_concurrent_reads = 16
        self.calls: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    @staticmethod
    def kind(key: str) -> str:
        if "/state/" in key or "/shared/" in key:
            return "state file"
        return "document"

    def _count(self, op: str, key: str) -> None:
        with self._lock:
            self.calls[(op, self.kind(key))] += 1

    @property
    def uri(self) -> str:
        return self.inner.uri

    def get(self, key: str) -> ObjectData:
        self._count("get", key)
        return self.inner.get(key)

    def head(self, key: str) -> ObjectInfo | None:
        self._count("head", key)
        return self.inner.head(key)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        self._count("list", prefix)
        return self.inner.list(prefix)

    def put(self, key: str, data: bytes) -> str:
        return self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> str:
        return self.inner.put_if_absent(key, data)

    def put_if_match(self, key: str, data: bytes, expected_version: str) -> str:
        return self.inner.put_if_match(key, data, expected_version)

    def delete(self, key: str) -> None:
        self.inner.delete(key)


def acked(config: CheckpointConfig, *, concurrent: bool) -> tuple[Job, CallCounter, int]:
    store = CallCounter(concurrent)
    job = make_job(config, store=store)
    n = job.coordinator.trigger(list(TASKS)).checkpoint_id
    job.coordinator.start_attempt(n)
    job.ack_all(n, TASKS)
    store.calls.clear()
    return job, store, n


@pytest.mark.parametrize("concurrent", [True, False], ids=["listing", "one-head-per-file"])
def test_completion_makes_no_get_of_a_state_file_by_default(concurrent: bool) -> None:
    job, store, n = acked(CheckpointConfig(timeout_ms=60_000), concurrent=concurrent)
    result = job.coordinator.complete(n)
    assert result.status == "completed"
    assert store.calls[("get", "state file")] == 0, store.calls
    if concurrent:  # the sizes came from listings of the state folder
        assert store.calls[("head", "state file")] == 0, store.calls
    else:  # one HEAD per file at completion and when the completed checkpoint is loaded
        assert store.calls[("head", "state file")] == 2 * len(TASKS), store.calls
    # the handles in the metadata are the writers' (BLAKE3), taken from the acks
    assert result.checkpoint is not None
    assert {h.algorithm for h in result.checkpoint.metadata.handles} == {"blake3"}


@pytest.mark.parametrize("option", ["deep_verify", "verify_sha256"])
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_deep_verify_reads_every_state_file_back_once(option: str) -> None:
    config = CheckpointConfig(timeout_ms=60_000, **{option: True})  # verify_sha256: its old name
    assert config.deep_verify
    job, store, n = acked(config, concurrent=True)
    assert job.coordinator.complete(n).status == "completed"
    assert store.calls[("get", "state file")] == len(TASKS), store.calls


def test_an_epoch_of_a_real_job_completes_without_reading_its_state_files() -> None:
    """The whole epoch cycle in process (trigger, run, complete, notify, retention) of the
    clickstream job: the only state-file reads are the restore's (the second epoch restores the
    first checkpoint) -- none between the acks and the decision."""
    store = CallCounter(concurrent=True)
    MemoryObjectStore.register(store.inner.uri.removeprefix("memory://"), store)  # type: ignore[arg-type]
    try:
        job, clock = small_job(), new_clock()
        clock.advance(STEP_MS)
        first = run_cycle(job, store.uri, clock)
        assert first.status == "completed"
        reads_after_first = store.calls[("get", "state file")]
        assert reads_after_first == 0, store.calls  # nothing to restore, nothing read back
        clock.advance(STEP_MS)
        second = run_cycle(job, store.uri, clock)
        assert second.status == "completed"
        restored = store.calls[("get", "state file")]
        assert first.checkpoint_id is not None
        meta = load_completed(store.inner, JobLayout(job.job_id), first.checkpoint_id).metadata
        files = {h.key for h in meta.handles if "/sinks/" not in h.key}
        assert 0 < restored <= len(files), store.calls  # the restore's reads only, each file once
    finally:
        MemoryObjectStore.forget(store.inner.uri.removeprefix("memory://"))
