"""Run the subtasks of one epoch: on Spark (one Spark job, one shuffle per key exchange) or in
process (the same subtask code, sequentially; used by fast tests and the embedded demo).

Spark pipeline for ``source -> key_by(a) -> ... -> key_by(b) -> ... -> sink``::

    parallelize(partitions).mapPartitionsWithIndex(SourceSubtask.run)        -> (dest, message)
      .partitionBy(parallelism, dest).mapPartitionsWithIndex(KeyedSubtask.run) -> (dest, message)
      .partitionBy(parallelism, dest).mapPartitionsWithIndex(KeyedSubtask.run) -> summaries
      .collect()
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from spark_jobs.api.graph import Stage
from spark_jobs.runtime import plan as topo
from spark_jobs.runtime.gcpause import gc_paused
from spark_jobs.runtime.plan import EpochPlan
from spark_jobs.runtime.subtask import KeyedSubtask, SourceSubtask


def terminal_stage(plan: EpochPlan) -> Stage:
    stages = plan.stages()
    terminal = [s for s in stages if topo.consumer_of(stages, s) is None]
    if len(terminal) != 1:
        raise ValueError(
            f"job {plan.job.job_id} has {len(terminal)} terminal stages: "
            "a job is one chain ending in one sink"
        )
    return terminal[0]


def run_source_subtask(plan: EpochPlan, stage_index: int, index: int) -> list[Any]:
    """One source subtask, restore to acks, in a single GC pause (``gcpause``): the restored state
    is not traversed by a collection between the restore and the processing."""
    with gc_paused():
        return list(SourceSubtask(plan, stage_index, index).run())


def run_keyed_subtask(plan: EpochPlan, stage_index: int, index: int, messages: Iterable[Any]) -> list[Any]:
    """One keyed subtask, restore to acks, in a single GC pause (see ``run_source_subtask``)."""
    with gc_paused():
        return list(KeyedSubtask(plan, stage_index, index).run(messages))


def _source_task(plan: EpochPlan, stage_index: int) -> Any:
    def run(index: int, _: Iterable[Any]) -> Iterator[Any]:
        return iter(run_source_subtask(plan, stage_index, index))

    return run


def _keyed_task(plan: EpochPlan, stage_index: int) -> Any:
    def run(index: int, messages: Iterable[Any]) -> Iterator[Any]:
        return iter(run_keyed_subtask(plan, stage_index, index, messages))

    return run


def _identity(key: int) -> int:
    return key


def run_on_spark(spark: Any, plan: EpochPlan) -> list[dict[str, Any]]:
    """Run the epoch as one Spark job; return the terminal stage's summaries."""
    sc = spark.sparkContext
    stages = plan.stages()

    def build(stage: Stage) -> Any:
        if stage.key is None:
            n = topo.width(stage, plan.job)
            return sc.parallelize(range(n), n).mapPartitionsWithIndex(_source_task(plan, stage.index))
        upstream = [build(stages[i]) for i in stage.inputs]
        rdd = upstream[0] if len(upstream) == 1 else sc.union(upstream)
        return rdd.partitionBy(plan.job.parallelism, _identity).mapPartitionsWithIndex(
            _keyed_task(plan, stage.index)
        )

    return list(build(terminal_stage(plan)).collect())


def run_in_process(plan: EpochPlan) -> list[dict[str, Any]]:
    """The same subtasks without Spark, stage by stage, shuffling messages in memory."""
    stages = plan.stages()

    def build(stage: Stage) -> list[list[Any]]:
        """Output of every subtask of ``stage``."""
        if stage.key is None:
            return [run_source_subtask(plan, stage.index, i) for i in range(topo.width(stage, plan.job))]
        inbox: list[list[Any]] = [[] for _ in range(plan.job.parallelism)]
        for upstream in stage.inputs:
            for outputs in build(stages[upstream]):
                for dest, message in outputs:
                    inbox[dest].append((dest, message))
        return [run_keyed_subtask(plan, stage.index, i, inbox[i]) for i in range(plan.job.parallelism)]

    return [summary for outputs in build(terminal_stage(plan)) for summary in outputs]
