"""Sink output: no key committed twice."""

from __future__ import annotations

import pandas as pd
import pytest

from state_store.validation import validate_sink_output


def committed() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "page": ["home", "cart", "home", "cart", "home"],
            "window_start": [0, 0, 60_000, 60_000, 120_000],
            "views": [3, 1, 4, 1, 5],
            "txn": [1, 1, 2, 2, 3],
        }
    )


def test_unique_output_passes() -> None:
    result = validate_sink_output(committed(), ["page", "window_start"])
    assert result.passed and result.suite == "sink_output"
    assert result.check("keys_unique").details == "5 rows, keys (page, window_start) unique"


def test_duplicate_across_transactions_is_caught_and_located() -> None:
    replayed = pd.concat([committed(), committed().iloc[[2]].assign(txn=4)], ignore_index=True)
    result = validate_sink_output(
        replayed, ["page", "window_start"], transaction_column="txn", suite_name="pages"
    )
    assert not result.passed and result.suite == "pages"
    check = result.check("keys_unique")
    assert check.unexpected_count == 2
    assert check.details == (
        "2 rows with duplicate keys (page, window_start), e.g. page='home' window_start=60000 (x2) "
        "in transactions [2, 4]"
    )


def test_single_key_column() -> None:
    assert validate_sink_output(committed(), ["views"]).check("keys_unique").unexpected_count == 2
    assert validate_sink_output(committed(), ["txn", "views"]).passed


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"lacks columns \['window'\]"):
        validate_sink_output(committed(), ["page", "window"])
    with pytest.raises(ValueError, match="non-empty"):
        validate_sink_output(committed(), [])
    with pytest.raises(ValueError, match="non-empty"):
        validate_sink_output(committed(), "page")
