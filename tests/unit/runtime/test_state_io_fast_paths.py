"""The restore fast paths of ``state_io`` and the keyed-state decoder keep the general paths'
results, including their refusal of a corrupt file that lists one entry twice."""

from __future__ import annotations

import pytest

from spark_jobs.runtime.state_io import _groups, read_operator_restore
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
    store = MemoryObjectStore()
    rows = tuple(StateRow(k, 0, [k, 2 * k], None) for k in (3, 11, 19))
    data = keyed.encode_key_groups(_part({"acc": rows}))
    handle = StateHandle(
        JobLayout("j").shared_file("w", sha256_hex(data), "arrow"), len(data), sha256_hex(data)
    )
    store.put(handle.key, data)
    snapshot = {"state_files": {"3": {"key": handle.key, "size": handle.size, "sha256": handle.sha256}}}
    task = TaskSnapshot(TaskId("w", 0), 1, (handle,), {}, snapshot)
    metadata = CompletedMetadata(1, "j", 1, CheckpointProperties(), 0, 0, (task,))
    restore, base = read_operator_restore(store, metadata, "w", KeyGroupRange(0, 7))
    assert restore is not None and restore.keyed[0].key_groups == {3: {"acc": rows}}
    assert restore.keyed[0].key_group_range == KeyGroupRange(3, 3)
    assert set(base[3].groups) == {("acc", k, 0) for k in (3, 11, 19)}
