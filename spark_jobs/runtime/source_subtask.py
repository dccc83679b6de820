"""A source stage subtask: reads one source partition for the epoch (one subtask per partition).

::

    restored watermark state -> emit the restored watermark (and IDLE if the partition has no input)
    read [start, end) in chunks -> add ``_ts`` -> operator chain -> watermark after every chunk
    (drain: MAX watermark) -> barrier n -> snapshot -> acks -> the source's ack

Invariants: the partition is read exactly over the plan's range ``[start, end)``; the watermark is
max event time - ``out_of_orderness_ms`` - 1 and never moves backwards (``StageExit``); the
source's ack records ``end`` as the next epoch's start and the max event time as watermark state;
it is written only when the subtask did not decline.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from spark_jobs.runtime import plan as topo
from spark_jobs.runtime import progress
from spark_jobs.runtime.acks import SourceAck
from spark_jobs.runtime.gcpause import gc_paused
from spark_jobs.runtime.memory import current_metrics
from spark_jobs.runtime.operators.window import TS
from spark_jobs.runtime.plan import EpochPlan
from spark_jobs.runtime.subtask import SubtaskParts, SubtaskRunner, open_subtask
from spark_jobs.sources.base import event_time_ms
from spark_jobs.sources.dead_letters import DeadLetterReason, DeadLetters
from state_store.core.stream import MAX_TIMESTAMP, StreamStatus
from state_store.core.task_parts import SourcePart


def open_source_subtask(plan: EpochPlan, stage_index: int, subtask: int) -> SourceSubtask:
    """Open the subtask (restore) and find its partition (a source may list its store for it)."""
    parts = open_subtask(plan, stage_index, subtask)
    return SourceSubtask(parts, topo.source_partitions(parts.stage)[subtask])


class SourceSubtask(SubtaskRunner):
    """Reads one source partition for the epoch (module docstring)."""

    def __init__(self, parts: SubtaskParts, partition: str) -> None:
        super().__init__(parts)
        step = self.stage.steps[0]
        self.spec = self.stage.source_spec
        self.source = self.spec.source
        self.source_uid = step.uid or self.source.uid
        self.partition = partition
        self.max_ts: int | None = None
        self.dead = DeadLetters()
        for part in self._source_parts():
            if part.partition == self.partition:
                self.max_ts = part.max_ts

    def _source_parts(self) -> list[SourcePart]:
        if self.metadata is None:
            return []
        tasks = (t for t in self.metadata.tasks if t.task.uid == self.source_uid)
        return [part for t in tasks if (part := t.parts.source) is not None]

    def expected_uids(self) -> list[str]:
        return [self.source_uid, *super().expected_uids()]

    def _records(self, start: int, end: int, delivered: int) -> int:
        """The ack's ``records``: positions count records (``end - start``, dead letters included),
        except for a source whose positions are values (``epoch_end``: ``SparkTableSource``), whose
        epoch counts the rows it delivered plus its dead letters."""
        if callable(getattr(self.spec.source, "epoch_end", None)):
            return delivered + sum(self.dead.count(r) for r in DeadLetterReason)
        return end - start

    def _watermark(self) -> int | None:
        return None if self.max_ts is None else self.max_ts - self.spec.watermark_lag_ms - 1

    def run(self) -> Iterator[Any]:
        with gc_paused():
            try:
                out = self._run()
            except BaseException:
                self.abandon()
                raise
        yield from out

    def _run(self) -> list[Any]:
        start, end = topo.source_position(self.plan, self.source_uid, self.partition)
        restored_wm = self._watermark()
        if restored_wm is not None:
            self.chain.watermark(restored_wm)
        if start >= end and self.spec.idleness_ms is not None and not self.plan.drain:
            self.exit.broadcast(StreamStatus.IDLE)
        chunks = self.source.read(
            self.partition, start, end, chunk_size=self.job.chunk_size, dead_letters=self.dead
        )
        delivered = 0
        for batch in chunks:
            if batch.num_rows == 0:
                continue
            delivered += batch.num_rows
            ts = event_time_ms(batch, self.source.event_time_column)
            batch = batch.append_column(TS, pa.array(np.asarray(ts, dtype=np.int64), pa.int64()))
            self.max_ts = int(ts.max()) if self.max_ts is None else max(self.max_ts, int(ts.max()))
            self.chain.push(batch)
            progress.records_read(self.stage.index, self.source_uid, batch.num_rows)  # per chunk
            wm = self._watermark()
            if wm is not None:
                self.chain.watermark(wm)
        if self.plan.drain:
            self.chain.watermark(MAX_TIMESTAMP)
        self.take_snapshot(self.plan.checkpoint_id, self.plan.trigger_ms, self.options())
        summaries = self.acknowledge()
        if self.declined is None:
            dead = {r.name: self.dead.count(r) for r in DeadLetterReason if self.dead.count(r)}
            ack = SourceAck(
                self.source_uid,
                self.partition,
                self.max_ts,
                end,
                self._records(start, end, delivered),
                dead,
                current_metrics(),
            )
            self.responder.acknowledge(ack.record(self.site))
        self.dispose()
        return self.result(summaries)
