"""Snapshots are frozen; restore rescales by key group; dirty tracking drives incremental checkpoints."""

from __future__ import annotations

from typing import Any

import pytest

from state_store.core.keygroups import KeyGroupRange, key_group_of
from state_store.core.state import (
    KeyedStateBackend,
    KeyedStateSnapshot,
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)

from .support import MAX_P, full_backend, owner, subtask_backends

PROFILE = ValueStateDescriptor[dict[str, Any]]("profile")
EVENTS = ListStateDescriptor[Any]("events")
SEEN = MapStateDescriptor[Any, Any]("seen")
KEYS = [f"user-{i}" for i in range(60)] + list(range(40)) + [(i, "t") for i in range(20)]


def write(backend: KeyedStateBackend, key: Any, i: int) -> None:
    backend.set_current_key(key)
    backend.get_state(PROFILE).update({"i": i, "tags": [str(key)]})
    backend.get_state(EVENTS).add_all([i, [i, i]])
    backend.get_state(SEEN).put(("day", i % 3), {"n": i})


def read(backend: KeyedStateBackend, key: Any) -> tuple[Any, ...]:
    backend.set_current_key(key)
    seen = sorted(backend.get_state(SEEN).items(), key=repr)
    return backend.get_state(PROFILE).value(), backend.get_state(EVENTS).get(), seen


def test_snapshot_is_isolated_from_later_mutation() -> None:
    backend = full_backend()
    write(backend, "a", 1)
    snapshot = backend.snapshot()
    profile = backend.get_state(PROFILE)
    backend.set_current_key("a")
    profile.value()["tags"].append("mutated in place")  # type: ignore[index]
    profile.update({"i": 2, "tags": []})
    backend.get_state(EVENTS).add("more")
    backend.get_state(SEEN).remove(("day", 1))
    backend.set_current_key("b")
    profile.update({"i": 3, "tags": []})
    rows = {
        name: [r.value for r in rows] for name, rows in snapshot.key_groups[key_group_of("a", MAX_P)].items()
    }
    assert rows == {
        "events": [1, [1, 1]],
        "profile": [{"i": 1, "tags": ["a"]}],
        "seen": [(("day", 1), {"n": 1})],
    }
    assert list(snapshot.key_groups) == [key_group_of("a", MAX_P)]
    with pytest.raises(TypeError):
        snapshot.key_groups[0] = {}  # type: ignore[index]


def test_restored_state_is_isolated_from_the_snapshot() -> None:
    source = full_backend()
    write(source, "a", 1)
    snapshot = source.snapshot()
    target = full_backend()
    target.restore([snapshot])
    target.set_current_key("a")
    target.get_state(PROFILE).value()["tags"].append("x")  # type: ignore[index]
    assert next(snapshot.rows("profile"))[1].value == {"i": 1, "tags": ["a"]}


@pytest.mark.parametrize(("old_p", "new_p"), [(4, 2), (4, 8), (3, 5), (2, 1)])
def test_rescale_by_key_groups_keeps_every_keys_state(old_p: int, new_p: int) -> None:
    old = subtask_backends(old_p)
    for i, key in enumerate(KEYS):
        write(owner(old, key), key, i)
    expected = {repr(k): read(owner(old, k), k) for k in KEYS}
    snapshots = [b.snapshot(checkpoint_id=1) for b in old]
    new = subtask_backends(new_p)
    restored = [b.restore(snapshots, from_checkpoint=1) for b in new]
    assert sum(restored) == len({key_group_of(k, MAX_P) for k in KEYS})
    assert {repr(k): read(owner(new, k), k) for k in KEYS} == expected
    for backend in new:  # nothing outside its range was taken
        assert all(kg in backend.key_groups for kg in backend.snapshot().key_groups)


def test_restore_refuses_two_snapshots_covering_one_key_group() -> None:
    backend = full_backend()
    write(backend, "a", 1)
    snapshot = backend.snapshot()
    with pytest.raises(ValueError, match="covered by two restored snapshots"):
        full_backend().restore([snapshot, snapshot.part(KeyGroupRange(0, 10))])
    target = full_backend()
    target.restore([snapshot.part(KeyGroupRange(0, 63))])
    with pytest.raises(ValueError, match="covered by two restored snapshots"):
        target.restore([snapshot.part(KeyGroupRange(60, 127))])


def test_restore_refuses_another_max_parallelism_and_misplaced_keys() -> None:
    backend = full_backend()
    write(backend, "a", 1)
    snapshot = backend.snapshot()
    with pytest.raises(ValueError, match="max_parallelism 128, this job uses 256"):
        KeyedStateBackend(KeyGroupRange(0, 255), 256).restore([snapshot])
    kg = key_group_of("a", MAX_P)
    wrong = (kg + 1) % MAX_P
    forged = KeyedStateSnapshot(
        MAX_P, KeyGroupRange(0, 127), snapshot.kinds, {wrong: snapshot.key_groups[kg]}
    )
    with pytest.raises(
        ValueError, match=f"lists key 'a' under key group {wrong}, but it belongs to key group {kg}"
    ):
        full_backend().restore([forged])
    lenient = full_backend()
    assert lenient.restore([forged], verify_keys=False) == 1


def test_restore_refuses_a_state_kind_conflict() -> None:
    backend = full_backend()
    write(backend, "a", 1)
    target = full_backend()
    target.get_state(ValueStateDescriptor("events"))
    with pytest.raises(ValueError, match="'events' is a value state in one snapshot and a list state"):
        target.restore([backend.snapshot()])


def test_dirty_tracking_reports_only_changed_key_groups_since_the_base() -> None:
    backend = full_backend()
    write(backend, "a", 1)
    write(backend, "b", 2)
    first = backend.snapshot(checkpoint_id=1)
    kg_a, kg_b = key_group_of("a", MAX_P), key_group_of("b", MAX_P)
    assert first.base_checkpoint_id is None and first.changed_key_groups == {kg_a, kg_b}
    assert first.reusable_key_groups == frozenset()
    assert backend.notify_checkpoint_complete(1)
    backend.set_current_key("a")
    backend.get_state(EVENTS).add("x")
    second = backend.snapshot(checkpoint_id=2)
    assert second.base_checkpoint_id == 1
    assert second.changed_key_groups == {kg_a}
    assert second.reusable_key_groups == {kg_b}


def test_changes_of_an_aborted_checkpoint_stay_changed() -> None:
    backend = full_backend()
    write(backend, "a", 1)
    backend.snapshot(checkpoint_id=1)
    backend.notify_checkpoint_complete(1)
    write(backend, "b", 2)
    backend.snapshot(checkpoint_id=2)  # never completes
    write(backend, "c", 3)
    third = backend.snapshot(checkpoint_id=3)
    expected = {key_group_of("b", MAX_P), key_group_of("c", MAX_P)}
    assert third.changed_key_groups == expected and third.base_checkpoint_id == 1
    backend.notify_checkpoint_aborted(2)
    assert backend.changed_key_groups == expected
    assert backend.notify_checkpoint_complete(3)
    assert backend.changed_key_groups == frozenset() and backend.base_checkpoint_id == 3
    assert not backend.notify_checkpoint_complete(2)  # subsumed


def test_a_savepoint_does_not_move_the_base_and_ids_must_increase() -> None:
    backend = full_backend()
    write(backend, "a", 1)
    savepoint = backend.snapshot()
    assert savepoint.checkpoint_id is None
    assert backend.snapshot(checkpoint_id=5).changed_key_groups == {key_group_of("a", MAX_P)}
    with pytest.raises(ValueError, match="checkpoint ids must increase"):
        backend.snapshot(checkpoint_id=5)


def test_deleting_state_marks_the_key_group_changed() -> None:
    backend = full_backend()
    write(backend, "a", 1)
    backend.snapshot(checkpoint_id=1)
    backend.notify_checkpoint_complete(1)
    backend.set_current_key("a")
    backend.get_state(PROFILE).clear()
    backend.get_state(EVENTS).clear()
    backend.get_state(SEEN).clear()
    snap = backend.snapshot(checkpoint_id=2)
    assert snap.is_empty() and snap.changed_key_groups == {key_group_of("a", MAX_P)}


def test_restore_from_a_checkpoint_makes_it_the_base() -> None:
    source = full_backend()
    write(source, "a", 1)
    snapshot = source.snapshot(checkpoint_id=7)
    incremental, full = full_backend(), full_backend()
    incremental.restore([snapshot], from_checkpoint=7)
    full.restore([snapshot])
    assert incremental.changed_key_groups == frozenset() and incremental.base_checkpoint_id == 7
    assert full.changed_key_groups == {key_group_of("a", MAX_P)} and full.base_checkpoint_id is None
    with pytest.raises(ValueError, match="not newer than checkpoint 7"):
        incremental.snapshot(checkpoint_id=7)
