"""The key-group function is one stable hash: vectorized == scalar, and identical in a separate
process with another PYTHONHASHSEED (driver, executors and offline tools agree)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.runtime.keys import key_groups, split_by, subtasks_of_key_groups
from state_store.core.keygroups import key_group_of, subtask_for_key_group

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
