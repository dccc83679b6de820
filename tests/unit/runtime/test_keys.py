"""The key-group function is one stable hash: vectorized == scalar, and identical in a separate
process with another PYTHONHASHSEED (driver, executors and offline tools agree)."""

from __future__ import annotations

import enum
import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.runtime.keys import key_groups, split_by, subtasks_of_key_groups
from state_store.core.keygroups import key_group_of, key_groups_of_many, subtask_for_key_group

KEYS = [f"user-{i}" for i in range(500)] + list(range(-250, 250)) + ["", "é", "ü" * 40]


@given(
    st.lists(st.one_of(st.text(max_size=12), st.integers(-(2**70), 2**70)), min_size=1, max_size=60),
    st.integers(1, 512),
)
def test_vectorized_key_groups_equal_the_scalar_function(keys: list[object], max_parallelism: int) -> None:
    strings = [k for k in keys if isinstance(k, str)] or ["x"]
    ints = [k for k in keys if isinstance(k, int) and abs(k) < 2**63] or [1]
    for column in (pa.array(strings), pa.array(ints, pa.int64())):
        expected = [key_group_of(k, max_parallelism) for k in column.to_pylist()]
        assert key_groups(column, max_parallelism).tolist() == expected


class _Level(enum.IntEnum):
    HIGH = 7


class _Name(str):
    pass


@given(
    st.lists(
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(-(2**80), 2**80),
            st.floats(allow_nan=True),
            st.text(max_size=8),
            st.binary(max_size=8),
            st.tuples(st.integers(-5, 5), st.text(max_size=3)),
        ),
        max_size=40,
    ),
    st.integers(1, 32768),
)
def test_the_batch_hash_equals_the_scalar_function_for_every_key_type(keys: list[object], maxp: int) -> None:
    keys = [*keys, _Level.HIGH, _Name("sub"), 0, -1, 255, 256, -129, 2**63, "", "é"]
    assert key_groups_of_many(keys, maxp) == [key_group_of(k, maxp) for k in keys]


def test_the_batch_hash_refuses_what_the_scalar_function_refuses() -> None:
    with pytest.raises(ValueError, match="not valid UTF-8"):
        key_groups_of_many(["ok", "\ud800"], 128)
    with pytest.raises(TypeError, match="unsupported key type list"):
        key_groups_of_many([1, [2]], 128)
    with pytest.raises(ValueError, match="max_parallelism"):
        key_groups_of_many([1], 0)


def test_cached_and_uncached_lookups_agree_for_seen_and_new_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    import spark_jobs.runtime.keys as keys_module

    column = pa.array([f"seen-{i % 300}" for i in range(900)] + [f"new-{i}" for i in range(50)])
    expected = [key_group_of(k, 64) for k in column.to_pylist()]
    key_groups(column.slice(0, 300), 64)  # warm the process-wide cache with some of the keys
    assert key_groups(column, 64).tolist() == expected
    monkeypatch.setattr(keys_module, "CACHE_KEY_GROUPS", False)
    assert key_groups(column, 64).tolist() == expected


def test_key_groups_are_identical_in_another_process_with_another_hash_seed() -> None:
    mine = [key_group_of(k, 128) for k in KEYS]
    script = (
        "import json,sys; from state_store.core.keygroups import key_group_of; "
        "keys=json.load(sys.stdin); print(json.dumps([key_group_of(k,128) for k in keys]))"
    )
    for seed in ("0", "12345"):
        out = subprocess.run(
            [sys.executable, "-c", script],
            input=json.dumps(KEYS),
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert json.loads(out.stdout) == mine


def test_rows_are_routed_to_the_subtask_owning_their_key_group() -> None:
    batch = pa.RecordBatch.from_pydict({"k": [f"u{i}" for i in range(1000)], "v": list(range(1000))})
    groups = key_groups(batch.column(0), 128)
    targets = subtasks_of_key_groups(groups, 128, 3)
    parts = split_by(batch, targets, 3)
    assert sum(p.num_rows for p in parts if p is not None) == 1000
    for subtask, part in enumerate(parts):
        assert part is not None
        assert all(
            subtask_for_key_group(128, 3, key_group_of(k, 128)) == subtask for k in part.column(0).to_pylist()
        )
        values = part.column(1).to_numpy()
        assert np.all(np.diff(values) > 0), "order within a target must be kept"
