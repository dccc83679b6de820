"""The runtime reports an epoch's progress through the reporter port (spark_jobs.runtime.progress):
totals from the epoch's cut, source records per chunk (never per record), keyed subtasks as they
finish, Spark stages from the status tracker; a failing reporter never fails the epoch."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest

from spark_jobs.runtime import progress
from spark_jobs.runtime.progress import LineReporter, StageTotal
from tests.unit.runtime.support import STEP_MS, cycle, new_clock, small_job


class Recorder:
    """A reporter that keeps every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def start(self, label: str, stages: list[StageTotal]) -> None:
        self.calls.append(("start", label, stages))

    def advance(self, stage: str, amount: int) -> None:
        self.calls.append(("advance", stage, amount))

    def set(self, stage: str, done: int, total: int, unit: str) -> None:
        self.calls.append(("set", stage, done, total, unit))

    def finish(self) -> None:
        self.calls.append(("finish",))


def test_an_in_process_epoch_reports_its_cut_per_chunk_and_every_keyed_subtask(tmp_path: Path) -> None:
    job = small_job(chunk_size=50)
    clock = new_clock()
    clock.advance(STEP_MS)
    recorder = Recorder()
    with progress.reporting(recorder):
        report = cycle(job, tmp_path.as_uri(), clock)
    assert str(report.status) == "completed"
    (start,) = [c for c in recorder.calls if c[0] == "start"]
    stages = {s.name: s for s in start[2]}
    source = "stage 0 source clicks"
    assert stages[source].unit == "records" and stages[source].total > 0
    read = [c[2] for c in recorder.calls if c[0] == "advance" and c[1] == source]
    assert sum(read) == stages[source].total  # every record of the cut, no more
    assert len(read) < stages[source].total / 10 and max(read) <= 50  # per chunk, not per record
    keyed = [name for name, s in stages.items() if s.unit == "subtasks"]
    assert keyed and all(stages[k].total == job.parallelism for k in keyed)
    for name in keyed:
        assert sum(c[2] for c in recorder.calls if c[0] == "advance" and c[1] == name) == job.parallelism
    assert recorder.calls[-1] == ("finish",)


def test_nothing_is_reported_without_a_current_reporter_and_a_failing_one_is_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(Recorder):
        def advance(self, stage: str, amount: int) -> None:
            raise RuntimeError("terminal gone")

    job = small_job()
    clock = new_clock()
    clock.advance(STEP_MS)
    assert str(cycle(job, (tmp_path / "a").as_uri(), clock).status) == "completed"  # no reporter
    clock.advance(STEP_MS)
    with progress.reporting(Broken()):
        report = cycle(job, (tmp_path / "a").as_uri(), clock)
    assert str(report.status) == "completed"
    assert "progress reporting switched off: terminal gone" in caplog.text


def test_line_reporter_prints_a_stage_at_most_once_per_interval_and_when_it_is_done() -> None:
    lines: list[str] = []
    reporter = LineReporter(lines.append, interval_s=3600)
    reporter.start("epoch 4", [StageTotal("stage 0 source clicks", 300, "records")])
    for _ in range(3):
        reporter.advance("stage 0 source clicks", 100)
    assert lines == [
        "epoch 4: stage 0 source clicks: 100/300 records",
        "epoch 4: stage 0 source clicks: 300/300 records",
    ]


def test_spark_stages_are_reported_from_the_status_tracker_until_they_complete() -> None:
    import time

    info = SimpleNamespace(stageId=3, numCompletedTasks=5, numTasks=8)
    active = [3]
    tracker = SimpleNamespace(getActiveStageIds=lambda: list(active), getStageInfo=lambda i: info)
    spark = SimpleNamespace(sparkContext=SimpleNamespace(statusTracker=lambda: tracker))
    recorder = Recorder()
    with progress.reporting(recorder), progress.spark_status(spark, poll_s=0.01):
        deadline = time.monotonic() + 5
        while not any(c[0] == "set" for c in recorder.calls) and time.monotonic() < deadline:
            time.sleep(0.01)
        info.numCompletedTasks, active[:] = 8, []  # the stage finished between two polls
    assert ("set", "spark stage 3", 5, 8, "tasks") in recorder.calls
    assert recorder.calls[-1] == ("set", "spark stage 3", 8, 8, "tasks")  # its completion is reported


def test_line_reporter_repeats_no_unchanged_count() -> None:
    lines: list[str] = []
    reporter = LineReporter(lines.append, interval_s=0)
    reporter.start("epoch 1", [])
    for _ in range(3):
        reporter.set("spark stage 2", 0, 2, "tasks")
    reporter.set("spark stage 2", 2, 2, "tasks")
    assert lines == ["epoch 1: spark stage 2: 0/2 tasks", "epoch 1: spark stage 2: 2/2 tasks"]


def _airflow_context(run_id: str, task_id: str, epoch: int, pulled: dict[str, Any] | None) -> dict[str, Any]:
    from datetime import UTC, datetime

    from spark_jobs.sources.generator import DEFAULT_START_MS

    end = datetime.fromtimestamp((DEFAULT_START_MS + epoch * STEP_MS) / 1000, tz=UTC)
    ti = SimpleNamespace(dag_id="epochal_p", task_id=task_id, try_number=1, xcom_pull=lambda task_ids: pulled)
    return {"ti": ti, "run_id": run_id, "data_interval_end": end, "logical_date": end}


def test_the_airflow_run_epoch_task_logs_progress_and_returns_the_summary_as_xcom(tmp_path: Path) -> None:
    from epochal_airflow.operators.checkpoint import RunEpochOperator, TriggerCheckpointOperator

    job, store = "tests.unit.runtime.support:small_job", (tmp_path / "store").as_uri()
    trigger = TriggerCheckpointOperator(task_id="trigger_checkpoint", job=job, store_uri=store)
    pending = trigger.execute(_airflow_context("run-1", "trigger_checkpoint", 1, None))
    run = RunEpochOperator(
        task_id="run_epoch", job=job, store_uri=store, epoch_executor="local", progress_interval_s=3600
    )
    logged: list[str] = []
    log = SimpleNamespace(info=lambda msg, *a: logged.append(msg % a), warning=lambda *a: None)
    with mock.patch.object(RunEpochOperator, "log", new=log):  # Airflow's task logger, as lines
        xcom = run.execute(_airflow_context("run-1", "run_epoch", 1, pending))
    summary = xcom["epoch_summary"]
    assert summary["checkpoint_id"] == 1 and summary["status"] == "acknowledged"
    assert summary["records_in"] == pending["records"] > 0 and summary["duration_ms"] > 0
    assert summary["state_bytes"] > 0 and summary["incremental_bytes"] > 0
    progress_lines = [line for line in logged if line.startswith("epochal progress:")]
    total = f"{pending['records']:,}/{pending['records']:,} records"
    assert f"epochal progress: epoch 1: stage 0 source clicks: {total}" in progress_lines
    assert any(
        line.startswith("epochal epoch summary: epoch -> checkpoint 1: acknowledged in") for line in logged
    )
