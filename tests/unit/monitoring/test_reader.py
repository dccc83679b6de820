"""The statistics equal what the manifests say, and the cache never changes an answer."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from spark_jobs.runtime.cycle import coordinator_for, run_cycle
from state_store.core import JobLayout, documents, load_completed
from state_store.core.failures import CheckpointFailureReason
from state_store.core.manifests import PendingRecord
from state_store.monitoring import CheckpointStats, MonitoringError
from state_store.storage import open_store
from tests.unit.monitoring.support import JOB_ID, STEP_MS, Made, TickingClock, make_history, small_job


def test_rows_match_the_manifests(history: Made) -> None:
    store = open_store(history.uri)
    stats = CheckpointStats(store, max_age_ms=0).stats(JOB_ID)
    layout = JobLayout(JOB_ID)
    by_id = {r.checkpoint_id: r for r in stats.rows}
    retained = [i for i in history.completed if i in by_id]
    assert retained, "retention keeps at least the newest completed checkpoints"
    for i in retained:
        meta = load_completed(store, layout, i).metadata
        pending = documents.read(store, layout.pending(i), PendingRecord)
        r = by_id[i]
        assert r.status == "completed"
        assert r.duration_ms == meta.wall_completed_ms - meta.wall_trigger_ms  # wall-clock: true
        assert r.state_size == meta.state_size > 0
        assert r.acked == r.expected == len(pending.expected)
        assert r.incremental_size == sum(
            int(t.metrics.get("bytes_written", 0)) for t in meta.tasks if "bytes_written" in t.metrics
        ) + sum(
            h.size
            for t in meta.tasks
            if "bytes_written" not in t.metrics
            for h in t.handles
            if not h.key.startswith(layout.shared_prefix)
        )
        assert r.run_id == pending.request_id == f"run-{history.completed.index(i)}"
        # keyed subtasks align barriers from their input channels and report it; sources do not
        aligned = [t.metrics["alignment_ms"] for t in meta.tasks if "alignment_ms" in t.metrics]
        assert aligned and all(isinstance(a, float) and a >= 0 for a in aligned)
        assert r.alignment_ms == int(max(aligned))
    assert by_id[history.completed[-1]].validation == "passed"
    failed = by_id[history.failed]
    assert failed.status == "failed" and failed.reason == "MANUALLY_ABORTED: by the test"
    assert by_id[history.in_progress].status == "in_progress" and by_id[history.in_progress].end_ms is None
    o = stats.overview
    assert (o.failed, o.in_progress) == (1, 1)
    assert o.completed == len(retained)
    assert o.latest_completed is not None and o.latest_completed.checkpoint_id == history.completed[-1]
    assert o.latest_failure is not None and o.latest_failure.checkpoint_id == history.failed
    durations = sorted(by_id[i].duration_ms or 0 for i in retained)
    assert stats.duration.min == durations[0] and stats.duration.max == durations[-1]
    assert stats.duration.avg == pytest.approx(sum(durations) / len(durations))
    assert stats.configuration["latest_pointer"] == history.completed[-1]
    assert stats.configuration["timeout_ms"] > 0


def test_page_is_newest_first_and_filters_by_status(history: Made) -> None:
    stats = CheckpointStats(open_store(history.uri), max_age_ms=0).stats(JOB_ID)
    ids = [r.checkpoint_id for r in stats.rows]
    assert [r.checkpoint_id for r in stats.page(limit=2)] == ids[::-1][:2]
    assert [r.checkpoint_id for r in stats.page(offset=2, limit=2)] == ids[::-1][2:4]
    assert [r.checkpoint_id for r in stats.page(status="failed")] == [history.failed]
    assert stats.page(offset=10_000) == []
    with pytest.raises(MonitoringError, match="status 'bogus' is unknown: use one of completed"):
        stats.page(status="bogus")
    with pytest.raises(MonitoringError, match="limit=0 is invalid"):
        stats.page(limit=0)


def test_detail_lists_every_expected_subtask(history: Made) -> None:
    service = CheckpointStats(open_store(history.uri), max_age_ms=0)
    detail = service.detail(JOB_ID, history.completed[-1])
    total = sum(len(op.subtasks) for op in detail.operators)
    assert total == detail.row.expected
    assert all(s.status == "acked" for op in detail.operators for s in op.subtasks)
    assert sum(op.state_size for op in detail.operators) == detail.row.state_size
    pending = service.detail(JOB_ID, history.in_progress)
    assert {s.status for op in pending.operators for s in op.subtasks} == {"pending"}
    with pytest.raises(MonitoringError, match="checkpoint 999 of job monitored is not in storage"):
        service.detail(JOB_ID, 999)


def test_cache_reads_only_new_checkpoints_and_equals_a_cold_scan(tmp_path: Path) -> None:
    made = make_history(tmp_path, epochs=2)
    store = open_store(made.uri)
    service = CheckpointStats(store, max_age_ms=0)
    first = service.stats(JOB_ID)
    assert first.documents_read > 0
    again = service.stats(JOB_ID)
    assert again is first  # nothing changed: the listing fingerprint is the same
    # finish the in-flight checkpoint's successor: abort it, run one more epoch
    job, clock = small_job(), TickingClock(first.rows[-1].trigger_ms + 5 * STEP_MS)
    run_cycle(job, made.uri, clock, executor="local")  # no request id: aborts the in-flight one (failover)
    warm = service.stats(JOB_ID)
    cold = CheckpointStats(open_store(made.uri), max_age_ms=0).stats(JOB_ID)
    assert warm.rows == cold.rows and warm.overview == cold.overview and warm.duration == cold.duration
    assert warm.documents_read < cold.documents_read
    assert warm.rows[-1].status == "completed"


def test_after_max_age_a_change_no_run_makes_is_served_cached_while_a_refresh_runs(tmp_path: Path) -> None:
    made = make_history(tmp_path, epochs=2)
    now = [0.0]
    store = open_store(made.uri)
    service = CheckpointStats(store, max_age_ms=1000, monotonic=lambda: now[0])
    a = service.stats(JOB_ID)
    oldest = made.completed[0]
    layout = JobLayout(JOB_ID)
    for info in store.list(layout.checkpoint_dir(oldest)):  # retention deletes an old folder
        store.delete(info.key)
    now[0] = 0.5
    assert service.stats(JOB_ID) is a  # young: no listing
    now[0] = 2.0
    assert service.stats(JOB_ID) is a  # old, but nothing a run writes moved: served at once
    deadline = time.monotonic() + 10
    while service.stats(JOB_ID) is a and time.monotonic() < deadline:
        time.sleep(0.05)
    fresh = service.stats(JOB_ID)
    assert fresh is not a and fresh.configuration["checkpoints_in_storage"] == (
        a.configuration["checkpoints_in_storage"] - 1
    )
    assert service.stats(JOB_ID, wait=True).rows == fresh.rows


@pytest.mark.parametrize("change", ["abort in-flight", "new epoch"])
def test_the_first_load_after_a_run_shows_that_run(tmp_path: Path, change: str) -> None:
    made = make_history(tmp_path, epochs=1)
    now = [0.0]
    store = open_store(made.uri)
    service = CheckpointStats(store, max_age_ms=1000, monotonic=lambda: now[0])
    before = service.stats(JOB_ID)
    clock = TickingClock(before.rows[-1].trigger_ms + STEP_MS)
    coordinator_for(small_job(), store, clock).abort(
        made.in_progress, CheckpointFailureReason.MANUALLY_ABORTED, "the run that owned it died"
    )
    expected = {made.in_progress: "failed"}
    if change == "new epoch":
        report = run_cycle(small_job(), made.uri, clock, executor="local", request_id="run-after")
        expected[report.checkpoint_id] = "completed"
    now[0] = 2.0  # the cache is older than max_age_ms: the very next load must show the change
    after = {r.checkpoint_id: r.status for r in service.stats(JOB_ID).rows}
    assert {i: after.get(i) for i in expected} == expected


def test_incremental_relisting_finds_new_checkpoints_and_keeps_deleted_ones_from_the_archive(
    tmp_path: Path,
) -> None:
    made = make_history(tmp_path, epochs=2)
    now = [0.0]
    service = CheckpointStats(
        open_store(made.uri), max_age_ms=0, full_relist_ms=60_000, recent=1, monotonic=lambda: now[0]
    )
    first = service.stats(JOB_ID)
    job, clock = small_job(), TickingClock(first.rows[-1].trigger_ms + 5 * STEP_MS)
    for _ in range(3):  # aborts the in-flight one, completes three, retention deletes the oldest
        clock.advance(STEP_MS)
        run_cycle(job, made.uri, clock, executor="local")
    incremental = service.stats(JOB_ID)
    cold = CheckpointStats(open_store(made.uri)).stats(JOB_ID)
    assert [r.checkpoint_id for r in cold.rows][-4:] == [r.checkpoint_id for r in incremental.rows][-4:]
    # retention deleted folders, but the cycle archived their rows first: the history keeps them
    assert cold.configuration["checkpoints_in_storage"] < len(cold.rows)
    assert cold.configuration["checkpoints_archived"] > 0
    assert cold.rows == incremental.rows
    now[0] = 61.0  # the next refresh is a full listing
    assert service.stats(JOB_ID).rows == cold.rows


def test_a_job_id_that_is_not_a_safe_name_is_refused() -> None:
    with pytest.raises(ValueError, match=r"job id .\.\./x. is invalid"):
        CheckpointStats(open_store("memory://m")).stats("../x")


def test_a_restore_is_counted_with_its_source_and_the_new_generation(tmp_path: Path) -> None:
    from spark_jobs.lifecycle.restore import RestoreRequest, restore

    made = make_history(tmp_path, epochs=2)
    job, clock = small_job(), TickingClock(10**13)
    before = CheckpointStats(open_store(made.uri)).stats(JOB_ID)
    report = restore(job, made.uri, clock, RestoreRequest(source=str(made.completed[0])))
    stats = CheckpointStats(open_store(made.uri)).stats(JOB_ID)
    o = stats.overview
    assert (before.overview.restored, o.restored) == (0, 1)
    assert o.latest_restore is not None and o.latest_restore.checkpoint_id == report.checkpoint_id
    assert o.latest_restore.restored_from and o.latest_restore.status == "completed"
    assert o.generation == before.overview.generation + 1
    assert stats.configuration["restored_from_checkpoint"] == report.checkpoint_id
