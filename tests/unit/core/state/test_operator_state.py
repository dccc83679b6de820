"""Operator list state and Flink's RoundRobinOperatorStateRepartitioner semantics."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from state_store.core.state import (
    OperatorStateBackend,
    OperatorStateMode,
    OperatorStateSnapshot,
    redistribute,
    redistribute_operator_state,
    redistribute_union,
)

SPLIT, UNION = OperatorStateMode.SPLIT_DISTRIBUTE, OperatorStateMode.UNION


def test_split_distribute_cuts_the_concatenation_into_contiguous_chunks_extra_first() -> None:
    old = [["a", "b", "c"], ["d"], ["e", "f", "g", "h"]]
    assert redistribute(old, 2) == [["a", "b", "c", "d"], ["e", "f", "g", "h"]]
    assert redistribute(old, 4) == [["a", "b"], ["c", "d"], ["e", "f"], ["g", "h"]]
    assert redistribute([[1, 2, 3], [4, 5]], 4) == [[1, 2], [3], [4], [5]]
    assert redistribute([[1], [2], [3], [4]], 2) == [[1, 2], [3, 4]]
    assert redistribute([[1]], 3) == [[1], [], []]


def test_same_parallelism_keeps_split_lists_as_they_were() -> None:
    assert redistribute([[1, 2, 3], []], 2) == [[1, 2, 3], []]


def test_union_gives_every_subtask_everything_in_old_subtask_order() -> None:
    assert redistribute_union([[1], [2, 3]], 3) == [[1, 2, 3]] * 3
    assert redistribute_union([[1], [2, 3]], 2) == [[1, 2, 3]] * 2


@given(st.lists(st.lists(st.integers(), max_size=6), min_size=1, max_size=6), st.integers(1, 8))
def test_split_distribute_loses_nothing_and_balances(old: list[list[int]], new_p: int) -> None:
    new = redistribute(old, new_p)
    assert len(new) == new_p
    assert [v for lst in new for v in lst] == [v for lst in old for v in lst]
    if len(old) != new_p:
        assert max(map(len, new)) - min(map(len, new)) <= 1


def test_several_names_rotate_the_start_like_flink() -> None:
    # Two split states of 4 elements onto 3 subtasks: the first name gives its extra element to
    # subtask 0, the second starts at subtask 1 (the first that got no extra) and gives it there.
    old = [
        OperatorStateSnapshot({"offsets": (SPLIT, (0, 1)), "pending": (SPLIT, (10, 11))}),
        OperatorStateSnapshot(
            {"offsets": (SPLIT, (2, 3)), "pending": (SPLIT, (12, 13)), "all": (UNION, ("x",))}
        ),
    ]
    new = redistribute_operator_state(old, 3)
    assert [dict(s.states) for s in new] == [
        {"all": (UNION, ("x",)), "offsets": (SPLIT, (0, 1)), "pending": (SPLIT, (13,))},
        {"all": (UNION, ("x",)), "offsets": (SPLIT, (2,)), "pending": (SPLIT, (10, 11))},
        {"all": (UNION, ("x",)), "offsets": (SPLIT, (3,)), "pending": (SPLIT, (12,))},
    ]


def test_same_parallelism_still_unions_union_state() -> None:
    old = [
        OperatorStateSnapshot({"split": (SPLIT, (1, 2, 3)), "u": (UNION, (1,))}),
        OperatorStateSnapshot({"split": (SPLIT, ()), "u": (UNION, (2,))}),
    ]
    new = redistribute_operator_state(old, 2)
    assert [s.states["split"][1] for s in new] == [(1, 2, 3), ()]
    assert [s.states["u"][1] for s in new] == [(1, 2), (1, 2)]


def test_backend_snapshot_restore_and_mode_conflict() -> None:
    backend = OperatorStateBackend()
    offsets = backend.get_list_state("offsets")
    offsets.add_all([{"partition": 0, "offset": 5}])
    backend.get_union_list_state("watermarks").add(100)
    snapshot = backend.snapshot()
    offsets.get()  # a copy
    offsets.update([])
    assert snapshot.states["offsets"] == (SPLIT, ({"partition": 0, "offset": 5},))
    restored = OperatorStateBackend()
    restored.restore(snapshot)
    assert restored.get_list_state("offsets").get() == [{"partition": 0, "offset": 5}]
    assert restored.get_union_list_state("watermarks").get() == [100]
    with pytest.raises(ValueError, match="'offsets' is a split_distribute list, not a union list"):
        restored.get_union_list_state("offsets")
    with pytest.raises(ValueError, match="new_parallelism must be a positive int"):
        redistribute([[1]], 0)
