"""What an adopted operator carries besides its checkpointed state: a process function's Python
attributes, the timer service's watermark, the logic of a job redefined in the same process; and the
state structures that fell back from columns to the heap backend mid-epoch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_jobs.api.functions import KeyedProcessFunction
from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.api.windows import Aggregates, Count, Sum, TumblingEventTimeWindows
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from tests.unit.review23.history import Epoch, play

ADOPTED = "adopted"


class CallCounter(KeyedProcessFunction):
    """Keeps a Python attribute between calls (not state): a run that opens fresh operators from
    the store starts it at zero each epoch (the Spark executor unpickles a fresh function)."""

    def __init__(self) -> None:
        self.calls = 0

    def process_key(self, key: Any, rows: list[dict[str, Any]], ctx: Any) -> None:
        self.calls += 1
        ctx.emit({"user_id": key, "n": len(rows), "calls": self.calls})


class WatermarkReader(KeyedProcessFunction):
    """Emits the watermark it sees: before the epoch's first watermark, an operator opened from the
    store sees none (the timer service's watermark is not part of a checkpoint, as in Flink)."""

    def process_key(self, key: Any, rows: list[dict[str, Any]], ctx: Any) -> None:
        ctx.emit({"user_id": key, "n": len(rows), "wm": ctx.current_watermark})


class Tagged(KeyedProcessFunction):
    """Emits a tag given at definition: a redefined job (same uid, same operator kind) changes it."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def process_key(self, key: Any, rows: list[dict[str, Any]], ctx: Any) -> None:
        ctx.emit({"user_id": key, "n": len(rows), "tag": self.tag})


def _source(keys: int = 40) -> GeneratorSource:
    return GeneratorSource(
        uid="clicks", partitions=2, seed=9, events_per_second=[30, 20], out_of_orderness_ms=[900, 300],
        keys=keys, start_ms=DEFAULT_START_MS,
    )  # fmt: skip


def _job(build: Any, job_id: str = "review23") -> Any:
    def make(parallelism: int, *, local_recovery: bool) -> Job:
        job = Job(job_id, parallelism=parallelism, max_parallelism=16, chunk_size=35,
                  local_recovery=local_recovery)  # fmt: skip
        keyed = job.source(_source(), uid="clicks", out_of_orderness_ms=900).key_by("user_id")
        build(keyed).sink(ParquetSink(), uid="out")
        return job

    return make


def _both(tmp_path: Path, make: Any, epochs: int = 5) -> list[str]:
    script = [Epoch() for _ in range(epochs)]
    cold = play((tmp_path / "cold").as_uri(), make, script, local_recovery=False)
    hot = play((tmp_path / "warm").as_uri(), make, script, local_recovery=True)
    assert hot[2][1:] == [ADOPTED] * (epochs - 1), hot[2]
    assert hot[0] == cold[0] and hot[0], "the same committed output"
    assert hot[1] == cold[1], "the same checkpointed state"
    return hot[2]


def test_a_process_functions_python_attributes_start_over_as_in_a_cold_epoch(tmp_path: Path) -> None:
    _both(tmp_path, _job(lambda keyed: keyed.process(CallCounter(), uid="op")))


def test_an_adopted_operator_sees_no_watermark_before_the_epochs_first_one() -> None:
    """As after a restore (the timer service's time is not checkpointed, as in Flink): a function
    reading ``ctx.current_watermark`` before the epoch's first watermark sees none either way."""
    from spark_jobs.runtime.operators.base import OperatorContext
    from spark_jobs.runtime.operators.process import ProcessOperator
    from state_store.core.keygroups import KeyGroupRange

    ctx = OperatorContext("review23", 0, 1, 16, KeyGroupRange(0, 15), DEFAULT_START_MS, 1)
    op = ProcessOperator("op", "user_id", WatermarkReader())
    op.open(ctx, None)
    op.timers.advance_watermark(DEFAULT_START_MS)
    op.reopen(ctx, 1)
    fresh = ProcessOperator("op", "user_id", WatermarkReader())
    fresh.open(ctx, None)
    assert op.context.current_watermark == fresh.context.current_watermark


def test_a_job_redefined_in_the_same_process_runs_its_new_logic(tmp_path: Path) -> None:
    """Epochs 1-2 with tag "v1", then the job is redefined (same ids, new function): adopted
    operators must run the new function, as a restore would."""
    calls = {"n": 0}

    def build(keyed: Any) -> Any:
        calls["n"] += 1
        return keyed.process(Tagged("v1" if calls["n"] <= 3 else "v2"), uid="op")

    make = _job(build)
    script = [Epoch() for _ in range(5)]
    cold = play((tmp_path / "cold").as_uri(), make, script, local_recovery=False)
    calls["n"] = 0
    hot = play((tmp_path / "warm").as_uri(), make, script, local_recovery=True)
    assert any("'v2'" in row for row in cold[0])
    assert hot[0] == cold[0]


def test_a_window_redefined_with_another_size_is_not_adopted_with_the_old_one(tmp_path: Path) -> None:
    """Same uid, same operator kind, another window size: a restore builds the new window; an
    adopted operator must not go on with the old assigner."""
    calls = {"n": 0}

    def build(keyed: Any) -> Any:
        calls["n"] += 1
        size = 2_000 if calls["n"] <= 3 else 1_000
        aggs = Aggregates(Count(name="n"), Sum("value", name="total"))
        return keyed.window(TumblingEventTimeWindows(size), aggs, uid="op")

    make = _job(build)
    script = [Epoch() for _ in range(5)]
    cold = play((tmp_path / "cold").as_uri(), make, script, local_recovery=False)
    calls["n"] = 0
    hot = play((tmp_path / "warm").as_uri(), make, script, local_recovery=True)
    assert hot[0] == cold[0] and hot[1] == cold[1]


def _mixed_keys(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``user_id`` as text, and from the second epoch on some of them as ints: the window's
    columns refuse the mixed column and fall back to the heap backend mid-epoch."""
    i = batch.schema.get_field_index("user_id")
    return batch.set_column(i, "user_id", pc.cast(batch.column(i), pa.string()))


def test_a_window_that_fell_back_to_the_heap_mid_epoch_is_adopted_exactly(tmp_path: Path) -> None:
    """uint64 keys beyond int64: the columns refuse the first batch and move to the heap backend
    mid-epoch (``WindowOperator._demote``); the adopted heap operator equals a restore, which opens
    on the columns and falls back again."""

    def widen(batch: pa.RecordBatch) -> pa.RecordBatch:
        i = batch.schema.get_field_index("user_id")
        ids = pc.cast(pc.replace_substring_regex(batch.column(i), "[^0-9]", ""), pa.uint64())
        return batch.set_column(i, "user_id", pc.add(ids, pa.scalar(2**63, pa.uint64())))

    def make(parallelism: int, *, local_recovery: bool) -> Job:
        job = Job("review23-demote", parallelism=parallelism, max_parallelism=16, chunk_size=35,
                  local_recovery=local_recovery)  # fmt: skip
        keyed = job.source(_source(), uid="clicks", out_of_orderness_ms=900).map(widen).key_by("user_id")
        aggs = Aggregates(Count(name="n"), Sum("value", name="total"))
        keyed.window(TumblingEventTimeWindows(2_000), aggs, uid="op").sink(ParquetSink(), uid="out")
        return job

    _both(tmp_path, make, epochs=6)


def test_dedup_that_fell_back_to_the_heap_on_a_hash_collision_is_adopted_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spark_jobs.runtime.operators import dedup, window_columns
    from tests.unit.runtime.test_window_typed_paths import _weak_hash

    monkeypatch.setattr(window_columns, "HASH_FUNCTION", _weak_hash)
    monkeypatch.setattr(dedup, "_REPORTED", set())
    _both(tmp_path, _job(lambda keyed: keyed.deduplicate(ttl_ms=2_500, uid="op")))


def test_dedup_then_a_window_with_lateness_are_both_adopted_exactly(tmp_path: Path) -> None:
    """Two keyed stages (a keyed operator ends its chain: ``deduplicate`` returns a plain stream)."""
    aggs = Aggregates(Count(name="n"), Sum("value", name="total"))
    build = lambda keyed: (  # noqa: E731
        keyed.deduplicate(ttl_ms=2_500, uid="seen")
        .key_by("user_id")
        .window(TumblingEventTimeWindows(2_000), aggs, uid="op", allowed_lateness_ms=1_000)
    )
    _both(tmp_path, _job(build))
