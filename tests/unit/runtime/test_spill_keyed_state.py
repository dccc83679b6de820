"""Issue 23 item 1 for the per-key API: a ``KeyedProcessFunction`` whose ``ValueState``,
``ListState`` and ``MapState`` (and timers) exceed its 1 MiB budget keeps them on local disk
(``spark_jobs.runtime.spill_rows``) and gives the same output and the same state as the same job
with its state in memory: across rescales 4 -> 2 -> 8, a crash at every kill point, switches of
backend between epochs, and savepoints written by either backend restored on the other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from spark_jobs.api.functions import KeyedProcessFunction
from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.chaos.observe import state_digest
from spark_jobs.lifecycle.restore import RestoreRequest, restore
from spark_jobs.lifecycle.savepoint import take_savepoint
from spark_jobs.runtime import warm
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sinks import read_committed
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core import CompletedCheckpointStore, JobLayout, killpoints
from state_store.core.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from state_store.storage import open_store
from state_store.testing import ManualClock
from tests.unit.runtime import spill_epochs
from tests.unit.runtime.spill_epochs import run_epochs
from tests.unit.runtime.test_spill_state import with_amount_and_trail

STEP = 10_000
IDLE_MS = 25_000
MAXP = 128
"""Flink's default; the store needs its budget to exceed a few key groups of state (1/MAXP each)."""
SCALES = [4, 2, 8, 8, 2, 4]
BUDGET_MB = 1


class Visits(KeyedProcessFunction):
    """Per user: events and amount (value states), the last three pages (list state), visits per
    page (map state), the longest trail (a ~1 KB string) and an idle deadline (a timer that emits the
    user as expired and clears all of it)."""

    count = ValueStateDescriptor[int]("count")
    total = ValueStateDescriptor[float]("total")
    trail = ValueStateDescriptor[str]("trail")
    deadline = ValueStateDescriptor[int]("deadline")
    recent = ListStateDescriptor[str]("recent")
    pages = MapStateDescriptor[str, int]("pages")
    state_descriptors = (count, total, trail, deadline, recent, pages)

    def process_key(self, key: Any, rows: list[dict[str, Any]], ctx: Any) -> None:
        count, total, trail = ctx.state(self.count), ctx.state(self.total), ctx.state(self.trail)
        recent, pages, deadline = ctx.state(self.recent), ctx.state(self.pages), ctx.state(self.deadline)
        n = (count.value() or 0) + len(rows)
        count.update(n)
        total.update((total.value() or 0.0) + sum(r["amount"] for r in rows))
        trail.update(max([trail.value() or "", *(r["trail"] for r in rows)]))
        recent.update([*recent.get(), *(r["page"] for r in rows)][-3:])
        for r in rows:
            pages.put(r["page"], (pages.get(r["page"]) or 0) + 1)
        old = deadline.value()
        if old is not None:
            ctx.delete_event_time_timer(old)
        new = max(r["_ts"] for r in rows) + IDLE_MS
        deadline.update(new)
        ctx.register_event_time_timer(new)
        if n & 7 == 1:
            ctx.emit(self._row(key, ctx, expired=False))

    def on_timer(self, timestamp: int, ctx: Any) -> None:
        ctx.emit({**self._row(ctx.current_key, ctx, expired=True), "_ts": timestamp})
        for descriptor in self.state_descriptors:
            ctx.state(descriptor).clear()

    def _row(self, key: Any, ctx: Any, expired: bool) -> dict[str, Any]:
        pages = ctx.state(self.pages).items()
        return {
            "user_id": key,
            "count": ctx.state(self.count).value(),
            "total": ctx.state(self.total).value(),
            "recent": ",".join(ctx.state(self.recent).get()),
            "pages": repr(sorted(pages)),
            "expired": expired,
        }


def job_of(parallelism: int, spill: bool, state_dir: Path) -> Job:
    job = Job(
        "visits",
        parallelism=parallelism,
        max_parallelism=MAXP,
        chunk_size=4_096,
        state_memory_mb=BUDGET_MB if spill else None,
        state_dir=str(state_dir),
    )
    source = GeneratorSource(
        uid="clicks", partitions=2, seed=7, events_per_second=[200, 120], out_of_orderness_ms=[1_500, 500],
        keys=8_000, start_ms=DEFAULT_START_MS,
    )  # fmt: skip
    (
        job.source(source, uid="clicks", out_of_orderness_ms=1_500)
        .map(with_amount_and_trail)
        .key_by("user_id")
        .process(Visits(), uid="visits")
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
    return spill_epochs.outcome(uri, "visits", MAXP)


def latest_tasks(uri: str) -> list[Any]:
    return spill_epochs.latest_tasks(uri, "visits", "visits")


@pytest.fixture(scope="module")
def in_memory(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("heap")
    return run((tmp / "store").as_uri(), False, tmp / "state")


def test_per_key_state_on_disk_equals_state_in_memory_across_rescales(
    tmp_path: Path, in_memory: tuple[list[str], dict[str, Any]]
) -> None:
    uri = (tmp_path / "store").as_uri()
    spilled = run(uri, True, tmp_path / "state")
    assert spilled == in_memory
    rows, digest = spilled
    assert any("('expired', True)" in r for r in rows) and any("('expired', False)" in r for r in rows)
    names = {entry[1] for entry in digest["visits"] if entry[0] != "timers"}
    assert names == {"count", "total", "trail", "deadline", "recent", "pages"}, names
    tasks = latest_tasks(uri)
    entries = [t.snapshot["spill"] for t in tasks if "spill" in t.snapshot]
    assert len(entries) == SCALES[-1]  # every subtask's state is on disk, none in state files
    assert all(e["form"] == "rows" for e in entries)
    assert {k: v for e in entries for k, v in e["kinds"].items()} == {
        "count": "value", "total": "value", "trail": "value", "deadline": "value",
        "recent": "list", "pages": "map",
    }  # fmt: skip
    disk = sorted(t.metrics["state_on_disk_bytes"] for t in tasks)
    assert disk[0] > BUDGET_MB << 20, disk  # every subtask's state exceeds its budget
    for task in tasks:
        assert 0 < task.metrics["state_memory_peak_bytes"] <= BUDGET_MB << 20, task.metrics
        assert "state_in_memory" not in task.metrics
    assert not list((tmp_path / "state").rglob("*.arrow")), "a subtask left its spill directory behind"


@pytest.fixture(scope="module")
def in_memory_4(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("heap4")
    return run((tmp / "store").as_uri(), False, tmp / "state", epochs=4)


@pytest.mark.parametrize("point", killpoints.ALL)
def test_a_crash_at_every_kill_point_recovers_exactly_with_per_key_state_on_disk(
    tmp_path: Path, point: str, in_memory_4: tuple[list[str], dict[str, Any]]
) -> None:
    """Epochs at parallelism 4, 2, 8, 8: the crash comes in the first epoch from the second on that
    reaches the point (most in the rescale 4 -> 2), and the retry recovers exactly."""
    assert run((tmp_path / "store").as_uri(), True, tmp_path / "state", epochs=4, kill=point) == in_memory_4


def test_checkpoints_of_either_backend_restore_on_the_other_with_per_key_state(
    tmp_path: Path, in_memory: tuple[list[str], dict[str, Any]]
) -> None:
    """The job switches backend between epochs (and rescales): disk -> memory -> disk -> memory."""
    modes = [True, False, True, True, False, True]
    assert run((tmp_path / "store").as_uri(), modes, tmp_path / "state") == in_memory


def test_a_savepoint_of_per_key_state_written_by_either_backend_restores_on_the_other(tmp_path: Path) -> None:
    locations = {}
    for spill in (True, False):
        uri = (tmp_path / f"source-{spill}").as_uri()
        clock = ManualClock(DEFAULT_START_MS)
        for epoch in range(2):
            clock.advance(STEP)
            job = job_of(SCALES[epoch], spill, tmp_path / "state")
            assert run_cycle(job, uri, clock, executor="local").status == "completed"
        info = take_savepoint(job_of(2, spill, tmp_path / "state"), uri, clock, f"sp-{spill}")
        locations[spill] = info["location"]
    frames = [
        pd.read_parquet(Path(loc.removeprefix("file://")) / "visits" / "state.parquet")
        for loc in locations.values()
    ]
    frames = [f.sort_values(["key_group", "state", "key", "value"]).reset_index(drop=True) for f in frames]
    assert len(frames[0]) > 5_000 and set(frames[0]["state"]) >= {"recent", "pages", "count"}
    pd.testing.assert_frame_equal(frames[0], frames[1])

    results = {}
    for written_by, restored_on in ((False, False), (True, False), (False, True)):
        target = (tmp_path / f"target-{written_by}-{restored_on}").as_uri()
        clock = ManualClock(DEFAULT_START_MS + 2 * STEP)
        job = job_of(4, restored_on, tmp_path / "state")
        assert restore(job, target, clock, RestoreRequest(source=locations[written_by])).plan.ok
        for epoch in range(2):
            clock.advance(STEP)
            job = job_of(SCALES[epoch + 2], restored_on, tmp_path / "state")
            assert run_cycle(job, target, clock, executor="local").status == "completed"
        store = open_store(target)
        rows = sorted(repr(sorted(r.items())) for r in read_committed(store, "visits", "out").to_pylist())
        completed, _ = CompletedCheckpointStore.recover(store, JobLayout("visits"), 1)
        latest = completed.latest()
        assert latest is not None
        results[(written_by, restored_on)] = (rows, state_digest(store, latest.metadata, MAXP))
    first = results[(False, False)]
    assert first[0] and first[1]["visits"]
    assert all(r == first for r in results.values()), [k for k, r in results.items() if r != first]


def test_warm_epochs_adopt_the_per_key_store_on_disk(
    tmp_path: Path, in_memory_4: tuple[list[str], dict[str, Any]]
) -> None:
    uri, state_dir = (tmp_path / "store").as_uri(), tmp_path / "state"
    warm.clear()
    clock = ManualClock(DEFAULT_START_MS)
    how = []
    try:
        for epoch in range(4):
            job = job_of(SCALES[epoch], True, state_dir)
            job.local_recovery = True
            clock.advance(STEP)
            assert run_cycle(job, uri, clock, executor="local").status == "completed"
            how.append(",".join(sorted({str(t.metrics.get("local_recovery")) for t in latest_tasks(uri)})))
    finally:
        warm.clear()
    assert not list(state_dir.rglob("*.arrow")), "disposed kept stores left their files behind"
    assert outcome(uri) == in_memory_4
    assert how == ["store", "store", "store", "adopted"], how  # scales 4, 2, 8, 8
