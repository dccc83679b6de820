"""The sink-output suite: exactly-once means no key is written twice across committed transactions.

The caller reads every committed transaction of a sink (e.g. the Parquet sink's committed files) into
one pandas frame; ``key_columns`` are the columns that identify one output record, e.g.
``["page", "window_start"]`` for windowed page counts. A duplicate means an epoch's output was
committed twice (a replay that was not fenced) or two windows fired for one key.

Checks: ``keys_unique`` (GX ``expect_compound_columns_to_be_unique`` with ``ignore_row_if="never"``,
so rows whose key columns are all null are compared too; with a single key column GX's
``expect_column_values_to_be_unique``, which skips nulls).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from state_store.validation import _engine
from state_store.validation._engine import Outcome, Planned
from state_store.validation.result import ValidationResult

SUITE = "sink_output"


def validate_sink_output(
    frame: pd.DataFrame,
    key_columns: Sequence[str],
    *,
    suite_name: str = SUITE,
    transaction_column: str | None = None,
) -> ValidationResult:
    """Check that no key appears twice in ``frame`` (all committed output of one sink).

    ``transaction_column`` (optional) names a column identifying the transaction (e.g. the checkpoint
    id) of each row; the details of a failure then say which transactions hold the duplicates.
    Raises ValueError for bad input (no key columns, a column missing from the frame).
    """
    from great_expectations.expectations.core.expect_column_values_to_be_unique import (
        ExpectColumnValuesToBeUnique,
    )
    from great_expectations.expectations.core.expect_compound_columns_to_be_unique import (
        ExpectCompoundColumnsToBeUnique,
    )

    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"the sink output must be a pandas DataFrame, not {type(frame).__name__}")
    keys = list(key_columns)
    if isinstance(key_columns, str) or not keys:
        raise ValueError(f"key_columns must be a non-empty list of column names, not {key_columns!r}")
    if len(set(keys)) != len(keys):
        raise ValueError(f"key_columns {keys} repeat a column")
    wanted = keys + ([transaction_column] if transaction_column else [])
    missing = [c for c in wanted if c not in frame.columns]
    if missing:
        raise ValueError(f"the sink output lacks columns {missing}; it has {list(frame.columns)}")
    if not frame.index.is_unique:
        frame = frame.reset_index(drop=True)

    def duplicates(o: Outcome) -> str:
        examples = []
        for value, count in o.partial_counts[: _engine.EXAMPLES]:
            parts = value if isinstance(value, tuple) and len(keys) > 1 else (value,)
            text = " ".join(_engine.fmt_field(c, v) for c, v in zip(keys, parts)) + f" (x{count})"
            if transaction_column:
                text += f" in transactions {_transactions(frame, o, keys, parts, transaction_column)}"
            examples.append(text)
        if not examples:  # GX reported rows but no value counts
            examples.append(_engine.example_rows(frame, o, wanted))
        rows = _engine.count(o.unexpected_count, "row")
        return f"{rows} with duplicate keys ({', '.join(keys)}), e.g. {'; '.join(examples)}"

    expectation: ExpectColumnValuesToBeUnique | ExpectCompoundColumnsToBeUnique
    if len(keys) == 1:
        expectation = ExpectColumnValuesToBeUnique(column=keys[0])
    else:
        expectation = ExpectCompoundColumnsToBeUnique(column_list=keys, ignore_row_if="never")
    planned = [Planned("keys_unique", expectation, duplicates)]
    passed = {"keys_unique": f"{len(frame)} rows, keys ({', '.join(keys)}) unique"}
    return ValidationResult.of(
        suite_name, _engine.to_checks(planned, _engine.run(frame, planned, suite_name), passed)
    )


def _transactions(
    frame: pd.DataFrame, o: Outcome, keys: list[str], parts: Sequence[object], column: str
) -> str:
    """Transactions (of the example rows GX reported) holding the key ``parts``."""
    found = set()
    for label in o.index:
        row = frame.loc[label]
        if all(_engine.plain(row[c]) == _engine.plain(v) for c, v in zip(keys, parts)):
            found.add(_engine.plain(row[column]))
    return repr(sorted(found, key=repr)) if found else "(unknown)"
