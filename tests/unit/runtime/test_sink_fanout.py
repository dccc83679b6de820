"""Fan-out to sinks: several sinks tap the steps of one chain (``spark_jobs.runtime.chain``).

Each sink of a fan-out job must hold exactly what the same branch written by a job with that one
sink holds -- fault-free, across rescales 2 -> 4 -> 1 and after a crash at every kill point -- and a
graph that branches operators (not sinks) is refused at definition with a one-line error.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_jobs.api.graph import JobDefinitionError
from spark_jobs.api.job import DataStream, Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.api.windows import Aggregates, Count, Sum, TumblingEventTimeWindows
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core import killpoints
from state_store.storage import open_store
from tests.unit.runtime.support import epochs_with_one_crash

STEP = 4_000
SCALES = [2, 2, 4, 4, 1, 1]
BRANCHES = ("raw", "scaled", "windows", "big-windows")


def _scaled(b: pa.RecordBatch) -> pa.RecordBatch:
    return b.append_column("amount", pc.multiply(pc.cast(b.column("value"), pa.float64()), 0.5))


def _mean(b: pa.RecordBatch) -> pa.RecordBatch:
    return b.append_column("mean", pc.divide(b.column("total"), pc.cast(b.column("n"), pa.float64())))


def job_of(parallelism: int, only: str | None = None) -> Job:
    """The fan-out job; ``only`` keeps one branch's sink (the reference it must equal)."""
    job = Job(f"fanout-{only or 'all'}", parallelism=parallelism, max_parallelism=16, chunk_size=30)
    source = GeneratorSource(
        uid="clicks", partitions=2, seed=3, events_per_second=[30, 20], out_of_orderness_ms=[800, 200],
        keys=25, start_ms=DEFAULT_START_MS,
    )  # fmt: skip

    def sink(stream: DataStream, uid: str) -> None:
        if only in (None, uid):
            stream.sink(ParquetSink(), uid=uid)

    clicks = job.source(source, uid="clicks", out_of_orderness_ms=800)
    sink(clicks, "raw")  # taps the source stage's input of its first operator
    scaled = clicks.map(_scaled)
    sink(scaled, "scaled")  # the source stage's end, which also feeds the key_by
    windows = scaled.key_by("user_id").window(
        TumblingEventTimeWindows(2_000), Aggregates(Count(name="n"), Sum("amount", name="total")), uid="w"
    )
    sink(windows, "windows")  # between the window and the filter
    sink(windows.filter(lambda b: pc.greater(b.column("n"), 1)).map(_mean), "big-windows")
    return job


def run(uri: str, only: str | None = None, kill: str | None = None) -> dict[str, list[str]]:
    jobs = [job_of(parallelism, only) for parallelism in SCALES]
    epochs_with_one_crash(jobs, uri, STEP, kill, lambda job: job.parallelism == 4)
    job = jobs[-1]
    store = open_store(uri)
    wanted = [only] if only else list(BRANCHES)
    out = {}
    for uid in wanted:
        rows = read_committed(store, job.job_id, uid).to_pylist()
        out[uid] = sorted(repr(sorted(r.items())) for r in rows)
    return out


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """Each branch written by a job whose only sink it is."""
    out: dict[str, list[str]] = {}
    for uid in BRANCHES:
        out.update(run(tmp_path_factory.mktemp(uid).as_uri(), only=uid))
    return out


def test_every_sink_of_a_fan_out_holds_what_its_branch_alone_writes(
    tmp_path: Path, references: dict[str, list[str]]
) -> None:
    got = run(tmp_path.as_uri())
    assert got == references
    assert all(got[uid] for uid in BRANCHES), "every branch wrote rows"
    assert len(got["raw"]) == len(got["scaled"]) and len(got["big-windows"]) < len(got["windows"])


@pytest.mark.parametrize("point", killpoints.ALL)
def test_a_crash_at_every_kill_point_leaves_every_sink_exact(
    tmp_path: Path, point: str, references: dict[str, list[str]]
) -> None:
    assert run(tmp_path.as_uri(), kill=point) == references


def _two_stream_job() -> tuple[Job, DataStream]:
    job = Job("bad-fanout", parallelism=1, max_parallelism=8)
    source = GeneratorSource(uid="c", partitions=1, seed=1, events_per_second=5, keys=3)
    return job, job.source(source, uid="c").map(lambda b: b)


def test_branching_operators_inside_a_stage_is_refused_at_definition() -> None:
    job, mapped = _two_stream_job()
    mapped.filter(lambda b: pc.greater(b.column("value"), 0)).sink(ParquetSink(), uid="a")
    mapped.map(lambda b: b, name="second").sink(ParquetSink(), uid="b")
    with pytest.raises(JobDefinitionError, match=r"map step 'second' branches off .*only sinks may branch"):
        job.graph.stages()


def test_a_second_exchange_out_of_one_stage_is_refused_at_definition() -> None:
    job, mapped = _two_stream_job()
    mapped.key_by("user_id").deduplicate(ttl_ms=10, uid="d1").sink(ParquetSink(), uid="a")
    mapped.key_by("page").deduplicate(ttl_ms=10, uid="d2").sink(ParquetSink(), uid="b")
    with pytest.raises(JobDefinitionError, match=r"second exchange out of the same stage"):
        job.graph.stages()
