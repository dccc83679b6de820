"""Completing a checkpoint reads each ack once and issues its reads concurrently (issue 9, S6),
with the same results and the same errors as the sequential path."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from state_store.core import AckRecord, CheckpointConfig, TaskId, completed, documents
from state_store.core.manifests import StateHandle
from state_store.core.parallel import map_ordered, read_concurrency
from state_store.core.ports import ObjectData, ObjectInfo, TransientStoreError
from state_store.storage import MemoryObjectStore
from tests.unit.core.helpers import Job, make_job

ACKS = 64
TASKS = tuple(TaskId("op", i) for i in range(ACKS))


class CountingStore:
    """MemoryObjectStore that counts reads by operation (and key), tracks reads in flight, and
    fails ``get`` of the keys in ``failing``. ``concurrent`` None: it does not declare
    ``max_concurrent_reads``, so the coordinator reads it sequentially."""

    def __init__(self, concurrent: int | None, *, delay_s: float = 0.0) -> None:
        self.inner = MemoryObjectStore(f"reads-{uuid.uuid4().hex}")
        if concurrent is not None:
            self.max_concurrent_reads = concurrent
        self.delay_s = delay_s
        self.ops: Counter[str] = Counter()
        self.keys: Counter[str] = Counter()
        self.failing: set[str] = set()
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self.ops.clear()
            self.keys.clear()
            self.max_in_flight = 0

    def _read(self, op: str, key: str) -> None:
        with self._lock:
            self.ops[op] += 1
            if op != "list":
                self.keys[key] += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay_s:
                time.sleep(self.delay_s)
            if op == "get" and key in self.failing:
                raise TransientStoreError(f"injected 500 on get {key!r}")
        finally:
            with self._lock:
                self.in_flight -= 1

    @property
    def uri(self) -> str:
        return self.inner.uri

    def get(self, key: str) -> ObjectData:
        self._read("get", key)
        return self.inner.get(key)

    def head(self, key: str) -> ObjectInfo | None:
        self._read("head", key)
        return self.inner.head(key)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        self._read("list", prefix)
        return self.inner.list(prefix)

    def put(self, key: str, data: bytes) -> str:
        return self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> str:
        return self.inner.put_if_absent(key, data)

    def put_if_match(self, key: str, data: bytes, expected_version: str) -> str:
        return self.inner.put_if_match(key, data, expected_version)

    def delete(self, key: str) -> None:
        self.inner.delete(key)


def acked_job(concurrent: int | None, *, delay_s: float = 0.0, read_concurrency: int = 16) -> tuple[Job, int]:
    store = CountingStore(concurrent, delay_s=delay_s)
    config = CheckpointConfig(timeout_ms=60_000, retained_checkpoints=2, read_concurrency=read_concurrency)
    job = make_job(config, store=store)
    n = job.coordinator.trigger(list(TASKS)).checkpoint_id
    job.coordinator.start_attempt(n)
    job.ack_all(n, TASKS)
    store.reset()
    return job, n


def counting(job: Job) -> CountingStore:
    assert isinstance(job.store, CountingStore)
    return job.store


def test_complete_reads_each_ack_once_and_each_state_file_once() -> None:
    job, n = acked_job(16)
    store = counting(job)
    assert job.coordinator.complete(n).status == "completed"
    ack_keys = [k for k in store.keys if "/acks/" in k]
    assert len(ack_keys) == ACKS and all(store.keys[k] == 1 for k in ack_keys)  # was 2 per ack
    reads = store.ops["get"] + store.ops["head"]
    # per ack: GET the ack; no state file is read (the writer's checksum is in the ack, issue 20),
    # and the size checks (completion's and load_completed's) list the state files' folder instead
    # of one HEAD per file. Was 4 per ack (the ack was read again in _follow, every file HEADed),
    # then 2 (a GET of every state file for its SHA-256). The rest is a constant: pending,
    # decision, job record, metadata, LATEST, attempts/declines listings.
    assert reads <= ACKS + 8, store.ops  # 263 before the ack reuse, 199 before the listing, 135 deep
    assert not [k for k in store.keys if "/state/" in k], store.keys  # no GET (nor HEAD) of a state file
    assert store.ops["head"] <= 8, store.ops
    assert store.ops["list"] <= 9, store.ops


def test_concurrent_complete_gives_exactly_the_sequential_result() -> None:
    seq_job, n = acked_job(None)
    par_job, m = acked_job(16)
    assert n == m
    assert seq_job.coordinator._reads == 1 and par_job.coordinator._reads == 16
    seq, par = seq_job.coordinator.complete(n), par_job.coordinator.complete(n)
    assert (seq.status, seq.acked, seq.ack_results) == (par.status, par.acked, par.ack_results)
    assert seq.checkpoint is not None and par.checkpoint is not None
    assert seq.checkpoint.metadata == par.checkpoint.metadata
    key = seq_job.coordinator.layout.metadata(n)
    assert seq_job.store.get(key).data == par_job.store.get(key).data
    seq_ops, par_ops = counting(seq_job).ops, counting(par_job).ops
    assert seq_ops["get"] == par_ops["get"]  # the same documents and files read ...
    assert (  # ... sizes listed, at completion and when the completed checkpoint is loaded
        par_ops["head"] == seq_ops["head"] - 2 * ACKS and par_ops["list"] == seq_ops["list"] + 2
    )


def test_reads_in_flight_are_bounded_by_the_config() -> None:
    job, n = acked_job(16, delay_s=0.002, read_concurrency=4)
    assert job.coordinator.complete(n).status == "completed"
    assert 1 < counting(job).max_in_flight <= 4


def test_a_failing_ack_read_raises_the_first_failure_in_key_order_like_the_sequential_path() -> None:
    errors = []
    for concurrent in (None, 16):
        job, n = acked_job(concurrent)
        store = counting(job)
        ack_keys = sorted(info.key for info in store.inner.list(job.coordinator.layout.acks_prefix(n)))
        store.failing = {ack_keys[40], ack_keys[7], ack_keys[63]}
        with pytest.raises(TransientStoreError) as caught:
            job.coordinator.complete(n)
        errors.append(str(caught.value))
        assert ack_keys[7] in errors[-1]
        assert job.coordinator.decision(n) is None  # nothing decided: the step is retried whole
        store.failing.clear()
        assert job.coordinator.complete(n).status == "completed"
    assert errors[0] == errors[1]


def test_corrupt_acks_and_bad_state_files_report_the_same_as_the_sequential_path() -> None:
    outcomes = []
    for concurrent in (None, 16):
        job, n = acked_job(concurrent)
        store = counting(job)
        ack_keys = sorted(info.key for info in store.inner.list(job.coordinator.layout.acks_prefix(n)))
        store.inner.put(ack_keys[5], b"{not json")
        result = job.coordinator.complete(n)
        assert result.status == "in_progress" and result.ack_results[ack_keys[5]].startswith("corrupt: ")
        outcomes.append(result.ack_results)
    assert outcomes[0] == outcomes[1]


def test_a_bad_state_file_aborts_with_the_same_message_in_both_paths() -> None:
    messages = []
    for concurrent in (None, 16):
        job, n = acked_job(concurrent)
        layout = job.coordinator.layout
        inner = counting(job).inner
        acks = [documents.read(inner, i.key, AckRecord) for i in inner.list(layout.acks_prefix(n))]
        handles = [h for ack in acks for h in ack.handles]
        counting(job).inner.put(handles[9].key, b"tampered")
        counting(job).inner.delete(handles[30].key)
        result = job.coordinator.complete(n)
        assert result.status == "aborted"
        messages.append(result.message)
    assert messages[0] == messages[1]
    assert "has 8 bytes" in messages[0] and "is missing" in messages[0]


def test_size_checks_by_listing_report_what_heads_would() -> None:
    """Missing and resized files in a listed folder, a folder too small to list, and a listing
    that runs out of budget in a crowded folder: the same problems as one HEAD per file."""
    store = CountingStore(16)
    crowded = [f"shared/op/{i:04d}" for i in range(40)]
    for key in crowded:
        store.inner.put(key, b"x" * 10)
    for i in range(40 * completed.LIST_ENTRIES_PER_HANDLE):  # other files sorting before them
        store.inner.put(f"shared/op/0000-other-{i:05d}", b"")
    store.inner.put("chk-1/lonely", b"abc")
    handles = [StateHandle(key, 10, "blake3:" + "0" * 64) for key in crowded] + [
        StateHandle("chk-1/lonely", 3, "blake3:" + "0" * 64)
    ]
    store.inner.delete(crowded[3])
    store.inner.put(crowded[17], b"short")
    handles.append(StateHandle("shared/op/never-written", 1, "blake3:" + "0" * 64))
    metadata = SimpleNamespace(handles=tuple(handles))  # verify_handles reads only .handles
    expected = completed.verify_handles(store, metadata, deep=False, concurrency=1)
    store.reset()
    assert completed.verify_handles(store, metadata, deep=False, concurrency=8) == expected
    assert expected == [
        f"state file {crowded[3]} is missing",
        f"state file {crowded[17]} has 5 bytes, metadata says 10",
        "state file shared/op/never-written is missing",
    ]
    assert store.ops["list"] == 1
    # the listing stopped in the crowd of other files: unresolved handles were HEADed, the lonely
    # file (a folder below LIST_MIN_HANDLES) too
    assert 1 <= store.ops["head"] <= len(handles), store.ops


def test_following_a_stored_decision_still_reads_the_acks() -> None:
    job, n = acked_job(16)
    first = job.coordinator.complete(n)
    store = counting(job)
    store.reset()
    other = job.new_coordinator()  # another process: only storage tells it what was decided
    again = other.complete(n)
    assert again.status == "completed" and again.checkpoint == first.checkpoint
    assert sum(1 for k in store.keys if "/acks/" in k) == ACKS


def test_map_ordered_keeps_order_and_raises_the_first_failure() -> None:
    def slow_square(i: int) -> int:
        time.sleep(0.001 * (i % 3))
        if i in (11, 5):
            raise ValueError(i)
        return i * i

    assert list(map_ordered(lambda i: i * i, list(range(50)), 8)) == [i * i for i in range(50)]
    out = []
    with pytest.raises(ValueError, match=r"^5$"):
        for value in map_ordered(slow_square, list(range(20)), 8):
            out.append(value)
    assert out == [0, 1, 4, 9, 16]
    assert read_concurrency(object(), 16) == 1
    assert read_concurrency(MemoryObjectStore(), 4) == 4
    assert read_concurrency(MemoryObjectStore(), 64) == 16
