"""plan_epoch fixes barrier positions: [start, end) per partition, capped, fair and deterministic."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.sources import InvalidPartitionError, OffsetOutOfRangeError, plan_epoch, validate_partition_id


def test_uncapped_plan_consumes_everything_available() -> None:
    assert plan_epoch({"p0": 10, "p1": 0}, {"p0": 25, "p1": 3}) == {"p0": (10, 25), "p1": (0, 3)}


def test_partition_without_a_position_starts_at_zero() -> None:
    assert plan_epoch({"p0": 4}, {"p0": 4, "p1": 7}) == {"p0": (4, 4), "p1": (0, 7)}


def test_partition_with_nothing_new_gets_an_empty_range_at_its_position() -> None:
    plan = plan_epoch({"p0": 9}, {"p0": 9}, max_records_per_epoch=5)
    assert plan == {"p0": (9, 9)}


def test_cap_is_shared_max_min_fairly_over_partitions() -> None:
    plan = plan_epoch({}, {"a": 2, "b": 100, "c": 100}, max_records_per_epoch=10)
    assert plan == {"a": (0, 2), "b": (0, 4), "c": (0, 4)}


def test_integer_remainder_is_settled_deterministically() -> None:
    plan = plan_epoch({}, {"a": 5, "b": 5, "c": 5}, max_records_per_epoch=10)
    assert plan == {"a": (0, 3), "b": (0, 3), "c": (0, 4)}
    assert plan == plan_epoch({}, {"c": 5, "b": 5, "a": 5}, max_records_per_epoch=10)


def test_truncated_partition_is_an_error_not_a_silent_rewind() -> None:
    with pytest.raises(OffsetOutOfRangeError, match="truncated or replaced"):
        plan_epoch({"p0": 10}, {"p0": 7})


def test_vanished_partition_is_an_error() -> None:
    with pytest.raises(OffsetOutOfRangeError, match="no longer lists"):
        plan_epoch({"p0": 1, "gone": 3}, {"p0": 4})


def test_cap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        plan_epoch({}, {"p0": 1}, max_records_per_epoch=0)


@given(
    st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.tuples(st.integers(0, 50), st.integers(0, 50))),
    st.none() | st.integers(1, 120),
)
def test_plan_never_exceeds_budget_or_availability_and_uses_all_it_can(
    positions: dict[str, tuple[int, int]], budget: int | None
) -> None:
    starts = {p: s for p, (s, _) in positions.items()}
    ends = {p: s + lag for p, (s, lag) in positions.items()}
    plan = plan_epoch(starts, ends, budget)
    assert set(plan) == set(ends)
    taken = 0
    for partition, (start, end) in plan.items():
        assert start == starts[partition] <= end <= ends[partition]
        taken += end - start
    available = sum(ends[p] - starts[p] for p in ends)
    assert taken == (available if budget is None else min(budget, available))


@pytest.mark.parametrize("good", ["p0", "0", "date=2026-11-21", "topic.a-1"])
def test_safe_partition_ids_are_accepted(good: str) -> None:
    assert validate_partition_id(good) == good


@pytest.mark.parametrize("bad", ["", ".", "..", "_markers", ".hidden", "a/b", "../x", "p 0", "ü"])
def test_unsafe_partition_ids_are_refused(bad: str) -> None:
    with pytest.raises(InvalidPartitionError, match="invalid"):
        validate_partition_id(bad)
