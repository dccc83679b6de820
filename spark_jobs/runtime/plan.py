"""The plan of one epoch, shipped to every Spark task, and the topology helpers derived from it.

Channel numbering of a stage: its input stages in order, each contributing one channel per
upstream subtask (a source stage has one subtask per source partition).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spark_jobs.api.graph import Stage
from spark_jobs.api.job import Job
from state_store.core.manifests import PendingRecord
from state_store.faults import KillSpec


@dataclass(frozen=True)
class EpochPlan:
    """Everything a Spark task needs, and nothing it must read elsewhere: the epoch's time is
    ``trigger_ms`` (tasks never read a clock), the fault to inject is ``kill`` (tasks never read the
    environment; each task arms its own switch from it)."""

    job: Job
    store_uri: str
    checkpoint_id: int
    attempt: int
    generation: int
    trigger_ms: int
    savepoint: bool
    positions: dict[str, list[int]]
    restore_id: int | None
    drain: bool = False
    kill: KillSpec | None = None

    @classmethod
    def for_attempt(
        cls,
        job: Job,
        store_uri: str,
        pending: PendingRecord,
        attempt: int,
        *,
        drain: bool = False,
        kill: KillSpec | None = None,
    ) -> EpochPlan:
        """The plan of ``attempt`` of the pending checkpoint; ``job`` at the parallelism the
        checkpoint was triggered at (``cycle.with_parallelism``)."""
        barrier = pending.barrier
        return cls(
            job=job,
            store_uri=store_uri,
            checkpoint_id=pending.checkpoint_id,
            attempt=attempt,
            generation=pending.generation,
            trigger_ms=pending.trigger_ms,
            savepoint=pending.properties.savepoint,
            positions={k: list(r) for k, r in barrier.ranges.items()},
            restore_id=barrier.base,
            drain=drain,
            kill=kill,
        )

    def stages(self) -> list[Stage]:
        return self.job.graph.stages()


def source_partitions(stage: Stage) -> list[str]:
    return list(stage.source_spec.source.partitions())


def width(stage: Stage, job: Job) -> int:
    """Number of subtasks of a stage."""
    return len(source_partitions(stage)) if stage.key is None else job.parallelism


def epoch_end(source: Any, partition: str, start: int, available: int, max_records: int) -> int:
    """The end of the epoch's cut of ``partition``: ``[start, end)`` with ``end`` at most what is
    available and never before ``start``. By default positions count records, so the cap is
    ``start + max_records``; a source whose positions are not record counts (``SparkTableSource``:
    a column's values) says where a cut of at most ``max_records`` rows ends (``epoch_end``)."""
    cut = getattr(source, "epoch_end", None)
    if callable(cut):
        return max(start, min(available, int(cut(partition, start, available, max_records))))
    return max(start, min(available, start + max_records))


def consumer_of(stages: list[Stage], stage: Stage) -> Stage | None:
    consumers = [s for s in stages if stage.index in s.inputs]
    if len(consumers) > 1:
        raise ValueError(f"stage {stage.index} feeds {len(consumers)} stages: fan-out is not supported yet")
    return consumers[0] if consumers else None


def channel_offset(stages: list[Stage], consumer: Stage, upstream: Stage, job: Job) -> int:
    offset = 0
    for index in consumer.inputs:
        if index == upstream.index:
            return offset
        offset += width(stages[index], job)
    raise ValueError(f"stage {upstream.index} is not an input of stage {consumer.index}")


def num_channels(stages: list[Stage], stage: Stage, job: Job) -> int:
    return sum(width(stages[i], job) for i in stage.inputs)


def position_key(source_uid: str, partition: str) -> str:
    return f"{source_uid}/{partition}"


def source_position(plan: EpochPlan, source_uid: str, partition: str) -> tuple[int, int]:
    start, end = plan.positions.get(position_key(source_uid, partition), [0, 0])
    return int(start), int(end)


def describe(plan: EpochPlan) -> dict[str, Any]:
    return {"job": plan.job.job_id, "checkpoint": plan.checkpoint_id, "attempt": plan.attempt}
