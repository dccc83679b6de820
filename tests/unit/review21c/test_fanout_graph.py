"""Review of fan-out to sinks at definition and in a two-input stage: a key_by or an operator that
would make an exchange read another step's rows, a sink tapping a source whose rows a ``.spark``
step replaces, and a sink named like a window's late output are refused in one line; a connect
stage's sink tapping the connect output beside a map after it holds exactly the connect's rows."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_jobs.api.graph import JobDefinitionError
from spark_jobs.api.job import DataStream, Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.api.windows import Aggregates, Count, TumblingEventTimeWindows
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS
from state_store.storage import open_store
from state_store.testing import ManualClock
from tests.unit.runtime.test_connect import CountBothInputs, clicks, orders


def _source() -> tuple[Job, DataStream]:
    job = Job("graph", parallelism=1, max_parallelism=8)
    return job, job.source(clicks(), uid="clicks")


def _same(b: pa.RecordBatch) -> pa.RecordBatch:
    return b


def test_a_key_by_off_a_step_inside_the_chain_is_refused() -> None:
    job, src = _source()
    enriched = src.map(_same, name="enrich")
    enriched.map(_same, name="mask").sink(ParquetSink(), uid="masked")
    enriched.key_by("user_id").deduplicate(ttl_ms=10, uid="d").sink(ParquetSink(), uid="unique")
    with pytest.raises(
        JobDefinitionError,
        match=r"^key_by step 'key_by\(user_id\)' branches off map step 'enrich', which already feeds map "
        r"step 'mask': an exchange reads the end of a chain",
    ):
        job.graph.stages()


def test_an_operator_after_a_step_that_already_feeds_a_key_by_is_refused() -> None:
    job, src = _source()
    enriched = src.map(_same, name="enrich")
    enriched.key_by("user_id").deduplicate(ttl_ms=10, uid="d").sink(ParquetSink(), uid="unique")
    enriched.map(_same, name="mask").sink(ParquetSink(), uid="masked")  # the exchange would read mask's rows
    with pytest.raises(
        JobDefinitionError,
        match=r"^map step 'mask' follows map step 'enrich', whose output already feeds a key_by or connect",
    ):
        job.graph.stages()
    job, src = _source()
    enriched = src.map(_same, name="enrich")
    enriched.key_by("user_id").deduplicate(ttl_ms=10, uid="d").sink(ParquetSink(), uid="unique")
    enriched.sink(ParquetSink(), uid="tap")  # a sink may still tap it
    assert [s.name for s in job.graph.stages()[0].steps] == ["clicks", "enrich", "tap"]


@pytest.mark.parametrize("tap_first", [True, False])
def test_a_sink_on_a_source_whose_rows_a_spark_step_replaces_is_refused(tap_first: bool) -> None:
    job, src = _source()
    if tap_first:
        src.sink(ParquetSink(), uid="raw")
    sql = src.spark(lambda df: df.where("value > 0"))
    sql.sink(ParquetSink(), uid="filtered")
    if not tap_first:
        src.sink(ParquetSink(), uid="raw")
    with pytest.raises(JobDefinitionError, match=r"tap the spark step's output instead$"):
        job.graph.stages()


def test_a_sink_named_like_a_windows_late_output_is_refused() -> None:
    job, src = _source()
    windows = src.key_by("user_id").window(
        TumblingEventTimeWindows(1_000), Aggregates(Count(name="n")), uid="w", late_output=ParquetSink()
    )
    windows.sink(ParquetSink(), uid="w-late")
    with pytest.raises(
        JobDefinitionError,
        match=r"^uid 'w-late' is used by both the late output of window step 'w' \(uid 'w'\) and sink step "
        r"'w-late' \(uid 'w-late'\): uids must be unique",
    ):
        job.graph.stages()


def _connect_job(only: str | None) -> Job:
    job = Job(f"joined-{only or 'all'}", parallelism=2, max_parallelism=16, chunk_size=10)
    a = job.source(clicks(), uid="clicks").key_by("user_id")
    b = job.source(orders(), uid="orders").key_by("user_id")
    both = a.connect(b).process(CountBothInputs(), uid="both")
    if only in (None, "counts"):
        both.sink(ParquetSink(), uid="counts")  # the connect's output, which also feeds the map
    if only in (None, "totals"):
        both.map(lambda t: t.append_column("total", pc.add(t.column("first"), t.column("second")))).sink(
            ParquetSink(), uid="totals"
        )
    return job


def _run(uri: str, only: str | None) -> dict[str, list[str]]:
    clock = ManualClock(DEFAULT_START_MS)
    for _ in range(4):
        clock.advance(15_000)
        job = _connect_job(only)
        assert run_cycle(job, uri, clock, executor="local").status == "completed"
    store = open_store(uri)
    uids = [only] if only else ["counts", "totals"]
    return {u: sorted(map(str, read_committed(store, job.job_id, u).to_pylist())) for u in uids}


def test_a_connect_stage_taps_its_output_beside_a_map_after_it(tmp_path: Path) -> None:
    got = _run((tmp_path / "all").as_uri(), None)
    reference = {**_run((tmp_path / "c").as_uri(), "counts"), **_run((tmp_path / "t").as_uri(), "totals")}
    assert got == reference and got["counts"] and len(got["counts"]) == len(got["totals"])
    assert "'total'" not in got["counts"][0] and "'total'" in got["totals"][0]
