"""A 200k-row state frame validates in well under 10 s (GX import excluded: the context is warm)."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from state_store.validation import validate_snapshot

ROWS = 200_000
MAX_P = 1024


def big_state() -> pd.DataFrame:
    i = np.arange(ROWS)
    groups = (i * 7919) % MAX_P
    return pd.DataFrame(
        {
            "operator": np.where(i % 3 == 0, "sessions", "counts"),
            "key_group": groups,
            "state": "n",
            "kind": np.where(i % 10 == 0, "list", "value"),
            "key": [f'"user-{n}"' for n in i],
            "namespace": "null",
            "key_hash_group": groups,
            "value": i % 1000,
        }
    )


def test_200k_rows_validate_fast() -> None:
    state = big_state()
    state.loc[[10, 20], "key"] = '"dup"'  # list rows: still fine
    state.loc[[11, 21], "key"] = '"dup"'  # value rows of operator counts... and sessions (21 % 3 == 0)
    state.loc[[13, 23], "key"] = '"dup2"'  # both value rows of counts: a real duplicate
    started = time.perf_counter()
    result = validate_snapshot(
        state,
        max_parallelism=MAX_P,
        positions={"p0": 10},
        previous_positions={"p0": 5},
        user_expectations={
            "counts": [
                {"type": "expect_column_values_to_be_between", "kwargs": {"column": "value", "min_value": 0}}
            ]
        },
    )
    elapsed = time.perf_counter() - started
    assert [c.name for c in result.failures] == ["keys_unique"], result.report()
    assert result.check("keys_unique").unexpected_count == 2
    assert elapsed < 10, f"validating {ROWS} rows took {elapsed:.1f} s"
