"""Per-key state on disk through a job's life: a descriptor dropped, renamed and added between
epochs (and backends switched meanwhile), crashes at kill points in epochs whose timers page
through many pages, local recovery with a damaged local run file, and a CoProcessFunction whose two
inputs share state and timers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_jobs.api.functions import CoProcessFunction, KeyedProcessFunction
from spark_jobs.api.job import Job
from spark_jobs.api.sinks import ParquetSink
from spark_jobs.runtime import warm
from spark_jobs.runtime.cycle import run_cycle
from spark_jobs.sources.generator import DEFAULT_START_MS, GeneratorSource
from state_store.core.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from state_store.testing import ManualClock
from tests.unit.review23c.harness import JOB, MAXP, STEP, UID, diff, latest_metadata, result, run
from tests.unit.review23c.test_timers import Chainer


class V1(KeyedProcessFunction):
    count = ValueStateDescriptor[int]("count")
    pages = MapStateDescriptor[str, int]("pages")
    old = ListStateDescriptor[int]("old")
    state_descriptors = (count, pages, old)

    def process_key(self, key: Any, rows: list[dict[str, Any]], ctx: Any) -> None:
        count = ctx.state(self.count)
        count.update((count.value() or 0) + len(rows))
        for r in rows:
            ctx.state(self.pages).put(r["page"], r["value"])
            ctx.state(self.old).add(r["value"] % 10)
        ctx.emit({"key": str(key), "n": count.value(), "old": repr(ctx.state(self.old).get()[-3:])})


class V2(KeyedProcessFunction):
    """``old`` dropped (its state stays, unread), ``pages`` renamed to ``visits`` (starts empty),
    ``count`` kept."""

    count = V1.count
    visits = MapStateDescriptor[str, int]("visits")
    state_descriptors = (count, visits)

    def process_key(self, key: Any, rows: list[dict[str, Any]], ctx: Any) -> None:
        count = ctx.state(self.count)
        count.update((count.value() or 0) + len(rows))
        visits = ctx.state(self.visits)
        for r in rows:
            visits.put(r["page"], (visits.get(r["page"]) or 0) + 1)
        ctx.emit({"key": str(key), "n": count.value(), "old": repr(sorted(visits.items()))})


def test_descriptors_dropped_renamed_and_added_between_epochs_equal_in_memory(tmp_path: Path) -> None:
    fns = [V1, V1, V2, V2, V1, V2]
    scales = [2, 2, 3, 1, 2, 2]
    heap = run((tmp_path / "heap").as_uri(), False, tmp_path / "hs", scales, V1, fns=fns, keys=80, rate=100)
    disk = run((tmp_path / "disk").as_uri(), True, tmp_path / "ds", scales, V1, fns=fns, keys=80, rate=100)
    switched = run(
        (tmp_path / "mixed").as_uri(), [True, False, True, True, False, True], tmp_path / "ms", scales, V1,
        fns=fns, keys=80, rate=100,
    )  # fmt: skip
    assert {e[1] for e in heap[1][UID] if e[0] != "timers"} >= {"count", "pages", "old", "visits"}
    assert disk[0] == heap[0], diff(heap[0], disk[0])
    assert disk[1] == heap[1]
    assert switched == heap


TIMER_SCALES = [2, 2, 3]


@pytest.fixture(scope="module")
def timers_in_memory(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("heap")
    return run((tmp / "store").as_uri(), False, tmp / "state", TIMER_SCALES, Chainer, keys=200, rate=200)


@pytest.mark.parametrize("point", ["after_state_upload", "after_metadata", "mid_sink_commit"])
def test_a_crash_in_an_epoch_of_paged_timers_recovers_exactly(
    tmp_path: Path, point: str, timers_in_memory: tuple[list[str], dict[str, Any]]
) -> None:
    got = run((tmp_path / "store").as_uri(), True, tmp_path / "state", TIMER_SCALES, Chainer,
              keys=200, rate=200, kill=(1, point))  # fmt: skip
    assert got[0] == timers_in_memory[0], diff(timers_in_memory[0], got[0])
    assert got[1] == timers_in_memory[1]


def test_local_recovery_with_a_damaged_run_file_falls_back_and_equals_in_memory(
    tmp_path: Path, timers_in_memory: tuple[list[str], dict[str, Any]]
) -> None:
    uri, state_dir = (tmp_path / "store").as_uri(), tmp_path / "state"
    how: list[set[str]] = []

    def between(epoch: int) -> None:
        if epoch >= 1:
            how.append(
                {
                    str(t.metrics.get("local_recovery"))
                    for t in latest_metadata(uri).tasks
                    if t.task.uid == UID
                }
            )
        if epoch == 2:
            files = sorted(p for p in state_dir.rglob("*.arrow") if p.is_file())
            assert files, "nothing kept on disk"
            data = bytearray(files[0].read_bytes())
            data[len(data) // 2] ^= 0xFF
            files[0].write_bytes(bytes(data))

    scales = [2, 2, 2]
    heap = run((tmp_path / "heap").as_uri(), False, tmp_path / "hs", scales, Chainer, keys=200, rate=200)
    got = run(uri, True, state_dir, scales, Chainer, keys=200, rate=200, local_recovery=True, between=between)
    assert how == [{"store"}, {"adopted"}], how  # epoch 1 adopted the kept store, then the damage
    assert got[0] == heap[0], diff(heap[0], got[0])
    assert got[1] == heap[1]
    assert not list(state_dir.rglob("*.arrow")), "kept stores left behind"


class Joined(CoProcessFunction):
    """Both inputs share one key's state and timers: a count per input, a list of both inputs'
    pages in arrival order, an event-time timer per key that emits and clears."""

    counts = MapStateDescriptor[int, int]("counts")
    trail = ListStateDescriptor[str]("trail")
    blob = ValueStateDescriptor[str]("blob")
    state_descriptors = (counts, trail, blob)

    def _add(self, key: Any, rows: list[dict[str, Any]], ctx: Any, side: int) -> None:
        counts = ctx.state(self.counts)
        counts.put(side, (counts.get(side) or 0) + len(rows))
        trail = ctx.state(self.trail)
        trail.update([*trail.get(), *(f"{side}{r['page']}" for r in rows)][-5:])
        ctx.state(self.blob).update(str(key) * 2_000)
        ctx.register_event_time_timer(max(r["_ts"] for r in rows) // 1_000 * 1_000 + 999)

    def process_key1(self, key: Any, rows: list[dict[str, Any]], ctx: Any) -> None:
        self._add(key, rows, ctx, 1)

    def process_key2(self, key: Any, rows: list[dict[str, Any]], ctx: Any) -> None:
        self._add(key, rows, ctx, 2)

    def on_timer(self, timestamp: int, ctx: Any) -> None:
        counts = ctx.state(self.counts)
        ctx.emit({"key": str(ctx.current_key), "at": timestamp, "counts": repr(sorted(counts.items())),
                  "trail": ",".join(ctx.state(self.trail).get())})  # fmt: skip
        counts.clear()


def co_job(parallelism: int, spill: bool, state_dir: Path) -> Job:
    job = Job(JOB, parallelism=parallelism, max_parallelism=MAXP, chunk_size=64,
              state_memory_mb=1 if spill else None, state_dir=str(state_dir))  # fmt: skip
    first = GeneratorSource(uid="clicks", partitions=2, seed=3, events_per_second=100,
                            out_of_orderness_ms=200,
                            keys=200, start_ms=DEFAULT_START_MS)  # fmt: skip
    second = GeneratorSource(uid="orders", partitions=1, seed=4, events_per_second=50,
                             out_of_orderness_ms=600,
                             keys=200, start_ms=DEFAULT_START_MS)  # fmt: skip
    a = job.source(first, uid="clicks", out_of_orderness_ms=200).key_by("user_id")
    b = job.source(second, uid="orders", out_of_orderness_ms=600).key_by("user_id")
    a.connect(b).process(Joined(), uid=UID).sink(ParquetSink(), uid="out")
    return job


def test_a_co_process_function_sharing_state_across_inputs_equals_in_memory(tmp_path: Path) -> None:
    results = []
    for spill in (False, True):
        uri = (tmp_path / f"s{spill}").as_uri()
        clock = ManualClock(DEFAULT_START_MS)
        warm.clear()
        for parallelism in [2, 3, 1]:
            clock.advance(STEP)
            job = co_job(parallelism, spill, tmp_path / f"d{spill}")
            assert run_cycle(job, uri, clock, executor="local").status == "completed"
        results.append(result(uri))
    heap, disk = results
    assert len(heap[0]) > 100 and any("(2," in r for r in heap[0])
    assert disk[0] == heap[0], diff(heap[0], disk[0])
    assert disk[1] == heap[1]
