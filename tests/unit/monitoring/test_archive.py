"""The checkpoint history archive: rows outlive retention, writes are idempotent and race-safe, a
corrupt segment is skipped and rebuilt, and a cold start reads segments plus live folders only."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.ui_bench import write_checkpoint
from spark_jobs.runtime.cycle import run_cycle
from state_store.core.layout import JobLayout
from state_store.core.ports import ObjectData, ObjectInfo
from state_store.monitoring import CheckpointStats
from state_store.monitoring import archive as archive_mod
from state_store.monitoring.archive import HistorySegment, archive_history, encode_segment, load_archive
from state_store.storage import MemoryObjectStore, open_store
from tests.unit.monitoring.support import JOB_ID, STEP_MS, TickingClock, make_history, small_job

HOUR_MS = 3_600_000


def _live_ids(store: Any, job_id: str) -> set[int]:
    layout = JobLayout(job_id)
    return {
        i
        for info in store.list(layout.checkpoints_prefix)
        if info.key.endswith("/_pending.json") and (i := layout.checkpoint_id_of(info.key)) is not None
    }


def test_rows_survive_retention_with_their_final_status(tmp_path: Path) -> None:
    made = make_history(tmp_path, epochs=3)  # 1-3 completed (3 validated later), 4 failed, 5 in flight
    store = open_store(made.uri)
    before = {r.checkpoint_id: r for r in CheckpointStats(store, max_age_ms=0).stats(JOB_ID).rows}
    job = small_job()
    job.retained_checkpoints = 2
    clock = TickingClock(max(r.trigger_ms for r in before.values()) + STEP_MS)
    for _ in range(5):  # the first cycle aborts the in-flight checkpoint 5 (failover)
        clock.advance(STEP_MS)
        assert run_cycle(job, made.uri, clock, executor="local").status == "completed"
    clock.advance(2 * HOUR_MS)  # past the orphan grace period: retention deletes the aborted ones too
    run_cycle(job, made.uri, clock, executor="local")

    stats = CheckpointStats(open_store(made.uri), max_age_ms=0).stats(JOB_ID)
    ids = [r.checkpoint_id for r in stats.rows]
    live = _live_ids(store, JOB_ID)
    assert ids == list(range(1, max(ids) + 1)), "every id ever triggered is in the history"
    assert {1, 2, 3, 4, 5} <= set(ids) - live, "their folders are gone"
    assert len(live) < len(ids) - 5
    by_id = {r.checkpoint_id: r for r in stats.rows}
    for i in (1, 2, 3, 4):
        assert by_id[i] == before[i]  # same row as when the folder was there
    assert by_id[3].validation == "passed"  # validated after its first archive: archived again
    assert by_id[4].status == "failed" and by_id[4].reason == "MANUALLY_ABORTED: by the test"
    assert by_id[5].status == "failed" and before[5].status == "in_progress"
    o = stats.overview
    assert (o.triggered, o.completed, o.failed, o.in_progress) == (len(ids), len(ids) - 2, 2, 0)
    assert stats.configuration["checkpoints_archived"] >= len(ids) - len(live)
    # a cold scan equals a warm one, and the incremental cold start (archive as listing) too
    assert CheckpointStats(store, full_relist_ms=60_000).stats(JOB_ID).rows == stats.rows


def test_archive_writes_are_idempotent(tmp_path: Path) -> None:
    made = make_history(tmp_path, epochs=2)
    store = open_store(made.uri)
    layout = JobLayout(JOB_ID)
    keys = [i.key for i in store.list(layout.history_prefix)]
    assert keys, "the cycles archived their checkpoints"
    report = archive_history(store, JOB_ID)  # new: the abort, and the validation of the newest one
    assert report.rows == 2 and len(report.written) == 1
    again = archive_history(store, JOB_ID)
    assert (again.written, again.rows) == ((), 0)
    assert [i.key for i in store.list(layout.history_prefix)] == keys + list(report.written)
    view = load_archive(store, layout)
    assert set(view.rows) == {*made.completed, made.failed} and view.open_ids == {made.in_progress}
    assert view.rows[made.completed[-1]].row.validation == "passed"


class _Racing:
    """Delegates to a store; before the first create-only write under ``history/`` it runs ``rival``."""

    def __init__(self, inner: Any, rival: Any) -> None:
        self.inner, self.rival, self.fired = inner, rival, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def put_if_absent(self, key: str, data: bytes) -> str:
        if "/history/" in key and not self.fired:
            self.fired = True
            self.rival(self.inner, key)
        return str(self.inner.put_if_absent(key, data))


def _abort_one_more(uri: str) -> int:
    from spark_jobs.runtime.cycle import coordinator_for, trigger_epoch
    from state_store.core.failures import CheckpointFailureReason

    job, store = small_job(), open_store(uri)
    clock = TickingClock(10**13)
    coordinator_for(job, store, clock).failover()  # aborts the in-flight one
    pending = trigger_epoch(job, store, clock, request_id="raced")
    assert pending is not None
    coordinator_for(job, store, clock).abort(
        pending.checkpoint_id, CheckpointFailureReason.MANUALLY_ABORTED, "race"
    )
    return pending.checkpoint_id


def test_two_writers_with_the_same_rows_write_the_same_segment(tmp_path: Path) -> None:
    made = make_history(tmp_path, epochs=1)
    store = open_store(made.uri)
    racing = _Racing(store, lambda inner, key: archive_history(inner, JOB_ID))
    report = archive_history(racing, JOB_ID)  # type: ignore[arg-type]
    assert racing.fired and report.rows == 2  # both wrote identical bytes under one key: no conflict
    assert archive_history(store, JOB_ID).written == ()
    assert made.failed in load_archive(store, JobLayout(JOB_ID)).rows


def test_a_create_only_conflict_rereads_the_archive_and_retries(tmp_path: Path) -> None:
    made = make_history(tmp_path, epochs=1)
    store = open_store(made.uri)
    layout = JobLayout(JOB_ID)
    extra = _abort_one_more(made.uri)

    def rival(inner: Any, key: str) -> None:  # another writer takes the same write number first
        seq = int(key.rsplit("-", 1)[1].removesuffix(".json"))
        inner.put_if_absent(key, encode_segment(HistorySegment(JOB_ID, seq, seq, (), (made.in_progress,))))

    racing = _Racing(store, rival)
    report = archive_history(racing, JOB_ID)  # type: ignore[arg-type]
    assert report.rows == 4 and len(report.written) == 1  # 2 failed, 1 validated, the extra abort
    view = load_archive(store, layout)
    assert {made.failed, made.in_progress, extra} <= set(view.rows) and not view.corrupt
    assert view.open_ids == set()  # the rival's open id is superseded by the retried write


# -- synthetic histories (the benchmark's generator: protocol records, no cycle) -----------------------
BENCH_JOB = "bench-ui"


class _Counting:
    """Counts gets and listed objects of a store."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.gets, self.listed = inner, 0, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def get(self, key: str) -> ObjectData:
        self.gets += 1
        data: ObjectData = self.inner.get(key)
        return data

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        for info in self.inner.list(prefix):
            self.listed += 1
            yield info


def _synthetic(count: int) -> MemoryObjectStore:
    store = MemoryObjectStore()
    layout = JobLayout(BENCH_JOB)
    for n in range(1, count + 1):
        write_checkpoint(store, layout, n, fail=n % 20 == 0, pending_only=n == count)
    return store


def _delete_folders(store: Any, ids: range) -> None:
    layout = JobLayout(BENCH_JOB)
    for i in ids:
        for info in list(store.list(layout.checkpoint_dir(i))):
            store.delete(info.key)


def test_cold_start_reads_segments_and_live_folders_not_every_checkpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(archive_mod, "SEAL_ROWS", 50)
    store = _synthetic(400)
    report = archive_history(store, BENCH_JOB)
    assert (report.rows, len(report.written)) == (399, 8)  # 399 decided, 50 per segment
    full = CheckpointStats(store, max_age_ms=0).stats(BENCH_JOB)
    # no retention (all 400 folders live): the incremental cold start lists only what can change
    counting = _Counting(store)
    cold = CheckpointStats(counting, max_age_ms=0, full_relist_ms=60_000, recent=4).stats(BENCH_JOB)  # type: ignore[arg-type]
    assert cold.rows == full.rows and len(cold.rows) == 400
    assert counting.gets <= 8 + 5 + 3, counting.gets  # segments, the in-flight folder, configuration
    assert counting.listed < 100, counting.listed  # not the 2,800 objects of the 400 folders
    # retention deleted the old folders: even a full listing is only of the live ones
    _delete_folders(store, range(1, 391))
    counting = _Counting(store)
    after = CheckpointStats(counting, max_age_ms=0).stats(BENCH_JOB)  # type: ignore[arg-type]
    assert after.rows == full.rows
    assert counting.gets <= 8 + 5 + 3, counting.gets  # live folders match the archive: not re-read
    assert counting.listed < 100, counting.listed
    # without the archive the same cold scan reads every checkpoint (what the archive saves)
    counting = _Counting(_synthetic(400))
    CheckpointStats(counting, max_age_ms=0).stats(BENCH_JOB)  # type: ignore[arg-type]
    assert counting.gets > 2 * 400


def test_tail_segments_are_merged_and_the_merge_is_what_readers_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archive_mod, "SEAL_ROWS", 1000)
    monkeypatch.setattr(archive_mod, "FANOUT", 4)
    store = MemoryObjectStore()
    layout = JobLayout(BENCH_JOB)
    merged = []
    for n in range(1, 11):  # one checkpoint and one archive write per "cycle"
        write_checkpoint(store, layout, n, fail=n == 5, pending_only=False)
        report = archive_history(store, BENCH_JOB)
        assert report.rows == 1
        if report.merged:
            merged.append(report.merged)
    keys = [i.key.rsplit("/", 1)[1] for i in store.list(layout.history_prefix)]
    assert keys == ["seg-00000001-00000010.json"]  # merged inputs are deleted
    assert merged == [layout.history_segment(1, k) for k in (4, 7, 10)]  # an unsealed merge is merged again
    view = load_archive(store, layout)
    assert sorted(view.rows) == list(range(1, 11)) and view.rows[5].row.status == "failed"


def test_a_corrupt_segment_is_ignored_with_a_warning_and_rebuilt_from_live_folders(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(archive_mod, "SEAL_ROWS", 50)
    store = _synthetic(200)
    layout = JobLayout(BENCH_JOB)
    archive_history(store, BENCH_JOB)
    expected = CheckpointStats(store, max_age_ms=0).stats(BENCH_JOB).rows
    _delete_folders(store, range(1, 181))  # retention: 181..200 live
    bad = layout.history_segment(4, 4)  # rows 151..199
    store.put(bad, store.get(bad).data.replace(b'"completed"', b'"complete"', 1))  # checksum fails
    with caplog.at_level(logging.WARNING, logger="state_store.monitoring.archive"):
        stats = CheckpointStats(store, max_age_ms=0).stats(BENCH_JOB)
    assert "fails its checksum" in caplog.text and bad in caplog.text
    ids = [r.checkpoint_id for r in stats.rows]
    assert ids == list(range(1, 151)) + list(range(181, 201))  # 151..180: archived only there, deleted
    assert [r for r in stats.rows if r.checkpoint_id > 180] == [r for r in expected if r.checkpoint_id > 180]
    report = archive_history(store, BENCH_JOB)  # rebuilds the live folders' rows the archive lost
    assert report.rows == 19  # 181..199 (200 is in flight)
    view = load_archive(store, layout)
    assert bad in view.corrupt and set(range(181, 200)) <= set(view.rows)
    assert CheckpointStats(store, max_age_ms=0).stats(BENCH_JOB).rows == stats.rows


def test_archiving_failure_does_not_fail_retention(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import spark_jobs.runtime.cycle as cycle
    from state_store.core.ports import TransientStoreError

    def broken(*_: Any, **__: Any) -> Any:
        raise TransientStoreError("history unavailable")

    made = make_history(tmp_path, epochs=1)
    monkeypatch.setattr(archive_mod, "archive_history", broken)
    job = small_job()
    job.retained_checkpoints = 1
    clock = TickingClock(10**13)
    for _ in range(3):
        clock.advance(STEP_MS)
        assert run_cycle(job, made.uri, clock, executor="local").status == "completed"
    plan = cycle.apply_job_retention(job, open_store(made.uri), clock)
    assert len(plan.retained) == 1 and made.completed[0] not in _live_ids(open_store(made.uri), JOB_ID)


def test_a_segment_round_trips_and_a_bad_one_is_refused() -> None:
    import json

    from state_store.core.codec import ManifestError, canonical_json, sha256_hex
    from state_store.monitoring.archive import SegmentRef, decode_segment

    store = _synthetic(30)
    archive_history(store, BENCH_JOB)
    key = JobLayout(BENCH_JOB).history_segment(1, 1)
    data = store.get(key).data
    ref = SegmentRef(key, "v", 1, 1)
    segment = decode_segment(data, ref, BENCH_JOB)
    assert encode_segment(segment) == data and len(segment.rows) == 29 and segment.open_ids == (30,)
    assert segment.rows == tuple(
        a
        for a in segment.rows
        if a.row == CheckpointStats(store, max_age_ms=0).detail(BENCH_JOB, a.row.checkpoint_id).row
    )
    with pytest.raises(ManifestError, match="does not match its key"):
        decode_segment(data, SegmentRef(key, "v", 2, 2), BENCH_JOB)
    envelope = json.loads(data)
    envelope["body"]["rows"][0][4] = "3"  # acked as text, in a well-formed envelope
    envelope["sha256"] = sha256_hex(canonical_json(envelope["body"]))
    with pytest.raises(ManifestError, match="column 'acked' has a value of the wrong type"):
        decode_segment(json.dumps(envelope).encode(), ref, BENCH_JOB)
    with pytest.raises(ManifestError, match="fails its checksum"):
        decode_segment(data.replace(b'"completed"', b'"failed"', 1), ref, BENCH_JOB)
