"""Review of fan-out to sinks (issue 21): taps before and after a window, the window's late data,
one sink object shared by every tap, rescales 4 -> 2 -> 8, a crash at every kill point, and
unaligned checkpoints. Every sink must hold exactly the rows its branch alone writes."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.api.windows import Aggregates, Count, TumblingEventTimeWindows
from spark_jobs.runtime.cycle import expected_tasks
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core import killpoints
from state_store.storage import open_store
from tests.unit.runtime.support import epochs_with_one_crash

STEP = 4_000
SCALES = [4, 4, 2, 2, 8, 8]
SHARED = ParquetSink()  # one sink object behind every tap and the late output
BRANCHES = ("keyed", "windows", "tagged", "w-late")


def _tag(b: pa.RecordBatch) -> pa.RecordBatch:
    return b.append_column("tag", pc.multiply(b.column("n"), 10))


def job_of(parallelism: int, only: str | None = None, mode: str = "exactly_once") -> Job:
    """``only`` keeps one main sink (the window and its late output stay whenever it is needed)."""
    job = Job(f"fan-{only or 'all'}", parallelism=parallelism, max_parallelism=16, chunk_size=25, mode=mode)
    source = GeneratorSource(
        uid="clicks", partitions=3, seed=11, events_per_second=[30, 20, 10],
        out_of_orderness_ms=[1_500, 300, 900], keys=20, start_ms=DEFAULT_START_MS,
    )  # fmt: skip
    keyed = job.source(source, uid="clicks", out_of_orderness_ms=100).key_by("user_id")
    if only in (None, "keyed"):
        keyed.sink(SHARED, uid="keyed")  # position 0 of the keyed stage: before the window
    if only == "keyed":
        return job
    windows = keyed.window(
        TumblingEventTimeWindows(1_000), Aggregates(Count(name="n")), uid="w", late_output=SHARED
    )
    if only in (None, "windows", "w-late"):
        windows.sink(SHARED, uid="windows")  # between the window and the map
    if only in (None, "tagged"):
        windows.map(_tag).sink(SHARED, uid="tagged")
    return job


def run(
    uri: str, only: str | None = None, kill: str | None = None, mode: str = "exactly_once"
) -> dict[str, list[str]]:
    jobs = [job_of(parallelism, only, mode) for parallelism in SCALES]
    epochs_with_one_crash(jobs, uri, STEP, kill, lambda job: job.parallelism == 2)
    job = jobs[-1]
    store = open_store(uri)
    wanted = [only] if only and only != "windows" else (["windows", "w-late"] if only else list(BRANCHES))
    return {
        uid: sorted(repr(sorted(r.items())) for r in read_committed(store, job.job_id, uid).to_pylist())
        for uid in wanted
    }


def references(root: Path, mode: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for only in ("keyed", "windows", "tagged"):
        out.update(run((root / only).as_uri(), only=only, mode=mode))
    return out


@pytest.fixture(scope="module")
def aligned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    return references(tmp_path_factory.mktemp("aligned"), "exactly_once")


def test_taps_before_and_after_a_window_with_late_data_hold_their_branches_across_rescales(
    tmp_path: Path, aligned: dict[str, list[str]]
) -> None:
    got = run(tmp_path.as_uri())
    assert got == aligned
    assert all(got[uid] for uid in BRANCHES), "every branch (late data too) wrote rows"


@pytest.mark.parametrize("point", killpoints.ALL)
def test_a_crash_at_every_kill_point_leaves_each_tap_and_the_late_sink_exact(
    tmp_path: Path, point: str, aligned: dict[str, list[str]]
) -> None:
    assert run(tmp_path.as_uri(), kill=point) == aligned


def test_unaligned_fan_out_puts_records_after_the_barrier_in_the_next_transaction_of_every_sink(
    tmp_path: Path,
) -> None:
    reference = references(tmp_path / "ref", "unaligned")
    got = run((tmp_path / "all").as_uri(), mode="unaligned")
    assert got == reference
    assert all(got[uid] for uid in BRANCHES)


def test_completion_waits_for_the_ack_of_every_tap_and_the_late_sink_of_every_subtask() -> None:
    tasks = {(t.uid, t.subtask) for t in expected_tasks(job_of(2))}
    for uid in ("keyed", "windows", "tagged", "w-late", "w"):
        assert {(uid, 0), (uid, 1)} <= tasks, uid
