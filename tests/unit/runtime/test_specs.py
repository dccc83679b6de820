"""Step specs (``spark_jobs.api.specs``) and the operator registry (``operators/build.py``): every
step the API can make has a spec type with a registered builder, and what a spec says about its
state is what a checkpoint of the running job holds and a restore plan reports."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.api.specs import (
    STEP_SPECS,
    ConnectSpec,
    KeyBySpec,
    SideOutput,
    SourceSpec,
    StepSpec,
    WindowSpec,
)
from spark_jobs.api.windows import Count, EventTimeSessionWindows, TumblingEventTimeWindows
from spark_jobs.examples.clickstream import UserActivity, page_section
from spark_jobs.lifecycle.restore import job_shape, snapshot_shape
from spark_jobs.lifecycle.snapshots import from_checkpoint
from spark_jobs.runtime.cycle import expected_tasks, run_cycle, sink_specs
from spark_jobs.runtime.operators.async_io import AsyncEnrichOperator
from spark_jobs.runtime.operators.base import FilterOperator, MapOperator
from spark_jobs.runtime.operators.build import BUILDERS, OperatorSite, build_chain_operators, build_operator
from spark_jobs.runtime.operators.dedup import DeduplicateOperator
from spark_jobs.runtime.operators.process import CoProcessOperator, ProcessOperator
from spark_jobs.runtime.operators.window import WindowOperator
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.storage import open_store
from state_store.testing import ManualClock

from .test_connect import CountBothInputs


def clicks(uid: str = "clicks", seed: int = 3) -> GeneratorSource:
    return GeneratorSource(
        uid=uid, partitions=2, seed=seed, events_per_second=30, out_of_orderness_ms=1_000, keys=15
    )


def add_chain(job: Job) -> None:
    (
        job.source(clicks(), uid="clicks", out_of_orderness_ms=1_000, idleness_ms=5_000)
        .map(lambda b: b)
        .flat_map(lambda b: b)
        .filter(lambda b: pa.array([True] * b.num_rows))
        .async_enrich(page_section)
        .key_by("event_id")
        .deduplicate(ttl_ms=60_000, uid="dedup")
        .key_by("user_id")
        .process(UserActivity(), uid="activity")
        .key_by("page")
        .window(TumblingEventTimeWindows(5_000), Count(), uid="counts", late_output=ParquetSink())
        .key_by("page")
        .window(EventTimeSessionWindows(60_000), Count(), uid="sessions")
        .sink(ParquetSink(), uid="out")
    )


def add_connect(job: Job) -> None:
    first = job.source(clicks("left", 4), uid="left").key_by("user_id")
    second = job.source(clicks("right", 5), uid="right").key_by("user_id")
    first.connect(second).process(CountBothInputs(), uid="both").sink(ParquetSink(), uid="both-out")


def every_kind_job() -> Job:
    """One job that calls every step-making method of the API (three chains: a graph, not
    runnable; the DataFrame stage runs on Spark: tests/integration/spark/test_spark_stages.py)."""
    job = Job("every-kind", parallelism=2, max_parallelism=16)
    add_chain(job)
    add_connect(job)
    job.source(clicks("sql", 6), uid="sql").spark(lambda df: df).sink(ParquetSink(), uid="sql-out")
    return job


def runnable(add: Any) -> Job:
    job = Job("one-chain", parallelism=2, max_parallelism=16)
    add(job)
    return job


def test_every_step_the_api_makes_has_a_spec_type_with_a_registered_builder() -> None:
    job = every_kind_job()
    made = {type(step.spec) for step in job.graph.steps} | {KeyBySpec}  # connect consumed its key_by steps
    assert made == set(STEP_SPECS)
    assert set(BUILDERS) == set(STEP_SPECS)
    assert len({spec.kind for spec in STEP_SPECS}) == len(STEP_SPECS), "one kind per spec type"
    assert all(step.kind == step.spec.kind for step in job.graph.steps)


def test_each_stage_builds_the_operators_of_its_steps_in_order() -> None:
    kinds = [[type(op) for op in build_chain_operators(stage)] for stage in every_kind_job().graph.stages()]
    assert kinds == [
        [MapOperator, MapOperator, FilterOperator, AsyncEnrichOperator],
        [DeduplicateOperator],
        [ProcessOperator],
        [WindowOperator],
        [WindowOperator],
        [],
        [],
        [CoProcessOperator],
        [],  # source -> spark (run by the driver, no operator) -> sink
    ]


def test_a_spec_type_without_a_builder_is_refused_not_skipped() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Unregistered(StepSpec):
        kind = "unregistered"

    with pytest.raises(TypeError, match="no operator builder for Unregistered"):
        build_operator(Unregistered(), OperatorSite(None, None))


def test_a_keyed_builder_needs_a_uid_and_a_key() -> None:
    spec = next(s.spec for s in every_kind_job().graph.steps if s.uid == "dedup")
    with pytest.raises(ValueError, match="uid and a key_by"):
        build_operator(spec, OperatorSite("dedup", None))


def test_specs_are_frozen_and_steps_derive_kind_and_flags_from_them() -> None:
    job = every_kind_job()
    step = next(s for s in job.graph.steps if s.uid == "counts")
    assert isinstance(step.spec, WindowSpec)
    with pytest.raises(dataclasses.FrozenInstanceError):
        step.spec.allowed_lateness_ms = 5  # type: ignore[misc]
    assert (step.kind, step.stateful, step.keyed) == ("window", True, True)
    source = job.graph.sources[0]
    assert (source.kind, source.stateful, source.keyed, source.spec.restorable) == (
        "source",
        True,
        False,
        True,
    )
    sink = job.graph.sinks[0]
    assert (sink.kind, sink.stateful, sink.spec.restorable) == ("sink", True, False)
    connect = next(s for s in job.graph.steps if s.uid == "both")
    assert isinstance(connect.spec, ConnectSpec) and connect.spec.keys == ("user_id", "user_id")


def test_a_window_with_a_late_output_has_a_side_output_that_acknowledges() -> None:
    job = every_kind_job()
    late = ParquetSink()
    counts = next(s for s in job.graph.steps if s.uid == "counts")
    counts.spec = dataclasses.replace(counts.spec, late_output=late)  # type: ignore[arg-type]
    assert counts.side_outputs() == (SideOutput(tag="late", uid="counts-late", sink=late),)
    assert next(s for s in job.graph.steps if s.uid == "sessions").side_outputs() == ()
    assert sink_specs(job)["counts-late"] is late
    assert {t.uid for t in expected_tasks(job)} >= {"counts", "counts-late"}


def test_a_source_spec_lags_its_watermark_by_the_out_of_orderness() -> None:
    assert SourceSpec(clicks(), out_of_orderness_ms=2_000).watermark_lag_ms == 2_000
    assert SourceSpec(clicks(), out_of_orderness_ms=None).watermark_lag_ms == 0  # type: ignore[arg-type]


def restorable(job: Job) -> dict[str, dict[str, str]]:
    return {s.uid: s.spec.state_kinds() for s in job.graph.steps if s.uid and s.spec.restorable}


def run(job: Job, tmp_path: Path, epochs: int = 3) -> tuple[str, int]:
    uri, clock = tmp_path.as_uri(), ManualClock(DEFAULT_START_MS)
    for _ in range(epochs):
        clock.advance(10_000)
        report = run_cycle(job, uri, clock)
        assert report.status == "completed", report
    assert report.checkpoint_id is not None
    return uri, report.checkpoint_id


@pytest.mark.parametrize("add", [add_chain, add_connect], ids=["chain", "connect"])
def test_spec_state_kinds_are_what_a_checkpoint_holds_and_a_restore_plan_reports(
    add: Any, tmp_path: Path
) -> None:
    """Includes the columnar Count window (``window_columns``: accumulators outside the backend)."""
    job = runnable(add)
    uri, n = run(job, tmp_path)
    snapshot = from_checkpoint(open_store(uri), job.job_id, n, job.max_parallelism)
    reported = {op.uid: dict(op.states) for op in snapshot_shape(snapshot).operators}
    declared = {op.uid: dict(op.states) for op in job_shape(job).operators if op.stateful}
    expected = restorable(job)
    if add is add_chain:
        assert expected["counts"] == {"acc": "value"}
        # session windows declare both modes' states (each reads the other's); this one, without
        # allowed lateness, writes ``session`` only
        assert expected["sessions"] == {"session": "value", "sessions": "value"}
        assert reported["sessions"] == {"session": "value"}
        expected["sessions"] = reported["sessions"]
        assert expected["activity"] == {"total": "value", "session": "value"}
        assert expected["clicks"] == {"positions": "operator_list"} and "out" not in expected
    else:
        assert expected["both"] == {"counts": "map"}
    assert reported == expected
    assert declared == restorable(job)
