"""DataFrame stages: Spark SQL on an epoch's cut, run by the driver before the source subtasks.

A source stage gets a *driver cut* when it has a ``.spark(fn)`` step (``SparkSpec``, right after
the source) or its source is Spark-native (it has ``spark_frame``, e.g. ``SparkTableSource``,
whose table only the driver's session can read; its ``fn`` is the identity)::

    trigger      barrier positions [start, end) per source partition, in _pending.json
    driver       for every source partition p (subtask i), on the driver's session:
                   cut_i = source.spark_frame(spark, p, start, end)          Spark-native source
                         | createDataFrame(source.read(p, start, end))      any other (Arrow)
                 out = union_i( fn(cut_i) + _partition = i )                one Spark job
                 schema checked on the analyzed plan (spark_stage_schema) -> toArrow
                 -> one StageOutput per subtask: its rows (by _offset when fn kept it) + dead letters
    subtasks     source subtask i reads its StageOutput instead of the source (same partition,
                 same [start, end) acked), then the rest of the chain, watermarks, barrier,
                 snapshot and ack exactly as without the stage; keyed stages are unchanged

Invariants:
  * ``fn`` is stateless and deterministic: the same cut gives the same rows. A replayed epoch (a
    new attempt after a crash) therefore gives the same output, and exactly-once holds through
    the existing checkpoint protocol: positions, state and sink transactions of one attempt are
    committed together or not at all; the stage itself keeps nothing between epochs;
  * ``fn`` runs on each source partition's cut separately (one plan per partition, unioned): each
    output row stays in the channel of the partition it came from, so per-channel watermarks and
    idleness are as without the stage. A per-row stage (filter, projection, join with a lookup
    table) gives the same rows as on the whole cut; an aggregation inside ``fn`` is per partition
    and per epoch (aggregate across epochs with a keyed window instead);
  * the output schema is checked before Spark runs a job and before any subtask starts: a
    mismatch fails the epoch (one line naming the step and the column); nothing is committed;
  * the source's position is still the source's: the subtask acks ``end`` of the plan's range,
    whatever the stage filtered out; dead letters of the read count as without the stage;
  * each partition's rows reach its subtask in ``_offset`` order when ``fn`` keeps ``_offset``,
    else in event-time order (never Spark's arbitrary order: the subtask emits a watermark after
    every chunk, and rows behind it would be dropped as late);
  * ``_partition`` is reserved: an output column of that name is refused, never overwritten;
  * an epoch's stage output passes through the driver as Arrow, whole: it is bounded by the cut
    (``max_records_per_epoch`` rows per partition) times the rows ``fn`` makes of one row (a
    fan-out join or explode multiplies it), and by Spark's ``spark.driver.maxResultSize``;
  * ``fn`` that is not deterministic (``rand()``, ``current_timestamp()``, a lookup table that
    changes) still commits exactly one attempt per epoch, never a mix and never both: a replay
    (after a crash before ``_metadata.json``, or a restore) runs ``fn`` again on the same cut, so
    its output is the replay's, not the crashed attempt's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.api.graph import Stage, Step
from spark_jobs.api.specs import SparkSpec
from spark_jobs.runtime import plan as topo
from spark_jobs.runtime.plan import EpochPlan
from spark_jobs.runtime.spark_stage_schema import (
    OFFSET_COLUMN,
    PARTITION_COLUMN,
    SparkStageError,
    arrow_schema,
    check_output,
    conform,
    expected_schema,
)
from spark_jobs.sources.base import DEFAULT_CHUNK_SIZE, read_table
from spark_jobs.sources.dead_letters import DeadLetter, DeadLetters


def is_spark_native(source: Any) -> bool:
    """The source reads its cut as a Spark DataFrame (``spark_frame(spark, partition, start, end)``)."""
    return callable(getattr(source, "spark_frame", None))


def spark_step(stage: Stage) -> Step | None:
    """The stage's ``.spark`` step (the one right after its source), if any."""
    if stage.key is None and len(stage.steps) > 1 and isinstance(stage.steps[1].spec, SparkSpec):
        return stage.steps[1]
    return None


def needs_driver_cut(stage: Stage) -> bool:
    """A source stage whose cut the driver reads with Spark (module docstring)."""
    return stage.key is None and (spark_step(stage) is not None or is_spark_native(stage.source_spec.source))


@dataclass(frozen=True)
class StageOutput:
    """The rows of one source subtask's cut after the stage: read by the subtask in place of its
    source (the parts of ``ReplayableSource`` a source subtask uses). Picklable (shipped to a
    Spark task)."""

    uid: str
    subtask: int
    partition: str
    event_time_column: str
    table: pa.Table
    dead: tuple[DeadLetter, ...] = field(default=())

    @property
    def schema(self) -> pa.Schema:
        return self.table.schema

    def partitions(self) -> list[str]:
        return [self.partition]

    def read(
        self,
        partition: str,
        start: int,
        end: int,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        dead_letters: DeadLetters | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """The stage's rows for the cut ``[start, end)`` of ``partition`` (the only range it has)."""
        if partition != self.partition:
            raise ValueError(
                f"stage output of {self.uid}/{self.partition} was asked for partition {partition!r}"
            )
        if dead_letters is not None:
            dead_letters.extend(self.dead)
        yield from self.table.to_batches(max_chunksize=chunk_size)


def _describe(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _cut_frame(
    spark: Any, plan: EpochPlan, stage: Stage, uid: str, partition: str
) -> tuple[Any, tuple[DeadLetter, ...]]:
    """Partition ``partition``'s cut of the epoch as a DataFrame, and the dead letters of its read."""
    source = stage.source_spec.source
    start, end = topo.source_position(plan, uid, partition)
    if is_spark_native(source):
        return source.spark_frame(spark, partition, start, end), ()
    dead = DeadLetters()
    table = read_table(source, partition, start, end, chunk_size=plan.job.chunk_size, dead_letters=dead)
    return spark.createDataFrame(table), tuple(dead)


def _apply(step: Step | None, frame: Any) -> Any:
    """``fn(frame)`` of the stage's spark step (the identity without one), checked to be a DataFrame."""
    if step is None:
        return frame
    assert isinstance(step.spec, SparkSpec)
    try:
        out = step.spec.fn(frame)
    except Exception as exc:
        raise SparkStageError(
            f"spark step {step.name!r} failed: {_describe(exc)}: fix the stage or the table it reads"
        ) from exc
    if not hasattr(out, "schema") or not hasattr(out, "toArrow"):
        raise SparkStageError(
            f"spark step {step.name!r} returned {type(out).__name__}, not a DataFrame: return a DataFrame"
        )
    if PARTITION_COLUMN in out.columns:
        raise SparkStageError(
            f"spark step {step.name!r}: its output has a column {PARTITION_COLUMN!r}, which is "
            "reserved (the driver tags each row's source partition with it): rename it in the stage"
        )
    return out


def _order(rows: pa.Table, event_time_column: str) -> str:
    """The column a partition's rows are handed on in: ``_offset`` when the stage kept it (the
    source's order), else the event time (Spark returns rows in any order; by event time no row
    of the epoch is late behind a watermark emitted earlier in the same epoch). Stable sort."""
    return OFFSET_COLUMN if OFFSET_COLUMN in rows.column_names else event_time_column


def stage_outputs(spark: Any, plan: EpochPlan, stage: Stage) -> list[StageOutput]:
    """Run the stage on the epoch's cut (module docstring); one StageOutput per source subtask."""
    from pyspark.sql import functions as F

    source = stage.source_spec.source
    uid = stage.steps[0].uid or source.uid
    step = spark_step(stage)
    name = step.name if step is not None else f"source {uid}"
    partitions = topo.source_partitions(stage)
    frames, dead = [], []
    for index, partition in enumerate(partitions):
        frame, letters = _cut_frame(spark, plan, stage, uid, partition)
        frames.append(_apply(step, frame).withColumn(PARTITION_COLUMN, F.lit(index)))
        dead.append(letters)
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    try:
        actual = arrow_schema(out)
    except Exception as exc:  # analysis: a table that does not exist, a column that does not
        raise SparkStageError(f"spark step {name!r} cannot run: {_describe(exc)}: fix the stage") from exc
    declared = step.spec.schema if step is not None and isinstance(step.spec, SparkSpec) else None
    expected = expected_schema((plan.job.job_id, uid, name), declared, actual)
    check_output(name, expected, actual, source.event_time_column)
    try:
        table = out.toArrow()
    except Exception as exc:
        raise SparkStageError(
            f"spark step {name!r} failed in Spark: {_describe(exc)}: fix the stage"
        ) from exc
    outputs = []
    for index, partition in enumerate(partitions):
        mine = table.filter(pc.equal(table.column(PARTITION_COLUMN), index))
        mine = mine.sort_by(_order(mine, source.event_time_column))
        rows = conform(name, mine, expected)
        outputs.append(StageOutput(uid, index, partition, source.event_time_column, rows, dead[index]))
    return outputs


def driver_cuts(spark: Any, plan: EpochPlan) -> dict[int, list[StageOutput]]:
    """Per source stage index that needs one, the driver cut of the epoch (one StageOutput per
    subtask). Empty, and no Spark session touched, when no stage needs one. ``spark``: the
    session to use (None: ``driver_spark()``, the process's local session)."""
    stages = [s for s in plan.stages() if needs_driver_cut(s)]
    if not stages:
        return {}
    if spark is None:
        from spark_jobs.runtime.spark_session import driver_spark

        spark = driver_spark()
    return {stage.index: stage_outputs(spark, plan, stage) for stage in stages}
