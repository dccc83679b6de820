"""Issue 23 item 1: keyed value state larger than its memory budget (``Job(state_memory_mb=...)``).

A batch process function whose state (about 40K keys x ~150 bytes, several times the 1 MiB budget)
lives in a spill store on local disk gives the same output and the same state (the canonical rows
every restore, savepoint and ``state_digest`` read) as the same job with its state in memory,
across rescales 4 -> 2 -> 8 and a crash at every kill point; a checkpoint written by either backend
restores on the other, and so does a savepoint; a checkpoint ships only the run files written since
the checkpoint it restored from; the store's own accounting of its memory stays under the budget."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from spark_jobs.api.functions import BatchProcessFunction
from spark_jobs.api.graph import JobDefinitionError
from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.chaos.observe import state_digest
from spark_jobs.cli import main as cli
from spark_jobs.lifecycle.restore import RestoreRequest, restore
from spark_jobs.lifecycle.savepoint import take_savepoint
from spark_jobs.runtime import warm
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.runtime.operators.keyed import IN_MEMORY_NOTE
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core import CompletedCheckpointStore, JobLayout, checkpoint_history
from state_store.core.errors import BadInputError
from state_store.core.state.backend import shared_key_group_cache
from state_store.monitoring.html import detail_page
from state_store.monitoring.reader import CheckpointStats
from state_store.storage import open_store
from state_store.testing import ManualClock
from tests.unit.runtime import spill_epochs
from tests.unit.runtime.spill_epochs import run_epochs

STEP = 10_000
IDLE_MS = 25_000
MAXP = 32
SCALES = [4, 4, 2, 2, 8, 8]
BUDGET_MB = 1


class WideTotals(BatchProcessFunction):
    """Per user: events, total amount, the largest page trail seen (a long string) and a deadline;
    users idle for ``IDLE_MS`` of event time are emitted as expired and forgotten (timers, clears)."""

    state_schema = pa.schema(
        [("count", pa.int64()), ("total", pa.float64()), ("trail", pa.string()), ("deadline", pa.int64())]
    )

    def process(self, rows: pa.Table, state: pa.Table, ctx: Any) -> pa.Table:
        chunk = rows.group_by("key", use_threads=False).aggregate(
            [([], "count_all"), ("amount", "sum"), ("_ts", "max"), ("trail", "max")]
        )
        mine = state.take(pc.index_in(chunk.column("key"), state.column("key")))
        count = pc.add(pc.coalesce(mine.column("count"), 0), chunk.column("count_all"))
        total = pc.add(pc.coalesce(mine.column("total"), 0.0), chunk.column("amount_sum"))
        deadline = pc.add(chunk.column("_ts_max"), IDLE_MS)
        old = mine.column("deadline")
        ctx.update_state(
            pa.table(
                {"key": chunk.column("key"), "count": count, "total": total,
                 "trail": chunk.column("trail_max"), "deadline": deadline}
            )
        )  # fmt: skip
        ctx.delete_timers(pc.filter(chunk.column("key"), pc.is_valid(old)), pc.drop_null(old))
        ctx.register_timers(chunk.column("key"), deadline)
        small = pc.equal(pc.bit_wise_and(count, 7), 1)  # emit a sample of the updates
        return pa.table(
            {"user_id": chunk.column("key"), "count": count, "total": total,
             "expired": pa.repeat(False, chunk.num_rows), "_ts": chunk.column("_ts_max")}
        ).filter(small)  # fmt: skip

    def on_timers(self, timers: pa.Table, state: pa.Table, ctx: Any) -> pa.Table:
        ctx.clear_state(timers.column("key"))
        return pa.table(
            {"user_id": timers.column("key"), "count": state.column("count"), "total": state.column("total"),
             "expired": pa.repeat(True, timers.num_rows), "_ts": timers.column("timestamp")}
        )  # fmt: skip


def with_amount_and_trail(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``amount`` (a float) and ``trail``: the page repeated to about 1 KB (wide state)."""
    amount = pc.multiply(pc.cast(batch.column("value"), pa.float64()), 0.1)
    trail = pc.binary_repeat(pc.binary_join_element_wise(batch.column("page"), "|", ""), 180)
    return batch.append_column("amount", amount).append_column("trail", trail)


def job_of(parallelism: int, spill: bool, state_dir: Path, cap: int = 1_000_000) -> Job:
    job = Job(
        "wide",
        parallelism=parallelism,
        max_parallelism=MAXP,
        chunk_size=4_096,
        max_records_per_epoch=cap,
        state_memory_mb=BUDGET_MB if spill else None,
        state_dir=str(state_dir),
    )
    source = GeneratorSource(
        uid="clicks", partitions=2, seed=5, events_per_second=[360, 240], out_of_orderness_ms=[1_500, 500],
        keys=12_000, start_ms=DEFAULT_START_MS,
    )  # fmt: skip
    (
        job.source(source, uid="clicks", out_of_orderness_ms=1_500)
        .map(with_amount_and_trail)
        .key_by("user_id")
        .process(WideTotals(), uid="totals")
        .sink(ParquetSink(), uid="out")
    )  # fmt: skip
    return job


def run(
    uri: str, spill: bool | list[bool], state_dir: Path, epochs: int = 6, kill: str | None = None
) -> tuple[list[str], dict[str, Any]]:
    modes = spill if isinstance(spill, list) else [spill] * epochs
    run_epochs(lambda p, s: job_of(p, s, state_dir), uri, SCALES[:epochs], modes, STEP, kill)
    return outcome(uri)


def outcome(uri: str) -> tuple[list[str], dict[str, Any]]:
    return spill_epochs.outcome(uri, "wide", MAXP)


def latest_tasks(uri: str) -> list[Any]:
    return spill_epochs.latest_tasks(uri, "wide", "totals")


def spill_entries(uri: str) -> list[dict[str, Any]]:
    """The spill parts of the latest checkpoint's acks of ``totals``."""
    return [t.snapshot["spill"] for t in latest_tasks(uri) if "spill" in t.snapshot]


@pytest.fixture(scope="module")
def in_memory(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("heap")
    return run((tmp / "store").as_uri(), False, tmp / "state")


def test_state_on_disk_equals_state_in_memory_across_rescales(
    tmp_path: Path, in_memory: tuple[list[str], dict[str, Any]]
) -> None:
    spilled = run((tmp_path / "store").as_uri(), True, tmp_path / "state")
    assert spilled == in_memory
    assert any("True" in r for r in spilled[0]) and any("False" in r for r in spilled[0])
    assert len(spilled[1]["totals"]) > 5_000  # the state really holds many keys
    entries = spill_entries((tmp_path / "store").as_uri())
    assert len(entries) == SCALES[-1]  # every subtask's state is on disk, none in state files
    on_disk = sum(run["file"]["size"] for e in entries for run in e["runs"])
    disk = sorted(t.metrics["state_on_disk_bytes"] for t in latest_tasks((tmp_path / "store").as_uri()))
    assert disk[0] > BUDGET_MB << 20, disk  # every subtask's state exceeds its budget, at 8 subtasks too
    assert on_disk > 8 * (BUDGET_MB << 20), on_disk
    assert not list((tmp_path / "state").rglob("*.arrow")), "a subtask left its spill directory behind"
    # the process-wide key -> key group cache is held to a tenth of the budget, not every key
    assert 0 < len(shared_key_group_cache(MAXP)) <= (BUDGET_MB << 20) // 10 // 128


@pytest.fixture(scope="module")
def in_memory_4(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("heap4")
    return run((tmp / "store").as_uri(), False, tmp / "state", epochs=4)


@pytest.mark.parametrize(
    "point", ["after_state_upload", "before_decision", "after_metadata", "mid_sink_commit"]
)
def test_a_crash_at_every_kill_point_recovers_exactly_with_state_on_disk(
    tmp_path: Path, point: str, in_memory_4: tuple[list[str], dict[str, Any]]
) -> None:
    """Epochs at parallelism 4, 4, 2, 2: the crash comes in the first epoch from the second on
    that reaches the point, the rescale after it. Four points here: the spill lifecycle (restore,
    snapshot, upload, adoption) is ``KeyedOperator``'s for every operator that keeps state on disk,
    and ``test_spill_keyed_state`` crashes it at all twelve."""
    assert run((tmp_path / "store").as_uri(), True, tmp_path / "state", epochs=4, kill=point) == in_memory_4


def test_checkpoints_written_by_either_backend_restore_on_the_other(
    tmp_path: Path, in_memory: tuple[list[str], dict[str, Any]]
) -> None:
    """The job switches backend between epochs (and rescales): disk -> memory -> disk -> memory."""
    modes = [True, False, True, True, False, True]
    assert run((tmp_path / "store").as_uri(), modes, tmp_path / "state") == in_memory
    assert len(spill_entries((tmp_path / "store").as_uri())) == SCALES[-1]


def test_a_savepoint_written_by_either_backend_restores_on_the_other(tmp_path: Path) -> None:
    """Savepoints are canonical: one taken with the state on disk equals one taken in memory row for
    row, and each restores into either backend with the same output and state afterwards."""
    locations = {}
    for spill in (True, False):
        uri = (tmp_path / f"source-{spill}").as_uri()
        clock = ManualClock(DEFAULT_START_MS)
        for epoch in range(3):
            clock.advance(STEP)
            assert (
                run_cycle(
                    job_of(SCALES[epoch], spill, tmp_path / "state"), uri, clock, executor="local"
                ).status
                == "completed"
            )
        info = take_savepoint(job_of(2, spill, tmp_path / "state"), uri, clock, f"sp-{spill}")
        locations[spill] = info["location"]
    frames = [
        pd.read_parquet(Path(loc.removeprefix("file://")) / "totals" / "state.parquet")
        for loc in locations.values()
    ]
    frames = [f.sort_values(["key_group", "key"]).reset_index(drop=True) for f in frames]
    assert len(frames[0]) > 5_000
    pd.testing.assert_frame_equal(frames[0], frames[1])

    results = {}
    # heap -> heap is the reference; disk -> disk restores like a checkpoint (tested above)
    for written_by, restored_on in ((False, False), (True, False), (False, True)):
        location = locations[written_by]
        target = (tmp_path / f"target-{written_by}-{restored_on}").as_uri()
        clock = ManualClock(DEFAULT_START_MS + 3 * STEP)
        job = job_of(4, restored_on, tmp_path / "state")
        assert restore(job, target, clock, RestoreRequest(source=location)).plan.ok
        for epoch in range(2):
            clock.advance(STEP)
            job = job_of(SCALES[epoch + 3], restored_on, tmp_path / "state")
            assert run_cycle(job, target, clock, executor="local").status == "completed"
        store = open_store(target)
        rows = sorted(repr(sorted(r.items())) for r in read_committed(store, "wide", "out").to_pylist())
        completed, _ = CompletedCheckpointStore.recover(store, JobLayout("wide"), 1)
        latest = completed.latest()
        assert latest is not None
        results[(written_by, restored_on)] = (rows, state_digest(store, latest.metadata, MAXP))
    first = results[(False, False)]
    assert first[0] and first[1]["totals"]
    assert all(r == first for r in results.values()), [k for k, r in results.items() if r != first]


def test_a_checkpoint_ships_only_the_run_files_written_since_its_base(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two epochs load about 30K keys, then epochs of 200 events each update a few of them: those
    checkpoints reference the run files the previous one uploaded and ship only the new runs (a
    size-tiered merge of small runs included), not the whole state. The store's own accounting of
    its memory stays under the budget, and the ack says so."""
    uri = (tmp_path / "store").as_uri()
    clock = ManualClock(DEFAULT_START_MS)
    shipped, sizes, written = [], [], []
    known: set[str] = set()
    for epoch in range(6):
        clock.advance(STEP)
        job = job_of(2, True, tmp_path / "state", cap=1_000_000 if epoch < 2 else 100)
        assert run_cycle(job, uri, clock, executor="local").status == "completed"
        entries = spill_entries(uri)
        files = {r["file"]["key"]: r["file"]["size"] for e in entries for r in e["runs"]}
        shipped.append(sum(size for key, size in files.items() if key not in known))
        written.append(sum(int(t.metrics["bytes_written"]) for t in latest_tasks(uri)))
        sizes.append(sum(files.values()))
        known |= set(files)
        for task in latest_tasks(uri):
            assert 0 < task.metrics["state_memory_peak_bytes"] <= BUDGET_MB << 20, task.metrics
            assert task.metrics["state_on_disk_bytes"] > 0
    assert sizes[-1] > BUDGET_MB << 20
    # the operator's view: `checkpoints show` and the Checkpoints page say where the state lives
    assert cli(["checkpoints", "show", "--job", "wide", "--store", uri]) == 0
    totals = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("totals"))
    assert re.search(r"state on local disk [\d.]+ MiB, store peak [\d.]+ KiB", totals), totals
    latest_id = max(
        r.checkpoint_id for r in checkpoint_history(open_store(uri), "wide") if r.status == "completed"
    )
    page = detail_page(CheckpointStats(open_store(uri)).detail("wide", latest_id))
    assert "of state on local disk" in page and "state on disk bytes" in page
    # Each small epoch ships its new runs and, now and then, a size-tiered merge of runs of similar
    # size (measured: 2-17% of the state per checkpoint, 10% on average); a full checkpoint would be
    # 100% every time. The acks count exactly the files their checkpoint added.
    assert all(s < 0.25 * total for s, total in zip(shipped[2:], sizes[2:])), (shipped, sizes)
    assert sum(shipped[2:]) < 0.15 * sum(sizes[2:]), (shipped, sizes)
    assert written[2:] == shipped[2:], (written, shipped)


def test_bad_budgets_and_keys_the_disk_cannot_hold_are_refused(tmp_path: Path) -> None:
    for bad in (0, -1, 1.5, True, "64"):
        with pytest.raises(
            JobDefinitionError, match=rf"state_memory_mb={bad!r} is invalid: use an integer >= 1"
        ):
            Job("wide", state_memory_mb=bad)  # type: ignore[arg-type]
    job = Job(
        "structs", parallelism=1, max_parallelism=MAXP, state_memory_mb=1, state_dir=str(tmp_path / "s")
    )
    source = GeneratorSource(
        uid="clicks", partitions=1, seed=1, events_per_second=[50], keys=10, start_ms=DEFAULT_START_MS
    )
    (
        job.source(source, uid="clicks")
        .map(lambda b: b.append_column("amount", pc.cast(b.column("value"), pa.float64())))
        .key_by(lambda b: pc.cast(b.column("value"), pa.float64()))
        .process(WideTotals(), uid="totals")
        .sink(ParquetSink(), uid="out")
    )
    with pytest.raises(
        BadInputError, match=r"keys of type double cannot be kept on disk .*set state_memory_mb=None"
    ):
        run_cycle(job, (tmp_path / "store").as_uri(), ManualClock(DEFAULT_START_MS + STEP), executor="local")


def test_warm_epochs_adopt_the_store_on_disk_and_equal_the_in_memory_run(
    tmp_path: Path, in_memory: tuple[list[str], dict[str, Any]]
) -> None:
    """The 6 epochs of ``run`` with local recovery on: the same output and state; each rescale reads
    the store, the epochs after it adopt the store on disk; clearing the kept chains deletes it."""
    uri, state_dir = (tmp_path / "store").as_uri(), tmp_path / "state"
    warm.clear()
    clock = ManualClock(DEFAULT_START_MS)
    how = []
    try:
        for epoch in range(6):
            job = job_of(SCALES[epoch], True, state_dir)
            job.local_recovery = True
            clock.advance(STEP)
            assert run_cycle(job, uri, clock, executor="local").status == "completed"
            how.append(",".join(sorted({str(t.metrics.get("local_recovery")) for t in latest_tasks(uri)})))
        assert list(state_dir.rglob("*.arrow")), "the kept stores' files are on disk between epochs"
    finally:
        warm.clear()
    assert not list(state_dir.rglob("*.arrow")), "disposed kept stores left their files behind"
    assert outcome(uri) == in_memory
    # scales 4, 4, 2, 2, 8, 8
    assert how == ["store", "adopted", "store", "adopted", "store", "adopted"], how


# A damaged local run file (changed, truncated, deleted) and crashes between warm epochs at four
# kill points: tests/unit/review23b/test_spill_local_recovery.py.


def test_operators_that_keep_state_in_memory_say_so_once_in_the_log_and_in_every_ack(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from spark_jobs.api.windows import Count, TumblingEventTimeWindows

    uri = (tmp_path / "store").as_uri()
    clock = ManualClock(DEFAULT_START_MS)
    for _ in range(2):
        job = Job(
            "counts", parallelism=2, max_parallelism=MAXP, state_memory_mb=1, state_dir=str(tmp_path / "s")
        )
        source = GeneratorSource(uid="clicks", partitions=1, seed=3, events_per_second=[40], keys=50,
                                 start_ms=DEFAULT_START_MS)  # fmt: skip
        job.source(source, uid="clicks").key_by("page").window(
            TumblingEventTimeWindows(2_000), Count(), uid="per-page"
        ).sink(ParquetSink(), uid="out")
        clock.advance(STEP)
        with caplog.at_level("WARNING", logger="spark_jobs.runtime.operators.keyed"):
            assert run_cycle(job, uri, clock, executor="local").status == "completed"
    told = [r.getMessage() for r in caplog.records if "per-page" in r.getMessage()]
    assert told == [f"job counts operator per-page: {IN_MEMORY_NOTE}"], (
        told
    )  # once, for 2 subtasks x 2 epochs
    completed, _ = CompletedCheckpointStore.recover(open_store(uri), JobLayout("counts"), 1)
    latest = completed.latest()
    assert latest is not None
    notes = {t.metrics.get("state_in_memory") for t in latest.metadata.tasks if t.task.uid == "per-page"}
    assert notes == {IN_MEMORY_NOTE}
