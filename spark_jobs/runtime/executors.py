"""Run the subtasks of one epoch: on Spark (one Spark job, one shuffle per key exchange) or in
process (the same subtask code, sequentially; used by fast tests and the embedded demo).

Spark pipeline for ``source -> key_by(a) -> ... -> key_by(b) -> ... -> sink``::

    parallelize(partitions).mapPartitionsWithIndex(SourceSubtask.run)        -> (dest, message)
      .partitionBy(parallelism, dest).mapPartitionsWithIndex(KeyedSubtask.run) -> (dest, message)
      .partitionBy(parallelism, dest).mapPartitionsWithIndex(KeyedSubtask.run) -> summaries
      .collect()

A source stage with a DataFrame stage (``.spark``) or a Spark-native source first runs on the
driver (``spark_stage.driver_cuts``: the local process's session in process, ``spark`` on Spark);
each of its subtasks then reads its ``StageOutput`` instead of the source (parallelized one per
Spark partition).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from spark_jobs.api.graph import Stage
from spark_jobs.runtime import plan as topo
from spark_jobs.runtime import progress
from spark_jobs.runtime.gcpause import gc_paused
from spark_jobs.runtime.keyed_subtask import open_keyed_subtask
from spark_jobs.runtime.memory import measured
from spark_jobs.runtime.plan import EpochPlan
from spark_jobs.runtime.source_subtask import open_source_subtask
from spark_jobs.runtime.spark_stage import StageOutput, driver_cuts
from state_store.core.manifests import AckBundleEntry


def terminal_stage(plan: EpochPlan) -> Stage:
    stages = plan.stages()
    terminal = [s for s in stages if topo.consumer_of(stages, s) is None]
    if len(terminal) != 1:
        raise ValueError(
            f"job {plan.job.job_id} has {len(terminal)} terminal stages: "
            "a job is one chain ending in one sink"
        )
    return terminal[0]


def run_source_subtask(
    plan: EpochPlan,
    stage_index: int,
    index: int,
    acks: list[AckBundleEntry] | None = None,
    cut: StageOutput | None = None,
) -> list[Any]:
    """One source subtask, restore to acks, in a single GC pause (``gcpause``): the restored state
    is not traversed by a collection between the restore and the processing. The acks it wrote
    are appended to ``acks`` (for the run's ack bundle). ``cut``: the driver's DataFrame-stage
    output of this subtask's partition, read in place of the source."""
    with gc_paused(), measured():
        subtask = open_source_subtask(plan, stage_index, index)
        if cut is not None:
            subtask.source = cut  # same partition and range; the rows the stage made of them
        out = list(subtask.run())
    if acks is not None:
        acks.extend(subtask.responder.receipts)
    return out


def run_keyed_subtask(
    plan: EpochPlan,
    stage_index: int,
    index: int,
    messages: Iterable[Any],
    acks: list[AckBundleEntry] | None = None,
) -> list[Any]:
    """One keyed subtask, restore to acks, in a single GC pause (see ``run_source_subtask``)."""
    with gc_paused(), measured():
        subtask = open_keyed_subtask(plan, stage_index, index)
        out = list(subtask.run(messages))
    progress.subtask_done(stage_index, keyed=True)  # a no-op on Spark executors (no reporter)
    if acks is not None:
        acks.extend(subtask.responder.receipts)
    return out


def _ack_accumulator(sc: Any) -> Any:
    """A Spark accumulator of ack receipts: each task adds the acks it wrote; the driver reads
    them after the action (a re-executed task may add an ack twice: the bundle de-duplicates).
    pyspark is imported here, not at module import (DAG files import this module)."""
    from pyspark.accumulators import AccumulatorParam

    class AckList(AccumulatorParam[list[AckBundleEntry]]):
        def zero(self, value: list[AckBundleEntry]) -> list[AckBundleEntry]:
            return []

        def addInPlace(self, a: list[AckBundleEntry], b: list[AckBundleEntry]) -> list[AckBundleEntry]:
            a.extend(b)
            return a

    return sc.accumulator([], AckList())


def _source_task(plan: EpochPlan, stage_index: int, acks: Any) -> Any:
    def run(index: int, items: Iterable[Any]) -> Iterator[Any]:
        written: list[AckBundleEntry] = []
        cut = next((x for x in items if isinstance(x, StageOutput) and x.subtask == index), None)
        out = run_source_subtask(plan, stage_index, index, written, cut)
        acks.add(written)
        return iter(out)

    return run


def _keyed_task(plan: EpochPlan, stage_index: int, acks: Any) -> Any:
    def run(index: int, messages: Iterable[Any]) -> Iterator[Any]:
        written: list[AckBundleEntry] = []
        out = run_keyed_subtask(plan, stage_index, index, messages, written)
        acks.add(written)
        return iter(out)

    return run


def _identity(key: int) -> int:
    return key


def run_on_spark(
    spark: Any, plan: EpochPlan, acks: list[AckBundleEntry] | None = None
) -> list[dict[str, Any]]:
    """Run the epoch as one Spark job; return the terminal stage's summaries. The acks every task
    wrote are appended to ``acks`` (gathered with an accumulator)."""
    sc = spark.sparkContext
    stages = plan.stages()
    written = _ack_accumulator(sc)
    cuts = driver_cuts(spark, plan)

    def build(stage: Stage) -> Any:
        if stage.key is None:
            n = topo.width(stage, plan.job)
            items: list[Any] = list(cuts.get(stage.index, range(n)))  # one per Spark partition
            return sc.parallelize(items, n).mapPartitionsWithIndex(_source_task(plan, stage.index, written))
        upstream = [build(stages[i]) for i in stage.inputs]
        rdd = upstream[0] if len(upstream) == 1 else sc.union(upstream)
        return rdd.partitionBy(plan.job.parallelism, _identity).mapPartitionsWithIndex(
            _keyed_task(plan, stage.index, written)
        )

    summaries = list(build(terminal_stage(plan)).collect())
    if acks is not None:
        acks.extend(written.value)
    return summaries


def run_in_process(plan: EpochPlan, acks: list[AckBundleEntry] | None = None) -> list[dict[str, Any]]:
    """The same subtasks without Spark, stage by stage, shuffling messages in memory (a DataFrame
    stage runs on the process's local Spark session)."""
    stages = plan.stages()
    cuts = driver_cuts(None, plan)

    def build(stage: Stage) -> list[list[Any]]:
        """Output of every subtask of ``stage``."""
        if stage.key is None:
            cut = cuts.get(stage.index)
            return [
                run_source_subtask(plan, stage.index, i, acks, cut[i] if cut else None)
                for i in range(topo.width(stage, plan.job))
            ]
        inbox: list[list[Any]] = [[] for _ in range(plan.job.parallelism)]
        for upstream in stage.inputs:
            for outputs in build(stages[upstream]):
                for dest, message in outputs:
                    inbox[dest].append((dest, message))
        return [run_keyed_subtask(plan, stage.index, i, inbox[i], acks) for i in range(plan.job.parallelism)]

    return [summary for outputs in build(terminal_stage(plan)) for summary in outputs]
