"""The restore fast paths of ``state_io`` and the keyed-state decoder keep the general paths'
results, including their refusal of a corrupt file that lists one entry twice."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from spark_jobs.runtime import state_io
from spark_jobs.runtime.operators.base import OperatorSnapshot
from spark_jobs.runtime.state_io import _groups, read_operator_restore, write_operator_snapshot
from state_store.core.codec import sha256_hex
from state_store.core.keygroups import KeyGroupRange
from state_store.core.layout import JobLayout
from state_store.core.manifests import CompletedMetadata, StateHandle, TaskId, TaskSnapshot
from state_store.core.properties import CheckpointProperties
from state_store.core.state import KeyedStateBackend
from state_store.core.state.descriptors import StateKind
from state_store.core.state.snapshot import KeyedStateSnapshot, StateRow
from state_store.formats import keyed
from state_store.storage import MemoryObjectStore

KINDS = {"acc": StateKind.VALUE, "items": StateKind.LIST}


def _part(states: dict[str, tuple[StateRow, ...]], kg: int = 3) -> KeyedStateSnapshot:
    return KeyedStateSnapshot(
        max_parallelism=8, key_group_range=KeyGroupRange(kg, kg), kinds=KINDS, key_groups={kg: states}
    )


def test_single_run_files_decode_like_multi_run_files() -> None:
    acc = tuple(StateRow(k, 10 * k, [k, k + 1], None) for k in range(20))
    items = tuple(StateRow(k, None, v, 5) for k in range(3) for v in ("a", "b"))
    one_run = keyed.decode_key_groups(keyed.encode_key_groups(_part({"acc": acc})))
    two_runs = keyed.decode_key_groups(keyed.encode_key_groups(_part({"acc": acc, "items": items})))
    assert one_run.key_groups[3]["acc"] == acc == two_runs.key_groups[3]["acc"]
    assert two_runs.key_groups[3]["items"] == items
    assert all(type(row) is StateRow for row in one_run.key_groups[3]["acc"])


def test_a_value_state_listing_an_entry_twice_is_still_refused_on_restore() -> None:
    duplicated = (StateRow(1, None, 5, None), StateRow(2, None, 6, None), StateRow(1, None, 7, None))
    part = keyed.decode_key_groups(keyed.encode_key_groups(_part({"acc": duplicated})))
    groups = _groups(part, 3)
    assert groups[("acc", 1, None)] == (duplicated[0], duplicated[2])  # both rows kept
    backend = KeyedStateBackend(KeyGroupRange(0, 7), 8)
    with pytest.raises(ValueError, match="twice"):
        backend.restore([part], verify_keys=False)


def test_groups_of_list_state_collect_every_element() -> None:
    items = (StateRow(1, None, "a", None), StateRow(1, None, "b", None), StateRow(2, None, "c", None))
    assert _groups(_part({"items": items}), 3) == {
        ("items", 1, None): items[:2],
        ("items", 2, None): items[2:],
    }


def test_restore_without_deltas_hands_over_the_decoded_file() -> None:
    """(The handles here are spelled as format 1 wrote them: ``sha256``, still read and verified.)"""
    store = MemoryObjectStore()
    rows = tuple(StateRow(k, 0, [k, 2 * k], None) for k in (3, 11, 19))
    data = keyed.encode_key_groups(_part({"acc": rows}))
    digest = sha256_hex(data)
    handle = StateHandle(JobLayout("j").shared_file("w", digest, "arrow"), len(data), f"sha256:{digest}")
    store.put(handle.key, data)
    snapshot = {"state_files": {"3": {"key": handle.key, "size": handle.size, "sha256": digest}}}
    task = TaskSnapshot(TaskId("w", 0), 1, (handle,), {}, snapshot)
    metadata = CompletedMetadata(1, "j", 1, CheckpointProperties(), 0, 0, (task,))
    restore, base = read_operator_restore(store, metadata, "w", KeyGroupRange(0, 7))
    assert restore is not None and restore.keyed[0].key_groups == {3: {"acc": rows}}
    assert restore.keyed[0].key_group_range == KeyGroupRange(3, 3)
    assert set(base[3].groups) == {("acc", k, 0) for k in (3, 11, 19)}


class _Tracking:
    """A memory store that declares ``max_concurrent_writes`` (or not) and records writes in flight."""

    def __init__(self, concurrent: int | None, fail_key_group: int | None = None) -> None:
        self.inner = MemoryObjectStore()
        if concurrent is not None:
            self.max_concurrent_writes = concurrent
        self.fail = fail_key_group
        self.in_flight = 0
        self.peak = 0
        self.lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        # only what this wrapper declares itself; and no ``put_verified`` of the inner store, which
        # would write around the tracked ``put_if_absent``
        if name in ("max_concurrent_writes", "put_verified"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def put_if_absent(self, key: str, data: bytes) -> str:
        with self.lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            time.sleep(0.005)
            if self.fail is not None and keyed.decode_key_groups(data).key_group_range.first >= self.fail:
                raise OSError(f"disk full at key group {keyed.decode_key_groups(data).key_group_range.first}")
            return str(self.inner.put_if_absent(key, data))
        finally:
            with self.lock:
                self.in_flight -= 1


def _operator_snapshot() -> OperatorSnapshot:
    groups = {
        kg: {"acc": tuple(StateRow(k, 0, [k, kg], None) for k in range(kg, 200, 16))} for kg in range(16)
    }
    snap = KeyedStateSnapshot(16, KeyGroupRange(0, 15), {"acc": StateKind.VALUE}, groups, checkpoint_id=1)
    return OperatorSnapshot(snap)


def test_key_group_files_are_written_concurrently_with_the_sequential_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(state_io, "ROWS_PER_FILE", 1)  # a file per key group: 16 files to write
    results = {}
    for concurrent in (None, 4):
        store = _Tracking(concurrent)
        written = write_operator_snapshot(store, JobLayout("j"), "w", _operator_snapshot(), {})  # type: ignore[arg-type]
        results[concurrent] = (
            written.snapshot,
            written.handles,
            written.bytes_written,
            written.files_written,
        )
        assert store.peak == (1 if concurrent is None else 4)
    assert results[None] == results[4]
    assert results[4][3] == 16


def test_a_failing_concurrent_write_raises_the_first_failure_in_key_group_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(state_io, "ROWS_PER_FILE", 1)
    store = _Tracking(4, fail_key_group=5)
    with pytest.raises(OSError, match="key group 5"):
        write_operator_snapshot(store, JobLayout("j"), "w", _operator_snapshot(), {})  # type: ignore[arg-type]


def test_by_default_the_key_groups_of_a_snapshot_go_into_one_file_fetched_once_on_restore() -> None:
    store = _Tracking(4)
    written = write_operator_snapshot(store, JobLayout("j"), "w", _operator_snapshot(), {})  # type: ignore[arg-type]
    assert written.files_written == 1 and len(written.handles) == 1
    [handle] = written.handles
    assert {chain["base"]["key"] for chain in written.snapshot["state_files"].values()} == {handle.key}
    task = TaskSnapshot(TaskId("w", 0), 1, (handle,), {}, written.snapshot)
    metadata = CompletedMetadata(1, "j", 1, CheckpointProperties(), 0, 0, (task,))
    gets: list[str] = []
    original_get = store.inner.get

    def counting_get(key: str) -> Any:
        gets.append(key)
        return original_get(key)

    store.inner.get = counting_get  # type: ignore[method-assign]
    expected = _operator_snapshot().keyed
    assert expected is not None
    for owned in (KeyGroupRange(0, 15), KeyGroupRange(4, 9)):  # the whole state, or a rescaled share
        gets.clear()
        restore, base = read_operator_restore(store.inner, metadata, "w", owned)
        assert restore is not None and gets == [handle.key]
        got = {kg: states for part in restore.keyed for kg, states in part.key_groups.items()}
        assert got == {kg: dict(expected.key_groups[kg]) for kg in owned}
        assert sorted(base) == list(owned)
