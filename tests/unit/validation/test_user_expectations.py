"""User expectations: GX objects or dicts, applied to one operator's rows only."""

from __future__ import annotations

from typing import Any

import great_expectations.expectations as gxe
import pytest

from state_store.validation import ValidationResult, coerce_expectation, validate_snapshot

from .conftest import MAX_P, clean_state

BETWEEN = "user:{uid}:expect_column_values_to_be_between(value)"


def run(user: dict[str, list[Any]]) -> ValidationResult:
    return validate_snapshot(clean_state(), max_parallelism=MAX_P, positions={}, user_expectations=user)


def test_expectation_applies_to_its_operator_rows_only() -> None:
    # sessions' values are 1 and 2; counts' values go up to 49: the same bound passes on one operator
    # and fails on the other, so the expectation cannot be running on the whole frame
    bound = gxe.ExpectColumnValuesToBeBetween(column="value", min_value=1, max_value=2)
    passed = run({"sessions": [bound]})
    assert passed.passed, passed.report()
    assert passed.check(BETWEEN.format(uid="sessions")).details == "passed on 20 rows of operator 'sessions'"

    failed = run({"counts": [bound]})
    assert [c.name for c in failed.failures] == [BETWEEN.format(uid="counts")]
    check = failed.failures[0]
    assert check.unexpected_count == 48  # values 0 and 3..49
    assert "48 of 50 rows unexpected" in check.details
    # the caller's object is neither bound to a suite nor changed, so it can be reused
    assert bound.id is None and not bound.meta
    assert run({"sessions": [bound]}).passed


def test_dict_form_and_several_expectations_per_operator() -> None:
    result = run(
        {
            "counts": [
                {
                    "type": "expect_column_values_to_be_between",
                    "kwargs": {"column": "value", "max_value": 40},
                },
                {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "value"}},
                {"type": "expect_column_values_to_be_between", "kwargs": {"column": "value", "min_value": 0}},
            ]
        }
    )
    names = [c.name for c in result.checks if c.name.startswith("user:")]
    assert names == [
        "user:counts:expect_column_values_to_be_between(value)",
        "user:counts:expect_column_values_to_not_be_null(value)",
        "user:counts:expect_column_values_to_be_between(value)#2",
    ]
    assert [c.name for c in result.failures] == [names[0]]
    assert result.failures[0].unexpected_count == 9  # 41..49


def test_aggregate_expectation_reports_the_observed_value() -> None:
    result = run({"counts": [gxe.ExpectColumnMaxToBeBetween(column="value", max_value=10)]})
    (failure,) = result.failures
    assert failure.name == "user:counts:expect_column_max_to_be_between(value)"
    assert "observed 49" in failure.details


def test_expectation_on_a_missing_column_fails_its_check_with_the_error() -> None:
    result = run({"counts": [gxe.ExpectColumnValuesToNotBeNull(column="no_such_column")]})
    (failure,) = result.failures
    assert failure.details.startswith("error: ") and "no_such_column" in failure.details


def test_invalid_expectations_are_usage_errors() -> None:
    with pytest.raises(ValueError, match="expect_no_such_thing"):
        coerce_expectation({"type": "expect_no_such_thing", "kwargs": {}})
    with pytest.raises(ValueError, match="is invalid"):
        coerce_expectation({"type": "expect_column_values_to_be_between", "kwargs": {"colum": "x"}})
    with pytest.raises(ValueError, match="unknown fields"):
        coerce_expectation({"type": "expect_column_values_to_not_be_null", "args": {}})
    with pytest.raises(TypeError):
        coerce_expectation("expect_column_values_to_not_be_null")
    with pytest.raises(ValueError, match="expect_no_such_thing"):
        run({"counts": [{"type": "expect_no_such_thing", "kwargs": {}}]})
