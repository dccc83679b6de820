"""Regressions from an adversarial review of the issue 18 change: each test is an interleaving that
broke exactly-once (or left a job stuck) before its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs.lifecycle.backfill import BackfillTargetExists, backfill
from spark_jobs.lifecycle.checks import validate_checkpoint
from spark_jobs.lifecycle.pins import pin
from spark_jobs.lifecycle.restore import RestoreRequest, restore
from spark_jobs.lifecycle.savepoint import take_savepoint
from state_store.core import JobLayout
from state_store.storage import open_store
from state_store.storage.local import LocalObjectStore
from state_store.testing import KillAt, SimulatedCrash
from tests.unit.runtime.support import SINK, STEP_MS, committed_rows, cycle, new_clock, small_job
from tests.unit.runtime.test_validation_quarantine import move_one_key_to_another_key_group


def reference(tmp_path: Path, epochs: int) -> list[tuple[object, ...]]:
    uri, job, clock = (tmp_path / "reference").as_uri(), small_job(), new_clock()
    for _ in range(epochs):
        clock.advance(STEP_MS)
        cycle(job, uri, clock)
    return committed_rows(uri, job)


def three_epochs(tmp_path: Path) -> tuple[str, object, object]:
    uri, job, clock = (tmp_path / "store").as_uri(), small_job(), new_clock()
    for _ in range(3):
        clock.advance(STEP_MS)
        cycle(job, uri, clock)
    return uri, job, clock


@pytest.mark.parametrize(
    "point", ["after_chain_commit", "before_metadata", "after_metadata", "after_pointer"]
)
def test_a_forced_restore_that_dies_after_its_commit_still_retracts_fences_and_pins(
    point: str, tmp_path: Path
) -> None:
    uri, job, clock = three_epochs(tmp_path)
    path = tmp_path / "store" / JobLayout("clickstream").metadata(3)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(SimulatedCrash):
        restore(job, uri, clock, RestoreRequest(source="2", force=True), kill=KillAt(point, 4))  # type: ignore[arg-type]
    report = cycle(job, uri, clock)  # type: ignore[arg-type]  # the same cut: reprocesses epoch 3
    assert report.status == "completed"
    assert committed_rows(uri, job) == reference(tmp_path, 3)  # type: ignore[arg-type]
    assert open_store(uri).head(JobLayout("clickstream").pin(2)) is not None


def test_a_restore_never_commits_a_checkpoint_the_job_fell_back_from(tmp_path: Path) -> None:
    uri, job, clock = three_epochs(tmp_path)
    store = open_store(uri)
    store.delete(f"clickstream/sinks/{SINK}/_commits/{3:010d}.json")  # died before notify
    move_one_key_to_another_key_group(store, "clickstream", 3, "dedup")
    assert not validate_checkpoint(job, store, 3, clock).passed  # type: ignore[arg-type]
    pin(store, "clickstream", 3, "kept for the post-mortem")
    assert cycle(job, uri, clock).status == "completed"  # type: ignore[arg-type]  # falls back to 2
    restore(job, uri, clock, RestoreRequest(source="latest"))  # type: ignore[arg-type]
    for _ in range(2):
        clock.advance(STEP_MS)  # type: ignore[attr-defined]
        cycle(job, uri, clock)  # type: ignore[arg-type]
    assert committed_rows(uri, job) == reference(tmp_path, 5)  # type: ignore[arg-type]


def test_a_retention_crash_never_revives_a_checkpoint_the_job_fell_back_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, job, clock = three_epochs(tmp_path)
    store = open_store(uri)
    store.delete(f"clickstream/sinks/{SINK}/_commits/{3:010d}.json")
    move_one_key_to_another_key_group(store, "clickstream", 3, "dedup")
    assert not validate_checkpoint(job, store, 3, clock).passed  # type: ignore[arg-type]
    real_delete = LocalObjectStore.delete

    def power_loss(self: LocalObjectStore, key: str) -> None:
        real_delete(self, key)
        if key.endswith("chk-0000000003/_metadata.json"):
            raise SimulatedCrash("power loss during retention", 4)

    monkeypatch.setattr(LocalObjectStore, "delete", power_loss)
    with pytest.raises(SimulatedCrash):
        cycle(job, uri, clock)  # type: ignore[arg-type]  # falls back, then retention discards 3
    monkeypatch.setattr(LocalObjectStore, "delete", real_delete)
    assert store.head(JobLayout("clickstream").quarantined(3)) is not None  # deleted last
    for _ in range(2):
        clock.advance(STEP_MS)  # type: ignore[attr-defined]
        cycle(job, uri, clock)  # type: ignore[arg-type]
    assert committed_rows(uri, job) == reference(tmp_path, 5)  # type: ignore[arg-type]


def test_two_backfills_into_one_new_job_id_commit_once(tmp_path: Path) -> None:
    uri, job, clock = three_epochs(tmp_path)
    info = take_savepoint(job, uri, clock, "sp")  # type: ignore[arg-type]
    first = backfill(job, uri, info["location"], "fix", epochs=1)  # type: ignore[arg-type]
    assert first["epochs"] == 1
    with pytest.raises(BackfillTargetExists, match="'fix' already has state"):
        backfill(job, uri, info["location"], "fix", epochs=1)  # type: ignore[arg-type]
    rows = committed_rows(uri, small_job(job_id="fix"))
    assert len(rows) == len(set(rows))


def test_a_lost_job_record_continues_from_the_newest_checkpoint_not_from_offset_zero(tmp_path: Path) -> None:
    uri, job, clock = three_epochs(tmp_path)
    (tmp_path / "store" / JobLayout("clickstream").job_record).unlink()
    clock.advance(STEP_MS)  # type: ignore[attr-defined]
    report = cycle(job, uri, clock)  # type: ignore[arg-type]
    assert report.status == "completed"
    assert committed_rows(uri, job) == reference(tmp_path, 4)  # type: ignore[arg-type]


def test_a_forced_restore_from_a_savepoint_past_a_damaged_head_retracts_everything_after_it(
    tmp_path: Path,
) -> None:
    uri, job, clock = (tmp_path / "store").as_uri(), small_job(), new_clock()
    for _ in range(2):
        clock.advance(STEP_MS)
        cycle(job, uri, clock)
    info = take_savepoint(job, uri, clock, "sp")  # checkpoint 3, at checkpoint 2's cut
    for _ in range(2):
        clock.advance(STEP_MS)
        cycle(job, uri, clock)  # checkpoints 4 and 5
    path = tmp_path / "store" / JobLayout("clickstream").metadata(5)
    path.write_bytes(b"")
    restore(job, uri, clock, RestoreRequest(source=info["location"], force=True))
    for _ in range(2):
        clock.advance(STEP_MS)
        cycle(job, uri, clock)  # reprocesses what 4 and 5 read, and more
    rows = committed_rows(uri, job)
    keys = [(r[0], r[1]) for r in rows]
    assert len(keys) == len(set(keys))  # 4's and 5's windows once, not twice
    # the same windows, counts and sums as a fault-free run (the max of a running total depends
    # on how epochs cut the input, which the rewind changed)
    assert [r[:5] for r in rows] == [r[:5] for r in reference(tmp_path, 6)]


def test_a_stop_and_an_unpin_after_a_restore_stand(tmp_path: Path) -> None:
    """A restore's follow-up runs once: it never deletes a later stop marker or re-pins."""
    from spark_jobs.lifecycle.pins import pinned_ids
    from spark_jobs.runtime.cycle import JobStoppedError, ensure_running
    from state_store.core.coordinator import CheckpointCoordinator

    uri, job, clock = three_epochs(tmp_path)
    restore(job, uri, clock, RestoreRequest(source="latest"), parallelism=3)  # type: ignore[arg-type]
    store = open_store(uri)
    assert pinned_ids(store, "clickstream") == [3]
    store.delete(JobLayout("clickstream").pin(3))  # an operator unpins it
    take_savepoint(job, uri, clock, "halt", stop=True)  # type: ignore[arg-type]
    report = cycle(job, uri, clock)  # type: ignore[arg-type]
    assert report.status == "stopped"
    with pytest.raises(JobStoppedError):
        ensure_running(job, store)  # type: ignore[arg-type]
    assert pinned_ids(store, "clickstream") == []
    assert CheckpointCoordinator(store, "clickstream", clock=clock).job().restore_finished == 4  # type: ignore[arg-type]


def test_a_restore_after_a_restore_that_died_after_its_commit_works(tmp_path: Path) -> None:
    uri, job, clock = three_epochs(tmp_path)
    with pytest.raises(SimulatedCrash):
        restore(job, uri, clock, RestoreRequest(source="2"), kill=KillAt("before_metadata", 4))  # type: ignore[arg-type]
    report = restore(job, uri, clock, RestoreRequest(source="latest"))  # type: ignore[arg-type]
    assert report.checkpoint_id == 5  # the dying restore's import (4) was finished, then restored


def test_a_failed_job_can_be_restored_as_its_error_says(tmp_path: Path) -> None:
    from state_store.core import JobFailedError

    uri, job, clock = three_epochs(tmp_path)
    for _ in range(4):
        clock.advance(STEP_MS)  # type: ignore[attr-defined]
        report = cycle(job, uri, clock, gate=lambda metadata: "injected expectation failure")  # type: ignore[arg-type]
        assert report.status == "aborted"
    clock.advance(STEP_MS)  # type: ignore[attr-defined]
    with pytest.raises(JobFailedError, match="restore from the latest checkpoint"):
        cycle(job, uri, clock)  # type: ignore[arg-type]
    assert restore(job, uri, clock, RestoreRequest(source="latest")).checkpoint_id is not None  # type: ignore[arg-type]
    assert cycle(job, uri, clock).status == "completed"  # type: ignore[arg-type]


@pytest.mark.parametrize("then_savepoint", [False, True])
def test_a_lost_job_record_after_a_restore_continues_from_the_newest_checkpoint(
    then_savepoint: bool, tmp_path: Path
) -> None:
    uri, job, clock = three_epochs(tmp_path)
    restore(job, uri, clock, RestoreRequest(source="latest"))  # type: ignore[arg-type]
    if then_savepoint:
        take_savepoint(job, uri, clock, "sp")  # type: ignore[arg-type]
    (tmp_path / "store" / JobLayout("clickstream").job_record).unlink()
    clock.advance(STEP_MS)  # type: ignore[attr-defined]
    assert cycle(job, uri, clock).status == "completed"  # type: ignore[arg-type]
    rows = committed_rows(uri, job)  # type: ignore[arg-type]
    assert len({(r[0], r[1]) for r in rows}) == len(rows)  # no window twice
    assert [r[:5] for r in rows] == [r[:5] for r in reference(tmp_path, 4)]


def test_a_restore_from_a_checkpoint_whose_output_was_retracted_is_refused(tmp_path: Path) -> None:
    from spark_jobs.lifecycle.snapshots import SnapshotError

    uri, job, clock = three_epochs(tmp_path)
    path = tmp_path / "store" / JobLayout("clickstream").metadata(3)
    path.write_bytes(b"")
    restore(job, uri, clock, RestoreRequest(source="1", force=True))  # type: ignore[arg-type]  # retracts 2, 3
    with pytest.raises(SnapshotError, match=r"output of checkpoint\(s\) \[2\].*older than 2"):
        restore(job, uri, clock, RestoreRequest(source="2"))  # type: ignore[arg-type]
