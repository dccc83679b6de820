"""A rescale sticks and is visible (issue 18): after ``restore --parallelism 3`` every later epoch runs
3 subtasks per keyed stage although the job's code says 2; a definition whose parallelism changed is
a rescale, applied with the restore plan printed, or refused (``rescale_on_change='refuse'``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs.cli import main as epochal
from spark_jobs.lifecycle.restore import RestoreRequest, restore
from spark_jobs.runtime.cycle import RescaleRefused, job_record
from state_store.core import CompletedCheckpointStore, JobLayout
from state_store.storage import open_store
from tests.unit.runtime.support import STEP_MS, committed_rows, cycle, new_clock, small_job


def keyed_subtasks(uri: str, job_id: str, uid: str = "page-counts") -> int:
    """How many subtasks of a keyed operator acknowledged the latest checkpoint."""
    completed, _ = CompletedCheckpointStore.recover(open_store(uri), JobLayout(job_id), 1)
    latest = completed.latest()
    assert latest is not None
    return len([t for t in latest.metadata.tasks if t.task.uid == uid])


def test_every_epoch_after_a_rescaling_restore_runs_at_its_parallelism(tmp_path: Path) -> None:
    uri, job, clock = tmp_path.as_uri(), small_job(parallelism=2), new_clock()
    for _ in range(2):
        clock.advance(STEP_MS)
        cycle(job, uri, clock)
    assert keyed_subtasks(uri, job.job_id) == 2
    restore(job, uri, clock, RestoreRequest(source="latest"), parallelism=3)
    record = job_record(job, open_store(uri))
    assert record is not None and (record.parallelism, record.declared_parallelism) == (3, 2)
    for _ in range(3):
        clock.advance(STEP_MS)
        report = cycle(job, uri, clock)  # the job's code still says 2
        assert report.status == "completed" and not report.rescale_plan
        assert keyed_subtasks(uri, job.job_id) == 3
    serial = tmp_path / "serial"
    reference_clock = new_clock()
    for _ in range(5):
        reference_clock.advance(STEP_MS)
        cycle(job, serial.as_uri(), reference_clock)
    # exactly once: the same windows with the same counts and sums (the max of a running total
    # depends on how records of many users interleave, which the parallelism changes)
    assert [r[:5] for r in committed_rows(uri, job)] == [r[:5] for r in committed_rows(serial.as_uri(), job)]


def test_a_changed_definition_rescales_with_the_plan_or_is_refused(tmp_path: Path) -> None:
    uri, clock = tmp_path.as_uri(), new_clock()
    clock.advance(STEP_MS)
    cycle(small_job(parallelism=2), uri, clock)
    refusing = small_job(parallelism=4)
    refusing.rescale_on_change = "refuse"
    clock.advance(STEP_MS)
    with pytest.raises(
        RescaleRefused, match=r"definition says parallelism 4 but the job runs at 2.*--parallelism 4"
    ):
        cycle(refusing, uri, clock)
    report = cycle(small_job(parallelism=4), uri, clock)
    assert report.status == "completed"
    assert "parallelism changed to 4 (the job ran at 2): rescaling to 4" in report.rescale_plan
    assert "parallelism" in report.rescale_plan and "2 -> 4" in report.rescale_plan
    assert keyed_subtasks(uri, "clickstream") == 4
    record = job_record(small_job(), open_store(uri))
    assert record is not None and (record.parallelism, record.declared_parallelism) == (4, 4)
    clock.advance(STEP_MS)
    assert not cycle(small_job(parallelism=4), uri, clock).rescale_plan  # applied once


def test_the_cli_prints_the_rescale_plan_and_keeps_a_restored_parallelism(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = (tmp_path / "store").as_uri()
    run = ["run", "--job", "clickstream", "--store", store, "--executor", "local", "--time-step-ms", "10000"]
    assert epochal([*run, "--epochs", "1"]) == 0
    assert epochal(["restore", "--job", "clickstream", "--store", store, "--parallelism", "3"]) == 0
    capsys.readouterr()
    assert epochal([*run, "--epochs", "2"]) == 0
    assert "rescaling" not in capsys.readouterr().out
    assert keyed_subtasks(store, "clickstream") == 3


def test_a_restore_commits_the_restored_checkpoints_pending_output_before_fencing_the_sinks(
    tmp_path: Path,
) -> None:
    """A run died between completing checkpoint 2 and committing its output (notify); a restore
    from latest must commit that output before it fences the sinks with the new generation, or it
    would be lost (found by the chaos harness's restore-during-an-epoch)."""
    from state_store.testing import KillAt, SimulatedCrash

    uri, job, clock = tmp_path.as_uri(), small_job(), new_clock()
    clock.advance(STEP_MS)
    cycle(job, uri, clock)
    clock.advance(STEP_MS)
    with pytest.raises(SimulatedCrash):
        cycle(job, uri, clock, kill=KillAt("after_pointer", 2))
    restore(job, uri, clock, RestoreRequest(source="latest"))
    serial, reference_clock = (tmp_path / "serial").as_uri(), new_clock()
    for _ in range(2):
        reference_clock.advance(STEP_MS)
        cycle(job, serial, reference_clock)
    assert committed_rows(uri, job) == committed_rows(serial, job)
    clock.advance(STEP_MS)
    reference_clock.advance(STEP_MS)
    cycle(job, uri, clock)
    cycle(job, serial, reference_clock)
    assert committed_rows(uri, job) == committed_rows(serial, job)
