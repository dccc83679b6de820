"""What a user gets when the disk cannot hold a job's keys or values: key types other than int,
str and bytes (floats, booleans, unsigned ints above int64) and state values that are not JSON.
Expected: the job fails with one clear line naming the operator and the remedy (keys), or the
same ``StateValueError`` the in-memory backend raises (values) -- never a pyarrow traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_jobs.api.functions import KeyedProcessFunction
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sources.generator import DEFAULT_START_MS
from state_store.core.state import ValueStateDescriptor
from state_store.formats.json_codec import StateValueError
from state_store.testing import ManualClock
from tests.unit.review23c import harness
from tests.unit.review23c.harness import STEP, job_of


class Count(KeyedProcessFunction):
    count = ValueStateDescriptor[int]("count")
    state_descriptors = (count,)

    def process_key(self, key: Any, rows: list[dict[str, Any]], ctx: Any) -> None:
        state = ctx.state(self.count)
        state.update((state.value() or 0) + len(rows))
        ctx.emit({"key": repr(key), "n": state.value()})


def _digits(b: pa.RecordBatch) -> pa.Array:
    return pc.cast(pc.utf8_slice_codeunits(b.column("user_id"), 1), pa.int64())


ODD_KEYS = {
    "float": lambda b: pc.divide(pc.cast(_digits(b), pa.float64()), 4.0),
    "bool": lambda b: pc.equal(pc.bit_wise_and(_digits(b), 1), 0),
    "uint64-above-int64": lambda b: pc.add(pc.cast(_digits(b), pa.uint64()), pa.scalar(2**63, pa.uint64())),
}


def _first_epoch(tmp_path: Path, spill: bool, fn: Any, key: str) -> Any:
    harness.KEYS[key] = ODD_KEYS[key] if key in ODD_KEYS else harness.KEYS[key]
    job = job_of(1, spill, tmp_path / ("ds" if spill else "hs"), fn, key=key, keys=30, rate=50)
    clock = ManualClock(DEFAULT_START_MS)
    clock.advance(STEP)
    return run_cycle(job, (tmp_path / ("disk" if spill else "heap")).as_uri(), clock, executor="local")


def _error_of(tmp_path: Path, spill: bool, fn: Any, key: str) -> BaseException | None:
    try:
        report = _first_epoch(tmp_path, spill, fn, key)
    except Exception as exc:  # the error is what the test looks at
        return exc
    assert report.status == "completed", report
    return None


@pytest.mark.parametrize(
    "key",
    [
        "bool",
        "float",
        "uint64-above-int64",
    ],
)
def test_a_key_type_the_disk_cannot_hold_fails_with_one_clear_line(tmp_path: Path, key: str) -> None:
    assert _error_of(tmp_path, False, Count, key) is None  # fine in memory
    error = _error_of(tmp_path, True, Count, key)
    assert error is not None, "the disk accepted a key type it cannot hold"
    text = str(error)
    assert not isinstance(error, pa.ArrowException), f"{type(error).__name__}: {text}"
    assert "\n" not in text.strip() and "process function 'fn'" in text and "state_memory_mb" in text, text


class Bad(KeyedProcessFunction):
    """Stores a set (not JSON) for keys ending in 7."""

    tags = ValueStateDescriptor[Any]("tags")
    state_descriptors = (tags,)

    def process_key(self, key: Any, rows: list[dict[str, Any]], ctx: Any) -> None:
        ctx.state(self.tags).update({r["page"] for r in rows} if str(key).endswith("7") else len(rows))


def test_a_state_value_that_is_not_json_raises_the_same_error_on_both(tmp_path: Path) -> None:
    errors = {}
    for spill in (False, True):
        error = _error_of(tmp_path, spill, Bad, "string")
        assert error is not None
        cause: BaseException | None = error
        while cause is not None and not isinstance(cause, StateValueError):
            cause = cause.__cause__ or cause.__context__
        errors[spill] = (type(error).__name__, type(cause).__name__, str(cause or error))
    assert errors[True][1] == "StateValueError", errors
    assert errors[True][:2] == errors[False][:2], errors
    assert "'tags'" in errors[True][2] and "set" in errors[True][2], errors
