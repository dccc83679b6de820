"""The built-in snapshot suite: a clean snapshot passes, each kind of corruption fails its own check."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from state_store.validation import STATE_COLUMNS, ValidationResult, validate_snapshot

from .conftest import MAX_P, clean_state, clean_timers, state_rows

POSITIONS = {"clicks/0": 120, "clicks/1": 80}
PREVIOUS = {"clicks/0": 100, "clicks/1": 80}


def run(state: pd.DataFrame | None = None, **kwargs: Any) -> ValidationResult:
    args: dict[str, Any] = {
        "max_parallelism": MAX_P,
        "positions": POSITIONS,
        "previous_positions": PREVIOUS,
        "timers": clean_timers(),
        "watermark": 1500,
    }
    args.update(kwargs)
    return validate_snapshot(clean_state() if state is None else state, **args)


def only_failure(result: ValidationResult) -> str:
    """The single failing check's name (a corruption must not be blamed on another check)."""
    assert not result.passed
    names = [c.name for c in result.failures]
    assert len(names) == 1, result.report()
    return names[0]


def test_clean_snapshot_passes_every_check() -> None:
    state, timers = clean_state(), clean_timers()
    result = run(state, timers=timers)
    pd.testing.assert_frame_equal(state, clean_state())  # the caller's frames are not modified
    pd.testing.assert_frame_equal(timers, clean_timers())
    assert result.passed, result.report()
    assert result.suite == "snapshot"
    assert [c.name for c in result.checks] == [
        "keys_not_null",
        "state_kinds_known",
        "keys_unique",
        "key_groups_in_range",
        "key_groups_correct",
        "timer_key_groups_correct",
        "timers_not_behind_watermark",
        "source_positions_monotone",
    ]
    assert result.failures == ()
    assert result.summary_line() == "validation snapshot: passed 8 of 8 checks"


def test_duplicate_key_in_value_state_fails_keys_unique() -> None:
    state = pd.concat(
        [clean_state(), state_rows("counts", "n", "value", ["u7"], value=[99])], ignore_index=True
    )
    result = run(state)
    assert only_failure(result) == "keys_unique"
    check = result.check("keys_unique")
    assert check.unexpected_count == 2
    assert "operator='counts'" in check.details and 'key="u7"' in check.details and "(x2)" in check.details


def test_same_key_in_other_namespace_state_or_operator_is_not_a_duplicate() -> None:
    state = pd.concat(
        [
            clean_state(),
            state_rows("counts", "n", "value", ["u7"], namespace=5),  # other window
            state_rows("counts", "m", "reducing", ["u7"]),  # other state
            state_rows("other", "n", "value", ["u7"]),  # other operator
        ],
        ignore_index=True,
    )
    assert run(state).passed


def test_repeated_keys_of_list_and_map_state_are_legitimate_but_not_of_reducing_state() -> None:
    extra = state_rows("recent", "clicks", "list", ["u9", "u9"])
    assert run(pd.concat([clean_state(), extra], ignore_index=True)).passed
    extra = state_rows("recent", "total", "reducing", ["u9", "u9"])
    assert only_failure(run(pd.concat([clean_state(), extra], ignore_index=True))) == "keys_unique"


def test_wrong_key_group_fails_key_groups_correct_naming_the_key() -> None:
    state = clean_state()
    row = state.index[state["key"] == '"u3"'][0]
    right = int(state.loc[row, "key_group"])
    state.loc[row, "key_group"] = (right + 1) % MAX_P
    result = run(state)
    assert only_failure(result) == "key_groups_correct"
    details = result.check("key_groups_correct").details
    assert 'key="u3"' in details and f"hashes to {right}" in details


def test_key_group_outside_max_parallelism_fails_range_check() -> None:
    state = clean_state()
    state.loc[0, ["key_group", "key_hash_group"]] = MAX_P + 3
    result = run(state)
    assert only_failure(result) == "key_groups_in_range"
    assert "outside 0..127" in result.check("key_groups_in_range").details


@pytest.mark.parametrize("null_key", [None, "null"], ids=["missing", "json-null"])
def test_null_key_fails_keys_not_null(null_key: str | None) -> None:
    state = clean_state()
    state.loc[4, "key"] = null_key
    result = run(state)
    assert only_failure(result) == "keys_not_null"
    check = result.check("keys_not_null")
    assert check.unexpected_count == 1
    assert "operator='counts'" in check.details and "state='n'" in check.details


def test_unknown_state_kind_fails() -> None:
    state = clean_state()
    state.loc[0, "kind"] = "valu"
    result = run(state)
    assert only_failure(result) == "state_kinds_known"
    assert "'valu'" in result.check("state_kinds_known").details


def test_position_regression_fails_naming_the_partition() -> None:
    result = run(positions={"clicks/0": 90, "clicks/1": 80})
    assert only_failure(result) == "source_positions_monotone"
    assert (
        result.check("source_positions_monotone").details == "partition 'clicks/0' went back from 100 to 90"
    )


def test_missing_partition_fails() -> None:
    result = run(positions={"clicks/0": 120})
    assert only_failure(result) == "source_positions_monotone"
    assert "partition 'clicks/1' disappeared (was at 80)" in result.check("source_positions_monotone").details


def test_new_partition_and_first_checkpoint_pass() -> None:
    assert run(positions={**POSITIONS, "clicks/2": 0}).passed
    first = run(previous_positions=None)
    assert first.passed
    assert "no previous checkpoint" in first.check("source_positions_monotone").details


def test_event_time_timer_behind_watermark_fails() -> None:
    timers = clean_timers()
    timers.loc[1, "timestamp"] = 1500  # == watermark: it should have fired
    result = run(timers=timers)
    assert only_failure(result) == "timers_not_behind_watermark"
    check = result.check("timers_not_behind_watermark")
    assert check.unexpected_count == 1
    assert 'key="u2"' in check.details and "timestamp=1500 <= watermark 1500" in check.details


def test_processing_time_timers_and_unlisted_operators_are_not_held_to_the_watermark() -> None:
    # the processing-time timer at 900 is behind the event-time watermark: not a failure
    assert run(watermark=1500).passed
    # per-operator watermarks: only listed operators are checked
    assert run(watermark={"other": 10_000}).passed
    assert only_failure(run(watermark={"sessions": 2000})) == "timers_not_behind_watermark"


def test_timer_in_wrong_key_group_fails() -> None:
    timers = clean_timers()
    timers.loc[0, "key_group"] = (int(timers.loc[0, "key_group"]) + 1) % MAX_P
    assert only_failure(run(timers=timers)) == "timer_key_groups_correct"


def test_several_corruptions_fail_several_checks_and_summary_names_them() -> None:
    state = clean_state()
    state.loc[4, "key"] = None
    result = run(state, positions={"clicks/0": 1, "clicks/1": 80})
    assert {c.name for c in result.failures} == {"keys_not_null", "source_positions_monotone"}
    line = result.summary_line()
    assert line.startswith("validation snapshot: FAILED 2 of 8 checks (keys_not_null: ")
    assert "source_positions_monotone: partition 'clicks/0' went back from 100 to 1" in line


def test_empty_state_passes_and_duplicate_index_labels_are_handled() -> None:
    empty = clean_state().iloc[0:0]
    assert run(empty, timers=None).passed
    state = pd.concat([clean_state(), state_rows("counts", "n", "value", ["u7"])])  # index labels repeat
    result = run(state)
    assert only_failure(result) == "keys_unique"
    assert 'key="u7"' in result.check("keys_unique").details


def test_missing_column_and_bad_max_parallelism_are_usage_errors() -> None:
    with pytest.raises(ValueError, match=r"lacks columns \['key_hash_group'\]"):
        run(clean_state().drop(columns=["key_hash_group"]))
    with pytest.raises(ValueError, match="max_parallelism 0"):
        run(max_parallelism=0)
    with pytest.raises(ValueError, match="timers frame lacks"):
        run(timers=clean_timers().drop(columns=["timestamp"]))
    assert "kind" in STATE_COLUMNS
